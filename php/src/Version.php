<?php

namespace LaravelWorker;

/**
 * The version of this package, and how it must fit the laravel-worker
 * binary's: the same major.minor (0.1.x goes with 0.1.y). The binary gives
 * its version on `laravel-worker --version` ("0.1.0 (git abc1234)") and to
 * every handler process in LARAVEL_WORKER_VERSION.
 *
 * Kept in this one file without dependencies: the bridge reads it without
 * Composer's autoloader.
 */
final class Version
{
    /** This package's version; equal to the binary's Cargo.toml version (a test checks it). */
    public const PACKAGE = '0.1.0';

    /** The first x.y.z in $text (a `--version` line or a bare version), or null. */
    public static function parse(string $text): ?string
    {
        return preg_match('/(\d+)\.(\d+)\.(\d+)/', $text, $m) === 1 ? $m[0] : null;
    }

    /**
     * Null when the binary's $binary version goes with this package (same
     * major.minor); else one sentence saying both versions and which of the
     * two to upgrade (the older one).
     */
    public static function mismatch(string $binary, string $package = self::PACKAGE): ?string
    {
        if (self::series($binary) === self::series($package)) {
            return null;
        }
        $both = "the laravel-worker binary is {$binary} and the Composer package "
            ."laravel-worker/laravel-worker is {$package}; their major.minor must match";
        if (version_compare($binary, $package, '<')) {
            return "{$both}: upgrade the binary to ".self::series($package).'.x '
                .'(php artisan laravel-worker:install --binary-only, with the new release\'s URL or --binary=PATH)';
        }

        return "{$both}: upgrade the package (composer require laravel-worker/laravel-worker:^"
            .self::series($binary).')';
    }

    /** "0.1" of "0.1.7". */
    private static function series(string $version): string
    {
        $parts = explode('.', $version);

        return ($parts[0] ?? '0').'.'.($parts[1] ?? '0');
    }
}
