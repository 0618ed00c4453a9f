<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldBeUnique;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use RuntimeException;

/**
 * At most one queued per $key: dispatch takes the cache lock
 * "laravel_unique_job:App\Jobs\UniqueJob:<key>" (12.x), and running (or failing)
 * the job releases it.
 */
class UniqueJob implements ShouldQueue, ShouldBeUnique
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $uniqueFor = 3600;

    public $key;

    public $fail;

    public function __construct(string $tag, string $key, bool $fail = false)
    {
        $this->tag = $tag;
        $this->key = $key;
        $this->fail = $fail;
    }

    public function uniqueId(): string
    {
        return $this->key;
    }

    public function handle(): void
    {
        $this->recordRun();
        if ($this->fail) {
            throw new RuntimeException("unique {$this->tag} failed");
        }
    }
}
