<?php

namespace LaravelWorker;

use Symfony\Component\Process\Process;

/**
 * The laravel-worker binary: taken out of a release archive, checked (it
 * runs and its version goes with this package) and placed where the app's
 * config points, mode 0755.
 */
final class Binary
{
    /** The binary's file name, at the root of the archive's one folder. */
    public const NAME = 'laravel-worker';

    /**
     * Copies the binary out of the release archive $archive (a .tar.gz
     * holding one folder laravel-worker-VERSION-TARGET/ with `laravel-worker`
     * at its root) to the file $to. No other path of the archive is read.
     *
     * @throws InstallException when PHP cannot read the archive or it holds no such binary
     */
    public static function extract(string $archive, string $to): void
    {
        if (! class_exists(\PharData::class)) {
            throw new InstallException(
                'PHP\'s phar extension is missing, so the archive cannot be read: enable it '
                .'(extension=phar; Debian ships it in php-common), or unpack the archive yourself '
                .'and give --binary=PATH.'
            );
        }
        try {
            $tar = new \PharData($archive);
            $entry = self::entry($tar);
        } catch (\UnexpectedValueException $e) {
            throw new InstallException(
                "The download is not a readable .tar.gz ({$e->getMessage()}): check that the URL "
                .'names a laravel-worker release archive.'
            );
        }
        if ($entry === null || ! copy($entry, $to)) {
            throw new InstallException(
                'The archive holds no '.self::NAME.' binary in its one top folder '
                .'(laravel-worker-VERSION-x86_64-linux-gnu/'.self::NAME.'): check that the URL names '
                .'a laravel-worker release archive.'
            );
        }
        chmod($to, 0755);
    }

    /** The phar:// path of the binary in $tar, or null. */
    private static function entry(\PharData $tar): ?string
    {
        $folders = [];
        foreach ($tar as $name => $item) {
            $folders[] = $item;
        }
        if (count($folders) !== 1 || ! $folders[0]->isDir()) {
            return null;
        }
        $folder = $folders[0]->getFilename();
        if ($folder === '..' || $folder === '.' || strpos($folder, '/') !== false) {
            return null;
        }
        $path = $folder.'/'.self::NAME;
        if (! isset($tar[$path]) || $tar[$path]->isDir()) {
            return null;
        }

        return $tar[$path]->getPathname();
    }

    /**
     * The version that the program $path prints on `--version`.
     *
     * @throws InstallException when it does not run or prints no version
     */
    public static function version(string $path): string
    {
        $process = new Process([$path, '--version']);
        $process->setTimeout(30);
        $process->run();
        $version = $process->isSuccessful() ? Version::parse($process->getOutput()) : null;
        if ($version === null) {
            $said = trim($process->getErrorOutput().' '.$process->getOutput());
            throw new InstallException(
                "{$path} does not run as laravel-worker (`--version` exited with status "
                .$process->getExitCode().($said === '' ? '' : ": {$said}").'): it must be the '
                .'laravel-worker binary for this machine (x86_64 Linux).'
            );
        }

        return $version;
    }

    /**
     * Places the program $from at $target (mode 0755), replacing any file
     * there in one step, after checking that it runs and that its version
     * goes with this package. Returns its version.
     *
     * @throws InstallException when it does not fit, or $target cannot be written
     */
    public static function place(string $from, string $target): string
    {
        $version = self::version($from);
        $mismatch = Version::mismatch($version);
        if ($mismatch !== null) {
            throw new InstallException("Not installed: {$mismatch}.");
        }
        $dir = dirname($target);
        if (! is_dir($dir) && ! @mkdir($dir, 0755, true) && ! is_dir($dir)) {
            throw new InstallException("Cannot create {$dir}: make it writable by this user, or set LARAVEL_WORKER_BINARY to another path.");
        }
        $partial = $dir.'/.'.basename($target).'.'.getmypid().'.partial';
        if (! @copy($from, $partial) || ! @chmod($partial, 0755) || ! @rename($partial, $target)) {
            @unlink($partial);
            throw new InstallException("Cannot write {$target}: make {$dir} writable by this user, or set LARAVEL_WORKER_BINARY to another path.");
        }

        return $version;
    }
}
