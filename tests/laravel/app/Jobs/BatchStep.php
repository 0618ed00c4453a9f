<?php

namespace App\Jobs;

use Illuminate\Bus\Batchable;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use RuntimeException;

/**
 * One job of a Bus::batch(): one try; throws when $fail; does no work
 * (records `skipped`) once its batch is cancelled.
 */
class BatchStep implements ShouldQueue
{
    use Batchable, Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $tries = 1;

    public $fail;

    public function __construct(string $tag, bool $fail = false)
    {
        $this->tag = $tag;
        $this->fail = $fail;
    }

    public function handle(): void
    {
        $cancelled = $this->batch() !== null && $this->batch()->cancelled();
        $this->recordRun($cancelled ? ['skipped' => true] : []);
        if (! $cancelled && $this->fail) {
            throw new RuntimeException("batch step {$this->tag} failed");
        }
    }
}
