<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/** Releases itself for $delay seconds on its first attempt, then succeeds. */
class ReleasingJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $tries = 2;

    public $releaseFor;

    public function __construct(string $tag, int $delay)
    {
        $this->tag = $tag;
        $this->releaseFor = $delay;
    }

    public function handle(): void
    {
        $this->recordRun();
        if ($this->attempts() === 1) {
            $this->release($this->releaseFor);
        }
    }
}
