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
import os
import sqlite3
import statistics
import subprocess
import sys
import threading
import time

from benchlib import (FULL_OPTIONS, PROCS, Lab, job_payload, plain_config, run_guarded,
                      status_kib, write_script)

MB = 1_000_000


def payload(size_mb, plain=False):
    """A Laravel 8+ payload whose command holds a `size_mb` MB string of
    characters that JSON escapes (so the payload text is about twice as
    large), or with `plain`, of ASCII letters (the payload is that size)."""
    unit = "abcdefghij" if plain else 'x"\\/é'
    blob = unit * (size_mb * MB // len(unit.encode()))
    command = 'O:12:"App\\Jobs\\Big":1:{s:4:"blob";s:%d:"%s";}' % (len(blob.encode()), blob)
    return job_payload("App\\Jobs\\Big", job="Illuminate\\Queue\\CallQueuedHandler@call",
                       data={"commandName": "App\\Jobs\\Big", "command": command},
                       job_id="big", options={**FULL_OPTIONS, "retryUntil": None})


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


PERSISTENT_PY = (
    "#!/usr/bin/env python3\n"
    "import os, re, sys\n"
    "answers = os.fdopen(3, 'w')\n"
    "for line in sys.stdin.buffer:\n"
    "    call = re.match(rb'\\{\"call\":(\\d+)', line).group(1).decode()\n"
    "    answers.write('{\"call\":%s,\"action\":\"done\"}\\n' % call)\n"
    "    answers.flush()\n"
)


def write_config(tmp, socket, case, http_port=None):
    """Writes TMP/CASE.toml for a case (transport+option) and its handler;
    returns its path."""
    transport, _, option = case.partition("+")
    if transport == "http":
        # Signed, so the signature's cost in memory shows too.
        config = os.path.join(tmp, f"{case}.toml")
        with open(config, "w") as f:
            f.write(
                plain_config(socket)
                + f'[[handlers]]\nmatch = "*"\nurl = "http://127.0.0.1:{http_port}/"\n'
                'secret_env = "BENCH_HANDLER_SECRET"\n'
            )
        return config
    if transport == "process" and option.startswith("fail"):
        script = "#!/bin/sh\ncat > /dev/null\nexit 1\n"
    elif transport == "process":
        script = "#!/bin/sh\ncat > /dev/null\n"
    else:
        # Persistent: one request per line on stdin, answer on fd 3
        # echoing the request's call id. Python reads a line in large
        # blocks (a shell's `read` takes a system call per byte, too
        # slow for a line of hundreds of MB).
        script = PERSISTENT_PY
    handler = write_script(os.path.join(tmp, "handler.sh"), script)
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
            plain_config(socket, failed)
            + f'[[handlers]]\nmatch = "*"\ncommand = ["{handler}"]\n'
            + ('mode = "persistent"\n' if transport == "persistent" else "")
            + ("decode_command = false\n" if option == "nodecode" else "")
        )
    return config


def peak_kib(binary, config, r, body):
    """Runs `work --stop-when-empty` on one job `body`; returns the
    daemon's VmHWM in KiB, or None for a binary that refuses the config's
    decode_command. Exits the script if the worker fails or leaves the
    job in Redis."""
    r.cmd("FLUSHALL")
    database = config[: -len(".toml")] + ".sqlite"
    if os.path.exists(database):
        with sqlite3.connect(database) as db:
            db.execute("DELETE FROM failed_jobs")
    r.cmd("RPUSH", "bench_queues:default", body)
    proc = PROCS.start(
        [binary, "--config", config, "work", "--stop-when-empty", "--sleep=0", "--memory=4096",
         "--tries=1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "BENCH_HANDLER_SECRET": "bench-secret"},
    )
    peak = 0
    while proc.poll() is None:
        peak = max(peak, status_kib(proc.pid, "VmHWM") or 0)
        time.sleep(0.01)
    err = proc.stderr.read().decode(errors="replace")
    PROCS.stop(proc)
    if proc.returncode != 0 and "unknown field `decode_command`" in err:
        return None  # a binary from before the option
    if proc.returncode != 0:
        raise SystemExit(f"{binary} exited {proc.returncode}:\n{err[-2000:]}")
    left = [k.decode() for k in r.cmd("KEYS", "*") if b"failed_jobs" not in k]
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
    lab = Lab()

    def body():
        lab.start_redis("--proto-max-bulk-len", "1gb")
        print("size_MB  payload_MB  case                 binary                    "
              "peak_MB  peak/payload  target_MB")
        for size in [int(s) for s in args.sizes.split(",")]:
            body = payload(size, args.plain).encode()
            for case in args.cases.split(","):
                config = write_config(lab.dir, lab.sock, case, sink.server_address[1])
                for binary in binaries:
                    peaks = [peak_kib(binary, config, lab.r, body) for _ in range(args.runs)]
                    if None in peaks:
                        continue
                    peak = statistics.median(peaks) * 1024 / MB
                    size_mb = len(body) / MB
                    print(f"{size:7}  {size_mb:10.1f}  {case:19}  {binary[-24:]:24}  "
                          f"{peak:7.1f}  {peak / size_mb:12.2f}  {3 * size_mb + 10:9.1f}")

    return run_guarded(body, lab.cleanup)


if __name__ == "__main__":
    sys.exit(main())
