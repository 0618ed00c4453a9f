<?php

namespace App\Support;

use Throwable;

/**
 * Appends one JSON line per event to the file named by config('app.job_log')
 * (JOB_LOG), so that tests can see what ran, how often and where.
 */
class Recorder
{
    /**
     * @param  string  $event  what happened: handle, failed, chain-catch, ...
     * @param  string  $job  the short name of the class that recorded it
     * @param  array  $fields  anything else worth asserting on
     */
    public static function record(string $event, string $job, array $fields = []): void
    {
        $path = config('app.job_log');
        if (! $path) {
            return;
        }
        $line = json_encode([
            'event' => $event,
            'job' => $job,
            'time' => microtime(true),
            'pid' => getmypid(),
        ] + $fields, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE);
        // One write per line, under an exclusive lock: several workers
        // (PHP and laravel-worker) may append at once.
        file_put_contents($path, $line."\n", FILE_APPEND | LOCK_EX);
    }

    /** The parts of an exception the tests look at. */
    public static function exception(?Throwable $e): array
    {
        return $e === null ? ['exception' => null] : [
            'exception' => get_class($e),
            'message' => $e->getMessage(),
        ];
    }
}
