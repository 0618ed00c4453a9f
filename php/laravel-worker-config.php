<?php

/*
 * laravel-worker config reader: prints, as one JSON object on stdout, the
 * configuration a Laravel app resolves for its queue (Redis, database or SQS),
 * Redis, cache, failed-jobs store and Horizon, so that laravel-worker reads what the app computes
 * instead of re-deriving it from .env.
 *
 *     php laravel-worker-config.php --app=/srv/app
 *
 * laravel-worker runs it once at start (it carries a copy and feeds it to
 * `php` on stdin), with `--app` or when `--env-file` points into an app
 * that has `artisan`. It boots the app only as far as its configuration:
 * vendor/autoload.php when present, bootstrap/app.php, then the kernel's
 * LoadEnvironmentVariables and LoadConfiguration bootstrappers, exactly as
 * artisan does before a command runs. A `config:cache`d app therefore reads
 * bootstrap/cache/config.php and ignores .env, as Laravel does.
 *
 * The output holds passwords (Redis, database, AWS): laravel-worker never logs it.
 * Exit status: 0 with the JSON; 2 for a bad --app; 1 when the app fails to
 * boot (the message on stderr).
 */

/**
 * Writes $message to stderr and exits with $status. Fed on standard input,
 * PHP defines no STDERR constant: php://stderr is opened instead.
 */
function lw_fail(string $message, int $status): void
{
    $stderr = fopen('php://stderr', 'w');
    if ($stderr !== false) {
        $line = str_replace(["\r", "\n"], ' ', $message);
        fwrite($stderr, 'laravel-worker-config: '.$line."\n");
    }
    exit($status);
}

$base = null;
foreach (array_slice($argv, 1) as $arg) {
    if (strncmp($arg, '--app=', 6) === 0) {
        $base = rtrim(substr($arg, 6), '/');
    }
}
if ($base === null || $base === '' || ! is_file($base.'/bootstrap/app.php')) {
    lw_fail('pass --app=/path/to/app (a directory with bootstrap/app.php)', 2);
}

// Whatever the app prints while it boots must not spoil the JSON.
ob_start();
try {
    if (is_file($base.'/vendor/autoload.php')) {
        require_once $base.'/vendor/autoload.php';
    }
    $app = require $base.'/bootstrap/app.php';
    $app->bootstrapWith([
        \Illuminate\Foundation\Bootstrap\LoadEnvironmentVariables::class,
        \Illuminate\Foundation\Bootstrap\LoadConfiguration::class,
    ]);
    $config = $app->make('config');
} catch (\Throwable $e) {
    ob_end_clean();
    lw_fail('the app did not boot: '.get_class($e).': '.$e->getMessage(), 1);
}
ob_end_clean();

/** Only the named keys of an array (absent keys left out). */
function lw_pick($array, array $keys): array
{
    $out = [];
    if (! is_array($array)) {
        return $out;
    }
    foreach ($keys as $key) {
        if (array_key_exists($key, $array) && (is_scalar($array[$key]) || $array[$key] === null)) {
            $out[$key] = $array[$key];
        }
    }

    return $out;
}

$redisKeys = ['url', 'host', 'port', 'username', 'password', 'database', 'scheme', 'prefix'];

// The keys of a database connection (config/database.php) the worker needs.
$databaseKeys = ['driver', 'url', 'host', 'port', 'database', 'username', 'password', 'unix_socket', 'prefix'];

$connections = [];
foreach ((array) $config->get('queue.connections', []) as $name => $connection) {
    $connections[$name] = lw_pick($connection, ['driver', 'connection', 'queue', 'retry_after', 'block_for', 'table']);
    // An sqs queue connection: where its queues are and its credentials
    // (SqsConnector's keys), and where its overflow payloads go (13.9+).
    if (($connections[$name]['driver'] ?? null) === 'sqs') {
        $connections[$name] += lw_pick($connection, ['prefix', 'suffix', 'region', 'key', 'secret', 'token', 'endpoint']);
        if (isset($connection['overflow']) && is_array($connection['overflow'])) {
            $connections[$name]['overflow'] = (object) lw_pick($connection['overflow'], ['enabled', 'store', 'delete_after_processing']);
        }
    }
    // A failover connection (Laravel 12.34+): its member connections, in
    // order (the skeleton's [database, deferred]).
    if (($connections[$name]['driver'] ?? null) === 'failover' && is_array($connection['connections'] ?? null)) {
        $connections[$name]['connections'] = array_values(array_filter($connection['connections'], 'is_string'));
    }
    // A beanstalkd queue connection: its server (BeanstalkdConnector's
    // host and port).
    if (($connections[$name]['driver'] ?? null) === 'beanstalkd') {
        $connections[$name] += lw_pick($connection, ['host', 'port']);
    }
    // A database queue connection: the database connection it names
    // (null: the app's default), as the app resolved it.
    if (($connections[$name]['driver'] ?? null) === 'database') {
        $databaseName = $connections[$name]['connection'] ?? $config->get('database.default');
        $connections[$name]['db'] = (object) lw_pick($config->get('database.connections.'.$databaseName), $databaseKeys);
    }
}

$redis = (array) $config->get('database.redis', []);
$redisConnections = [];
foreach ($redis as $name => $connection) {
    if (in_array($name, ['client', 'options', 'clusters'], true) || ! is_array($connection)) {
        continue;
    }
    $entry = lw_pick($connection, $redisKeys);
    if (isset($connection['options']['prefix']) && is_scalar($connection['options']['prefix'])) {
        $entry['options_prefix'] = $connection['options']['prefix'];
    }
    $redisConnections[$name] = $entry;
}
$clusters = [];
foreach ((array) ($redis['clusters'] ?? []) as $name => $nodes) {
    if (! is_array($nodes)) {
        continue;
    }
    $clusters[$name] = [];
    foreach ($nodes as $key => $node) {
        if ($key !== 'options' && is_array($node)) {
            $clusters[$name][] = lw_pick($node, $redisKeys);
        }
    }
}

$cacheDefault = $config->get('cache.default');
$store = $config->get('cache.stores.'.$cacheDefault);

$failed = lw_pick($config->get('queue.failed'), ['driver', 'database', 'table']);
$failedConnection = $failed['database'] ?? $config->get('database.default');
$failedDatabase = lw_pick(
    $config->get('database.connections.'.$failedConnection),
    $databaseKeys
);

// Horizon's own config (config/horizon.php), when the app has one.
$horizon = $config->get('horizon');
$horizonAnswer = null;
if (is_array($horizon)) {
    $horizonAnswer = lw_pick($horizon, ['prefix', 'use']);
    $horizonAnswer['trim'] = (object) lw_pick(
        $horizon['trim'] ?? [],
        ['recent', 'pending', 'completed', 'recent_failed', 'failed', 'monitored']
    );
}

// Laravel Pulse's config (config/pulse.php), when the app has Pulse: where
// it ingests, and its Queues and SlowJobs recorders (a recorder left out of
// `recorders` is off; a threshold map gives its `default` and its patterns;
// the `ignore` patterns).
$pulse = $config->get('pulse');
$pulseAnswer = null;
if (is_array($pulse)) {
    $recorder = function (string $class) use ($pulse) {
        $settings = $pulse['recorders'][$class] ?? null;
        if (! is_array($settings)) {
            return ['enabled' => false];
        }
        $threshold = $settings['threshold'] ?? null;
        // A threshold map's entries other than `default`, as [pattern, ms]
        // pairs in the map's order (the first match wins, as in Pulse).
        $thresholds = [];
        foreach (is_array($threshold) ? $threshold : [] as $pattern => $ms) {
            if ($pattern !== 'default') {
                $thresholds[] = [(string) $pattern, $ms];
            }
        }
        $ignore = array_values(array_filter((array) ($settings['ignore'] ?? []), 'is_string'));

        return [
            'enabled' => (bool) ($settings['enabled'] ?? true),
            'sample_rate' => $settings['sample_rate'] ?? null,
            'threshold' => is_array($threshold) ? ($threshold['default'] ?? null) : $threshold,
            'thresholds' => $thresholds,
            'ignore' => $ignore,
        ];
    };
    $pulseConnection = $pulse['storage']['database']['connection'] ?? null;
    $pulseAnswer = [
        'enabled' => (bool) ($pulse['enabled'] ?? true),
        'ingest' => $pulse['ingest']['driver'] ?? null,
        'redis_connection' => $pulse['ingest']['redis']['connection'] ?? null,
        'database' => (object) lw_pick(
            $config->get('database.connections.'.($pulseConnection ?? $config->get('database.default'))),
            $databaseKeys
        ),
        'queues' => $recorder('Laravel\\Pulse\\Recorders\\Queues'),
        'slow_jobs' => $recorder('Laravel\\Pulse\\Recorders\\SlowJobs'),
    ];
}

$cacheDatabase = null;
if (is_array($store) && ($store['driver'] ?? null) === 'database') {
    $name = $store['connection'] ?? $config->get('database.default');
    $cacheDatabase = lw_pick(
        $config->get('database.connections.'.$name),
        $databaseKeys
    );
}

echo json_encode([
    'version' => $app->version(),
    'app_name' => $config->get('app.name'),
    'queue' => [
        'default' => $config->get('queue.default'),
        'connections' => (object) $connections,
    ],
    'redis' => [
        'client' => $redis['client'] ?? null,
        'prefix' => $redis['options']['prefix'] ?? null,
        'cluster' => $redis['options']['cluster'] ?? null,
        'connections' => (object) $redisConnections,
        'clusters' => (object) $clusters,
    ],
    'cache' => [
        'default' => $cacheDefault,
        'prefix' => $config->get('cache.prefix'),
        'store' => lw_pick($store, ['driver', 'connection', 'table', 'path', 'prefix', 'lock_connection', 'lock_table']),
        'database' => $cacheDatabase,
    ],
    'batching' => [
        'table' => $config->get('queue.batching.table'),
        'db' => (object) lw_pick(
            $config->get('database.connections.'.($config->get('queue.batching.database') ?? $config->get('database.default'))),
            $databaseKeys
        ),
    ],
    'failed' => (object) $failed,
    'failed_database' => (object) $failedDatabase,
    'horizon' => $horizonAnswer,
    'pulse' => $pulseAnswer,
], JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PARTIAL_OUTPUT_ON_ERROR)."\n";
