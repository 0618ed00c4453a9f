<?php

namespace App\Notifications;

use App\Support\Recorder;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Notifications\Notification;
use Throwable;

/** A queued notification (SendQueuedNotifications in the payload). */
class InvoicePaid extends Notification implements ShouldQueue
{
    use Queueable;

    public $invoice;

    public function __construct(string $invoice)
    {
        $this->invoice = $invoice;
    }

    public function via($notifiable): array
    {
        return [FileChannel::class];
    }

    public function toFile($notifiable): string
    {
        return $this->invoice;
    }

    public function failed(Throwable $e): void
    {
        Recorder::record('failed', 'InvoicePaid', ['tag' => $this->invoice] + Recorder::exception($e));
    }
}
