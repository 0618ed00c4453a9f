<?php

namespace App\Notifications;

use App\Support\Recorder;
use Illuminate\Notifications\Notification;

/** A notification channel that "delivers" by recording a line. */
class FileChannel
{
    public function send($notifiable, Notification $notification): void
    {
        Recorder::record('notification', class_basename($notification), [
            'tag' => $notification->toFile($notifiable),
            'to' => $notifiable->routeNotificationFor(self::class, $notification),
        ]);
    }
}
