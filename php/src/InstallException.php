<?php

namespace LaravelWorker;

/** A step of laravel-worker:install that failed; the message says what to do. */
class InstallException extends \RuntimeException
{
}
