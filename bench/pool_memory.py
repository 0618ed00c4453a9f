#!/usr/bin/env python3
"""Memory of a PHP bridge pool under load and idle after a burst, against
as many `php artisan queue:work` processes.

    bench/pool_memory.py [--binary PATH] [--processes N] [--jobs M] [--idle-timeout S]

One run, one private redis-server (unix socket in a temporary directory,
killed at the end), the test app of tests/laravel/ and bench/compare.py's
`NoopJob` payload. Three setups, each given a burst of M queued jobs:

  * laravel-worker + the PHP bridge, persistent, `processes = N`,
    `--concurrency=N`, `idle_timeout = S` (the pool follows the load);
  * the same without `idle_timeout` (the default: processes are kept);
  * N `php artisan queue:work redis --sleep=1` processes.

For each: the resident memory (VmRSS, and PSS, which shares the pages the
processes have in common instead of counting them once per process) of the
daemon plus its PHP processes (or of the N queue:work processes), sampled
every 20 ms while the burst runs ("under load": the highest sample), then
once idle after the burst (for the pool with `idle_timeout`: once its
processes have stopped; for the others: when the queue is empty and S + 1
seconds have passed). Prints numbers; asserts nothing. Needs php with the
redis extension and Debian's Laravel (php-laravel-framework).
"""

import argparse
import os
import subprocess
import sys
import time

from benchlib import (PROCS, QUEUE, ROOT, Lab, children, keys, log, preload, pss_kib,
                      run_guarded, status_kib)


def measure(pids):
    """(processes, RSS KiB, PSS KiB) summed over `pids`."""
    return (len(pids), sum(status_kib(p, "VmRSS") or 0 for p in pids),
            sum(pss_kib(p) for p in pids))


class PoolMemory:
    """The three setups on `lab` (a benchlib.Lab with Redis and the app
    started): `processes` PHP processes, bursts of `jobs`, the pool's
    `idle_timeout` in seconds. bench/compare.py `--only pool_memory` runs
    them too."""

    def __init__(self, lab, processes, jobs, idle_timeout):
        self.lab = lab
        self.processes = processes
        self.jobs = jobs
        self.idle_timeout = idle_timeout

    def bridge_config(self, idle_timeout):
        n = self.processes
        bridge = os.path.join(ROOT, "php", "laravel-worker-bridge.php")
        handler = self.lab.handler_persistent(["php", bridge, f"--app={self.lab.app}"], n)
        handler += "decode_command = false\n"
        if idle_timeout:
            handler += f"idle_timeout = {idle_timeout}\n"
        return self.lab.config(f"pool-{idle_timeout or 'kept'}", handler + "\n")

    def burst(self, pids_of, done_idle):
        """Preloads the burst, samples until the queue is empty, then waits
        for `done_idle()`; returns (under load, idle) measurements."""
        r = self.lab.r
        ready, reserved = keys(QUEUE)[0], keys(QUEUE)[1]
        preload(r, QUEUE, self.lab.payloads, self.jobs)
        peak = (0, 0, 0)
        deadline = time.monotonic() + 600
        while r.cmd("LLEN", ready) + r.cmd("ZCARD", reserved) > 0:
            sample = measure(pids_of())
            if sample[1] > peak[1]:
                peak = sample
            if time.monotonic() > deadline:
                raise RuntimeError("the burst did not drain in 600 s")
            time.sleep(0.02)
        idle_deadline = time.monotonic() + 600
        while not done_idle():
            if time.monotonic() > idle_deadline:
                raise RuntimeError("the pool did not come to rest")
            time.sleep(0.05)
        return peak, measure(pids_of())

    def laravel_worker(self, idle_timeout):
        n = self.processes
        worker = self.lab.worker(self.bridge_config(idle_timeout), "--sleep=1",
                                 f"--concurrency={n}")
        settle = time.monotonic()

        def pids():
            return [worker.pid] + children(worker.pid)

        def rested():
            if idle_timeout:
                return not children(worker.pid)
            return time.monotonic() - settle > self.idle_timeout + 1

        try:
            time.sleep(1)
            at_start = measure(pids())
            under, idle = self.burst(pids, rested)
        finally:
            PROCS.stop(worker)
            self.lab.outcomes()
        return at_start, under, idle

    def queue_work(self):
        n = self.processes
        procs = [PROCS.start(["php", "artisan", "queue:work", "redis", "--sleep=1"],
                             cwd=self.lab.app, env=self.lab.php_env(),
                             stdout=self.lab.out_file(), stderr=subprocess.STDOUT)
                 for _ in range(n)]
        try:
            # Time to boot and poll the empty queue.
            time.sleep(3)
            at_start = measure([p.pid for p in procs])
            start = time.monotonic()
            under, idle = self.burst(
                lambda: [p.pid for p in procs],
                lambda: time.monotonic() - start > self.idle_timeout + 1)
        finally:
            for p in procs:
                PROCS.stop(p)
            self.lab.outcomes()
        return at_start, under, idle

    def rows(self):
        """Runs the three setups; returns [(setup, (at start, under load,
        idle after))], each a `measure()`."""
        n, s = self.processes, self.idle_timeout
        rows = [
            (f"laravel-worker + bridge, processes = {n}, idle_timeout = {s}",
             lambda: self.laravel_worker(s)),
            (f"laravel-worker + bridge, processes = {n}, no idle_timeout",
             lambda: self.laravel_worker(None)),
            (f"php artisan queue:work x{n}", self.queue_work),
        ]
        results = []
        for name, run in rows:
            self.lab.flush()
            log(f"{name}: {self.jobs} jobs")
            results.append((name, run()))
        return results


def table(results, jobs):
    """The report of `PoolMemory.rows()`: text lines (MiB)."""
    lines = [f"\n{jobs} NoopJobs in one burst; RSS and PSS in MiB of the daemon "
             f"+ its PHP processes (or of the queue:work processes); processes counted "
             f"in /proc\n",
             f"| {'setup':58} | start: procs, RSS, PSS | under load: procs, RSS, PSS "
             f"| idle after: procs, RSS, PSS |",
             f"|{'-' * 60}|---|---|---|"]
    for name, (start, under, idle) in results:
        cell = lambda m: f"{m[0]}, {m[1] / 1024:.1f}, {m[2] / 1024:.1f}"  # noqa: E731
        lines.append(f"| {name:58} | {cell(start)} | {cell(under)} | {cell(idle)} |")
    return lines


def run(lab, args):
    if not args.binary and not args.no_build:
        lab.build()
    lab.start_redis()
    lab.setup_app()
    if not lab.app:
        log("the PHP bridge cannot run here; nothing to measure")
        return
    results = PoolMemory(lab, args.processes, args.jobs, args.idle_timeout).rows()
    for line in table(results, args.jobs):
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", help="the laravel-worker binary (default: target/release, "
                                     "built first)")
    ap.add_argument("--no-build", action="store_true", help="use target/release as it is")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--idle-timeout", type=int, default=2, help="seconds (the pool's idle_timeout)")
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    lab = Lab(args.binary)
    return run_guarded(lambda: run(lab, args), lab.cleanup)


if __name__ == "__main__":
    sys.exit(main())
