<?php

namespace App\Events;

use Illuminate\Foundation\Events\Dispatchable;

class OrderShipped
{
    use Dispatchable;

    public $orderId;

    public $fail;

    public function __construct(string $orderId, bool $fail = false)
    {
        $this->orderId = $orderId;
        $this->fail = $fail;
    }
}
