<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use InvalidArgumentException;

/** Fails itself ($this->fail()) with tries left: no retry, failed() runs. */
class SelfFailingJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $tries = 5;

    public function __construct(string $tag)
    {
        $this->tag = $tag;
    }

    public function handle(): void
    {
        $this->recordRun();
        $this->fail(new InvalidArgumentException("bad input for {$this->tag}"));
    }
}
