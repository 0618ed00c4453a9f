<?php

// The test app's stand-in for Composer's vendor/autoload.php: the framework
// from ../shared/laravel12 (its autoload.php, whose path the tests write into
// vendor/framework.php), then composer.json's PSR-4 rules for App\ and
// Database\.

require_once require __DIR__.'/framework.php';

spl_autoload_register(function (string $class): void {
    foreach (['App\\' => '/app/', 'Database\\' => '/database/'] as $prefix => $dir) {
        if (strncmp($class, $prefix, strlen($prefix)) === 0) {
            $file = dirname(__DIR__).$dir.str_replace('\\', '/', substr($class, strlen($prefix))).'.php';
            if (is_file($file)) {
                require $file;
            }
        }
    }
});
