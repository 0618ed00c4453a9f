<?php

namespace App\Jobs;

use DateTimeInterface;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use RuntimeException;

/**
 * Retried until a deadline instead of a number of tries: $tries is 1, yet
 * while retryUntil() has not passed every failure is retried.
 */
class DeadlineJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    public $tries = 1;

    /** @var int UNIX time of the deadline */
    public $until;

    public $failures;

    public function __construct(string $tag, int $seconds, int $failures)
    {
        $this->tag = $tag;
        $this->until = time() + $seconds;
        $this->failures = $failures;
    }

    public function retryUntil(): DateTimeInterface
    {
        return now()->setTimestamp($this->until);
    }

    public function handle(): void
    {
        $this->recordRun();
        if ($this->attempts() <= $this->failures) {
            throw new RuntimeException("deadline {$this->tag} failed attempt {$this->attempts()}");
        }
    }
}
