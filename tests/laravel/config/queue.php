<?php

// The 8.x skeleton's Redis connection, the database, sqs and beanstalkd connections
// and the database-uuids failed store.

return [
    'default' => env('QUEUE_CONNECTION', 'redis'),

    'connections' => [
        'redis' => [
            'driver' => 'redis',
            'connection' => 'default',
            'queue' => env('REDIS_QUEUE', 'default'),
            'retry_after' => (int) env('REDIS_QUEUE_RETRY_AFTER', 90),
            'block_for' => null,
            'after_commit' => false,
        ],
        // The 11.x skeleton's database connection (8.x has no `connection`
        // key; null is the app's default database connection, here the
        // SQLite file that also holds failed_jobs).
        'database' => [
            'driver' => 'database',
            'connection' => env('DB_QUEUE_CONNECTION'),
            'table' => env('DB_QUEUE_TABLE', 'jobs'),
            'queue' => env('DB_QUEUE', 'default'),
            'retry_after' => (int) env('DB_QUEUE_RETRY_AFTER', 90),
            'after_commit' => false,
        ],
        // The 8.x skeleton's sqs connection, with the `endpoint` an app
        // adds for a local SQS and 13.x's `overflow` settings.
        'sqs' => [
            'driver' => 'sqs',
            'key' => env('AWS_ACCESS_KEY_ID'),
            'secret' => env('AWS_SECRET_ACCESS_KEY'),
            'prefix' => env('SQS_PREFIX', 'https://sqs.us-east-1.amazonaws.com/your-account-id'),
            'queue' => env('SQS_QUEUE', 'default'),
            'suffix' => env('SQS_SUFFIX'),
            'region' => env('AWS_DEFAULT_REGION', 'us-east-1'),
            'endpoint' => env('AWS_ENDPOINT_URL'),
            'after_commit' => false,
            'overflow' => [
                'enabled' => env('SQS_OVERFLOW_ENABLED', false),
                'store' => env('SQS_OVERFLOW_STORE'),
                'always' => false,
                'delete_after_processing' => true,
                'flush_on_clear' => env('SQS_OVERFLOW_FLUSH_ON_CLEAR', false),
            ],
        ],
        // The 8.x skeleton's beanstalkd connection, with the `port` key
        // BeanstalkdConnector reads (the skeleton leaves it out; the
        // tests' servers listen on a port of their own).
        'beanstalkd' => [
            'driver' => 'beanstalkd',
            'host' => env('BEANSTALKD_QUEUE_HOST', 'localhost'),
            'port' => (int) env('BEANSTALKD_QUEUE_PORT', 11300),
            'queue' => env('BEANSTALKD_QUEUE', 'default'),
            'retry_after' => 90,
            'block_for' => 0,
            'after_commit' => false,
        ],
        'sync' => [
            'driver' => 'sync',
        ],
    ],

    'failed' => [
        'driver' => env('QUEUE_FAILED_DRIVER', 'database-uuids'),
        'database' => env('DB_CONNECTION', 'sqlite'),
        'table' => 'failed_jobs',
    ],
];
