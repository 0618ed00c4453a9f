<?php

use Illuminate\Support\Str;

// Laravel 8 skeleton defaults, except that the default store is Redis (the
// skeleton's is "file"): the worker's restart and maxExceptions keys and the
// unique-job locks live in the Redis cache, DB REDIS_CACHE_DB.

return [
    'default' => env('CACHE_DRIVER', 'redis'),

    'stores' => [
        'redis' => [
            'driver' => 'redis',
            'connection' => 'cache',
            'lock_connection' => 'default',
        ],
        'array' => [
            'driver' => 'array',
            'serialize' => false,
        ],
    ],

    // 8.x: RedisStore adds ':' after it, so keys are "laravel_cache:<key>".
    'prefix' => env('CACHE_PREFIX', Str::slug(env('APP_NAME', 'laravel'), '_').'_cache'),
];
