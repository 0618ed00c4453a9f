<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use RuntimeException;

/**
 * Ten tries but at most two exceptions. It releases itself (no exception)
 * on its first attempt, then throws every time: the job fails on its third
 * attempt, the second exception.
 */
class MaxExceptionsJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $tries = 10;

    public $maxExceptions = 2;

    public function __construct(string $tag)
    {
        $this->tag = $tag;
    }

    public function handle(): void
    {
        $this->recordRun();
        if ($this->attempts() === 1) {
            $this->release(0);

            return;
        }
        throw new RuntimeException("max exceptions {$this->tag} attempt {$this->attempts()}");
    }
}
