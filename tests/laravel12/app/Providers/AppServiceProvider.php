<?php

namespace App\Providers;

use App\Events\OrderShipped;
use App\Listeners\RecordShipment;
use Illuminate\Support\Facades\Event;
use Illuminate\Support\ServiceProvider;

class AppServiceProvider extends ServiceProvider
{
    public function boot(): void
    {
        Event::listen(OrderShipped::class, RecordShipment::class);
    }
}
