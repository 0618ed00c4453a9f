"""What the benchmark scripts in bench/ share.

    import benchlib   # bench/ is on sys.path when a script there runs

* `PROCS`: every process a script starts, each in its own session, so that
  the end of the run (also Ctrl-C, SIGTERM, SIGHUP: see `run_guarded`) stops
  exactly those and nothing else;
* `/proc` readings: `status_kib` (VmHWM, VmRSS), `pss_kib`, `cpu_seconds`,
  `children`, and `wait_all`, which samples peak memory and CPU time until
  processes exit;
* `Redis`: a minimal RESP client over a unix socket or TCP, and the key names of a
  Laravel queue (`keys`);
* job payloads in Laravel's format (`job_payload`, `string_job`, `Payloads`)
  and `push`, which queues them as the worker's push does;
* `Lab`: a private temporary directory with its own redis-server on a unix
  socket and, when PHP can run it, a copy of the tests' Laravel app
  (tests/laravel/) with a no-op `NoopJob`, plus the worker configuration and
  output bookkeeping that bench/compare.py and bench/pool_memory.py use.

Nothing here measures; the scripts do, and print their own numbers.
"""

import json
import os
import random
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "laravel_database_"  # the Laravel 8 app's Redis prefix
QUEUE = "default"

# The variables the app must not inherit (it reads its settings from .env).
PHP_ENV_DROP = ["REDIS_URL", "REDIS_HOST", "REDIS_PORT", "REDIS_PREFIX", "REDIS_DB",
                "REDIS_CACHE_DB", "CACHE_PREFIX", "APP_NAME", "QUEUE_CONNECTION",
                "REDIS_QUEUE", "DB_CONNECTION", "DB_DATABASE", "LARAVEL_WORKER_PROTOCOL"]

NOOP_JOB_PHP = r"""<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\SerializesModels;

/** Does nothing: the benchmark's job. */
class NoopJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function handle(): void
    {
    }
}
"""

DISPATCH_ONE_PHP = r"""<?php
// Boots the app as artisan does and dispatches one NoopJob onto its queue.
$app = require $argv[1].'/bootstrap/app.php';
$app->make(Illuminate\Contracts\Console\Kernel::class)->bootstrap();
dispatch(new App\Jobs\NoopJob());
"""

# A push as `laravel-worker push` makes it: the payload, then a wake-up on
# the queue's :notify list. KEYS: ready, notify; ARGV: the payload.
PUSH_LUA = "redis.call('rpush', KEYS[1], ARGV[1])\nredis.call('rpush', KEYS[2], 1)\n"


def log(msg):
    """One line on stderr, flushed (progress; the results go to stdout)."""
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes

class Procs:
    """Every process a script starts, each in its own session, so that
    cleanup can stop exactly those (their process groups) and nothing else."""

    def __init__(self):
        self.live = []

    def start(self, args, **kw):
        """subprocess.Popen(args, **kw) in a new session, stdin /dev/null
        unless given; the process is remembered until `stop`/`terminate`."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(args, start_new_session=True, **kw)
        self.live.append(p)
        return p

    def stop(self, p, grace=5.0):
        """SIGTERM to the process group of `p`, SIGKILL after `grace`
        seconds; forgets `p` (also when it had exited already)."""
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        if p in self.live:
            self.live.remove(p)

    def terminate(self, p, timeout=60.0):
        """SIGTERM to `p` alone (not its children: a worker stops its
        handlers itself, as on a deploy), waits up to `timeout` seconds for
        it to exit and returns its exit status; forgets `p`. Raises
        subprocess.TimeoutExpired if it does not exit (`stop_all` then
        kills its group)."""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        code = p.wait(timeout)
        if p in self.live:
            self.live.remove(p)
        return code

    def stop_all(self):
        """Stops every process still remembered, the latest first."""
        for p in reversed(list(self.live)):
            self.stop(p, grace=3.0)


PROCS = Procs()


def run_guarded(body, cleanup=None):
    """Runs `body()` with SIGINT, SIGTERM and SIGHUP turned into
    KeyboardInterrupt, then `cleanup()` (if given) and `PROCS.stop_all()`,
    however it ended. Returns body's result (None counts as 0), or 130 when
    interrupted."""

    def stop(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        return body() or 0
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); stopping what was started")
        return 130
    finally:
        if cleanup:
            cleanup()
        PROCS.stop_all()


# ---------------------------------------------------------------- /proc

def status_kib(pid, field):
    """A KiB field of /proc/PID/status (`VmHWM`: peak resident set,
    `VmRSS`: resident set now), or None if the process or field is gone
    (an exited or zombie process has no Vm* fields)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_rss_kib(pid):
    """VmHWM of `pid` in KiB (its peak resident set so far), or None."""
    return status_kib(pid, "VmHWM")


def pss_kib(pid):
    """Proportional set size of `pid` in KiB (pages shared with other
    processes counted in part), from /proc/PID/smaps_rollup; 0 if gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid):
    """utime + stime of the process itself (not its children), seconds;
    None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def machine_counters():
    """(CPU seconds the whole machine spent busy, context switches) since
    boot, from /proc/stat: every process's user and system time, interrupts
    included, idle and iowait left out."""
    busy, switches = 0, 0
    with open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts[0] == "cpu":
                user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, parts[1:9])
                busy = user + nice + system + irq + softirq + steal
            elif parts[0] == "ctxt":
                switches = int(parts[1])
    return busy / os.sysconf("SC_CLK_TCK"), switches


def children(pid):
    """The live (not zombie) children of `pid`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X") and int(fields[1]) == pid:
            found.append(int(name))
    return found


def wait_all(procs, timeout):
    """Waits for every process to exit, sampling every 10 ms; returns (max
    VmHWM KiB seen, CPU seconds of the processes themselves, summed over
    them, as last seen before each exit). Raises RuntimeError after
    `timeout` seconds."""
    peak = 0
    cpu = {}
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if p.poll() is None]
        if not alive:
            return peak, sum(cpu.values())
        for p in alive:
            kib = peak_rss_kib(p.pid)
            if kib:
                peak = max(peak, kib)
            secs = cpu_seconds(p.pid)
            if secs is not None:
                cpu[p.pid] = secs
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {[p.args for p in alive]} did not finish in {timeout} s")
        time.sleep(0.01)


# ---------------------------------------------------------------- redis

class Redis:
    """A minimal RESP client over a redis-server's unix socket (`path`), or
    over TCP when `path` is a (host, port) pair. Errors replied by the
    server raise RuntimeError."""

    def __init__(self, path):
        if isinstance(path, tuple):
            self.sock = socket.create_connection(path)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(path)
        self.buf = b""

    @staticmethod
    def encode(args):
        """One command as RESP bytes; arguments that are not bytes are
        sent as their str()."""
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(max(1 << 16, n + 2 - len(self.buf)))
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        """The next reply: str, int, bytes, None or a list of those."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError("redis: " + rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError(f"redis: unexpected reply {line!r}")

    def cmd(self, *args):
        """Sends one command and returns its reply."""
        self.sock.sendall(self.encode(args))
        return self.reply()

    def pipeline(self, commands, chunk=500):
        """Sends commands in chunks, reading each chunk's replies."""
        for i in range(0, len(commands), chunk):
            part = commands[i:i + chunk]
            self.sock.sendall(b"".join(self.encode(c) for c in part))
            for _ in part:
                self.reply()

    def close(self):
        self.sock.close()


class LengthSampler:
    """Samples a list's length every `interval` seconds on a connection of
    its own, from a thread, until `stop()`, which returns the samples as
    (monotonic time, length) and closes the connection."""

    def __init__(self, address, key, interval):
        self.redis = Redis(address)
        self.key = key
        self.interval = interval
        self.samples = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.done.is_set():
            self.samples.append((time.monotonic(), self.redis.cmd("LLEN", self.key)))
            time.sleep(self.interval)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.done.set()
        self.thread.join()
        self.redis.close()
        return self.samples


def start_redis_server(path, directory, *extra):
    """Starts a redis-server (in `PROCS`) listening only on the unix socket
    `path`, no TCP port, nothing saved, working directory `directory`,
    with `extra` options; waits until it answers PING. Returns the
    process; raises RuntimeError if it does not answer within 5 s."""
    proc = PROCS.start(
        ["redis-server", "--port", "0", "--unixsocket", path, "--save", "",
         "--appendonly", "no", "--dir", directory, *extra],
        stdout=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(path):
            try:
                probe = Redis(path)
                probe.cmd("PING")
                probe.close()
                return proc
            except OSError:
                pass
        time.sleep(0.025)
    raise RuntimeError("redis-server did not start")


def callgrind_total(directory, proc):
    """The instructions callgrind counted in `proc` (a worker `Lab.worker`
    started under valgrind, its output in `directory`), the whole process;
    None for a process not run under callgrind. Instruction counts do not
    move with the machine's load, so a before/after of a few per cent that
    the time figures cannot settle shows here."""
    if not proc.args or proc.args[0] != "valgrind":
        return None
    path = os.path.join(directory, f"callgrind-{proc.pid}.out")
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("totals:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def keys(queue, prefix=PREFIX):
    """(ready, reserved, delayed, notify) keys of a Laravel queue."""
    base = f"{prefix}queues:{queue}"
    return base, base + ":reserved", base + ":delayed", base + ":notify"


# ---------------------------------------------------------------- payloads

# The options between "job" and "data" in a payload, in Laravel's order.
SHORT_OPTIONS = {"maxTries": None, "timeout": None}
FULL_OPTIONS = {"maxTries": None, "maxExceptions": None, "failOnTimeout": False,
                "backoff": None, "timeout": None}


def rand_id():
    """A random 32-character job id, as Laravel's Str::random(32)."""
    return "".join(random.choices(string.ascii_letters + string.digits, k=32))


def job_payload(display_name, job=None, data=None, job_id=None, job_uuid=None,
                options=FULL_OPTIONS, compact=False):
    """A job payload in Laravel's format (JSON text): `job` defaults to
    `display_name` (a string job), `data` to {}, `job_id` to a random id,
    `job_uuid` to a random uuid; `options` (maxTries, timeout, ...) go
    between "job" and "data". `compact` leaves out the spaces after ","
    and ":" as PHP's json_encode does."""
    body = {"uuid": job_uuid or str(uuid.uuid4()), "displayName": display_name,
            "job": job or display_name, **options,
            "data": {} if data is None else data, "id": job_id or rand_id(), "attempts": 0}
    return json.dumps(body, separators=(",", ":") if compact else None)


def string_job(name, job_id=None):
    """A string-job payload as `laravel-worker push` writes it."""
    return job_payload(name, job_id=job_id, compact=True)


class Payloads:
    """Clones one payload with fresh uuid and id (both random in Laravel)."""

    def __init__(self, template):
        self.template = template
        body = json.loads(template)
        self.uuid = body.get("uuid")
        self.id = body.get("id")

    def make(self, job_id=None):
        """The template with a new uuid and `job_id` (else a random id)."""
        text = self.template
        if self.uuid:
            text = text.replace(self.uuid, str(uuid.uuid4()), 1)
        if self.id:
            text = text.replace(f'"id":"{self.id}"', f'"id":"{job_id or rand_id()}"', 1)
        return text


def push(r, ready, bodies, notify=None, batch=1000):
    """Appends the payloads `bodies` (any iterable) to the list `ready`,
    `batch` per RPUSH, and as many "1" to `notify` unless it is None (the
    wake-ups Laravel's push leaves); pipelined 20 commands at a time."""
    cmds = []
    bodies = iter(bodies)
    while True:
        part = [b for _, b in zip(range(batch), bodies)]
        if not part:
            break
        cmds.append(["RPUSH", ready] + part)
        if notify is not None:
            cmds.append(["RPUSH", notify] + ["1"] * len(part))
        if len(cmds) >= 20:
            r.pipeline(cmds)
            cmds = []
    r.pipeline(cmds)


def preload(r, queue, payloads, count):
    """Queues `count` clones of `payloads` on the app's `queue`, with their
    :notify entries."""
    ready, _, _, notify = keys(queue)
    push(r, ready, (payloads.make() for _ in range(count)), notify)


# ---------------------------------------------------------------- files

def write_script(path, text):
    """Writes an executable file (a handler script); returns `path`."""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


def plain_config(sock, failed='driver = "null"\n', prefix="bench_"):
    """The start of a worker config without the app: Redis on the unix
    socket `sock` with `prefix`, no cache store, `failed` as the [failed]
    section's body. Handlers and [worker] settings follow."""
    return (f'[redis]\nurl = "unix://{sock}?db=0"\nprefix = "{prefix}"\n'
            f'[cache]\nstore = "none"\n[failed]\n{failed}')


# ---------------------------------------------------------------- the lab

class Lab:
    """A private temporary directory (`dir`) with its own redis-server on
    a unix socket in it (`sock`, client `r`, after `start_redis`) and,
    after `setup_app`, a copy of the tests' Laravel app (`app`, None when
    PHP cannot run it) whose `NoopJob` payload `payloads` clones. `bin` is
    the laravel-worker binary the rows run (default: target/release)."""

    def __init__(self, binary=None):
        self.dir = tempfile.mkdtemp(prefix="lw-bench-")
        self.sock = os.path.join(self.dir, "redis.sock")
        self.bin = (os.path.abspath(binary) if binary
                    else os.path.join(ROOT, "target", "release", "laravel-worker"))
        self.r = None
        self.app = None
        self.payloads = None
        self.outputs = []
        # With a concurrency N: workers started with --concurrency=N run
        # under callgrind (see `callgrind_total`).
        self.callgrind = None

    def build(self):
        """cargo build --release of this tree (target/release)."""
        log("building the release binary (cargo build --release)")
        subprocess.run(["cargo", "build", "--release", "--manifest-path",
                        os.path.join(ROOT, "Cargo.toml")], check=True)

    def start_redis(self, *extra):
        """Starts the private redis-server (`extra`: more options) and
        connects `r` to it."""
        self.redis_proc = start_redis_server(self.sock, self.dir, *extra)
        self.r = Redis(self.sock)

    def flush(self):
        self.r.cmd("FLUSHALL")

    def php_missing(self):
        """Why the PHP rows cannot run here, or None."""
        if not shutil.which("php"):
            return "php is not installed"
        probe = subprocess.run(
            ["php", "-r", "exit(extension_loaded('redis') && "
             "stream_resolve_include_path('Illuminate/autoload.php') ? 0 : 3);"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode != 0:
            return "php lacks the redis extension or Debian's Laravel (php-redis, php-laravel-framework)"
        return None

    def php_env(self):
        """The environment without the variables the app must not inherit."""
        env = dict(os.environ)
        for var in PHP_ENV_DROP:
            env.pop(var, None)
        return env

    def setup_app(self):
        """Copies tests/laravel/ into `dir` with a NoopJob, dispatches one
        through it and keeps its payload as the template of `payloads`.
        Without PHP, notes why and uses a string job instead (`app` stays
        None)."""
        why = self.php_missing()
        if why:
            log(f"note: skipping the PHP rows: {why}; the jobs are string jobs instead")
            self.payloads = Payloads(string_job("App\\Jobs\\NoopJob"))
            return
        app = os.path.join(self.dir, "app")
        shutil.copytree(os.path.join(ROOT, "tests", "laravel"), app)
        for sub in ["storage/logs", "storage/framework/cache/data", "bootstrap/cache"]:
            os.makedirs(os.path.join(app, sub), exist_ok=True)
        with open(os.path.join(app, "app", "Jobs", "NoopJob.php"), "w") as f:
            f.write(NOOP_JOB_PHP)
        with open(os.path.join(self.dir, "dispatch-one.php"), "w") as f:
            f.write(DISPATCH_ONE_PHP)
        db = os.path.join(self.dir, "failed.sqlite")
        open(db, "w").close()
        with open(os.path.join(app, ".env"), "w") as f:
            f.write(f"APP_NAME=Laravel\nAPP_ENV=production\nAPP_DEBUG=false\n"
                    f"APP_KEY={secrets.token_hex(16)}\n"
                    f"REDIS_HOST={self.sock}\nREDIS_PORT=0\n"
                    f"DB_CONNECTION=sqlite\nDB_DATABASE={db}\n"
                    f"JOB_LOG={os.path.join(self.dir, 'jobs.log')}\nLOG_CHANNEL=single\n")
        self.app = app
        subprocess.run(["php", os.path.join(self.dir, "dispatch-one.php"), app],
                       cwd=app, env=self.php_env(), check=True)
        ready, _, _, notify = keys(QUEUE)
        got = self.r.cmd("LRANGE", ready, 0, -1)
        if not got or len(got) != 1:
            raise RuntimeError(f"expected one dispatched NoopJob on {ready}, found {got!r}")
        self.r.cmd("DEL", ready, notify)
        self.payloads = Payloads(got[0].decode())
        log(f"NoopJob payload ({len(got[0])} bytes): {got[0][:160].decode()}...")

    def config(self, name, handlers, queue_extra=""):
        """Writes `dir`/NAME.toml: the app's Redis, queue, cache (redis, as
        the app's) and a null failed store, then `handlers` (TOML text).
        Returns its path."""
        path = os.path.join(self.dir, f"{name}.toml")
        with open(path, "w") as f:
            f.write(f"""[app]
laravel = "8.83"

[redis]
url = "unix://{self.sock}?db=0"
prefix = "{PREFIX}"

[queue]
connection = "redis"
queue = "{QUEUE}"
retry_after = 90
{queue_extra}

[cache]
store = "redis"
database = 1
prefix = "laravel_cache"
colon = true

[failed]
driver = "null"

{handlers}""")
        return path

    def handler_persistent(self, command, processes, match="*", pipeline=False,
                           decode_command=True):
        """A [[handlers]] entry (TOML text): `command` persistent, a pool
        of `processes`, pipelined when `pipeline`; without
        `decode_command`, `decode_command = false` (as the book configures
        the PHP bridge, which reads the payload itself)."""
        cmd = ", ".join(json.dumps(c) for c in command)
        return (f'[[handlers]]\nmatch = {json.dumps(match)}\ncommand = [{cmd}]\n'
                f'mode = "persistent"\nprocesses = {processes}\n'
                + ('pipeline = true\n' if pipeline else '')
                + ('' if decode_command else 'decode_command = false\n') + '\n')

    def worker_env(self):
        env = dict(os.environ)
        env["RUST_LOG"] = "warn"
        for var in PHP_ENV_DROP:
            env.pop(var, None)
        return env

    def worker(self, config, *args, stdout=None, stderr=None, binary=None):
        """Starts `laravel-worker work ARGS` (with `binary`, else `bin`);
        its stdout (one line per job) goes to a file counted by
        `outcomes()` unless `stdout` is given."""
        if stdout is None:
            stdout = self.out_file()
        argv = [binary or self.bin, "--config", config, "work", *args]
        if self.callgrind is not None and f"--concurrency={self.callgrind}" in args:
            argv = ["valgrind", "--tool=callgrind", "--quiet",
                    f"--callgrind-out-file={self.dir}/callgrind-%p.out", *argv]
        return PROCS.start(argv, env=self.worker_env(), stdout=stdout, stderr=stderr)

    def out_file(self):
        """A new output file in `dir`, counted by the next `outcomes()`."""
        path = os.path.join(self.dir, f"out-{len(self.outputs)}.txt")
        self.outputs.append(path)
        return open(path, "w")

    def outcomes(self):
        """Counts (done, other) job lines in the outputs written since the
        last call: laravel-worker's `DONE`/`FAIL`, queue:work's
        `Processed:`/`Failed:`."""
        done = other = 0
        for path in self.outputs:
            with open(path, errors="replace") as f:
                for line in f:
                    if line.rstrip().endswith(" DONE") or "Processed:" in line:
                        done += 1
                    elif line.rstrip().endswith(" FAIL") or "Failed:" in line:
                        other += 1
            os.unlink(path)
        self.outputs = []
        return done, other

    def cleanup(self):
        """Closes the client, stops every process started, removes `dir`."""
        try:
            self.r.close()
        except Exception:
            pass
        PROCS.stop_all()
        shutil.rmtree(self.dir, ignore_errors=True)
