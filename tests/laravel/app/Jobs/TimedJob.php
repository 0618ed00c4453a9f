<?php

namespace App\Jobs;

use App\Support\Recorder;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/**
 * Records a "start" and an "end" line per run, both with the run's own id
 * and the process ids: the mixed fleet tests match each run's start with
 * its end, and tell which worker ran it (queue:work runs a job in its own
 * process, `pid`; laravel-worker in a bridge process it started, `ppid`).
 *
 * With $gates (a directory), a run that finds the file "hold-php" (run by
 * queue:work) or "hold-daemon" (run by laravel-worker) there takes it,
 * renaming it "held-WORKER_PID", and holds between its start and its end
 * until its worker is killed (at most 60 s): so the test kills a worker
 * in the middle of a job.
 */
class TimedJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, RecordsRuns;

    /** @var string|null  the directory of the hold files */
    public $gates;

    public function __construct(string $tag, ?string $gates = null)
    {
        $this->tag = $tag;
        $this->gates = $gates;
    }

    public function handle(): void
    {
        $runner = $this->job ? get_class($this->job) : null;
        $fields = [
            'tag' => $this->tag,
            'run' => bin2hex(random_bytes(8)),
            'attempt' => $this->attempts(),
            'runner' => $runner,
            'ppid' => posix_getppid(),
        ];
        Recorder::record('start', 'TimedJob', $fields);
        if ($this->gates !== null) {
            $php = $runner === \Illuminate\Queue\Jobs\DatabaseJob::class;
            $worker = $php ? getmypid() : posix_getppid();
            $hold = $this->gates.'/hold-'.($php ? 'php' : 'daemon');
            if (file_exists($hold) && @rename($hold, "{$this->gates}/held-{$worker}")) {
                for ($i = 0; $i < 6000; $i++) {
                    usleep(10000);
                }
            }
        }
        Recorder::record('end', 'TimedJob', $fields);
    }
}
