<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldBeUnique;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/**
 * At most one queued per $uniqueId, a property (no uniqueId() method): the
 * lock "laravel_unique_job:App\Jobs\PropertyUniqueJob<uniqueId>" (8.x) is
 * one a worker can name from the payload without PHP.
 */
class PropertyUniqueJob implements ShouldQueue, ShouldBeUnique
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $uniqueFor = 3600;

    public $uniqueId;

    public function __construct(string $tag, string $key)
    {
        $this->tag = $tag;
        $this->uniqueId = $key;
    }

    public function handle(): void
    {
        $this->recordRun();
    }
}
