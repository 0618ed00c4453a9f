<?php
// Prints, as JSON, what a Laravel app's env() returns for every variable
// starting with T_ after Laravel's phpdotenv loads the given file: the real
// phpdotenv and Illuminate\Support\Env (Debian's packages, or the
// directory given as the second argument holding their autoloaders).
// Usage: php laravel_env.php /path/to/file.env [/usr/share/php]
// Exit 2 with the parser's message when phpdotenv refuses the file.

$lib = $argv[2] ?? '/usr/share/php';
require $lib . '/Dotenv/autoload.php';
require $lib . '/Illuminate/Support/autoload.php';

use Illuminate\Support\Env;

$file = $argv[1];
try {
    $loaded = Dotenv\Dotenv::create(Env::getRepository(), dirname($file), basename($file))->load();
} catch (Dotenv\Exception\InvalidFileException $e) {
    fwrite(STDERR, $e->getMessage() . "\n");
    exit(2);
}
$names = array_keys(getenv());
$names = array_merge($names, array_keys($loaded));
$out = [];
foreach (array_unique($names) as $name) {
    if (strncmp($name, 'T_', 2) === 0 && Env::getRepository()->has($name)) {
        $out[$name] = Env::get($name);
    }
}
ksort($out);
echo json_encode($out, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE), "\n";
