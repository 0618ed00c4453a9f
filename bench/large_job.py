#!/usr/bin/env python3
"""Peak memory of the daemon while it works one large job.

For each payload size and handler transport, starts a private redis-server
on a unix socket, pushes one job whose `data.command` (PHP serialize()
text) holds a string of that many bytes, runs `work --stop-when-empty`,
and samples the daemon's VmHWM (peak resident set, from /proc) until it
exits. Prints the peak and its ratio to the payload, beside the target of
3 x payload + 10 MB.

    bench/large_job.py [--binary PATH]... [--sizes 5,20,50] [--runs 3] [--cases ...]

Several --binary values are measured in the same run, one after the other
for each case, so that a before/after comparison shares the machine's
state. Medians of --runs runs are printed. Needs redis-server and python3.
The http case (`--cases http`) signs each request and sends it to an
endpoint this script serves.
"""

import argparse
import http.server
import json
import os
import sqlite3
import statistics
import subprocess
import tempfile
import threading
import time
import uuid

MB = 1_000_000


def payload(size_mb, plain=False):
    """A Laravel 8+ payload whose command holds a `size_mb` MB string of
    characters that JSON escapes (so the payload text is about twice as
    large), or with `plain`, of ASCII letters (the payload is that size)."""
    unit = "abcdefghij" if plain else 'x"\\/é'
    blob = unit * (size_mb * MB // len(unit.encode()))
    command = 'O:12:"App\\Jobs\\Big":1:{s:4:"blob";s:%d:"%s";}' % (len(blob.encode()), blob)
    return json.dumps({
        "uuid": str(uuid.uuid4()),
        "displayName": "App\\Jobs\\Big",
        "job": "Illuminate\\Queue\\CallQueuedHandler@call",
        "maxTries": None, "maxExceptions": None, "failOnTimeout": False,
        "backoff": None, "timeout": None, "retryUntil": None,
        "data": {"commandName": "App\\Jobs\\Big", "command": command},
        "id": "big", "attempts": 0,
    })


class Sink(http.server.BaseHTTPRequestHandler):
    """An HTTP handler endpoint that reads each request and answers 204."""

    def do_POST(self):
        left = int(self.headers.get("Content-Length", 0))
        while left > 0:
            left -= len(self.rfile.read(min(left, 1 << 20)) or b"x" * left)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def start_sink():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def write_config(tmp, socket, case, http_port=None):
    transport, _, option = case.partition("+")
    if transport == "http":
        # Signed, so the signature's cost in memory shows too.
        config = os.path.join(tmp, f"{case}.toml")
        with open(config, "w") as f:
            f.write(
                f'[redis]\nurl = "unix://{socket}?db=0"\nprefix = "bench_"\n'
                '[cache]\nstore = "none"\n[failed]\ndriver = "null"\n'
                f'[[handlers]]\nmatch = "*"\nurl = "http://127.0.0.1:{http_port}/"\n'
                'secret_env = "BENCH_HANDLER_SECRET"\n'
            )
        return config
    handler = os.path.join(tmp, "handler.sh")
    with open(handler, "w") as f:
        if transport == "process" and option.startswith("fail"):
            f.write("#!/bin/sh\ncat > /dev/null\nexit 1\n")
        elif transport == "process":
            f.write("#!/bin/sh\ncat > /dev/null\n")
        else:
            # Persistent: one request per line on stdin, answer on fd 3
            # echoing the request's call id. Python reads a line in large
            # blocks (a shell's `read` takes a system call per byte, too
            # slow for a line of hundreds of MB).
            f.write(
                "#!/usr/bin/env python3\n"
                "import os, re, sys\n"
                "answers = os.fdopen(3, 'w')\n"
                "for line in sys.stdin.buffer:\n"
                "    call = re.match(rb'\\{\"call\":(\\d+)', line).group(1).decode()\n"
                "    answers.write('{\"call\":%s,\"action\":\"done\"}\\n' % call)\n"
                "    answers.flush()\n"
            )
    os.chmod(handler, 0o755)
    failed = 'driver = "null"\n'
    if option == "fail-redis":
        failed = 'driver = "redis"\n'
    elif option == "fail-db":
        database = os.path.join(tmp, f"{case}.sqlite")
        if os.path.exists(database):
            os.remove(database)
        with sqlite3.connect(database) as db:
            db.execute(
                "CREATE TABLE failed_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "uuid VARCHAR(255) UNIQUE, connection TEXT, queue TEXT, payload TEXT, "
                "exception TEXT, failed_at DATETIME DEFAULT CURRENT_TIMESTAMP)"
            )
        failed = f'driver = "database-uuids"\nurl = "sqlite://{database}"\n'
    config = os.path.join(tmp, f"{case}.toml")
    with open(config, "w") as f:
        f.write(
            f'[redis]\nurl = "unix://{socket}?db=0"\nprefix = "bench_"\n'
            f'[cache]\nstore = "none"\n[failed]\n{failed}'
            f'[[handlers]]\nmatch = "*"\ncommand = ["{handler}"]\n'
            + ('mode = "persistent"\n' if transport == "persistent" else "")
            + ("decode_command = false\n" if option == "nodecode" else "")
        )
    return config


def redis_cli(socket, *args, stdin=None):
    return subprocess.run(
        ["redis-cli", "-s", socket, *args], input=stdin, capture_output=True, check=True
    ).stdout


def peak_kib(binary, config, socket, body):
    redis_cli(socket, "FLUSHALL")
    database = config[: -len(".toml")] + ".sqlite"
    if os.path.exists(database):
        with sqlite3.connect(database) as db:
            db.execute("DELETE FROM failed_jobs")
    redis_cli(socket, "-x", "RPUSH", "bench_queues:default", stdin=body)
    proc = subprocess.Popen(
        [binary, "--config", config, "work", "--stop-when-empty", "--sleep=0", "--memory=4096",
         "--tries=1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "BENCH_HANDLER_SECRET": "bench-secret"},
    )
    peak = 0
    status = f"/proc/{proc.pid}/status"
    while proc.poll() is None:
        try:
            with open(status) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.01)
    err = proc.stderr.read().decode(errors="replace")
    if proc.returncode != 0 and "unknown field `decode_command`" in err:
        return None  # a binary from before the option
    if proc.returncode != 0:
        raise SystemExit(f"{binary} exited {proc.returncode}:\n{err[-2000:]}")
    left = [k for k in redis_cli(socket, "KEYS", "*").decode().split() if "failed_jobs" not in k]
    if left:
        raise SystemExit(f"{binary}: the job was not settled ({left}):\n{err[-2000:]}")
    return peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", action="append", default=[])
    ap.add_argument("--sizes", default="5,20,50")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--plain", action="store_true", help="ASCII letters instead of escaped characters")
    ap.add_argument(
        "--cases",
        default="process,process+nodecode,persistent,persistent+nodecode",
        help="transports (process, persistent, http: signed, to a local endpoint); "
        "+nodecode sets decode_command = false (the PHP bridge's setting); "
        "process+fail-db and process+fail-redis fail the job (--tries=1) into a SQLite "
        "failed_jobs table or the Redis failed store",
    )
    args = ap.parse_args()
    binaries = args.binary or ["target/release/laravel-worker"]
    sink = start_sink()
    with tempfile.TemporaryDirectory(prefix="lw-bench-") as tmp:
        socket = os.path.join(tmp, "redis.sock")
        server = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", socket, "--save", "",
             "--appendonly", "no", "--proto-max-bulk-len", "1gb"],
            stdout=subprocess.DEVNULL,
        )
        try:
            for _ in range(200):
                if os.path.exists(socket):
                    break
                time.sleep(0.02)
            print("size_MB  payload_MB  case                 binary                    "
                  "peak_MB  peak/payload  target_MB")
            for size in [int(s) for s in args.sizes.split(",")]:
                body = payload(size, args.plain).encode()
                for case in args.cases.split(","):
                    config = write_config(tmp, socket, case, sink.server_address[1])
                    for binary in binaries:
                        peaks = [peak_kib(binary, config, socket, body) for _ in range(args.runs)]
                        if None in peaks:
                            continue
                        peak = statistics.median(peaks) * 1024 / MB
                        size_mb = len(body) / MB
                        print(f"{size:7}  {size_mb:10.1f}  {case:19}  {binary[-24:]:24}  "
                              f"{peak:7.1f}  {peak / size_mb:12.2f}  {3 * size_mb + 10:9.1f}")
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
