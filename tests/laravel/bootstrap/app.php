<?php

// Creates the application, as a Laravel 8 skeleton's bootstrap/app.php does.
// Unlike the skeleton, it also sets up autoloading (see autoload.php), so
// that whoever boots the app from this file alone (artisan, the
// laravel-worker bridge) gets the classes.

require_once __DIR__.'/autoload.php';

$app = new Illuminate\Foundation\Application(
    $_ENV['APP_BASE_PATH'] ?? dirname(__DIR__)
);

$app->singleton(
    Illuminate\Contracts\Console\Kernel::class,
    App\Console\Kernel::class
);

$app->singleton(
    Illuminate\Contracts\Debug\ExceptionHandler::class,
    App\Exceptions\Handler::class
);

return $app;
