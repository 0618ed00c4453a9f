<?php

use Illuminate\Support\Str;

return [
    'default' => env('DB_CONNECTION', 'sqlite'),

    'connections' => [
        // Holds failed_jobs (the tests create the table with Laravel's schema).
        'sqlite' => [
            'driver' => 'sqlite',
            'database' => env('DB_DATABASE'),
            'prefix' => '',
            'foreign_key_constraints' => true,
        ],
        // The skeleton's pgsql connection, for the database queue's fleet
        // test (DB_QUEUE_CONNECTION=pgsql); PG_HOST is the private server's
        // socket directory. Its own variables: DB_DATABASE names the
        // SQLite file above.
        'pgsql' => [
            'driver' => 'pgsql',
            'host' => env('PG_HOST', '127.0.0.1'),
            'port' => env('PG_PORT', '5432'),
            'database' => env('PG_DATABASE', 'laravel'),
            'username' => env('PG_USERNAME', 'postgres'),
            'password' => env('PG_PASSWORD', ''),
            'charset' => 'utf8',
            'prefix' => '',
            'prefix_indexes' => true,
            'schema' => 'public',
            'sslmode' => 'prefer',
        ],
        // The skeleton's mysql connection, for the database queue's tests
        // on MariaDB (DB_CONNECTION or DB_QUEUE_CONNECTION=mysql); MY_SOCKET
        // is the private server's unix socket. Its own variables, as pgsql.
        'mysql' => [
            'driver' => 'mysql',
            'host' => env('MY_HOST', '127.0.0.1'),
            'port' => env('MY_PORT', '3306'),
            'database' => env('MY_DATABASE', 'laravel'),
            'username' => env('MY_USERNAME', 'root'),
            'password' => env('MY_PASSWORD', ''),
            'unix_socket' => env('MY_SOCKET', ''),
            'charset' => 'utf8mb4',
            'collation' => 'utf8mb4_unicode_ci',
            'prefix' => '',
            'prefix_indexes' => true,
            'strict' => true,
            'engine' => null,
        ],
    ],

    'migrations' => 'migrations',

    // The 8.x skeleton's Redis section. A unix socket works with phpredis:
    // REDIS_HOST=/path/to/redis.sock, REDIS_PORT=0.
    'redis' => [
        'client' => env('REDIS_CLIENT', 'phpredis'),

        'options' => [
            'cluster' => env('REDIS_CLUSTER', 'redis'),
            'prefix' => env('REDIS_PREFIX', Str::slug(env('APP_NAME', 'laravel'), '_').'_database_'),
        ],

        'default' => [
            'host' => env('REDIS_HOST', '127.0.0.1'),
            'password' => env('REDIS_PASSWORD'),
            'port' => env('REDIS_PORT', '6379'),
            'database' => env('REDIS_DB', '0'),
        ],

        'cache' => [
            'host' => env('REDIS_HOST', '127.0.0.1'),
            'password' => env('REDIS_PASSWORD'),
            'port' => env('REDIS_PORT', '6379'),
            'database' => env('REDIS_CACHE_DB', '1'),
        ],
    ],
];
