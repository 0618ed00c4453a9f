<?php

namespace App\Jobs;

use App\Support\Recorder;
use RuntimeException;

/**
 * A job pushed by name: Queue::push('App\Jobs\StringJob@handle', $data).
 * Laravel calls handle($job, $data); such a job deletes itself when done.
 */
class StringJob
{
    public function handle($job, array $data): void
    {
        Recorder::record('handle', 'StringJob', [
            'tag' => $data['tag'] ?? null,
            'attempt' => $job->attempts(),
            'runner' => get_class($job),
            'data' => $data,
        ]);
        if (! empty($data['fail'])) {
            throw new RuntimeException("string job {$data['tag']} failed");
        }
        $job->delete();
    }

    /** Called with the job's data when it fails for good. */
    public function failed(array $data, $e): void
    {
        Recorder::record('failed', 'StringJob', ['tag' => $data['tag'] ?? null] + Recorder::exception($e));
    }
}
