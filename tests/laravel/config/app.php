<?php

// Everything comes from the environment (or the .env file the tests write
// into their copy of the app).

return [
    'name' => env('APP_NAME', 'Laravel'),
    'env' => env('APP_ENV', 'testing'),
    'debug' => (bool) env('APP_DEBUG', false),
    'url' => env('APP_URL', 'http://localhost'),
    'timezone' => 'UTC',
    'locale' => 'en',
    'fallback_locale' => 'en',

    // Needed by ShouldBeEncrypted jobs and serialized closures (chain catch).
    'key' => env('APP_KEY'),
    'cipher' => 'AES-256-CBC',

    // Where the test jobs append one JSON line per thing they do.
    'job_log' => env('JOB_LOG'),

    'providers' => [
        Illuminate\Bus\BusServiceProvider::class,
        Illuminate\Cache\CacheServiceProvider::class,
        Illuminate\Foundation\Providers\ConsoleSupportServiceProvider::class,
        Illuminate\Database\DatabaseServiceProvider::class,
        Illuminate\Encryption\EncryptionServiceProvider::class,
        Illuminate\Filesystem\FilesystemServiceProvider::class,
        Illuminate\Notifications\NotificationServiceProvider::class,
        Illuminate\Queue\QueueServiceProvider::class,
        Illuminate\Redis\RedisServiceProvider::class,
        App\Providers\EventServiceProvider::class,
    ],

    'aliases' => [],
];
