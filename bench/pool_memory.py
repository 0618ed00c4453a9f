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
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (bench/compare.py: redis, app, payloads, process helpers)
from compare import PROCS, QUEUE, keys, log, preload  # noqa: E402


def status_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid):
    """The live children of `pid`."""
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


def measure(pids):
    """(processes, RSS KiB, PSS KiB) summed over `pids`."""
    return len(pids), sum(status_kib(p, "VmRSS") for p in pids), sum(pss_kib(p) for p in pids)


class PoolBench(compare.Bench):
    def __init__(self, args):
        args.size, args.reps, args.only = "quick", None, None
        super().__init__(args)
        if args.binary:
            self.bin = os.path.abspath(args.binary)

    def bridge_config(self, idle_timeout):
        n = self.args.processes
        bridge = os.path.join(compare.ROOT, "php", "laravel-worker-bridge.php")
        handler = self.handler_persistent(["php", bridge, f"--app={self.app}"], n)
        handler += "decode_command = false\n"
        if idle_timeout:
            handler += f"idle_timeout = {idle_timeout}\n"
        return self.config(f"pool-{idle_timeout or 'kept'}", handler + "\n")

    def burst(self, pids_of, done_idle):
        """Preloads the burst, samples until the queue is empty, then waits
        for `done_idle()`; returns (under load, idle) measurements."""
        ready, reserved = keys(QUEUE)[0], keys(QUEUE)[1]
        preload(self.r, QUEUE, self.payloads, self.args.jobs)
        peak = (0, 0, 0)
        deadline = time.monotonic() + 600
        while self.r.cmd("LLEN", ready) + self.r.cmd("ZCARD", reserved) > 0:
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
        n = self.args.processes
        worker = self.worker(self.bridge_config(idle_timeout), "--sleep=1",
                             f"--concurrency={n}")
        settle = time.monotonic()

        def pids():
            return [worker.pid] + children(worker.pid)

        def rested():
            if idle_timeout:
                return not children(worker.pid)
            return time.monotonic() - settle > self.args.idle_timeout + 1

        try:
            time.sleep(1)
            at_start = measure(pids())
            under, idle = self.burst(pids, rested)
        finally:
            PROCS.stop(worker)
            self.outcomes()
        return at_start, under, idle

    def queue_work(self, _count=None):
        n = self.args.processes
        procs = [PROCS.start(["php", "artisan", "queue:work", "redis", "--sleep=1"],
                             cwd=self.app, env=self.php_env(), stdout=self.out_file(),
                             stderr=compare.subprocess.STDOUT)
                 for _ in range(n)]
        try:
            # Time to boot and poll the empty queue.
            time.sleep(3)
            at_start = measure([p.pid for p in procs])
            start = time.monotonic()
            under, idle = self.burst(
                lambda: [p.pid for p in procs],
                lambda: time.monotonic() - start > self.args.idle_timeout + 1)
        finally:
            for p in procs:
                PROCS.stop(p)
            self.outcomes()
        return at_start, under, idle

    def run(self):
        if not self.args.binary and not self.args.no_build:
            self.build()
        self.start_redis()
        self.setup_app()
        if not self.app:
            log("the PHP bridge cannot run here; nothing to measure")
            return
        n, s = self.args.processes, self.args.idle_timeout
        rows = [
            (f"laravel-worker + bridge, processes = {n}, idle_timeout = {s}",
             lambda: self.laravel_worker(s)),
            (f"laravel-worker + bridge, processes = {n}, no idle_timeout",
             lambda: self.laravel_worker(None)),
            (f"php artisan queue:work x{n}", self.queue_work),
        ]
        results = []
        for name, run in rows:
            self.flush()
            log(f"{name}: {self.args.jobs} jobs")
            results.append((name, run()))
        print(f"\n{self.args.jobs} NoopJobs in one burst; RSS and PSS in MiB of the daemon "
              f"+ its PHP processes (or of the queue:work processes); processes counted "
              f"in /proc\n")
        print(f"| {'setup':58} | start: procs, RSS, PSS | under load: procs, RSS, PSS "
              f"| idle after: procs, RSS, PSS |")
        print(f"|{'-' * 60}|---|---|---|")
        for name, (start, under, idle) in results:
            cell = lambda m: f"{m[0]}, {m[1] / 1024:.1f}, {m[2] / 1024:.1f}"  # noqa: E731
            print(f"| {name:58} | {cell(start)} | {cell(under)} | {cell(idle)} |")


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

    def stop(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    bench = PoolBench(args)
    try:
        bench.run()
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); stopping what was started")
        return 130
    finally:
        bench.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
