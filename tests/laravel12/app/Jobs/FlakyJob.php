<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use RuntimeException;

/**
 * Throws on its first $failures attempts, then succeeds. Three tries, with
 * a backoff list: 2 s after the first failure, 5 s after later ones.
 */
class FlakyJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $tries = 3;

    public $backoff = [2, 5];

    public $failures;

    public function __construct(string $tag, int $failures)
    {
        $this->tag = $tag;
        $this->failures = $failures;
    }

    public function handle(): void
    {
        $this->recordRun();
        if ($this->attempts() <= $this->failures) {
            throw new RuntimeException("flaky {$this->tag} failed attempt {$this->attempts()}");
        }
    }
}
