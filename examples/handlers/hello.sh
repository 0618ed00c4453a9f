#!/bin/sh
# A minimal handler: logs the job and succeeds.
#
# The payload (JSON, attempts already counted) is on stdin; the metadata is
# in LARAVEL_WORKER_* variables. Exit 0 = done, anything else = exception.
# To release, fail or delete instead, write one JSON object to the file named
# by $LARAVEL_WORKER_RESULT, e.g.:
#   echo '{"action":"release","delay":30}' > "$LARAVEL_WORKER_RESULT"
if [ "$LARAVEL_WORKER_MODE" = failed ]; then
    echo "failed hook for $LARAVEL_WORKER_JOB_NAME ($LARAVEL_WORKER_JOB_ID)" >&2
    exit 0
fi
payload=$(cat)
echo "ran $LARAVEL_WORKER_JOB_NAME on $LARAVEL_WORKER_QUEUE, attempt $LARAVEL_WORKER_ATTEMPT of $LARAVEL_WORKER_MAX_TRIES (${#payload} bytes)"
