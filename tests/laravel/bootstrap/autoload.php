<?php

// Autoloading for the test app.
//
// A Composer-based app loads vendor/autoload.php. This app runs on Debian's
// packaged Laravel 8 (php-laravel-framework), which ships its own
// autoloader under /usr/share/php; the app's own classes (namespace App\)
// are mapped to app/ here, as Composer's PSR-4 rule would. A copy of the app
// given a composer.json (tests/integration/composer_package.rs installs
// laravel-worker's package into it) has a vendor/ holding only its packages:
// Composer's autoloader loads those, and Laravel still comes from Debian's.

if (is_file(__DIR__.'/../vendor/autoload.php')) {
    require_once __DIR__.'/../vendor/autoload.php';

    if (class_exists(Illuminate\Foundation\Application::class)) {
        return;
    }
}

// Resolved through PHP's include_path (".:/usr/share/php" on Debian).
require_once 'Illuminate/autoload.php';

// Debian's php-pda-pheanstalk (for the beanstalkd connection) installs its
// autoloader as Pheanstalk/autoload.php, where Laravel 8.83's Debian
// autoloader looks for Pda/Pheanstalk/autoload.php: required here, when
// installed.
if (stream_resolve_include_path('Pheanstalk/autoload.php') !== false) {
    require_once 'Pheanstalk/autoload.php';
}

spl_autoload_register(function (string $class): void {
    if (strncmp($class, 'App\\', 4) !== 0) {
        return;
    }
    $file = __DIR__.'/../app/'.str_replace('\\', '/', substr($class, 4)).'.php';
    if (is_file($file)) {
        require $file;
    }
});
