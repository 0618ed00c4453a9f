<?php

namespace LaravelWorker;

use Illuminate\Support\ServiceProvider;

/**
 * Registers laravel-worker's artisan commands and its config
 * (config/laravel-worker.php, publishable with the tag
 * "laravel-worker-config"). Found by Laravel's package discovery through
 * this package's composer.json (extra.laravel.providers).
 */
class LaravelWorkerServiceProvider extends ServiceProvider
{
    public function register(): void
    {
        $this->mergeConfigFrom(__DIR__.'/../config/laravel-worker.php', 'laravel-worker');
    }

    public function boot(): void
    {
        if (! $this->app->runningInConsole()) {
            return;
        }
        $this->publishes([
            __DIR__.'/../config/laravel-worker.php' => $this->app->configPath('laravel-worker.php'),
        ], 'laravel-worker-config');
        $this->commands([
            Console\InstallCommand::class,
            Console\WorkCommand::class,
        ]);
    }
}
