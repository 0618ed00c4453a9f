<?php

namespace App\Providers;

use App\Events\OrderShipped;
use App\Listeners\RecordShipment;
use App\Support\Recorder;
use Illuminate\Foundation\Support\Providers\EventServiceProvider as ServiceProvider;
use Illuminate\Support\Facades\Event;

class EventServiceProvider extends ServiceProvider
{
    protected $listen = [
        OrderShipped::class => [RecordShipment::class],
    ];

    /**
     * With LW_NEWER_QUEUE_EVENTS set (tests of the bridge's events only):
     * the stand-ins of newer Laravel's queue events are declared, and every
     * queue event is recorded in order, with the job's uuid, as
     * `queue-event` lines.
     */
    public function boot()
    {
        parent::boot();
        if (! env('LW_NEWER_QUEUE_EVENTS')) {
            return;
        }
        require_once __DIR__.'/../Support/NewerQueueEvents.php';
        $events = ['JobProcessing', 'JobProcessed', 'JobExceptionOccurred', 'JobFailed',
            'JobReleasedAfterException', 'JobAttempted', 'JobReleased'];
        foreach ($events as $name) {
            Event::listen('Illuminate\\Queue\\Events\\'.$name, function ($event) use ($name) {
                $fields = ['uuid' => $event->job->uuid()];
                if (property_exists($event, 'exception')) {
                    $fields['carried'] = $event->exception === null ? null : get_class($event->exception);
                }
                if (property_exists($event, 'backoff')) {
                    $fields['backoff'] = $event->backoff;
                }
                Recorder::record('queue-event', $name, $fields);
            });
        }
    }
}
