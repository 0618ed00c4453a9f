<?php

/*
 * laravel-worker bridge: runs the jobs of a Laravel app for laravel-worker.
 *
 * Part of the Composer package laravel-worker/laravel-worker: `php artisan
 * laravel-worker:install` writes a [[handlers]] entry pointing at it,
 *
 *     command = ["php", "/srv/app/vendor/laravel-worker/laravel-worker/laravel-worker-bridge.php", "--app=/srv/app"]
 *
 * and it also works as one file copied anywhere. At start it compares the
 * daemon's version (LARAVEL_WORKER_VERSION) with the package's
 * (src/Version.php beside it) and says on stderr which to upgrade when
 * their major.minor differ.
 *
 * It boots the app the way artisan does (vendor/autoload.php when present,
 * bootstrap/app.php, then the console kernel's bootstrappers) and runs each
 * job the way `php artisan queue:work` fires it: a Job object over the
 * payload, JobProcessing / JobProcessed / JobExceptionOccurred / JobFailed
 * events (and, where the app's Laravel has them, JobReleased,
 * JobReleasedAfterException and JobAttempted: see NewerEvents),
 * `Illuminate\Queue\CallQueuedHandler@call` for dispatched objects
 * (encrypted ones included) and `Class@method` for jobs pushed by name.
 *
 * The daemon owns Redis. This bridge never touches the job's queue keys:
 * `$this->release()`, `$this->delete()` and `$this->fail()` only record
 * what the job asked for, and the bridge reports it back:
 *
 *     {"action":"done"}                       the job ran
 *     {"action":"release","delay":30}         $this->release(30)
 *     {"action":"fail","reason":"..."}        $this->fail($e), or an exception the
 *                                             app says not to retry (failed() has run)
 *     {"action":"delete"}                     deleted by the job, then it threw
 *     {"action":"exception","class":"...","message":"...","text":"(string) $e"}
 *
 * Two transports, as laravel-worker's handler contract defines them:
 *
 *  - one process per job (the default): the reserved payload on stdin, the
 *    job's metadata in LARAVEL_WORKER_* variables, the outcome written as
 *    JSON to the file named by LARAVEL_WORKER_RESULT;
 *  - persistent (LARAVEL_WORKER_PROTOCOL=persistent): the app is booted
 *    once; requests arrive on stdin as one JSON object per line, and one
 *    answer line per request goes to file descriptor 3, carrying the
 *    request's "call" number unchanged (the daemon matches answers by it).
 *    End of stdin means exit.
 *
 * In "failed" mode (LARAVEL_WORKER_MODE=failed, or "mode":"failed") the
 * daemon has failed the job; the bridge runs the app's failure logic as
 * `Job::fail()` does: the handler's failed() (for CallQueuedHandler: unique
 * lock release, batch bookkeeping, chain catch callbacks, the job's own
 * failed() method) and the JobFailed event. It writes no failed_jobs row:
 * the daemon already has.
 *
 * In "finish" and "finish-failed" modes another handler (a process, HTTP
 * or persistent handler in any language) ran the job; the bridge does only
 * the bookkeeping CallQueuedHandler does around a run, without running
 * handle(): "finish" (the job succeeded) releases the unique lock, dispatches
 * the chain's next job and records the batch's success; "finish-failed"
 * (the failure as recorded) releases the unique lock, records the batch's
 * failure and runs the chain's catch callbacks (not the job's failed(),
 * nor JobFailed: the handler that ran the job has its own failed mode).
 *
 * Batches, chains, unique, encrypted and (13.6+) debounced jobs need nothing
 * here: CallQueuedHandler does their bookkeeping in this process, as it does
 * under queue:work (batch rows and callbacks, next chain job, lock release,
 * deleting a superseded debounced job, which is then reported as done).
 *
 * Verified with Laravel 8.83 and 12.67 (PHP 8.2). Written against the Job
 * API that Laravel 8 to 13 share (Illuminate\Queue\Jobs\Job).
 */

namespace LaravelWorker {

    use Throwable;

    /**
     * The daemon's own failure class names (a handler that crashed, a job no
     * handler matches). Declared so that a failed() method receives an
     * exception of the class named in the failed_jobs row.
     */
    class HandlerFailedException extends \RuntimeException
    {
    }

    class NoHandlerException extends \RuntimeException
    {
    }

    /**
     * Handed to failed() when the recorded failure names a class this app
     * cannot build (unknown, or a constructor that needs more than a
     * message). getOriginalClass() tells which class it was.
     */
    class RecordedFailureException extends \RuntimeException
    {
        private $originalClass;

        public function __construct(string $originalClass, string $message)
        {
            parent::__construct($message);
            $this->originalClass = $originalClass;
        }

        public function getOriginalClass(): string
        {
            return $this->originalClass;
        }
    }

    /** One call from the daemon: the payload and what the daemon knows. */
    final class Request
    {
        /** @var string "run", "failed", "finish" or "finish-failed" */
        public $mode = 'run';

        /** @var string the reserved payload JSON (attempts already counted) */
        public $payload = '';

        public $id = '';

        public $uuid = '';

        public $name = '';

        public $queue = 'default';

        public $connection = 'redis';

        /** @var int this attempt's number, from 1 (0 when not given) */
        public $attempt = 0;

        public $maxTries = 0;

        public $timeout = 0;

        /** @var string the failure as recorded (failed mode) */
        public $exception = '';

        /** A request of the one-process-per-job transport: stdin and environment. */
        public static function fromEnvironment(string $payload): self
        {
            $env = function (string $name, string $default = ''): string {
                $value = getenv('LARAVEL_WORKER_'.$name);

                return $value === false ? $default : $value;
            };
            $r = new self;
            $r->mode = $env('MODE', 'run');
            $r->payload = $payload;
            $r->id = $env('JOB_ID');
            $r->uuid = $env('JOB_UUID');
            $r->name = $env('JOB_NAME');
            $r->queue = $env('QUEUE', 'default');
            $r->connection = $env('CONNECTION', 'redis');
            $r->attempt = (int) $env('ATTEMPT', '0');
            $r->maxTries = (int) $env('MAX_TRIES', '0');
            $r->timeout = (int) $env('TIMEOUT', '0');
            $r->exception = $env('EXCEPTION');

            return $r;
        }

        /** A request of the persistent transport: one decoded NDJSON line. */
        public static function fromLine(array $line): self
        {
            $r = new self;
            $r->mode = (string) ($line['mode'] ?? 'run');
            // The payload is sent as a string (the reserved bytes); accept
            // an object too.
            $payload = $line['payload'] ?? '';
            $r->payload = is_string($payload) ? $payload : (string) json_encode($payload);
            $r->id = (string) ($line['id'] ?? '');
            $r->uuid = (string) ($line['uuid'] ?? '');
            $r->name = (string) ($line['name'] ?? '');
            $r->queue = (string) ($line['queue'] ?? 'default');
            $r->connection = (string) ($line['connection'] ?? getenv('LARAVEL_WORKER_CONNECTION') ?: 'redis');
            $r->attempt = (int) ($line['attempt'] ?? 0);
            $r->maxTries = (int) ($line['max_tries'] ?? 0);
            $r->timeout = (int) ($line['timeout'] ?? 0);
            $r->exception = (string) ($line['exception'] ?? '');

            return $r;
        }
    }

    /** Building the JSON answers of the handler contract. */
    final class Outcome
    {
        public static function done(): array
        {
            return ['action' => 'done'];
        }

        public static function exception(Throwable $e): array
        {
            return [
                'action' => 'exception',
                'class' => get_class($e),
                'message' => $e->getMessage(),
                'text' => (string) $e,
            ];
        }

        /**
         * The answer line (without its newline) to a decoded request: the
         * outcome, led by the request's "call" when it has one. The common
         * answer, done to an integer call, is written without json_encode.
         */
        public static function answer($request, array $outcome): string
        {
            if (! is_array($request) || ! array_key_exists('call', $request)) {
                return self::encode($outcome);
            }
            $call = $request['call'];
            if (is_int($call) && $outcome === ['action' => 'done']) {
                return '{"call":'.$call.',"action":"done"}';
            }

            return self::encode(['call' => $call] + $outcome);
        }

        /** JSON text of an answer; never fails (bad UTF-8 is replaced). */
        public static function encode(array $outcome): string
        {
            $flags = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_INVALID_UTF8_SUBSTITUTE;
            $json = json_encode($outcome, $flags);
            if ($json === false) {
                $json = json_encode([
                    'action' => 'exception',
                    'class' => HandlerFailedException::class,
                    'message' => 'the bridge could not encode its result: '.json_last_error_msg(),
                ], $flags);
            }

            return $json;
        }
    }

    /** Command line, boot, and the two transports. */
    final class Bridge
    {
        /** @var \Illuminate\Contracts\Foundation\Application|null */
        private static $app;

        /** @var Throwable|null why the app could not be booted */
        private static $bootError;

        /**
         * Boots the app named by --app (default: the directory of this file).
         * A failure is kept and reported as the outcome of the first job.
         */
        public static function boot(array $argv): void
        {
            $base = __DIR__;
            foreach (array_slice($argv, 1) as $arg) {
                if (strncmp($arg, '--app=', 6) === 0) {
                    $base = substr($arg, 6);
                } elseif ($arg === '--help' || $arg === '-h') {
                    fwrite(STDOUT, "usage: php laravel-worker-bridge.php [--app=/path/to/laravel/app]\n");
                    exit(0);
                } else {
                    fwrite(STDERR, "laravel-worker-bridge: unknown argument {$arg}\n");
                    exit(2);
                }
            }
            self::checkVersion();
            try {
                self::$app = self::bootApp(rtrim($base, '/'));
            } catch (Throwable $e) {
                self::$bootError = $e;
                fwrite(STDERR, "laravel-worker-bridge: cannot boot the app at {$base}: {$e}\n");
            }
        }

        /**
         * Compares the daemon's version (LARAVEL_WORKER_VERSION, set for
         * every handler process) with this package's (src/Version.php, when
         * the bridge runs from the Composer package) and, when their
         * major.minor differ, says on stderr which to upgrade. The jobs run
         * all the same.
         */
        private static function checkVersion(): void
        {
            $daemon = getenv('LARAVEL_WORKER_VERSION');
            $file = __DIR__.'/src/Version.php';
            if ($daemon === false || $daemon === '' || ! is_file($file)) {
                return;
            }
            if (! class_exists(Version::class, false)) {
                require_once $file;
            }
            $mismatch = Version::mismatch($daemon);
            if ($mismatch !== null) {
                fwrite(STDERR, "laravel-worker-bridge: {$mismatch} (jobs run all the same)\n");
            }
        }

        private static function bootApp(string $base)
        {
            if (! is_file($base.'/bootstrap/app.php')) {
                throw new \RuntimeException("{$base}/bootstrap/app.php not found; pass --app=/path/to/your/app");
            }
            // Composer's autoloader, as artisan loads it. An app without one
            // must set up autoloading in its bootstrap/app.php.
            if (is_file($base.'/vendor/autoload.php')) {
                require_once $base.'/vendor/autoload.php';
            }
            if (! defined('LARAVEL_START')) {
                define('LARAVEL_START', microtime(true));
            }
            $app = require $base.'/bootstrap/app.php';
            // The console kernel's bootstrappers: environment, configuration,
            // error handling, facades, providers.
            $app->make(\Illuminate\Contracts\Console\Kernel::class)->bootstrap();

            return $app;
        }

        /** Chooses the transport from LARAVEL_WORKER_PROTOCOL and runs it. */
        public static function serve(): int
        {
            return getenv('LARAVEL_WORKER_PROTOCOL') === 'persistent'
                ? self::servePersistent()
                : self::serveOne();
        }

        /** One job: payload on stdin, metadata in the environment, outcome to the result file. */
        private static function serveOne(): int
        {
            $request = Request::fromEnvironment((string) stream_get_contents(STDIN));
            $outcome = self::handle($request);
            $json = Outcome::encode($outcome);
            $path = getenv('LARAVEL_WORKER_RESULT');
            if ($path === false || $path === '') {
                // Run by hand: show the outcome.
                fwrite(STDOUT, $json."\n");
            } elseif (file_put_contents($path, $json) === false) {
                fwrite(STDERR, "laravel-worker-bridge: cannot write the result to {$path}\n");

                return 1;
            }

            return self::$app === null ? 1 : 0;
        }

        /** Many jobs in one booted app: NDJSON requests on stdin, responses on fd 3. */
        private static function servePersistent(): int
        {
            $out = @fopen('php://fd/3', 'w');
            if ($out === false) {
                fwrite(STDERR, "laravel-worker-bridge: persistent mode needs file descriptor 3 open for responses\n");

                return 2;
            }
            while (($line = fgets(STDIN)) !== false) {
                // json_decode skips the surrounding whitespace itself.
                $decoded = json_decode($line, true);
                if ($decoded === null && trim($line) === '') {
                    continue;
                }
                $outcome = is_array($decoded)
                    ? self::handle(Request::fromLine($decoded))
                    : Outcome::exception(new HandlerFailedException('the bridge got an unreadable request: '.substr(trim($line), 0, 200)));
                // The answer names the request it answers.
                fwrite($out, Outcome::answer($decoded, $outcome)."\n");
                fflush($out);
                if (self::$app === null) {
                    // Answered with the boot error; a fresh process will try again.
                    return 1;
                }
                self::resetScope();
            }

            return 0;
        }

        /** Runs one request in the booted app; every error becomes an outcome. */
        public static function handle(Request $request): array
        {
            if (self::$app === null) {
                return Outcome::exception(self::$bootError ?? new \RuntimeException('the app is not booted'));
            }
            try {
                $job = new BridgeJob(self::$app, $request);
            } catch (Throwable $e) {
                return Outcome::exception($e);
            }

            switch ($request->mode) {
                case 'failed':
                    return Runner::failed(self::$app, $job, $request->exception);
                case 'finish':
                    return Runner::finish(self::$app, $job, null);
                case 'finish-failed':
                    return Runner::finish(self::$app, $job, $request->exception);
                default:
                    return Runner::run(self::$app, $job);
            }
        }

        /**
         * What queue:work does between two jobs: forget scoped instances, the
         * log context and the facades' resolved instances.
         */
        private static function resetScope(): void
        {
            $app = self::$app;
            try {
                if ($app->resolved('log') && method_exists($app['log']->driver(), 'withoutContext')) {
                    $app['log']->withoutContext();
                }
                if (method_exists($app, 'forgetScopedInstances')) {
                    $app->forgetScopedInstances();
                }
                \Illuminate\Support\Facades\Facade::clearResolvedInstances();
            } catch (Throwable $e) {
                Runner::report($app, $e);
            }
        }
    }
}

namespace {
    // Boot first: the job class below extends a Laravel class, which the
    // app's autoloader has to provide before PHP can declare it.
    LaravelWorker\Bridge::boot($argv);
}

namespace LaravelWorker {

    use Illuminate\Contracts\Container\Container;
    use Illuminate\Contracts\Debug\ExceptionHandler;
    use Illuminate\Contracts\Queue\Job as JobContract;
    use Illuminate\Queue\Events\JobExceptionOccurred;
    use Illuminate\Queue\Events\JobProcessed;
    use Illuminate\Queue\Events\JobProcessing;
    use Illuminate\Queue\Jobs\Job;
    use Illuminate\Queue\ManuallyFailedException;
    use Throwable;

    if (class_exists(Job::class)) {
        /**
         * The job object a job sees as `$this->job`: Laravel's base Job over
         * the payload the daemon reserved. Asking it to delete, release or
         * fail records the request; the daemon carries it out.
         */
        class BridgeJob extends Job implements JobContract
        {
            /** @var string the reserved payload */
            private $body;

            /** @var array the decoded payload */
            private $decoded;

            /** @var Request */
            private $request;

            /** @var int seconds asked for by release() */
            private $releaseDelay = 0;

            /** @var Throwable|null what fail() was given */
            private $failure;

            public function __construct(Container $container, Request $request)
            {
                $decoded = json_decode($request->payload, true);
                if (! is_array($decoded)) {
                    throw new \Illuminate\Queue\InvalidPayloadException('The job payload is not a JSON object.');
                }
                $this->container = $container;
                $this->request = $request;
                $this->body = $request->payload;
                $this->decoded = $decoded;
                $this->connectionName = $request->connection;
                $this->queue = $request->queue;
            }

            public function getJobId()
            {
                return $this->request->id !== '' ? $this->request->id : ($this->decoded['id'] ?? null);
            }

            /**
             * The payload as reserved. (RedisJob returns the body before the
             * attempts increment; only "attempts" and key order differ.)
             */
            public function getRawBody()
            {
                return $this->body;
            }

            public function payload()
            {
                return $this->decoded;
            }

            /** This attempt's number, from 1. */
            public function attempts()
            {
                // The reserved copy already counts this attempt.
                return $this->request->attempt > 0
                    ? $this->request->attempt
                    : max(1, (int) ($this->decoded['attempts'] ?? 1));
            }

            public function release($delay = 0)
            {
                parent::release($delay);
                $this->releaseDelay = max(0, $this->secondsUntil($delay));
            }

            public function fail($e = null)
            {
                if (! $this->hasFailed()) {
                    $this->failure = $e ?: new ManuallyFailedException;
                }
                // Marks the job failed and deleted (recorded only), runs the
                // handler's failed() and fires JobFailed.
                parent::fail($e);
            }

            public function releaseDelay(): int
            {
                return $this->releaseDelay;
            }

            /** Attempts allowed, as the daemon counts them (0: unlimited). */
            public function maxTriesForBridge(): int
            {
                return $this->request->maxTries;
            }

            public function failure(): ?Throwable
            {
                return $this->failure;
            }
        }
    }

    /**
     * The queue events of newer Laravel versions, fired where the app's
     * Laravel has them (class_exists), in the order Worker::process fires
     * them, and 13.17's dontRetry() honoured:
     *
     *  - JobReleased (13.26): the job released itself (its release(), a
     *    middleware such as WithoutOverlapping), after fire();
     *  - 13.17: an exception the app's handler says not to retry
     *    (shouldStopRetries(), from dontRetry()/dontRetryWhen()) fails the
     *    job at once (Worker::markJobAsFailedIfItShouldntBeRetried): the
     *    job's failed() and JobFailed run here and the answer is "fail";
     *  - JobReleasedAfterException (9.x+): after JobExceptionOccurred, when
     *    the daemon will release the job (not deleted, released or failed,
     *    tries and retryUntil and maxExceptions left);
     *  - JobAttempted (11.23+): last, with whether (11.x, 12.x) or which
     *    (13.x) exception occurred.
     *
     * Every listener error is reported and never changes the outcome.
     */
    final class NewerEvents
    {
        private const ATTEMPTED = 'Illuminate\\Queue\\Events\\JobAttempted';

        private const RELEASED = 'Illuminate\\Queue\\Events\\JobReleased';

        private const RELEASED_AFTER_EXCEPTION = 'Illuminate\\Queue\\Events\\JobReleasedAfterException';

        /** JobReleased, when the job released itself while it ran. */
        public static function released($app, $events, string $connection, BridgeJob $job): void
        {
            if (! $job->isReleased() || ! class_exists(self::RELEASED)) {
                return;
            }
            try {
                $class = self::RELEASED;
                $events->dispatch(new $class($connection, $job, $job->releaseDelay()));
            } catch (Throwable $inner) {
                Runner::report($app, $inner);
            }
        }

        /**
         * Fails the job at once when the app's exception handler says the
         * exception must not be retried (13.17+: shouldStopRetries()).
         */
        public static function failIfNotToBeRetried($app, BridgeJob $job, Throwable $e): void
        {
            if ($job->hasFailed()) {
                return;
            }
            try {
                $handler = $app[ExceptionHandler::class];
                if (method_exists($handler, 'shouldStopRetries') && $handler->shouldStopRetries($e)) {
                    $job->fail($e);
                }
            } catch (Throwable $inner) {
                Runner::report($app, $inner);
            }
        }

        /**
         * JobReleasedAfterException, when the daemon will release the job:
         * it carries the job's backoff for this attempt (the payload's
         * `backoff`; the daemon's --backoff is not sent to handlers: 0) and,
         * on 13.x, the exception.
         */
        public static function releasedAfterException($app, $events, string $connection, BridgeJob $job, Throwable $e): void
        {
            if (! class_exists(self::RELEASED_AFTER_EXCEPTION)
                || $job->isDeleted() || $job->isReleased() || $job->hasFailed()
                || self::daemonWillFail($app, $job)) {
                return;
            }
            try {
                $class = self::RELEASED_AFTER_EXCEPTION;
                $events->dispatch(new $class($connection, $job, self::backoff($job), $e));
            } catch (Throwable $inner) {
                Runner::report($app, $inner);
            }
        }

        /** JobAttempted, last: with a bool (11.x, 12.x) or the exception (13.x). */
        public static function attempted($app, $events, string $connection, BridgeJob $job, ?Throwable $thrown): void
        {
            if (! class_exists(self::ATTEMPTED)) {
                return;
            }
            try {
                $class = self::ATTEMPTED;
                $params = (new \ReflectionMethod($class, '__construct'))->getParameters();
                $takesBool = isset($params[2]) && $params[2]->isDefaultValueAvailable()
                    && $params[2]->getDefaultValue() === false;
                $events->dispatch(new $class($connection, $job, $takesBool ? $thrown !== null : $thrown));
            } catch (Throwable $inner) {
                Runner::report($app, $inner);
            }
        }

        /**
         * Whether the daemon will fail this attempt's exception rather than
         * release it, as Worker::handleJobException decides: retryUntil
         * passed, or (without retryUntil) the last of maxTries, or the
         * job's maxExceptions reached with this one (the daemon counts them
         * under Laravel's `job-exceptions:{uuid}` cache key after this
         * answer).
         */
        private static function daemonWillFail($app, BridgeJob $job): bool
        {
            $payload = $job->payload();
            $retryUntil = $payload['retryUntil'] ?? null;
            if ($retryUntil) {
                if ($retryUntil <= time()) {
                    return true;
                }
            } elseif ($job->maxTriesForBridge() > 0 && $job->attempts() >= $job->maxTriesForBridge()) {
                return true;
            }
            $maxExceptions = $payload['maxExceptions'] ?? null;
            $uuid = $payload['uuid'] ?? null;
            if ($maxExceptions === null || $uuid === null) {
                return false;
            }
            try {
                $count = (int) $app['cache']->get('job-exceptions:'.$uuid, 0);
            } catch (Throwable $e) {
                return false;
            }

            return $count + 1 >= (int) $maxExceptions;
        }

        /** The payload's backoff for this attempt, as Worker::calculateBackoff reads it. */
        private static function backoff(BridgeJob $job): int
        {
            $backoff = $job->payload()['backoff'] ?? null;
            if ($backoff === null || $backoff === '') {
                return 0;
            }
            $steps = explode(',', (string) $backoff);

            return (int) ($steps[$job->attempts() - 1] ?? end($steps));
        }
    }

    /** Firing a job as Illuminate\Queue\Worker::process does. */
    final class Runner
    {
        /**
         * The app's event dispatcher, resolved at the first job and kept, as
         * queue:work's Worker keeps the one it was built with.
         *
         * @var \Illuminate\Contracts\Events\Dispatcher|null
         */
        private static $events;

        /** Run mode: fire the job and report what became of it. */
        public static function run($app, BridgeJob $job): array
        {
            $events = self::$events ?? (self::$events = $app['events']);
            $connection = $job->getConnectionName();
            $thrown = null;
            try {
                $events->dispatch(new JobProcessing($connection, $job));
                // The daemon has already failed jobs past their tries or
                // retryUntil; this one may run.
                $job->fire();
                NewerEvents::released($app, $events, $connection, $job);
                $events->dispatch(new JobProcessed($connection, $job));
            } catch (Throwable $e) {
                $thrown = $e;
                NewerEvents::failIfNotToBeRetried($app, $job, $e);
                try {
                    $events->dispatch(new JobExceptionOccurred($connection, $job, $e));
                } catch (Throwable $inner) {
                    self::report($app, $inner);
                }
                NewerEvents::releasedAfterException($app, $events, $connection, $job, $e);
            } finally {
                NewerEvents::attempted($app, $events, $connection, $job, $thrown);
            }
            if ($thrown !== null) {
                // Reported after JobAttempted, as Worker::runJob reports
                // what Worker::process threw.
                self::report($app, $thrown);
            }

            if ($job->hasFailed()) {
                // The job called $this->fail() (or a missing model failed it):
                // failed() has run here already, the daemon records it.
                $e = $job->failure() ?? $thrown ?? new ManuallyFailedException;

                return [
                    'action' => 'fail',
                    'reason' => $e->getMessage(),
                    'class' => get_class($e),
                    'message' => $e->getMessage(),
                    'text' => (string) $e,
                ];
            }
            if ($job->isReleased()) {
                return ['action' => 'release', 'delay' => $job->releaseDelay()];
            }
            if ($thrown !== null) {
                // Deleted by the job before it threw: gone, as in Laravel.
                return $job->isDeleted() ? ['action' => 'delete'] : Outcome::exception($thrown);
            }

            // Done. (A job pushed by name that neither deleted nor released
            // itself stays reserved under queue:work until retry_after; here
            // it is done.)
            return Outcome::done();
        }

        /**
         * Failed mode: the daemon has failed the job; run its failure logic
         * with an exception rebuilt from the recorded text.
         */
        public static function failed($app, BridgeJob $job, string $recorded): array
        {
            try {
                $job->fail(self::rebuildException($recorded, $job));
            } catch (Throwable $e) {
                self::report($app, $e);

                return Outcome::exception($e);
            }

            return Outcome::done();
        }

        /**
         * Finish modes: the bookkeeping of a job another handler ran
         * (`$recorded` null: it succeeded; else its recorded failure).
         * A job pushed by name (no data.command) has none.
         */
        public static function finish($app, BridgeJob $job, ?string $recorded): array
        {
            try {
                $data = $job->payload()['data'] ?? null;
                if (! is_array($data) || ! is_string($data['command'] ?? null)) {
                    return Outcome::done();
                }
                $finisher = $app->make(Finisher::class);
                if ($recorded === null) {
                    $finisher->succeeded($job, $data);
                    self::markFinished($app, $job);
                } else {
                    $finisher->failedBookkeeping($job, $data, self::rebuildException($recorded, $job));
                }
            } catch (Throwable $e) {
                self::report($app, $e);

                return Outcome::exception($e);
            }

            return Outcome::done();
        }

        /**
         * The daemon's finish marker for the job (laravel_worker_finished:
         * {uuid}, a lock of the app's default cache store, which the daemon
         * set to "started" before calling) set to "done" as soon as the
         * finish is done: a daemon killed before this answer reaches it
         * then does not finish the job (push its chain's next job) again.
         * A store without locks keeps none; a failure here is reported and
         * never fails the finish.
         */
        private static function markFinished($app, BridgeJob $job): void
        {
            $uuid = (string) $job->uuid();
            if ($uuid === '') {
                return;
            }
            try {
                $store = $app['cache']->store()->getStore();
                if (! $store instanceof \Illuminate\Contracts\Cache\LockProvider) {
                    return;
                }
                $retryAfter = (int) $app['config']->get('queue.connections.'.$job->getConnectionName().'.retry_after', 90);
                $lock = $store->lock('laravel_worker_finished:'.$uuid, $retryAfter + 3600, 'done');
                $lock->forceRelease();
                $lock->acquire();
            } catch (Throwable $e) {
                self::report($app, $e);
            }
        }

        /**
         * The exception named by a failed_jobs text ("Class: message in
         * file:line\nStack trace:..." as PHP writes it, or the daemon's own
         * "Class: message\nStack trace:\n#0 {main}").
         */
        public static function rebuildException(string $text, BridgeJob $job): Throwable
        {
            $header = explode("\nStack trace:", $text, 2)[0];
            if (! preg_match('/^([A-Za-z_\\\\][A-Za-z0-9_\\\\]*)(?:: (.*))?$/s', trim($header), $m)) {
                return new RecordedFailureException('', $text === '' ? 'The job failed.' : $text);
            }
            $class = ltrim($m[1], '\\');
            $message = preg_replace('/ in \S+:\d+$/', '', $m[2] ?? '');

            // Laravel before 10.25 has no TimeoutExceededException; it fails
            // timed-out jobs with MaxAttemptsExceededException.
            if ($class === 'Illuminate\Queue\TimeoutExceededException'
                && ! class_exists($class)
                && class_exists('Illuminate\Queue\MaxAttemptsExceededException')) {
                $class = 'Illuminate\Queue\MaxAttemptsExceededException';
            }
            if (class_exists($class) && is_subclass_of($class, Throwable::class)) {
                try {
                    return new $class($message);
                } catch (Throwable $e) {
                    // A constructor that wants more than a message.
                }
            }

            return new RecordedFailureException($class, $message);
        }

        /** Hands an exception to the app's exception handler, as the worker does. */
        public static function report($app, Throwable $e): void
        {
            try {
                $app[ExceptionHandler::class]->report($e);
            } catch (Throwable $ignored) {
                fwrite(STDERR, (string) $e."\n");
            }
        }
    }
}

namespace LaravelWorker {

    use Illuminate\Contracts\Queue\Job as QueueJob;
    use Illuminate\Contracts\Queue\ShouldBeUniqueUntilProcessing;
    use Illuminate\Queue\CallQueuedHandler;
    use Throwable;

    if (class_exists(CallQueuedHandler::class)) {
        /**
         * CallQueuedHandler's steps around a run, without the run: what the
         * finish modes do for a job another handler ran. Each step is the
         * app's own method, called only where its Laravel has it.
         */
        class Finisher extends CallQueuedHandler
        {
            /** After a successful run: lock, the chain's next job, the batch. */
            public function succeeded(QueueJob $job, array $data): void
            {
                $command = $this->setJobInstanceIfNecessary($job, $this->getCommand($data));
                $this->releaseLock($command, (string) $job->uuid());
                $this->ensureNextJobInChainIsDispatched($command);
                $this->ensureSuccessfulBatchJobIsRecorded($command);
            }

            /** After the final failure: lock, the batch, the chain's catch callbacks. */
            public function failedBookkeeping(QueueJob $job, array $data, Throwable $e): void
            {
                $command = $this->setJobInstanceIfNecessary($job, $this->getCommand($data));
                $uuid = (string) $job->uuid();
                $this->releaseLock($command, $uuid);
                if ($command instanceof \__PHP_Incomplete_Class) {
                    return;
                }
                $this->ensureFailedBatchJobIsRecorded($uuid, $command, $e);
                $this->ensureChainCatchCallbacksAreInvoked($uuid, $command, $e);
            }

            /** The unique lock, as CallQueuedHandler releases it after a run. */
            private function releaseLock($command, string $uuid): void
            {
                if ($command instanceof ShouldBeUniqueUntilProcessing) {
                    // Released before the run; 13.x forgets its marker here.
                    if (method_exists($this, 'forgetUniqueUntilProcessingReleasedMarker')) {
                        $this->forgetUniqueUntilProcessingReleasedMarker($command, $uuid);
                    }

                    return;
                }
                if (method_exists($this, 'ensureUniqueJobLockIsReleased')) {
                    $this->ensureUniqueJobLockIsReleased($command);
                }
            }
        }
    }
}

namespace {
    exit(LaravelWorker\Bridge::serve());
}
