#!/usr/bin/env python3
"""What Horizon's record of one completed job costs Redis at the least.

Issue 47 item 8 asks that Horizon's records cost at most 1.5x the Redis CPU
per job of the records-off rows. This prints the floor of that cost: a
private redis-server (unix socket), N reserved members of the bench's
no-op payload size, then, for each way of settling them, Redis's own CPU
(`INFO cpu`, user + sys) over the settles, per job:

* `ZREM` alone: the delete with the records off;
* the completed record's writes sent as plain pipelined commands, no
  script and no condition: `ZREM`, the job hash (`HSET` of the eleven
  fields Horizon's `reserved` and `completed` leave, the payload among
  them), the `recent_jobs` and `completed_jobs` entries (`ZADD` each) and
  the hash's expiry (`EXPIREAT`): what `RedisJobRepository` writes for a
  job, less its own round trips;
* the same writes inside `MULTI`/`EXEC`.

Usage: bench/horizon_floor.py [--jobs N] [--reps R]. Medians of R runs.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Lab, PROCS, log  # noqa: E402


def redis_cpu(r):
    """redis-server's CPU seconds so far (user + sys)."""
    fields = dict(line.split(":", 1) for line in r.cmd("INFO", "cpu").decode().split("\r\n")
                  if line.startswith("used_cpu_"))
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def payload(i):
    """A no-op job's payload, about the bench's size (600 bytes)."""
    return json.dumps({
        "uuid": f"00000000-0000-4000-8000-{i:012d}", "displayName": "App\\Jobs\\NoopJob",
        "job": "Illuminate\\Queue\\CallQueuedHandler@call", "maxTries": None,
        "data": {"commandName": "App\\Jobs\\NoopJob",
                 "command": "O:15:\"App\\Jobs\\NoopJob\":0:{}" + " " * 380},
        "attempts": 1})


def settle_plain(i, member, now):
    job = f"laravel_horizon:{i}"
    at = f"{now:.4f}"
    return [["ZREM", "queues:default:reserved", member],
            ["HSET", job, "id", str(i), "connection", "redis", "queue", "default",
             "name", "App\\Jobs\\NoopJob", "created_at", at, "updated_at", at,
             "reserved_at", at, "status", "completed", "payload", member, "completed_at", at],
            ["ZADD", "laravel_horizon:recent_jobs", f"-{at}", str(i)],
            ["ZADD", "laravel_horizon:completed_jobs", f"-{at}", str(i)],
            ["EXPIREAT", job, str(int(now) + 3600)]]


WAYS = [
    ("ZREM alone (records off)",
     lambda i, m, now: [["ZREM", "queues:default:reserved", m]]),
    ("the record's writes, pipelined, no script",
     settle_plain),
    ("the same in MULTI/EXEC",
     lambda i, m, now: [["MULTI"], *settle_plain(i, m, now), ["EXEC"]]),
]


def run(lab, jobs, settle):
    """Redis CPU µs per job of settling `jobs` reserved members."""
    lab.flush()
    members = [payload(i) for i in range(jobs)]
    lab.r.pipeline([["ZADD", "queues:default:reserved", str(i), m]
                    for i, m in enumerate(members)])
    now = time.time()
    commands = [c for i, m in enumerate(members) for c in settle(i, m, now)]
    before = redis_cpu(lab.r)
    lab.r.pipeline(commands, chunk=64)
    return (redis_cpu(lab.r) - before) / jobs * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    lab = Lab()
    try:
        lab.start_redis()
        results = {name: [] for name, _ in WAYS}
        for _ in range(args.reps):
            for name, settle in WAYS:
                results[name].append(run(lab, args.jobs, settle))
        base = statistics.median(results[WAYS[0][0]])
        load = os.getloadavg()[0]
        print(f"\n{args.jobs} jobs, median of {args.reps}, load {load:.2f}, "
              f"{os.cpu_count()} CPUs\n")
        print("| settle | Redis CPU/job | × ZREM alone |")
        print("|---|---:|---:|")
        for name, samples in results.items():
            median = statistics.median(samples)
            print(f"| {name} | {median:.2f} µs | {median / base:.1f}× |")
    finally:
        PROCS.stop_all()
        log("done")


if __name__ == "__main__":
    main()
