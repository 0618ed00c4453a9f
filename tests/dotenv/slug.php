<?php
// Prints Laravel's Str::slug of each argument with '-' and with '_',
// tab-separated, one name a line (Debian's Laravel 8 support package, or
// the directory given in LARAVEL_SUPPORT holding its autoloader).
require (getenv('LARAVEL_SUPPORT') ?: '/usr/share/php') . '/Illuminate/Support/autoload.php';

use Illuminate\Support\Str;

foreach (array_slice($argv, 1) as $name) {
    echo Str::slug($name, '-'), "\t", Str::slug($name, '_'), "\n";
}
