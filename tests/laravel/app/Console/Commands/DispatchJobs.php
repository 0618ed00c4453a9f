<?php

namespace App\Console\Commands;

use App\Events\OrderShipped;
use App\Jobs;
use App\Notifications\FileChannel;
use App\Notifications\InvoicePaid;
use App\Support\Recorder;
use Illuminate\Console\Command;
use Illuminate\Support\Facades\Bus;
use Illuminate\Support\Facades\Notification;
use Illuminate\Support\Facades\Queue;
use InvalidArgumentException;
use Throwable;

/**
 * Dispatches test jobs through the real bus, queue, event dispatcher and
 * notification sender, in one process.
 *
 *   php artisan test:dispatch '[{"kind":"plain","tag":"a"},{"kind":"flaky","tag":"b","failures":1}]'
 *
 * Every item may also give "queue" (a queue name), "delay" (seconds) and
 * "count" (dispatch that many, tagged tag0, tag1, ...).
 */
class DispatchJobs extends Command
{
    protected $signature = 'test:dispatch {specs : a JSON array of jobs to dispatch}';

    protected $description = 'Dispatch test jobs';

    public function handle(): int
    {
        $specs = json_decode($this->argument('specs'), true, 512, JSON_THROW_ON_ERROR);
        $n = 0;
        foreach ($specs as $spec) {
            $count = $spec['count'] ?? null;
            foreach (range(0, ($count ?? 1) - 1) as $i) {
                $tag = ($spec['tag'] ?? '').($count === null ? '' : $i);
                $this->dispatchOne($spec, $tag);
                $n++;
            }
        }
        $this->line("dispatched {$n}");

        return 0;
    }

    private function dispatchOne(array $spec, string $tag): void
    {
        switch ($spec['kind']) {
            case 'plain':
                $this->bus(new Jobs\PlainJob($tag, $spec['data'] ?? []), $spec);
                break;
            case 'timed':
                $this->bus(new Jobs\TimedJob($tag, $spec['gates'] ?? null), $spec);
                break;
            case 'flaky':
                $this->bus(new Jobs\FlakyJob($tag, $spec['failures']), $spec);
                break;
            case 'timeout':
                $this->bus(new Jobs\TimeoutJob($tag, $spec['sleep'], $spec['fail_on_timeout'] ?? false), $spec);
                break;
            case 'deadline':
                $this->bus(new Jobs\DeadlineJob($tag, $spec['seconds'], $spec['failures']), $spec);
                break;
            case 'max-exceptions':
                $this->bus(new Jobs\MaxExceptionsJob($tag), $spec);
                break;
            case 'releasing':
                $this->bus(new Jobs\ReleasingJob($tag, $spec['release']), $spec);
                break;
            case 'self-failing':
                $this->bus(new Jobs\SelfFailingJob($tag), $spec);
                break;
            case 'dont-retry':
                $this->bus(new Jobs\DontRetryJob($tag), $spec);
                break;
            case 'gated':
                $this->bus(new Jobs\GatedJob($tag, $spec['gate']), $spec);
                break;
            case 'hold':
                $this->bus(new Jobs\HoldJob($tag, $spec['gate']), $spec);
                break;
            case 'encrypted':
                $this->bus(new Jobs\EncryptedJob($tag, $spec['secret']), $spec);
                break;
            case 'unique':
                $this->bus(new Jobs\UniqueJob($tag, $spec['key'], $spec['fail'] ?? false), $spec);
                break;
            case 'property-unique':
                $this->bus(new Jobs\PropertyUniqueJob($tag, $spec['key']), $spec);
                break;
            case 'chain':
                // Steps are tagged "<tag>.<step>"; the step named in "fail" throws.
                $steps = array_map(
                    fn ($step) => new Jobs\ChainStep("{$tag}.{$step}", $step === ($spec['fail'] ?? null)),
                    $spec['steps']
                );
                $chain = Bus::chain($steps)->catch(function (Throwable $e) use ($tag) {
                    Recorder::record('chain-catch', 'Chain', ['tag' => $tag] + Recorder::exception($e));
                });
                if (isset($spec['queue'])) {
                    $chain->onQueue($spec['queue']);
                }
                $chain->dispatch();
                break;
            case 'batch':
                $this->batch($spec, $tag);
                break;
            case 'event':
                event(new OrderShipped($tag, $spec['fail'] ?? false));
                break;
            case 'notification':
                Notification::route(FileChannel::class, $spec['to'] ?? 'someone')
                    ->notify(new InvoicePaid($tag));
                break;
            case 'string':
                $data = ['tag' => $tag] + ($spec['data'] ?? []);
                if (isset($spec['delay'])) {
                    Queue::later($spec['delay'], 'App\Jobs\StringJob@handle', $data, $spec['queue'] ?? null);
                } else {
                    Queue::push('App\Jobs\StringJob@handle', $data, $spec['queue'] ?? null);
                }
                break;
            default:
                throw new InvalidArgumentException("unknown job kind {$spec['kind']}");
        }
    }

    /**
     * Bus::batch() of BatchStep jobs: each step is "name" or "name:fail",
     * tagged "<tag>.<name>"; then, catch and finally record the batch's
     * counters; "allow_failures" calls allowFailures().
     */
    private function batch(array $spec, string $tag): void
    {
        $jobs = array_map(function (string $step) use ($tag) {
            [$name, $action] = array_pad(explode(':', $step, 2), 2, '');

            return new Jobs\BatchStep("{$tag}.{$name}", $action === 'fail');
        }, $spec['steps']);
        $callback = function (string $event) use ($tag) {
            return static function ($batch, $e = null) use ($event, $tag) {
                Recorder::record($event, 'Batch', [
                    'tag' => $tag,
                    'pending' => $batch->pendingJobs,
                    'failed' => $batch->failedJobs,
                    'cancelled' => $batch->cancelled(),
                    'finished' => $batch->finished(),
                ] + ($e === null ? [] : Recorder::exception($e)));
            };
        };
        $batch = Bus::batch($jobs)->name($tag)
            ->then($callback('batch-then'))
            ->catch($callback('batch-catch'))
            ->finally($callback('batch-finally'));
        if ($spec['allow_failures'] ?? false) {
            $batch->allowFailures();
        }
        $batch->dispatch();
    }

    /** dispatch() with the item's queue and delay. */
    private function bus($job, array $spec): void
    {
        $pending = dispatch($job);
        if (isset($spec['queue'])) {
            $pending->onQueue($spec['queue']);
        }
        if (isset($spec['delay'])) {
            $pending->delay(now()->addSeconds($spec['delay']));
        }
        // The job is pushed when $pending goes out of scope, here.
    }
}
