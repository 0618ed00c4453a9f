<?php

// laravel-worker's settings for this app (publish with
// `php artisan vendor:publish --tag=laravel-worker-config` to change them
// here rather than in .env).

return [

    // Where `php artisan laravel-worker:install` places the worker binary
    // and where `php artisan laravel-worker` runs it from. When the file is
    // missing, `laravel-worker` on the PATH is run instead (a system package).
    'binary' => env('LARAVEL_WORKER_BINARY', base_path('bin/laravel-worker')),

    // A release archive to install the binary from
    // (laravel-worker-VERSION-x86_64-linux-gnu.tar.gz); "{version}" stands
    // for this package's version. Its SHA-256 comes from binary_sha256, else
    // from the SHA256SUMS file beside it.
    'binary_url' => env('LARAVEL_WORKER_BINARY_URL'),

    'binary_sha256' => env('LARAVEL_WORKER_BINARY_SHA256'),

    // The worker's config file, written by laravel-worker:install.
    'config' => env('LARAVEL_WORKER_CONFIG', base_path('laravel-worker.toml')),

];
