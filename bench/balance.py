#!/usr/bin/env python3
"""Balanced slots on a mixed load: jobs/s and p95 wait per queue.

    bench/balance.py [--binary PATH] [--seconds S] [--slots N]

Three queues, pushed at a steady pace for S seconds: `hot` (20 jobs/s of
20 ms), `slow` (6 jobs/s of 800 ms) and `idle` (nothing). One worker with N
slots (default 8) runs them with `balance = "off"` (`--queue=hot,slow,idle`
in priority order), `"simple"` (a fixed even split) and `"auto"` (1 s
cooldown), one after the other on one private redis-server (unix socket in a
temporary directory, killed at the end). The handler is a shell script
(a process per job: on a loaded machine a "20 ms" job takes much longer)
that notes when it started; a job's wait is that moment minus the push
time carried in its id. Prints jobs done per second over the whole run
(feed + drain) and the p95 wait per queue; asserts nothing.
"""

import argparse
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "bench_queues:"
# queue -> (jobs per second, seconds per job)
LOAD = {"hot": (20, 0.02), "slow": (6, 0.8), "idle": (0, 0.0)}

HANDLER = """#!/bin/sh
echo "$LARAVEL_WORKER_QUEUE $LARAVEL_WORKER_JOB_ID $(date +%s%N)" >> "$BENCH_DIR/started"
case "$LARAVEL_WORKER_QUEUE" in
  hot) sleep 0.02 ;;
  slow) sleep 0.8 ;;
esac
"""


def resp(*parts):
    out = [f"*{len(parts)}\r\n".encode()]
    for p in parts:
        b = p.encode()
        out.append(f"${len(b)}\r\n".encode() + b + b"\r\n")
    return b"".join(out)


def payload(queue, n):
    job_id = f"{queue}-{n}-{time.time_ns()}"
    return json.dumps({
        "uuid": f"00000000-0000-4000-8000-{n:012d}",
        "displayName": "App\\Jobs\\Work",
        "job": "App\\Jobs\\Work@handle",
        "maxTries": None,
        "timeout": None,
        "data": {},
        "id": job_id,
        "attempts": 0,
    })


def feed(socket, seconds, stop):
    """Pushes LOAD's rates for `seconds`, in 50 ms ticks, through one
    redis-cli --pipe per tick."""
    tick, sent, start = 0.05, {q: 0 for q in LOAD}, time.monotonic()
    while not stop.is_set() and time.monotonic() - start < seconds:
        elapsed = time.monotonic() - start
        commands = []
        for queue, (rate, _) in LOAD.items():
            due = int(rate * elapsed)
            while sent[queue] < due:
                sent[queue] += 1
                commands.append(resp("RPUSH", PREFIX + queue, payload(queue, sent[queue])))
                commands.append(resp("RPUSH", PREFIX + queue + ":notify", "1"))
        if commands:
            subprocess.run(["redis-cli", "-s", socket, "--pipe"], input=b"".join(commands),
                           capture_output=True, check=True)
        time.sleep(tick)
    return sent


def waits(path):
    per_queue = {q: [] for q in LOAD}
    with open(path) as f:
        for line in f:
            queue, job_id, started = line.split()
            pushed = int(job_id.rsplit("-", 1)[1])
            per_queue[queue].append((int(started) - pushed) / 1e9)
    return per_queue


def p95(values):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(0.95 * len(values)))]


def run(binary, tmp, socket, mode, slots, seconds):
    subprocess.run(["redis-cli", "-s", socket, "FLUSHALL"], capture_output=True, check=True)
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
            f'[worker]\nbalance = "{mode}"\nmax_processes = {slots}\nbalance_cooldown = 1\n'
            f'[[handlers]]\nmatch = "*"\ncommand = ["{handler}"]\n'
        )
    stop = threading.Event()
    started = os.path.join(work, "started")
    with open(os.path.join(work, "log"), "wb") as log:
        proc = subprocess.Popen(
            [binary, "--config", config, "work", "--queue=hot,slow,idle", "--sleep=1",
             f"--concurrency={slots}", "--timeout=0"],
            stdout=subprocess.DEVNULL, stderr=log,
            env={**os.environ, "BENCH_DIR": work, "NO_COLOR": "1"},
        )
        begin = time.monotonic()
        total = sum(feed(socket, seconds, stop).values())
        deadline = begin + seconds * 4
        while time.monotonic() < deadline:
            done = sum(1 for _ in open(started)) if os.path.exists(started) else 0
            if done >= total:
                break
            time.sleep(0.2)
        elapsed = time.monotonic() - begin
        time.sleep(1)  # the last jobs end (they are at most 0.8 s)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    per_queue = waits(started)
    done = sum(len(v) for v in per_queue.values())
    moves = sum(1 for line in open(os.path.join(work, "log")) if "slots rebalanced" in line)
    return done / elapsed, {q: p95(v) for q, v in per_queue.items()}, done, total, moves


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/debug/laravel-worker"))
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--slots", type=int, default=8)
    args = ap.parse_args()
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
            print(f"{args.slots} slots, {args.seconds:g} s of load: "
                  + ", ".join(f"{q} {r}/s x {t * 1000:g} ms" for q, (r, t) in LOAD.items()))
            print(f"{'balance':8}  {'jobs/s':>7}  {'done':>11}  {'p95 wait hot':>12}  "
                  f"{'p95 wait slow':>13}  {'moves':>5}")
            for mode in ["off", "simple", "auto"]:
                rate, p, done, total, moves = run(args.binary, tmp, socket, mode, args.slots,
                                                  args.seconds)
                show = lambda v: "-" if v is None else f"{v:.2f} s"
                print(f"{mode:8}  {rate:7.1f}  {done:5}/{total:<5}  {show(p['hot']):>12}  "
                      f"{show(p['slow']):>13}  {moves:5}")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
