#!/usr/bin/env python3
"""A handler that cannot work: what the worker does with it in a fixed time.

    bench/tripped_handler.py [--binary PATH ...] [--jobs N] [--seconds S]

The reproduction of issue 21: a persistent handler written for the earlier
protocol (answers on fd 3 without the request's `call` id), N queued jobs,
the worker run for S seconds with `--tries=0` (unlimited, as the issue's
run), default breaker settings. For each binary, in one run on one private
redis-server (unix socket in a temporary directory, killed at the end):
requests the handler received (jobs started), processes it started, log
lines (stdout + stderr), and the jobs left in Redis (waiting + delayed +
reserved) after SIGTERM. Prints numbers; asserts nothing.
"""

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUEUE = "bench_queues:default"

# Old protocol: `{"action":"done"}` without `call`. Counts requests and starts.
HANDLER = """#!/bin/sh
echo >> "$BENCH_DIR/starts"
while IFS= read -r line; do
  echo >> "$BENCH_DIR/requests"
  printf '{"action":"done"}\\n' >&3
done
"""


def resp(*parts):
    out = [f"*{len(parts)}\r\n".encode()]
    for p in parts:
        b = p.encode()
        out.append(f"${len(b)}\r\n".encode() + b + b"\r\n")
    return b"".join(out)


def redis_cli(socket, *args, stdin=None):
    return subprocess.run(
        ["redis-cli", "-s", socket, *args], input=stdin, capture_output=True, check=True
    ).stdout


def push(socket, jobs):
    commands = []
    for n in range(jobs):
        payload = {
            "uuid": f"00000000-0000-4000-8000-{n:012d}",
            "displayName": "App\\Jobs\\Work",
            "job": "App\\Jobs\\Work@handle",
            "maxTries": None,
            "timeout": None,
            "data": {"n": n},
            "id": str(n),
            "attempts": 0,
        }
        commands.append(resp("RPUSH", QUEUE, json.dumps(payload)))
    redis_cli(socket, "--pipe", stdin=b"".join(commands))


def left(socket):
    script = ("return redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) "
              "+ redis.call('ZCARD', KEYS[3])")
    out = redis_cli(socket, "EVAL", script, "3", QUEUE, QUEUE + ":delayed", QUEUE + ":reserved")
    return int(out)


def lines(path):
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def run(binary, tmp, socket, jobs, seconds):
    redis_cli(socket, "FLUSHALL")
    work = tempfile.mkdtemp(dir=tmp)
    handler = os.path.join(work, "handler.sh")
    with open(handler, "w") as f:
        f.write(HANDLER)
    os.chmod(handler, 0o755)
    config = os.path.join(work, "config.toml")
    with open(config, "w") as f:
        f.write(
            f'[redis]\nurl = "unix://{socket}?db=0"\nprefix = "bench_"\n'
            '[cache]\nstore = "none"\n[failed]\ndriver = "null"\n'
            f'[[handlers]]\nmatch = "*"\ncommand = ["{handler}"]\nmode = "persistent"\n'
        )
    push(socket, jobs)
    out, err = os.path.join(work, "stdout"), os.path.join(work, "stderr")
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(
            [binary, "--config", config, "work", "--sleep=0.05", "--tries=0"],
            stdout=o, stderr=e, env={**os.environ, "BENCH_DIR": work, "NO_COLOR": "1"},
        )
        time.sleep(seconds)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    return {
        "requests": lines(os.path.join(work, "requests")),
        "starts": lines(os.path.join(work, "starts")),
        "log_lines": lines(out) + lines(err),
        "left": left(socket),
        "exit": code,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", action="append", default=[])
    ap.add_argument("--jobs", type=int, default=8000)
    ap.add_argument("--seconds", type=float, default=30)
    args = ap.parse_args()
    binaries = args.binary or [os.path.join(ROOT, "target/debug/laravel-worker")]
    with tempfile.TemporaryDirectory(prefix="lw-bench-") as tmp:
        socket = os.path.join(tmp, "redis.sock")
        server = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", socket, "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        try:
            for _ in range(200):
                if os.path.exists(socket):
                    break
                time.sleep(0.02)
            print(f"{args.jobs} jobs, old-protocol persistent handler, {args.seconds:g} s")
            print(f"{'binary':40}  {'requests':>8}  {'starts':>6}  {'log_lines':>9}  "
                  f"{'left':>6}  exit")
            for binary in binaries:
                r = run(binary, tmp, socket, args.jobs, args.seconds)
                print(f"{binary[-40:]:40}  {r['requests']:8}  {r['starts']:6}  "
                      f"{r['log_lines']:9}  {r['left']:6}  {r['exit']}")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
