<?php

namespace App\Jobs;

use App\Support\Recorder;
use Throwable;

/**
 * Shared by the test jobs: records each run and each failed() call with the
 * job's tag, its attempt number and the job object that ran it (RedisJob
 * under queue:work, the bridge's job under laravel-worker).
 */
trait RecordsRuns
{
    /** A label chosen by the test, to find this job's lines. */
    public $tag;

    protected function recordRun(array $fields = []): void
    {
        Recorder::record('handle', class_basename($this), [
            'tag' => $this->tag,
            'attempt' => $this->attempts(),
            'runner' => $this->job ? get_class($this->job) : null,
            'queue' => $this->job ? $this->job->getQueue() : null,
        ] + $fields);
    }

    /** Laravel calls this when the job fails for good. */
    public function failed(?Throwable $e = null): void
    {
        Recorder::record('failed', class_basename($this), [
            'tag' => $this->tag,
        ] + Recorder::exception($e));
    }
}
