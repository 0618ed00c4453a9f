<?php
// A laravel-worker handler in plain PHP, for the process and persistent modes.
// (To run the app's own Laravel job classes, use php/laravel-worker-bridge.php.)
//
//   [[handlers]]
//   match = "App\\Jobs\\*"
//   command = ["php", "/srv/handlers/handler.php"]
//   # mode = "persistent"   # keep it warm: one process takes job after job
//
// handle() runs one job and returns the answer. This one does what the job's
// data.action asks (done by default; "throw" throws), so every answer can be
// tried with `laravel-worker push default --job 'App\Jobs\Try' --data
// '{"action":"release","delay":5}'`. Replace its body with the real work.

function handle(array $job): array
{
    if ($job['mode'] === 'failed') { // the failed hook: the worker failed the job
        fwrite(STDERR, "failed hook for {$job['name']}: {$job['exception']}\n");
        return ['action' => 'done'];
    }
    $data = $job['payload']['data'] ?? [];
    fwrite(STDERR, "running {$job['name']}, attempt {$job['attempt']}\n");
    if (($data['action'] ?? null) === 'throw') {
        throw new RuntimeException('the job asked to throw');
    }
    return isset($data['action']) ? $data : ['action' => 'done'];
}

// Runs handle(); an uncaught exception becomes the answer the worker records.
function answer(array $job): array
{
    try {
        return handle($job);
    } catch (Throwable $e) {
        return ['action' => 'exception', 'class' => get_class($e),
            'message' => $e->getMessage(), 'text' => (string) $e];
    }
}

if (getenv('LARAVEL_WORKER_PROTOCOL') === 'persistent') {
    // One request per line on stdin; exactly one answer per request on fd 3,
    // echoing its "call". End of stdin means exit.
    $answers = fopen('php://fd/3', 'w');
    while (($line = fgets(STDIN)) !== false) {
        $request = json_decode($line, true);
        $job = ['payload' => json_decode($request['payload'], true)] + $request;
        $answer = ['call' => $request['call']] + answer($job);
        fwrite($answers, json_encode($answer)."\n");
        fflush($answers);
    }
} else {
    // One job per process: the payload on stdin, the rest in the environment.
    // Exit 0 = done; any other answer goes to the result file.
    $answer = answer([
        'mode' => getenv('LARAVEL_WORKER_MODE'),
        'name' => getenv('LARAVEL_WORKER_JOB_NAME'),
        'attempt' => (int) getenv('LARAVEL_WORKER_ATTEMPT'),
        'exception' => (string) getenv('LARAVEL_WORKER_EXCEPTION'),
        'payload' => json_decode(stream_get_contents(STDIN), true),
    ]);
    if ($answer['action'] !== 'done') {
        file_put_contents(getenv('LARAVEL_WORKER_RESULT'), json_encode($answer));
    }
}
