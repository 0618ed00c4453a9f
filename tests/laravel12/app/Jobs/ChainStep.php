<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use RuntimeException;

/** One step of a chain; throws when $fail (one try). */
class ChainStep implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $fail;

    public function __construct(string $tag, bool $fail = false)
    {
        $this->tag = $tag;
        $this->fail = $fail;
    }

    public function handle(): void
    {
        $this->recordRun();
        if ($this->fail) {
            throw new RuntimeException("chain step {$this->tag} failed");
        }
    }
}
