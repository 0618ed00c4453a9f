<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldBeEncrypted;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/** Its serialized command is encrypted with APP_KEY in the payload. */
class EncryptedJob implements ShouldQueue, ShouldBeEncrypted
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $secret;

    public function __construct(string $tag, string $secret)
    {
        $this->tag = $tag;
        $this->secret = $secret;
    }

    public function handle(): void
    {
        $this->recordRun(['secret' => $this->secret]);
    }
}
