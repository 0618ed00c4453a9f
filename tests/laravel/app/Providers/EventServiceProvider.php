<?php

namespace App\Providers;

use App\Events\OrderShipped;
use App\Listeners\RecordShipment;
use Illuminate\Foundation\Support\Providers\EventServiceProvider as ServiceProvider;

class EventServiceProvider extends ServiceProvider
{
    protected $listen = [
        OrderShipped::class => [RecordShipment::class],
    ];
}
