<?php

namespace LaravelWorker;

/**
 * The worker's config file (TOML) that `laravel-worker:install` writes for
 * an app: the app's root and one handler that runs every job through this
 * package's PHP bridge, in warm PHP processes. Every path is absolute, so
 * it works from any working directory (supervisord, systemd). The
 * connection, prefixes, cache and failed-jobs store are left out: the
 * worker reads them from the app itself (`--app`, which the run command
 * passes), and a [redis], [queue] or [failed] section here would outrank
 * the app's own settings.
 */
final class ConfigFile
{
    /** The bridge file of this package (absolute). */
    public static function bridge(): string
    {
        return dirname(__DIR__).'/laravel-worker-bridge.php';
    }

    /** The file's text for the app at $base, its bridge run by the PHP program $php. */
    public static function render(string $base, string $php): string
    {
        $app = self::quote($base);
        $version = Version::PACKAGE;
        $command = '['.implode(', ', array_map([self::class, 'quote'], [
            $php,
            self::bridge(),
            '--app='.$base,
        ])).']';

        return <<<TOML
# laravel-worker's config for this app, written by `php artisan laravel-worker:install`
# (laravel-worker/laravel-worker {$version}). Run the worker with `php artisan laravel-worker`.
#
# The queue connection, Redis, prefixes, cache and failed_jobs store are read from the
# app itself (its config/queue.php, config/database.php and .env): a [redis], [queue],
# [cache] or [failed] section here would outrank them. Every key is described in the
# laravel-worker book, "Configuration keys".

[app]
path = {$app}

[worker]
kill_grace = 10                  # seconds between SIGTERM and SIGKILL of a timed-out job
on_lease_lost = "kill"

# Every job runs through the app's own job classes (the PHP bridge of the Composer
# package), in warm PHP processes started as jobs need them. Put more specific
# [[handlers]] above this one.
[[handlers]]
match = "*"
command = {$command}
mode = "persistent"
processes = 4
max_jobs = 1000                  # recycle a PHP process after this many jobs
decode_command = false           # the bridge reads the payload itself

TOML;
    }

    /** $text as a TOML basic string. */
    public static function quote(string $text): string
    {
        return json_encode($text, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
    }
}
