<?php

namespace App\Exceptions;

use Illuminate\Foundation\Exceptions\Handler as ExceptionHandler;
use Throwable;

class Handler extends ExceptionHandler
{
    /**
     * Laravel 13.17's hook (what `dontRetry()` configures), which 8.83 does
     * not have: offered only with LW_NEWER_QUEUE_EVENTS set, for the
     * bridge's tests, and true for DontRetryException only.
     */
    public function shouldStopRetries(Throwable $e): bool
    {
        return (bool) env('LW_NEWER_QUEUE_EVENTS') && $e instanceof DontRetryException;
    }
}
