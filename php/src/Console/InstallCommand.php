<?php

namespace LaravelWorker\Console;

use Illuminate\Console\Command;
use LaravelWorker\Binary;
use LaravelWorker\ConfigFile;
use LaravelWorker\InstallException;
use LaravelWorker\Release;
use LaravelWorker\Version;
use Symfony\Component\Process\ExecutableFinder;

/**
 * `php artisan laravel-worker:install`: obtains the laravel-worker binary
 * (a file given with --binary, or a release archive downloaded and checked
 * against its SHA-256) and places it where config('laravel-worker.binary')
 * points, then writes the worker's config file for this app. Exit 0 when
 * done, 1 (with what to do) when a step failed; a failed step leaves the
 * binary and the config file as they were.
 */
class InstallCommand extends Command
{
    protected $signature = 'laravel-worker:install
        {--binary= : Install the binary from this file instead of downloading it}
        {--url= : The release archive (.tar.gz) to download [default: config laravel-worker.binary_url, env LARAVEL_WORKER_BINARY_URL]}
        {--sha256= : The archive\'s SHA-256 [default: env LARAVEL_WORKER_BINARY_SHA256, else the SHA256SUMS file beside the URL]}
        {--config= : The worker\'s config file to write [default: config laravel-worker.config, base_path("laravel-worker.toml")]}
        {--binary-only : Only obtain the binary; leave the config file alone}
        {--force : Overwrite an existing config file}';

    protected $description = 'Install the laravel-worker binary and write its config for this app';

    public function handle(): int
    {
        $config = (string) ($this->option('config') ?: config('laravel-worker.config'));
        try {
            if (! $this->option('binary-only') && file_exists($config) && ! $this->option('force')) {
                throw new InstallException(
                    "{$config} already exists and was left as it is: run with --force to write it "
                    .'anew, or with --binary-only to install only the binary.'
                );
            }
            $this->installBinary((string) config('laravel-worker.binary'));
            if (! $this->option('binary-only')) {
                $this->writeConfig($config);
            }
        } catch (InstallException $e) {
            $this->error($e->getMessage());

            return 1;
        }
        $this->info('Run the worker with: php artisan laravel-worker');

        return 0;
    }

    /** Places the binary at $target from --binary or a URL, or checks the one there. */
    private function installBinary(string $target): void
    {
        $file = $this->option('binary');
        $url = $this->option('url') ?: config('laravel-worker.binary_url');
        if ($file) {
            if (! is_file($file)) {
                throw new InstallException("--binary={$file}: no such file. Give the path of the laravel-worker binary.");
            }
            $version = Binary::place($file, $target);
            $this->info("Installed laravel-worker {$version} at {$target} (copied from {$file}).");
        } elseif ($url) {
            $this->download(str_replace('{version}', Version::PACKAGE, (string) $url), $target);
        } else {
            $this->useExisting($target);
        }
    }

    /** Downloads the release archive at $url, checks it and places its binary at $target. */
    private function download(string $url, string $target): void
    {
        $sha256 = $this->option('sha256') ?: config('laravel-worker.binary_sha256');
        $dir = $this->scratchDirectory();
        try {
            $this->line("Downloading {$url}");
            Release::download($url, $dir.'/release.tar.gz', $sha256 ? (string) $sha256 : null);
            Binary::extract($dir.'/release.tar.gz', $dir.'/'.Binary::NAME);
            $version = Binary::place($dir.'/'.Binary::NAME, $target);
        } finally {
            foreach (['release.tar.gz', Binary::NAME] as $name) {
                @unlink($dir.'/'.$name);
            }
            @rmdir($dir);
        }
        $this->info("Installed laravel-worker {$version} at {$target} (SHA-256 checked).");
    }

    /** Without a source: the binary already at $target, or on the PATH, if its version fits. */
    private function useExisting(string $target): void
    {
        $found = is_file($target) ? $target : (new ExecutableFinder())->find(Binary::NAME);
        if ($found === null) {
            throw new InstallException(
                "No laravel-worker binary at {$target} nor on the PATH: set LARAVEL_WORKER_BINARY_URL "
                .'to a release archive (laravel-worker-'.Version::PACKAGE.'-x86_64-linux-gnu.tar.gz) '
                .'and run this again, or give --binary=PATH.'
            );
        }
        $version = Binary::version($found);
        $mismatch = Version::mismatch($version);
        if ($mismatch !== null) {
            throw new InstallException("{$found}: {$mismatch}.");
        }
        $this->info("Using laravel-worker {$version} at {$found}.");
    }

    /** A new private directory for the download. */
    private function scratchDirectory(): string
    {
        $dir = sys_get_temp_dir().'/laravel-worker-install-'.bin2hex(random_bytes(8));
        if (! @mkdir($dir, 0700)) {
            throw new InstallException("Cannot create {$dir}: make the temporary directory (TMPDIR) writable.");
        }

        return $dir;
    }

    /** Writes the worker's config for this app to $path. */
    private function writeConfig(string $path): void
    {
        $text = ConfigFile::render($this->laravel->basePath(), 'php');
        if (@file_put_contents($path, $text) === false) {
            throw new InstallException(
                "Cannot write {$path}: make its directory writable by this user, or choose another "
                .'file with --config (and LARAVEL_WORKER_CONFIG for the run command).'
            );
        }
        $this->info("Wrote {$path}: every job runs through the package's PHP bridge.");
    }
}
