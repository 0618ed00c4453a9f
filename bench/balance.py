#!/usr/bin/env python3
"""Balanced slots on a mixed load: jobs/s and p95 wait per queue.

    bench/balance.py [--binary PATH] [--seconds S] [--slots N]

Three queues, pushed at a steady pace for S seconds: `hot` (20 jobs/s of
20 ms), `slow` (6 jobs/s of 800 ms) and `idle` (nothing). One worker with N
slots (default 8) runs them with `balance = "off"` (`--queue=hot,slow,idle`
in priority order), `"simple"` (a fixed even split), `"auto"` (1 s
cooldown) and "horizon-like" (`"auto"` with Horizon's supervisor defaults:
autoScalingStrategy "time", minProcesses 1, balanceMaxShift 1,
balanceCooldown 3 s, maxProcesses N), one after the other on one private
redis-server (unix socket in a temporary directory, killed at the end); the
table shows the [worker] settings each row wrote. The handler is a shell script
(a process per job: on a loaded machine a "20 ms" job takes much longer)
that notes when it started; a job's wait is that moment minus the push
time carried in its id. Prints jobs done per second over the whole run
(feed + drain), the p95 wait per queue and the slot moves (the worker's
"slots rebalanced" log lines); asserts nothing. bench/compare.py
`--only balance` runs the same rows.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from benchlib import (PROCS, ROOT, SHORT_OPTIONS, Lab, job_payload, keys, plain_config, push,
                      run_guarded, write_script)

PREFIX = "bench_"
# queue -> (jobs per second, seconds per job)
LOAD = {"hot": (20, 0.02), "slow": (6, 0.8), "idle": (0, 0.0)}

HANDLER = """#!/bin/sh
echo "$LARAVEL_WORKER_QUEUE $LARAVEL_WORKER_JOB_ID $(date +%s%N)" >> "$BENCH_DIR/started"
case "$LARAVEL_WORKER_QUEUE" in
  hot) sleep 0.02 ;;
  slow) sleep 0.8 ;;
esac
"""


def settings(slots):
    """The rows: (name, [worker] settings in the order written). Settings
    not written take the worker's defaults (DEFAULTS)."""
    return [
        ("off", {"balance": "off", "max_processes": slots, "balance_cooldown": 1}),
        ("simple", {"balance": "simple", "max_processes": slots, "balance_cooldown": 1}),
        ("auto", {"balance": "auto", "max_processes": slots, "balance_cooldown": 1}),
        # Horizon's supervisor options left at their defaults, maxProcesses
        # the slots: autoScalingStrategy, minProcesses, balanceMaxShift,
        # balanceCooldown (seconds).
        ("horizon-like", {"balance": "auto", "auto_scaling_strategy": "time",
                          "min_processes": 1, "max_processes": slots,
                          "balance_max_shift": 1, "balance_cooldown": 3}),
    ]


# The worker's own defaults for what a row does not set.
DEFAULTS = 'auto_scaling_strategy = "time", min_processes = 1, balance_max_shift = 1, ' \
           "balance_cooldown = 3"


def toml_value(v):
    return json.dumps(v) if isinstance(v, str) else str(v)


def payload(queue, n):
    """A job whose id ends with its push time (ns since the epoch)."""
    return job_payload("App\\Jobs\\Work", job="App\\Jobs\\Work@handle", data={},
                       job_id=f"{queue}-{n}-{time.time_ns()}",
                       job_uuid=f"00000000-0000-4000-8000-{n:012d}", options=SHORT_OPTIONS)


def feed(r, seconds):
    """Pushes LOAD's rates for `seconds`, in 50 ms ticks, one pipelined
    write per tick; returns the jobs pushed per queue."""
    tick, sent, start = 0.05, {q: 0 for q in LOAD}, time.monotonic()
    while time.monotonic() - start < seconds:
        elapsed = time.monotonic() - start
        for queue, (rate, _) in LOAD.items():
            due = int(rate * elapsed)
            if sent[queue] < due:
                bodies = [payload(queue, n) for n in range(sent[queue] + 1, due + 1)]
                sent[queue] = due
                ready, _, _, notify = keys(queue, PREFIX)
                push(r, ready, bodies, notify)
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


def run(lab, worker_settings, slots, seconds):
    """One row: a worker with `worker_settings` under `seconds` of LOAD
    on `lab`'s Redis (with `lab.bin`), then the drain. Returns (jobs/s, p95 wait per queue,
    jobs done, jobs pushed, slot moves)."""
    lab.flush()
    work = tempfile.mkdtemp(prefix="balance-", dir=lab.dir)
    handler = write_script(os.path.join(work, "handler.sh"), HANDLER)
    config = os.path.join(work, "config.toml")
    with open(config, "w") as f:
        f.write(plain_config(lab.sock) + "[worker]\n"
                + "".join(f"{k} = {toml_value(v)}\n" for k, v in worker_settings.items())
                + f'[[handlers]]\nmatch = "*"\ncommand = ["{handler}"]\n')
    started = os.path.join(work, "started")
    with open(os.path.join(work, "log"), "wb") as log:
        proc = PROCS.start(
            [lab.bin, "--config", config, "work", "--queue=hot,slow,idle", "--sleep=1",
             f"--concurrency={slots}", "--timeout=0"],
            stdout=subprocess.DEVNULL, stderr=log,
            env={**os.environ, "BENCH_DIR": work, "NO_COLOR": "1"},
        )
        begin = time.monotonic()
        total = sum(feed(lab.r, seconds).values())
        deadline = begin + seconds * 4
        while time.monotonic() < deadline:
            done = sum(1 for _ in open(started)) if os.path.exists(started) else 0
            if done >= total:
                break
            time.sleep(0.2)
        elapsed = time.monotonic() - begin
        time.sleep(1)  # the last jobs end (they are at most 0.8 s)
        PROCS.terminate(proc, timeout=60)
    per_queue = waits(started)
    done = sum(len(v) for v in per_queue.values())
    moves = sum(1 for line in open(os.path.join(work, "log")) if "slots rebalanced" in line)
    return done / elapsed, {q: p95(v) for q, v in per_queue.items()}, done, total, moves


def header(slots, seconds):
    """The table's first lines."""
    return [f"{slots} slots, {seconds:g} s of load: "
            + ", ".join(f"{q} {r}/s x {t * 1000:g} ms" for q, (r, t) in LOAD.items()),
            f"[worker] settings a row leaves out are the defaults: {DEFAULTS}",
            f"{'row':12}  {'jobs/s':>7}  {'done':>11}  {'p95 wait hot':>12}  "
            f"{'p95 wait slow':>13}  {'moves':>5}  [worker] settings"]


def rows(lab, slots, seconds):
    """Runs every row in turn on `lab` (a benchlib.Lab with Redis
    started), yielding each one's results as it ends: a dict of the row's
    name, its [worker] settings, jobs/s, p95 wait per queue (seconds, None
    without jobs), jobs done and pushed, slot moves. bench/compare.py
    `--only balance` runs them too."""
    for name, worker_settings in settings(slots):
        rate, p, done, total, moves = run(lab, worker_settings, slots, seconds)
        yield {"row": name, "settings": worker_settings, "jobs_per_s": rate,
               "p95_wait_s": p, "done": done, "pushed": total, "moves": moves}


def line(row):
    """One row of the table, from a `rows()` result."""
    show = lambda v: "-" if v is None else f"{v:.2f} s"  # noqa: E731
    p = row["p95_wait_s"]
    written = ", ".join(f"{k} = {toml_value(v)}" for k, v in row["settings"].items())
    return (f"{row['row']:12}  {row['jobs_per_s']:7.1f}  {row['done']:5}/{row['pushed']:<5}  "
            f"{show(p['hot']):>12}  {show(p['slow']):>13}  {row['moves']:5}  {written}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/debug/laravel-worker"))
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--slots", type=int, default=8)
    args = ap.parse_args()
    lab = Lab(args.binary)

    def body():
        lab.start_redis()
        for text in header(args.slots, args.seconds):
            print(text, flush=True)
        for row in rows(lab, args.slots, args.seconds):
            print(line(row), flush=True)

    return run_guarded(body, lab.cleanup)


if __name__ == "__main__":
    sys.exit(main())
