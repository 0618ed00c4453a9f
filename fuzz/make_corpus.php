<?php
// Writes the seed corpus of the unserialize and payload readers
// (tests/fuzz_readers.rs replays it and mutates it).
// Run from the repository root: php fuzz/make_corpus.php
namespace App\Jobs;

enum Status: string { case Active = 'a'; case Gone = 'g'; }
enum Plain { case One; }
class Model { public $class = 'App\\Models\\User'; public $id = 7; public $relations = []; public $connection = 'mysql'; }
class SendMail {
    public $queue = 'mail';
    protected $user;
    private $tags = ['a', 'bé', "q\"uote;"];
    public $opts = ['x' => 1.5, 'y' => true, 3 => null, 'z' => -0.0];
    public $status = Status::Active;
    public $plain = Plain::One;
    public $big = PHP_INT_MAX;
    public $floats = [INF, -INF, NAN, 1e300, 0.1];
    public $nul = "a\0b";
    function __construct() { $this->user = new Model; }
}
class Shared { public $a; public $b; }

$u = __DIR__ . '/corpus/unserialize/';
$p = __DIR__ . '/corpus/payload/';
$write = function ($dir, $name, $bytes) { file_put_contents($dir . $name, $bytes); };

$job = new SendMail;
$write($u, 'laravel-job', serialize($job));
$shared = new Shared; $o = new Model; $shared->a = $o; $shared->b = $o;
$write($u, 'object-reference', serialize($shared));
$arr = [1, 2]; $ref = [&$arr, &$arr];
$write($u, 'value-reference', serialize($ref));
$write($u, 'sparse-array', serialize([1 => 'a', 5 => null, 'k' => [0 => 'x', 2 => 'y']]));
$write($u, 'empty', serialize(['a' => [], 'o' => new \stdClass]));
$write($u, 'enum', serialize(Status::Gone));
$write($u, 'custom', 'C:11:"ArrayObject":21:{x:i:0;a:0:{};m:a:0:{}}');
$write($u, 'scalars', serialize([null, true, false, 0, -1, PHP_INT_MIN, 1.0, "", "é"]));
$write($u, 'numeric-string-keys', 'a:2:{s:1:"0";N;s:1:"1";b:0;}');
$write($u, 'nested-510', str_repeat('a:1:{i:0;', 510) . 'N;' . str_repeat('}', 510));
$write($u, 'nested-511', str_repeat('a:1:{i:0;', 511) . 'N;' . str_repeat('}', 511));
$write($u, 'nested-objects-600', str_repeat('O:1:"A":1:{s:1:"x";', 600) . 'N;' . str_repeat('}', 600));
$write($u, 'unclosed-nesting', str_repeat('a:1:{i:0;', 2000));
$write($u, 'huge-count', 'a:999999999999:{i:0;N;}');
$write($u, 'count-overflow', 'a:99999999999999999999999:{}');
$write($u, 'string-too-long', 's:99999999999:"abc";');
$write($u, 'string-length-overflow', 's:184467440737095516160:"";');
$write($u, 'bad-key', 'a:1:{a:0:{}N;}');
$write($u, 'bad-bool', 'b:2;');
$write($u, 'truncated', substr(serialize($job), 0, 120));
$write($u, 'trailing', 'N;N;');
$write($u, 'int-overflow', 'i:99999999999999999999999;');
$write($u, 'float-forms', 'a:5:{i:0;d:.5;i:1;d:5.;i:2;d:1.0E+25;i:3;d:-0;i:4;d:NAN;}');
$write($u, 'invalid-utf8', "s:4:\"\xff\xfe\xc3\x28\";");

$payload = fn (array $extra = []) => json_encode(array_merge([
    'uuid' => '7c9c3e2a-1b1e-4f0e-9a55-2b6f6f0b1a11', 'displayName' => 'App\\Jobs\\SendMail',
    'job' => 'Illuminate\\Queue\\CallQueuedHandler@call', 'maxTries' => null, 'maxExceptions' => null,
    'failOnTimeout' => false, 'backoff' => null, 'timeout' => null, 'retryUntil' => null,
    'data' => ['commandName' => 'App\\Jobs\\SendMail', 'command' => serialize($job)],
    'id' => 'abcdefghijabcdefghijabcdefghij12', 'attempts' => 0,
], $extra), JSON_UNESCAPED_UNICODE);
$write($p, 'laravel-8', $payload());
$write($p, 'laravel-13', $payload(['deleteWhenMissingModels' => true, 'createdAt' => 1760000000, 'delay' => null]));
$write($p, 'string-attempts', $payload(['attempts' => '0']));
$write($p, 'backoff-list', $payload(['backoff' => '1,5,30', 'maxTries' => '3', 'timeout' => 12.5]));
$write($p, 'odd-name', $payload(['displayName' => "A\0B\n\e[31m", 'id' => str_repeat('i', 4096)]));
$write($p, 'duplicate-keys', '{"attempts":5,"displayName":"A","attempts":1}');
$write($p, 'deep-511', '{"attempts":0,"x":' . str_repeat('[', 510) . str_repeat(']', 510) . '}');
$write($p, 'deep-512', '{"attempts":0,"x":' . str_repeat('[', 511) . str_repeat(']', 511) . '}');
$write($p, 'data-not-object', '{"attempts":0,"data":"O:3:\"Foo\":0:{}"}');
$write($p, 'command-not-string', '{"attempts":0,"data":{"command":[1,2]}}');
$write($p, 'not-object', '[{"attempts":0}]');
$write($p, 'unterminated-string', '{"attempts":0,"id":"abc');
