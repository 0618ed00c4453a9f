<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/** Records its start, then waits until the file $gate exists: for pool tests. */
class HoldJob implements ShouldQueue
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
        $this->recordRun(['pid' => getmypid()]);
        while (! file_exists($this->gate)) {
            usleep(10000);
        }
    }
}
