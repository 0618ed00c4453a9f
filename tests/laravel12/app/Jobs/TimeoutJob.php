<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/**
 * Sleeps past its one-second $timeout on every attempt while $sleep says so.
 * Two tries; $failOnTimeout can be switched on per dispatch.
 */
class TimeoutJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $timeout = 1;

    public $tries = 2;

    public $failOnTimeout = false;

    /** @var float seconds to sleep */
    public $sleep;

    public function __construct(string $tag, float $sleep, bool $failOnTimeout = false)
    {
        $this->tag = $tag;
        $this->sleep = $sleep;
        $this->failOnTimeout = $failOnTimeout;
    }

    public function handle(): void
    {
        $this->recordRun();
        usleep((int) ($this->sleep * 1e6));
        $this->recordRun(['woke' => true]);
    }
}
