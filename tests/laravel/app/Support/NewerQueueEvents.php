<?php

// Test-only stand-ins for the queue events of newer Laravel versions, which
// the app's Laravel (8.83) does not have: JobReleasedAfterException (9.x),
// JobAttempted (11.23; the exception it carries as of 13.0) and JobReleased
// (13.26), each declared only when absent, with the constructor of the newest
// version. Loaded only when LW_NEWER_QUEUE_EVENTS is set (see
// EventServiceProvider), so that the bridge's code paths for these versions
// run against a real 8.83 app: the bridge fires each event where
// class_exists() finds it, exactly as it would on the newer framework. They
// are not Laravel's classes: only their names and constructor shapes are.

namespace Illuminate\Queue\Events;

if (! class_exists(JobReleasedAfterException::class, false)) {
    class JobReleasedAfterException
    {
        public function __construct(public $connectionName, public $job, public $backoff = null, public $exception = null)
        {
        }
    }
}

if (! class_exists(JobAttempted::class, false)) {
    class JobAttempted
    {
        public function __construct(public $connectionName, public $job, public $exception = null)
        {
        }
    }
}

if (! class_exists(JobReleased::class, false)) {
    class JobReleased
    {
        public function __construct(public $connectionName, public $job, public $delay = 0)
        {
        }
    }
}
