<?php

namespace App\Exceptions;

/** What DontRetryJob throws: an exception the app says not to retry. */
class DontRetryException extends \RuntimeException
{
}
