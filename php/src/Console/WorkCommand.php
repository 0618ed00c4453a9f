<?php

namespace LaravelWorker\Console;

use Illuminate\Console\Command;
use LaravelWorker\Binary;
use LaravelWorker\InstallException;
use LaravelWorker\Version;
use Symfony\Component\Process\ExecutableFinder;
use Symfony\Component\Process\Process;

/**
 * `php artisan laravel-worker`: runs the laravel-worker binary's `work` for
 * this app, as `php artisan horizon` runs Horizon. queue:work's arguments
 * and options are passed through as given (the binary's defaults are
 * artisan's), with `--app=base_path()` and the config file written by
 * laravel-worker:install. The command replaces itself with the binary
 * (pcntl_exec), so supervisord or systemd signal the worker itself; without
 * pcntl_exec the binary runs as a child, signals are forwarded to it where
 * pcntl_signal exists, and its exit status is returned.
 */
class WorkCommand extends Command
{
    /** Options passed through with their value (queue:work's, then the binary's own). */
    private const VALUE_OPTIONS = [
        'name', 'queue', 'backoff', 'delay', 'max-jobs', 'max-time', 'memory', 'sleep', 'rest',
        'timeout', 'tries', 'stop-when-empty-for', 'concurrency', 'heartbeat-file', 'balance',
        'auto-scaling-strategy', 'min-processes', 'max-processes', 'balance-max-shift',
        'balance-cooldown',
    ];

    /** Options passed through as flags. */
    private const FLAG_OPTIONS = ['once', 'stop-when-empty', 'force', 'json'];

    /** Signals forwarded to the binary when it runs as a child. */
    private const SIGNALS = ['SIGTERM', 'SIGINT', 'SIGQUIT', 'SIGHUP', 'SIGUSR2', 'SIGCONT'];

    protected $signature = 'laravel-worker
        {connection? : The name of the queue connection to work [default: the app\'s QUEUE_CONNECTION]}
        {--name= : The name of the worker [default: "default"]}
        {--queue= : The names of the queues to work, highest priority first}
        {--once : Only process the next job on the queue}
        {--stop-when-empty : Stop when the queue is empty}
        {--stop-when-empty-for= : Stop once no job has run for this many seconds}
        {--backoff= : Seconds to wait before retrying a job that failed (1,5,10: one per attempt) [default: 0]}
        {--delay= : Deprecated alias of --backoff}
        {--max-jobs= : The number of jobs to process before stopping [default: 0, no limit]}
        {--max-time= : The seconds the worker may run before stopping [default: 0, no limit]}
        {--force : Work even while the app is down for maintenance}
        {--memory= : The memory limit in megabytes [default: 128]}
        {--sleep= : Seconds to sleep when no job is available [default: 3]}
        {--rest= : Seconds to rest after each job [default: 0]}
        {--timeout= : Seconds a job may run [default: 60]}
        {--tries= : Attempts of a job before it fails [default: 1]}
        {--json : Output Laravel\'s JSON event lines}
        {--concurrency= : Jobs this worker runs at once [default: 1]}
        {--heartbeat-file= : A file the worker rewrites every 5 seconds (for health checks)}
        {--balance= : off, simple or auto: slots per queue, as Horizon\'s balance}
        {--auto-scaling-strategy= : time or size: what --balance=auto follows}
        {--min-processes= : Slots every queue keeps when balanced}
        {--max-processes= : Slots in all when balanced}
        {--balance-max-shift= : Slots a queue gains or loses per round}
        {--balance-cooldown= : Seconds between two balancing rounds}';

    protected $description = 'Process jobs on the queue with laravel-worker (queue:work\'s options)';

    public function handle(): int
    {
        $config = (string) config('laravel-worker.config');
        if (! is_file($config)) {
            $this->error("No worker config at {$config}: run php artisan laravel-worker:install first.");

            return 1;
        }
        try {
            $binary = $this->binary();
            $mismatch = Version::mismatch(Binary::version($binary));
        } catch (InstallException $e) {
            $this->error($e->getMessage());

            return 1;
        }
        if ($mismatch !== null) {
            $this->error("Not started: {$mismatch}.");

            return 1;
        }
        $arguments = $this->binaryArguments();
        if (function_exists('pcntl_exec')) {
            // Returns only when the binary could not be run (a warning, kept
            // from the app's error handler: the line below says it).
            set_error_handler(function () {
                return true;
            });
            pcntl_exec($binary, $arguments);
            restore_error_handler();
            $this->error("Cannot run {$binary}: ".pcntl_strerror(pcntl_get_last_error()).'.');

            return 1;
        }

        return $this->runAsChild($binary, $arguments);
    }

    /** The binary to run: config laravel-worker.binary, else laravel-worker on the PATH. */
    private function binary(): string
    {
        $configured = (string) config('laravel-worker.binary');
        if (is_file($configured)) {
            return $configured;
        }
        $found = (new ExecutableFinder())->find(Binary::NAME);
        if ($found === null) {
            throw new InstallException(
                "No laravel-worker binary at {$configured} nor on the PATH: run "
                .'php artisan laravel-worker:install first.'
            );
        }

        return $found;
    }

    /** The binary's command line: the app, its config file, then `work` with queue:work's options as given. */
    private function binaryArguments(): array
    {
        $arguments = ['--app='.$this->laravel->basePath(), '--config='.config('laravel-worker.config')];
        if ($this->output->isQuiet()) {
            $arguments[] = '-q';
        } elseif ($this->output->isVeryVerbose()) {
            $arguments[] = '-vv';
        } elseif ($this->output->isVerbose()) {
            $arguments[] = '-v';
        }
        $arguments[] = 'work';
        if ($this->argument('connection') !== null) {
            $arguments[] = $this->argument('connection');
        }
        foreach (self::VALUE_OPTIONS as $name) {
            if ($this->option($name) !== null) {
                $arguments[] = "--{$name}=".$this->option($name);
            }
        }
        foreach (self::FLAG_OPTIONS as $name) {
            if ($this->option($name)) {
                $arguments[] = "--{$name}";
            }
        }

        return $arguments;
    }

    /** Runs the binary as a child (no pcntl_exec): its output passed on, signals forwarded, its status returned. */
    private function runAsChild(string $binary, array $arguments): int
    {
        $process = new Process(array_merge([$binary], $arguments));
        $process->setTimeout(null);
        $process->start(function ($type, $buffer) {
            fwrite($type === Process::ERR ? STDERR : STDOUT, $buffer);
        });
        if (function_exists('pcntl_signal')) {
            pcntl_async_signals(true);
            foreach (self::SIGNALS as $name) {
                if (defined($name)) {
                    pcntl_signal(constant($name), function ($signal) use ($process) {
                        $process->signal($signal);
                    });
                }
            }
        }

        return (int) $process->wait();
    }
}
