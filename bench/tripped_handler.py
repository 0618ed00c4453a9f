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
import os
import sys
import tempfile
import time

from benchlib import (PROCS, ROOT, SHORT_OPTIONS, Lab, job_payload, plain_config, push,
                      run_guarded, write_script)

QUEUE = "bench_queues:default"

# Old protocol: `{"action":"done"}` without `call`. Counts requests and starts.
HANDLER = """#!/bin/sh
echo >> "$BENCH_DIR/starts"
while IFS= read -r line; do
  echo >> "$BENCH_DIR/requests"
  printf '{"action":"done"}\\n' >&3
done
"""


def payloads(jobs):
    for n in range(jobs):
        yield job_payload("App\\Jobs\\Work", job="App\\Jobs\\Work@handle", data={"n": n},
                          job_id=str(n), job_uuid=f"00000000-0000-4000-8000-{n:012d}",
                          options=SHORT_OPTIONS)


def left(r):
    """Jobs waiting, delayed and reserved on QUEUE."""
    script = ("return redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) "
              "+ redis.call('ZCARD', KEYS[3])")
    return r.cmd("EVAL", script, "3", QUEUE, QUEUE + ":delayed", QUEUE + ":reserved")


def lines(path):
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def run(binary, lab, jobs, seconds):
    lab.flush()
    work = tempfile.mkdtemp(dir=lab.dir)
    handler = write_script(os.path.join(work, "handler.sh"), HANDLER)
    config = os.path.join(work, "config.toml")
    with open(config, "w") as f:
        f.write(plain_config(lab.sock)
                + f'[[handlers]]\nmatch = "*"\ncommand = ["{handler}"]\nmode = "persistent"\n')
    push(lab.r, QUEUE, payloads(jobs))  # no :notify entries: the worker polls
    out, err = os.path.join(work, "stdout"), os.path.join(work, "stderr")
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = PROCS.start(
            [binary, "--config", config, "work", "--sleep=0.05", "--tries=0"],
            stdout=o, stderr=e, env={**os.environ, "BENCH_DIR": work, "NO_COLOR": "1"},
        )
        time.sleep(seconds)
        code = PROCS.terminate(proc, timeout=60)
    return {
        "requests": lines(os.path.join(work, "requests")),
        "starts": lines(os.path.join(work, "starts")),
        "log_lines": lines(out) + lines(err),
        "left": left(lab.r),
        "exit": code,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", action="append", default=[])
    ap.add_argument("--jobs", type=int, default=8000)
    ap.add_argument("--seconds", type=float, default=30)
    args = ap.parse_args()
    binaries = args.binary or [os.path.join(ROOT, "target/debug/laravel-worker")]
    lab = Lab()

    def body():
        lab.start_redis()
        print(f"{args.jobs} jobs, old-protocol persistent handler, {args.seconds:g} s")
        print(f"{'binary':40}  {'requests':>8}  {'starts':>6}  {'log_lines':>9}  "
              f"{'left':>6}  exit")
        for binary in binaries:
            r = run(binary, lab, args.jobs, args.seconds)
            print(f"{binary[-40:]:40}  {r['requests']:8}  {r['starts']:6}  "
                  f"{r['log_lines']:9}  {r['left']:6}  {r['exit']}")

    return run_guarded(body, lab.cleanup)


if __name__ == "__main__":
    sys.exit(main())
