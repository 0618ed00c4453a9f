<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\SerializesModels;

/** Runs once and records it; no limits of its own. */
class PlainJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels, RecordsRuns;

    /** @var array  data the test wants to see again in the record */
    public $data;

    public function __construct(string $tag, array $data = [])
    {
        $this->tag = $tag;
        $this->data = $data;
    }

    public function handle(): void
    {
        $this->recordRun(['data' => $this->data]);
    }
}
