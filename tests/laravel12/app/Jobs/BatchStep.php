<?php

namespace App\Jobs;

use Illuminate\Bus\Batchable;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\Middleware\SkipIfBatchCancelled;
use RuntimeException;

/**
 * One job of a batch. Tagged "<batch tag>.<step>". Does, by $action:
 *
 *  - "ok": records its run;
 *  - "fail": records its run and throws (one try: fails at once);
 *  - "cancel": records its run and cancels its batch.
 *
 * A job of a cancelled batch skips its work and records "skipped": through
 * Laravel's SkipIfBatchCancelled middleware when $middleware is set (it then
 * never reaches handle()), else by asking $this->batch()->cancelled() as the
 * Laravel docs show.
 */
class BatchStep implements ShouldQueue
{
    use Batchable, Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $tries = 1;

    public $action;

    public $useMiddleware;

    public function __construct(string $tag, string $action = 'ok', bool $useMiddleware = false)
    {
        $this->tag = $tag;
        $this->action = $action;
        $this->useMiddleware = $useMiddleware;
    }

    public function middleware(): array
    {
        return $this->useMiddleware ? [new SkipIfBatchCancelled] : [];
    }

    public function handle(): void
    {
        if ($this->batch()->cancelled()) {
            $this->recordRun(['skipped' => true, 'by' => 'handle']);

            return;
        }
        $this->recordRun(['batch' => $this->batchId]);
        if ($this->action === 'fail') {
            throw new RuntimeException("batch step {$this->tag} failed");
        }
        if ($this->action === 'cancel') {
            $this->batch()->cancel();
        }
    }
}
