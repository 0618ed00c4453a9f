<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use RuntimeException;

/** Throws until the file $gate exists (one try): for queue:retry tests. */
class GatedJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $gate;

    public function __construct(string $tag, string $gate)
    {
        $this->tag = $tag;
        $this->gate = $gate;
    }

    public function handle(): void
    {
        $this->recordRun();
        if (! file_exists($this->gate)) {
            throw new RuntimeException("gate closed for {$this->tag}");
        }
    }
}
