<?php
// Random values through PHP's own serialize() and unserialize(): prints one
// JSON line per value, {"s": hex of serialize($v), "j": unserialize() of it
// written in the worker's JSON convention}. tests/fuzz_readers.rs compares
// the worker's reader with "j".
// Usage: php fuzz/php_oracle.php SEED COUNT
namespace App\Jobs;

enum Suit: string { case Hearts = 'H'; case Spades = 'S'; }
enum Bare { case One; case Two; }
class Node {
    public $pub; protected $prot; private $priv;
    function set($a, $b, $c) { $this->pub = $a; $this->prot = $b; $this->priv = $c; }
}
class Child extends Node {
    private $priv; public $extra;
    function set2($p, $e) { $this->priv = $p; $this->extra = $e; }
}

mt_srand((int) $argv[1]);
$count = (int) $argv[2];
$enumUsed = false;

function pick(array $a) { return $a[mt_rand(0, count($a) - 1)]; }

function rnd_string() {
    $pieces = ['', 'a', 'xyz', 'é', '日本', "\0", '"', ';', '{', '}', ':', 'O:3:"x";', '\\', "\n", "\e[31m", ' ', '0', '12'];
    $s = '';
    for ($i = mt_rand(0, 6); $i > 0; $i--) { $s .= pick($pieces); }
    return $s;
}

function rnd_value(int $depth) {
    global $enumUsed;
    $r = mt_rand(0, $depth >= 5 ? 5 : 10);
    switch ($r) {
        case 0: return null;
        case 1: return (bool) mt_rand(0, 1);
        case 2: return pick([0, 1, -1, 42, PHP_INT_MAX, PHP_INT_MIN, mt_rand(), -mt_rand()]);
        case 3: return pick([0.0, -0.0, 0.1, 1.5, -2.25, 1e300, 1e-300, 1e25, INF, -INF, NAN, mt_rand() / 7]);
        case 4: return rnd_string();
        case 5:
            if ($enumUsed) { return rnd_string(); }
            $enumUsed = true;
            return pick([Suit::Hearts, Suit::Spades, Bare::One, Bare::Two]);
        case 6: case 7:
            $a = [];
            for ($i = mt_rand(0, 4); $i > 0; $i--) { $a[] = rnd_value($depth + 1); }
            return $a;
        case 8:
            $a = [];
            for ($i = mt_rand(0, 4); $i > 0; $i--) {
                $a[pick([mt_rand(0, 3), mt_rand(-5, 100), rnd_string(), (string) mt_rand(0, 3)])] = rnd_value($depth + 1);
            }
            return $a;
        case 9:
            $o = new Node;
            $o->set(rnd_value($depth + 1), rnd_value($depth + 1), rnd_value($depth + 1));
            return $o;
        default:
            if (mt_rand(0, 1)) {
                $o = new Child;
                $o->set(rnd_value($depth + 1), rnd_value($depth + 1), rnd_value($depth + 1));
                $o->set2(rnd_value($depth + 1), rnd_value($depth + 1));
                return $o;
            }
            $o = new \stdClass;
            for ($i = mt_rand(0, 3); $i > 0; $i--) { $o->{pick(['a', 'b', '5', 'é', 'x' . rnd_string()])} = rnd_value($depth + 1); }
            return $o;
    }
}

// The worker's convention: objects {"__class": ..., props}, markers
// stripped; enums {"__enum": "Class:Case"}; INF/NAN null.
function conv($v) {
    if (is_float($v)) { return is_finite($v) ? $v : null; }
    if ($v instanceof \UnitEnum) { return ['__enum' => get_class($v) . ':' . $v->name]; }
    if (is_array($v)) { return array_map('App\Jobs\conv', $v); }
    if (is_object($v)) {
        $o = ['__class' => get_class($v)];
        foreach ((array) $v as $k => $x) {
            if (is_string($k) && $k !== '' && $k[0] === "\0") { $k = substr($k, strpos($k, "\0", 1) + 1); }
            $o[$k] = conv($x);
        }
        return $o;
    }
    return $v;
}

for ($n = 0; $n < $count; $n++) {
    $enumUsed = false;
    // Laravel's commands are objects; test any value too.
    $v = mt_rand(0, 3) ? rnd_value(0) : (function () { $o = new Node; $o->set(rnd_value(1), rnd_value(1), rnd_value(1)); return $o; })();
    $text = serialize($v);
    $back = unserialize($text);
    echo json_encode(['s' => bin2hex($text), 'j' => conv($back)], JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR), "\n";
}
