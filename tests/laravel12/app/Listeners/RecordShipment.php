<?php

namespace App\Listeners;

use App\Events\OrderShipped;
use App\Support\Recorder;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Queue\InteractsWithQueue;
use RuntimeException;
use Throwable;

/** A queued listener (CallQueuedListener in the payload). */
class RecordShipment implements ShouldQueue
{
    use InteractsWithQueue;

    public $tries = 1;

    public function handle(OrderShipped $event): void
    {
        Recorder::record('handle', 'RecordShipment', [
            'tag' => $event->orderId,
            'attempt' => $this->attempts(),
            'runner' => get_class($this->job),
        ]);
        if ($event->fail) {
            throw new RuntimeException("shipment {$event->orderId} failed");
        }
    }

    public function failed(OrderShipped $event, Throwable $e): void
    {
        Recorder::record('failed', 'RecordShipment', ['tag' => $event->orderId] + Recorder::exception($e));
    }
}
