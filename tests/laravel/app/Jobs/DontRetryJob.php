<?php

namespace App\Jobs;

use App\Exceptions\DontRetryException;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/** Three tries, but throws an exception the app says not to retry. */
class DontRetryJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $tries = 3;

    public function __construct(string $tag)
    {
        $this->tag = $tag;
    }

    public function handle(): void
    {
        $this->recordRun();
        throw new DontRetryException("not worth retrying {$this->tag}");
    }
}
