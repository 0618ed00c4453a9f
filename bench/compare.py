#!/usr/bin/env python3
"""Side-by-side benchmark: laravel-worker against `php artisan queue:work`.

    bench/compare.py [--size quick|full] [--reps N] [--only NAME,...] [--json FILE]
                     [--binary PATH | --no-build] [--baseline PATH]

One run, one private redis-server (unix socket in a temporary directory,
killed at the end), the same queued no-op jobs (a real Laravel 8 `NoopJob`
payload, dispatched once through the tests' app in tests/laravel/ and
cloned with fresh uuid/id) through:

  * `php artisan queue:work redis --sleep=0 --stop-when-empty`, 1 and 2 processes;
  * laravel-worker + the PHP bridge (persistent, 2 processes, concurrency 2,
    `decode_command = false` as the book configures it; once more with the
    default `true`, this build only, for what decoding costs);
    with `ahead` named, also concurrency 4, without and with `pipeline = true`;
  * laravel-worker + a warm no-op persistent handler (mawk answering on fd 3),
    concurrency 1, 8, 32, 64 (as many processes as slots);
  * the same, concurrency 1 and 8, with `[horizon] enabled` off and on in
    turn (the cost of Horizon's records), and on with Horizon's records sent
    to a second redis-server that refuses every write (`maxmemory 1`,
    noeviction); the report then gives what the records cost, on against
    off, per concurrency (each repetition's ratio, their median: jobs/s and
    Redis CPU per job);
  * laravel-worker + a keep-alive HTTP/1.1 no-op endpoint (a small asyncio
    server on 127.0.0.1), concurrency 32;
  * laravel-worker + /bin/true per job (process mode), concurrency 8, beside a
    plain spawn loop of /bin/true at 8 in parallel (`xargs -P 8`);
  * the ceiling: redis-benchmark running the worker's pop script
    (src/queue/redis_queue/scripts.rs `POP`, by EVALSHA) on a preloaded list, 8 clients,
    unpipelined and pipelined (-P 16).

With `--baseline BIN` (repeatable) every laravel-worker row runs again with
each such binary (an earlier build), interleaved in the same repetitions.

Then: pickup latency of an idle worker with default settings (push -> the
handler reading the request, timestamps on both sides), time from exec to the
first poll (redis-cli MONITOR: the first command naming the queue's ready or
notify key), jobs/s with a small and a large backlog, and a burst of due
delayed jobs while ready jobs are pushed on a higher queue.

Six parts run only when `--only` names them, never in the default run:
`balance` (bench/balance.py's rows: off, simple, auto and horizon-like on a
mixed load; 8 slots, 10 s of load in quick, 30 s in full), `pool_memory`
(bench/pool_memory.py's setups: a PHP bridge pool with and without
idle_timeout against as many queue:work processes; 4 processes, 4000 jobs,
idle_timeout 2 s), `database` (bench/database.py's rows: the database
queue against `queue:work database` on SQLite, PostgreSQL and MariaDB,
1500 jobs per row in quick, 10,000 in full, and the MariaDB deadlock row,
4 workers + 2 queue:work on 6000 jobs in quick, 50,000 in full; its queue:work
rows and the deadlock row are left out with `--no-queue-work`),
`beanstalkd` (bench/beanstalkd.py's rows: the beanstalkd queue against
`queue:work beanstalkd`, 3000 jobs per row in quick, 20,000 in full),
`finish` (bench/finish.py's rows: chains of two jobs run by a no-op
handler and finished by the PHP bridge against as many jobs that need no
finish, at concurrency 1 and 8; 500 chains in quick, 3000 in full) and
`cluster` (bench/cluster.py: Redis's CPU per job on one server and on each
master of a 3-master Redis Cluster, and of another whose cache keys are on
the queue's master; private servers on 127.0.0.1 TCP ports, 4000 jobs in
quick, 30,000 in full, warm no-op c=32 with 8 processes, and the commands
per job each server served). They use this run's Redis (the
cluster part its own servers), payload and binary (--binary, else the
release build) and print their tables after the others.

Throughput is measured two ways: "steady" (the ready list sampled every 5 ms,
jobs/s while it falls from 90 % to 10 % of its start length: process start-up
and the tail are left out) and "wall" (N / exec-to-exit). Peak RSS is VmHWM of
the worker process (the daemon, not its handlers; each PHP worker for
queue:work). Worker CPU/job is the worker processes' own CPU time per job
(handlers not counted); Redis CPU/job is the private redis-server's over the
same time (what the row costs Redis: its scripts, and Horizon's records when on).
Every process the script starts is stopped at the end, also on Ctrl-C.
"""

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

import balance
import beanstalkd
import finish
import cluster
import database
import pool_memory
from benchlib import (PROCS, PUSH_LUA, QUEUE, ROOT, Lab, LengthSampler, Redis, callgrind_total,
                      cpu_seconds,
                      keys, log, machine_counters, peak_rss_kib, preload, rand_id, run_guarded, start_redis_server,
                      string_job, wait_all)

SIZES = {
    # jobs per throughput row, jobs per process-mode row, repetitions,
    # pickup samples, redis-benchmark requests, backlog (small, large, jobs run),
    # due delayed jobs, seconds of probes after they come due; when named:
    # balance (slots, seconds of load), pool_memory (processes, jobs,
    # idle_timeout seconds), database (jobs per row, jobs in the deadlock row)
    "quick": dict(jobs=4000, process_jobs=1000, reps=1, pickup=12, bench_requests=100_000,
                  backlog=(10_000, 200_000, 6000), delayed=20_000, probe_after=4,
                  balance=(8, 10), pool_memory=(4, 4000, 2), database=(1500, 6000),
                  beanstalkd=3000, finish=500),
    "full": dict(jobs=30_000, process_jobs=6000, reps=3, pickup=200, bench_requests=400_000,
                 backlog=(10_000, 1_000_000, 8000), delayed=100_000, probe_after=8,
                 balance=(8, 30), pool_memory=(4, 4000, 2), database=(10_000, 50_000),
                 beanstalkd=20_000, finish=3000),
}


# A warm no-op persistent handler: one answer on fd 3 per request line,
# echoing the request's "call" number (the line starts with {"call":N,).
WARM_SH = """#!/bin/sh
exec mawk -W interactive '{ match($0, /"call":[0-9]+/); c = substr($0, RSTART + 7, RLENGTH - 7); print "{\\"call\\":" c ",\\"action\\":\\"done\\"}" }' >&3
"""

# A warm persistent handler that writes "<job id> <ns since the epoch>" when a
# request arrives, then answers done.
STAMP_PY = r"""import json, os, sys, time
out = os.fdopen(3, "w")
log = open(sys.argv[1], "a")
for line in sys.stdin:
    t = time.time_ns()
    try:
        request = json.loads(line)
    except ValueError:
        request = {}
    jid = request.get("id")
    log.write(f"{jid} {t}\n")
    log.flush()
    out.write(json.dumps({"call": request.get("call"), "action": "done"}) + "\n")
    out.flush()
"""

# A keep-alive HTTP/1.1 no-op endpoint on 127.0.0.1: 204 to every request.
HTTP_PY = r"""import asyncio, re, sys
ANSWER = b"HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\n\r\n"
LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.I)
class Endpoint(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.buf = b""
    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            m = LENGTH.search(self.buf, 0, end + 2)
            size = int(m.group(1)) if m else 0
            if len(self.buf) < end + 4 + size:
                return
            self.buf = self.buf[end + 4 + size:]
            self.transport.write(ANSWER)
async def main():
    server = await asyncio.get_running_loop().create_server(Endpoint, "127.0.0.1", 0, backlog=256)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""



# ---------------------------------------------------------------- the bench

class Bench(Lab):
    """The rows of one run (benchlib.Lab: the private directory, Redis and
    app they share); `run()` measures, `report()` prints."""

    def __init__(self, args):
        super().__init__(args.binary)
        self.args = args
        self.callgrind = args.callgrind
        self.size = dict(SIZES[args.size])
        if args.reps:
            self.size["reps"] = args.reps
        self.only = set(args.only.split(",")) if args.only else None
        self.results = {"rows": [], "extra": {}}
        self.http_port = None
        self.http_proc = None

    def wanted(self, name):
        """A part of the default run: run unless --only leaves it out."""
        return self.only is None or name in self.only

    def named(self, name):
        """A part outside the default run: run only when --only names it."""
        return self.only is not None and name in self.only

    # -- setup

    def write_files(self):
        self.warm = os.path.join(self.dir, "warm.sh")
        with open(self.warm, "w") as f:
            f.write(WARM_SH if shutil.which("mawk") else
                    "#!/bin/sh\nexec python3 -c 'import json,os,sys\n"
                    "o=os.fdopen(3,\"w\")\nfor l in sys.stdin:\n"
                    " o.write(json.dumps({\"call\":json.loads(l)[\"call\"],\"action\":\"done\"})+\"\\n\");o.flush()'\n")
        os.chmod(self.warm, 0o755)
        self.stamp_py = os.path.join(self.dir, "stamp.py")
        with open(self.stamp_py, "w") as f:
            f.write(STAMP_PY)
        self.http_py = os.path.join(self.dir, "http_noop.py")
        with open(self.http_py, "w") as f:
            f.write(HTTP_PY)


    # -- helpers

    def drain(self, start, n, timeout):
        """Starts processes with `start()`, samples the ready list until they
        exit; returns (steady jobs/s, wall jobs/s, peak KiB, CPU seconds of
        the worker processes themselves, handlers not counted). Redis's own
        CPU seconds over the same time are left in `last_redis_cpu`, and the
        whole machine's busy CPU seconds and context switches in
        `last_machine` (daemon, handlers, Redis, kernel and whatever else
        ran)."""
        sampler = LengthSampler(self.sock, keys(QUEUE)[0], 0.005)
        if self.args.commandstats:
            self.r.cmd("CONFIG", "RESETSTAT")
        t0 = time.monotonic()
        redis_cpu = cpu_seconds(self.redis_proc.pid)
        machine = machine_counters()
        procs = start()
        sampler.start()
        try:
            peak, cpu = wait_all(procs, timeout)
        finally:
            samples = sampler.stop()
        wall = time.monotonic() - t0
        self.last_redis_cpu = cpu_seconds(self.redis_proc.pid) - redis_cpu
        after = machine_counters()
        self.last_machine = (after[0] - machine[0], after[1] - machine[1])
        if self.args.commandstats:
            self.log_commandstats(n)
        self.last_instructions = None
        for p in procs:
            if p.returncode not in (0, None):
                log(f"warning: {p.args[:4]} exited with {p.returncode}")
            PROCS.stop(p)
            counted = callgrind_total(self.dir, p)
            if counted is not None:
                self.last_instructions = (self.last_instructions or 0) + counted
        return steady_rate(samples, n), n / wall, peak, cpu

    def log_commandstats(self, n):
        """Logs Redis's `INFO commandstats` since the row started, per job:
        calls and µs of CPU of each command (those a script runs are counted
        on their own and again in the script's `EVAL`/`EVALSHA`)."""
        text = self.r.cmd("INFO", "commandstats").decode()
        rows = []
        for line in text.splitlines():
            if not line.startswith("cmdstat_"):
                continue
            name, _, fields = line[len("cmdstat_"):].partition(":")
            stat = dict(f.split("=", 1) for f in fields.split(","))
            rows.append((int(stat["usec"]), int(stat["calls"]), name))
        rows.sort(reverse=True)
        log("  commandstats per job: " + ", ".join(
            f"{name} {calls / n:.2f} calls {usec / n:.1f} µs" for usec, calls, name in rows
            if calls))

    # -- rows

    def bins(self):
        """(label, binary) of every build the laravel-worker rows run: this
        build, then each --baseline, in the same repetitions (before/after)."""
        bins = [("", self.bin)]
        for i, baseline in enumerate(self.args.baseline or []):
            label = " (baseline)" if len(self.args.baseline) == 1 else f" (baseline {i + 1})"
            bins.append((label, os.path.abspath(baseline)))
        return bins

    def throughput_rows(self):
        n, np_ = self.size["jobs"], self.size["process_jobs"]
        rows = []
        bins = self.bins()
        if self.app:
            rows += [("queue:work", "queue:work x1", n, lambda: self.queue_work(1)),
                     ("queue:work", "queue:work x2", n, lambda: self.queue_work(2))]
        for label, binary in bins:
            if self.app:
                rows.append(("bridge", f"bridge persistent x2, c=2{label}", n,
                             lambda binary=binary: self.bridge(binary)))
            if self.app and not label:
                # The default `decode_command = true`, which the book tells
                # bridge users to turn off: what not doing so costs.
                rows.append(("bridge", "bridge persistent x2, c=2, decode_command = true", n,
                             lambda: self.bridge(decode_command=True)))
            for c in (1, 8, 32, 64):
                rows.append(("warm", f"warm no-op, c={c}{label}", n,
                             lambda c=c, binary=binary: self.warm_row(c, binary=binary)))
        for c in (1, 8):
            for label, binary in bins:
                for mode in ("off", "on", "refused"):
                    rows.append(("horizon", f"warm no-op, c={c}, [horizon] {mode}{label}", n,
                                 lambda c=c, mode=mode, binary=binary:
                                 self.warm_row(c, horizon=mode, binary=binary)))
        # Reserve ahead (issue 29): --concurrency above and equal to the
        # pool's size.
        for c, p in ((1, 1), (32, 8), (32, 32)):
            for label, binary in bins:
                rows.append(("ahead", f"warm no-op, c={c}, processes={p}{label}", n,
                             lambda c=c, p=p, binary=binary:
                             self.warm_row(c, binary=binary, processes=p)))
        # Pipelined pools (`pipeline = true`): the current build only (an
        # earlier one refuses the key).
        rows.append(("ahead", "warm no-op, c=32, processes=8, pipeline", n,
                     lambda: self.warm_row(32, processes=8, pipeline=True)))
        # The window as wide as the free slots (24), without and with it.
        rows.append(("ahead", "warm no-op, c=32, processes=8, reserve_ahead=24", n,
                     lambda: self.warm_row(32, processes=8, ahead=24)))
        rows.append(("ahead", "warm no-op, c=32, processes=8, pipeline, reserve_ahead=24", n,
                     lambda: self.warm_row(32, processes=8, pipeline=True, ahead=24)))
        # The no-op handler never reads `command`: what its decoding costs.
        rows.append(("ahead", "warm no-op, c=32, processes=8, decode_command = false", n,
                     lambda: self.warm_row(32, processes=8, decode_command=False)))
        rows.append(("ahead", "warm no-op, c=32, processes=8, reserve_ahead=24, "
                              "decode_command = false", n,
                     lambda: self.warm_row(32, processes=8, ahead=24, decode_command=False)))
        if self.app:
            rows.append(("ahead", "PHP bridge x2, c=4", n, lambda: self.bridge(c=4)))
            rows.append(("ahead", "PHP bridge x2, c=4, pipeline", n,
                         lambda: self.bridge(c=4, pipeline=True)))
        for label, binary in bins:
            rows.append(("http", f"HTTP keep-alive no-op, c=32{label}", n,
                         lambda binary=binary: self.http_row(32, binary)))
            rows.append(("process", f"/bin/true per job, c=8{label}", np_,
                         lambda binary=binary: self.process_row(8, binary)))
        rows = [(name, count, run) for key, name, count, run in rows
                if (self.named(key) if key == "ahead" else self.wanted(key))]
        results = {name: [] for name, _, _ in rows}
        instructions = {}
        for rep in range(self.size["reps"]):
            for name, count, run in rows:
                self.flush()
                preload(self.r, QUEUE, self.payloads, count)
                http_cpu = cpu_seconds(self.http_proc.pid) if self.http_proc else None
                steady, wall, peak, cpu = self.drain(run, count, timeout=max(600, count / 50))
                if http_cpu is not None and name.startswith("HTTP"):
                    used = cpu_seconds(self.http_proc.pid) - http_cpu
                    log(f"  the HTTP endpoint used {used * 1e6 / count:.0f} µs CPU per job")
                left = self.r.cmd("LLEN", keys(QUEUE)[0])
                if left:
                    log(f"warning: {name}: {left} jobs left on the queue")
                done, other = self.outcomes()
                if done != count or other:
                    log(f"WARNING: {name}: {done} of {count} jobs done, {other} failed or released")
                load = os.getloadavg()[0]
                redis_us = self.last_redis_cpu * 1e6 / count
                machine_us = self.last_machine[0] * 1e6 / count
                switches = self.last_machine[1] / count
                results[name].append((steady, wall, peak, load, cpu * 1e6 / count, redis_us,
                                      machine_us, switches))
                if self.last_instructions is not None:
                    instructions.setdefault(name, []).append(self.last_instructions)
                    log(f"  callgrind: {self.last_instructions / 1e6:.1f} M instructions "
                        f"({self.last_instructions / count:,.0f} per job)")
                log(f"[rep {rep + 1}] {name}: {count} jobs, steady {fmt(steady)} jobs/s, "
                    f"wall {wall:.0f} jobs/s, peak RSS {peak / 1024:.1f} MiB, "
                    f"worker CPU {cpu * 1e6 / count:.0f} µs/job, "
                    f"Redis CPU {redis_us:.0f} µs/job, machine CPU {machine_us:.0f} µs/job, "
                    f"{switches:.1f} context switches/job, load {load:.2f}")
        for name, count, _ in rows:
            runs = results[name]
            self.results["rows"].append({
                "row": name, "jobs": count, "reps": len(runs),
                "steady": median([r[0] for r in runs if r[0]]),
                "wall": median([r[1] for r in runs]),
                "peak_kib": max(r[2] for r in runs),
                "load": median([r[3] for r in runs]),
                "cpu_us_per_job": median([r[4] for r in runs]),
                "redis_us_per_job": median([r[5] for r in runs]),
                "machine_us_per_job": median([r[6] for r in runs]),
                "switches_per_job": median([r[7] for r in runs]),
                **({"instructions": median(instructions[name])} if name in instructions else {}),
            })
        self.horizon_cost(results, bins)
        if self.wanted("process"):
            self.spawn_loop(np_)

    def horizon_cost(self, results, bins):
        """What Horizon's records cost, from the `horizon` rows of this run:
        for each concurrency and binary, [horizon] on against off in each
        repetition (the rows alternate within it), then the median of
        those ratios: jobs/s (steady, else wall) and Redis CPU per job."""
        out = []
        for c in (1, 8):
            for label, _ in bins:
                off = results.get(f"warm no-op, c={c}, [horizon] off{label}")
                on = results.get(f"warm no-op, c={c}, [horizon] on{label}")
                if not off or not on:
                    continue
                rate = [(b[0] or b[1]) / (a[0] or a[1]) for a, b in zip(off, on)]
                redis = [b[5] / a[5] for a, b in zip(off, on) if a[5]]
                out.append({"row": f"c={c}{label}", "reps": len(rate),
                            "off_rate": median([a[0] or a[1] for a in off]),
                            "on_rate": median([b[0] or b[1] for b in on]),
                            "rate_ratio": median(rate),
                            "off_redis_us": median([a[5] for a in off]),
                            "on_redis_us": median([b[5] for b in on]),
                            "redis_ratio": median(redis)})
        if out:
            self.results["extra"]["horizon_cost"] = out

    def queue_work(self, count):
        return [PROCS.start(["php", "artisan", "queue:work", "redis", "--sleep=0",
                             "--stop-when-empty"], cwd=self.app, env=self.php_env(),
                            stdout=self.out_file(), stderr=subprocess.STDOUT)
                for _ in range(count)]

    def bridge(self, binary=None, c=2, pipeline=False, decode_command=False):
        """The PHP bridge, 2 processes, configured as the book says
        (`decode_command = false`: it reads the payload itself), unless
        `decode_command`."""
        cfg = self.config(f"bridge-c{c}-{pipeline}-{decode_command}", self.handler_persistent(
            ["php", os.path.join(ROOT, "php", "laravel-worker-bridge.php"), f"--app={self.app}"], 2,
            pipeline=pipeline, decode_command=decode_command))
        return [self.worker(cfg, "--stop-when-empty", "--sleep=0", f"--concurrency={c}",
                            binary=binary)]

    def warm_row(self, c, horizon="off", binary=None, processes=None, pipeline=False, ahead=None,
                 decode_command=True):
        handlers = self.handler_persistent([self.warm], processes or c, pipeline=pipeline,
                                           decode_command=decode_command)
        if ahead is not None:
            handlers = handlers.rstrip("\n") + f"\nreserve_ahead = {ahead}\n\n"
        if horizon != "off":
            handlers += '[horizon]\nenabled = true\nprefix = "laravel_horizon:"\n'
        if horizon == "refused":
            handlers += f'url = "unix://{self.refusing_redis()}?db=0"\n'
        cfg = self.config(f"warm{c}-p{processes or c}-horizon-{horizon}-{pipeline}-{ahead}"
                          f"-{decode_command}",
                          handlers + "\n")
        return [self.worker(cfg, "--stop-when-empty", "--sleep=0", f"--concurrency={c}",
                            binary=binary)]

    def refusing_redis(self):
        """A second redis-server that refuses every write (maxmemory 1,
        noeviction), started once; its socket."""
        sock = os.path.join(self.dir, "refusing.sock")
        if getattr(self, "refusing", None) is None:
            self.refusing = start_redis_server(sock, self.dir, "--maxmemory-policy", "noeviction")
            Redis(sock).cmd("CONFIG", "SET", "maxmemory", "1")
        return sock

    def start_http(self):
        self.http_proc = PROCS.start([sys.executable, self.http_py], stdout=subprocess.PIPE)
        self.http_port = int(self.http_proc.stdout.readline())

    def http_row(self, c, binary=None):
        cfg = self.config("http", f'[[handlers]]\nmatch = "*"\n'
                                  f'url = "http://127.0.0.1:{self.http_port}/"\n\n')
        return [self.worker(cfg, "--stop-when-empty", "--sleep=0", f"--concurrency={c}",
                            binary=binary)]

    def process_row(self, c, binary=None):
        cfg = self.config("true", '[[handlers]]\nmatch = "*"\ncommand = ["/bin/true"]\n\n')
        return [self.worker(cfg, "--stop-when-empty", "--sleep=0", f"--concurrency={c}",
                            binary=binary)]

    def spawn_loop(self, n):
        walls = []
        for _ in range(self.size["reps"]):
            t0 = time.monotonic()
            p = PROCS.start(["sh", "-c", f"seq {n} | xargs -P 8 -n 1 /bin/true"])
            p.wait()
            walls.append(n / (time.monotonic() - t0))
            PROCS.stop(p)
        rate = median(walls)
        log(f"plain spawn loop (xargs -P 8 /bin/true): {rate:.0f} spawns/s")
        self.results["rows"].append({"row": "plain spawn loop /bin/true, 8 parallel",
                                     "jobs": n, "reps": len(walls), "steady": None, "wall": rate,
                                     "peak_kib": None, "load": os.getloadavg()[0]})

    def ceiling(self):
        """redis-benchmark of the worker's pop script on a preloaded list. The
        script is called with ARGV[2] = 1 (one job per call, Laravel's pop);
        a script that takes a count there (a batch pop) also gets a row at 32
        jobs per call. A script that sets large jobs aside (KEYS[4], ARGV[3]
        and ARGV[4], as `RedisQueue::pop` passes them) gets its key and 1 MiB
        for both numbers: the benchmark's jobs are far smaller, so none is."""
        pop = pop_script()
        sha = self.r.cmd("SCRIPT", "LOAD", pop).decode()
        ready, reserved, _, notify = keys("bench-ceiling")
        n = self.size["bench_requests"]
        out = {}
        runs = [("8 clients", 1, 1), ("8 clients, pipelined -P 16", 16, 1)]
        if "ARGV[2]" in pop:
            runs.append(("8 clients, 32 jobs per call", 1, 32))
        for label, pipe, per_call in runs:
            self.flush()
            preload(self.r, "bench-ceiling", self.payloads, n + 1000)
            expiry = str(int(time.time()) + 90)
            res = subprocess.run(
                ["redis-benchmark", "-s", self.sock, "-c", "8", "-n", str(n // per_call),
                 "-P", str(pipe), "--csv", "EVALSHA", sha, *keys_and_args(pop, expiry, per_call)],
                capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError(f"redis-benchmark failed: {res.stdout}{res.stderr}")
            rps = parse_benchmark_csv(res.stdout) * per_call
            left = self.r.cmd("LLEN", ready)
            if left < 1000:
                log(f"warning: the ceiling's list ran dry ({left} left)")
            log(f"ceiling ({label}): {rps:.0f} jobs popped/s")
            out[label] = rps
            self.results["rows"].append({"row": f"ceiling: pop script, {label}", "jobs": n,
                                         "reps": 1, "steady": rps, "wall": rps,
                                         "peak_kib": None, "load": os.getloadavg()[0]})
        self.flush()
        return out

    # -- latency, start-up, backlog, delayed burst

    def pickup(self):
        samples = self.size["pickup"]
        stamps = os.path.join(self.dir, "pickup.log")
        open(stamps, "w").close()
        cfg = self.config("pickup", self.handler_persistent(
            [sys.executable, self.stamp_py, stamps], 1))
        self.flush()
        w = self.worker(cfg)  # default settings: --sleep=3, block_for null
        ready, _, _, notify = keys(QUEUE)
        push = Redis(self.sock)
        # A first job warms the handler process (started on first use).
        self.push_probe(push, ready, notify, stamps)
        lat = []
        peak = 0
        for i in range(samples):
            time.sleep(random.uniform(0, 3.0))
            lat.append(self.push_probe(push, ready, notify, stamps))
            peak = max(peak, peak_rss_kib(w.pid) or 0)
        push.close()
        PROCS.stop(w)
        lat.sort()
        res = {"samples": samples, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
               "max_ms": lat[-1], "mean_ms": statistics.mean(lat), "idle_peak_kib": peak}
        log(f"idle pickup ({samples} samples, gaps uniform in 0-3 s): p50 {res['p50_ms']:.1f} ms, "
            f"p99 {res['p99_ms']:.1f} ms, max {res['max_ms']:.1f} ms")
        self.results["extra"]["pickup"] = res

    def push_probe(self, push, ready, notify, stamps, timeout=30.0):
        jid = rand_id()
        body = string_job("Bench\\Probe", jid)
        t = time.time_ns()
        push.cmd("EVAL", PUSH_LUA, 2, ready, notify, body)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = find_stamp(stamps, jid)
            if got is not None:
                return (got - t) / 1e6
            time.sleep(0.002)
        raise RuntimeError("a pushed probe job was not picked up within 30 s")

    def first_poll(self):
        ready, _, _, notify = keys(QUEUE)
        cfg = self.config("firstpoll", self.handler_persistent([self.warm], 1))
        self.flush()
        runs = []
        for _ in range(5):
            mon = PROCS.start(["redis-cli", "-s", self.sock, "MONITOR"],
                              stdout=subprocess.PIPE, text=True)
            if mon.stdout.readline().strip() != "OK":
                raise RuntimeError("redis-cli MONITOR did not start")
            lines = []
            reader = threading.Thread(target=lambda: lines.extend(iter(mon.stdout.readline, "")),
                                      daemon=True)
            reader.start()
            t0 = time.time()
            w = self.worker(cfg)
            time.sleep(1.0)
            PROCS.stop(w)
            time.sleep(0.1)
            PROCS.stop(mon)
            reader.join(2)
            first_cmd = first_poll = None
            for line in lines:
                m = re.match(r"(\d+\.\d+) \[\d+ (\S+)\] (.*)", line)
                if not m:
                    continue
                ts = float(m.group(1))
                if first_cmd is None:
                    first_cmd = ts
                if f'"{ready}"' in m.group(3) or f'"{notify}"' in m.group(3):
                    first_poll = ts
                    break
            if first_poll is None:
                raise RuntimeError("MONITOR saw no poll of the queue")
            runs.append(((first_cmd - t0) * 1000, (first_poll - t0) * 1000))
        res = {"first_command_ms": median([r[0] for r in runs]),
               "first_poll_ms": median([r[1] for r in runs]), "runs": len(runs),
               "how": "redis-cli MONITOR: first command naming the ready or :notify key, "
                      "server timestamp minus the time just before exec"}
        log(f"exec to first Redis command {res['first_command_ms']:.1f} ms, to first poll "
            f"{res['first_poll_ms']:.1f} ms (median of {len(runs)})")
        self.results["extra"]["first_poll"] = res

    def backlog(self):
        small, large, run = self.size["backlog"]
        cfg = self.config("backlog", self.handler_persistent([self.warm], 32))
        out = {}
        for total in (small, large):
            self.flush()
            rates = []
            for rep in range(self.size["reps"]):
                # Each run takes `run` jobs off the list; the small backlog is
                # loaded again every time, the large one once.
                if rep == 0 or total == small:
                    self.flush()
                    log(f"loading a backlog of {total} jobs")
                    preload(self.r, QUEUE, self.payloads, total)
                ready = keys(QUEUE)[0]
                start_len = self.r.cmd("LLEN", ready)
                sampler = Redis(self.sock)
                samples = []
                t0 = time.monotonic()
                w = self.worker(cfg, "--sleep=0", "--concurrency=32", f"--max-jobs={run}")
                while w.poll() is None:
                    samples.append((time.monotonic(), sampler.cmd("LLEN", ready)))
                    time.sleep(0.005)
                wall = time.monotonic() - t0
                sampler.close()
                PROCS.stop(w)
                done, other = self.outcomes()
                if done < run or other:
                    log(f"WARNING: backlog {total}: {done} of {run} jobs done, {other} not")
                # jobs/s from 10 % to 90 % of the run, measured on the list length
                steady = steady_window(samples, start_len, run)
                rates.append((steady, run / wall, os.getloadavg()[0]))
                log(f"backlog {total}: {run} jobs at c=32, steady {fmt(steady)} jobs/s, "
                    f"wall {run / wall:.0f} jobs/s")
            out[total] = {"steady": median([r[0] for r in rates]),
                          "wall": median([r[1] for r in rates]),
                          "load": median([r[2] for r in rates]), "reps": len(rates)}
        self.flush()
        self.results["extra"]["backlog"] = {"jobs_run": run, "concurrency": 32,
                                            **{str(k): v for k, v in out.items()}}

    def delayed_burst(self):
        """N delayed jobs on `default` come due at one instant (a RENAME of a
        staging zset whose scores are all past onto `default:delayed`), while
        probe jobs are pushed on `high` every 20 ms to a worker run with
        `--queue=high,default --sleep=0 --concurrency=8`. The probes' pickup
        latency before and after that instant shows how long ready jobs stall."""
        n, after = self.size["delayed"], self.size["probe_after"]
        stamps = os.path.join(self.dir, "burst.log")
        open(stamps, "w").close()
        handlers = (self.handler_persistent([sys.executable, self.stamp_py, stamps], 2,
                                            match="Bench\\Probe")
                    + self.handler_persistent([self.warm], 8))
        cfg = self.config("burst", handlers)
        self.flush()
        _, _, delayed, _ = keys(QUEUE)
        staging = "bench:staging"
        past = str(int(time.time()) - 60)
        log(f"loading {n} delayed jobs")
        cmds = []
        for start in range(0, n, 1000):
            args = ["ZADD", staging]
            for _ in range(min(1000, n - start)):
                args += [past, self.payloads.make()]
            cmds.append(args)
        self.r.pipeline(cmds, chunk=20)
        w = self.worker(cfg, "--queue=high,default", "--sleep=0", "--concurrency=8")
        hready, _, _, hnotify = keys("high")
        push = Redis(self.sock)
        # One probe first, so that the probe handler has started.
        self.push_probe(push, hready, hnotify, stamps)
        probes = []
        due_ns = None
        start = time.monotonic()
        while time.monotonic() < start + 2 + after:
            if due_ns is None and time.monotonic() >= start + 2:
                due_ns = time.time_ns()
                self.r.cmd("RENAME", staging, delayed)
            jid = rand_id()
            t = time.time_ns()
            push.cmd("EVAL", PUSH_LUA, 2, hready, hnotify, string_job("Bench\\Probe", jid))
            probes.append((jid, t))
            time.sleep(0.02)
        # let the last probes be picked up
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(read_stamps(stamps)) < len(probes) + 1:
            time.sleep(0.05)
        remaining = self.r.cmd("LLEN", keys(QUEUE)[0])
        still_delayed = self.r.cmd("ZCARD", delayed)
        push.close()
        PROCS.stop(w)
        got = read_stamps(stamps)
        before, around = [], []
        for jid, t in probes:
            if jid not in got:
                continue
            ms = (got[jid] - t) / 1e6
            (before if t < due_ns else around).append((t, ms))
        lost = sum(1 for jid, _ in probes if jid not in got)
        b = sorted(ms for _, ms in before)
        a = sorted(ms for _, ms in around)
        worst = max(around, key=lambda x: x[1], default=None)
        res = {"delayed": n, "probes": len(probes), "not_picked_up": lost,
               "worst_pushed_at_s": ((worst[0] - due_ns) / 1e9) if worst else None,
               "before_p50_ms": pct(b, 50) if b else None,
               "before_max_ms": b[-1] if b else None,
               "after_p50_ms": pct(a, 50) if a else None,
               "after_p99_ms": pct(a, 99) if a else None,
               "after_max_ms": a[-1] if a else None,
               "default_left_when_stopped": remaining, "delayed_left": still_delayed}
        log(f"delayed burst ({n} due at once, probes on 'high' every 20 ms): before p50 "
            f"{fmt(res['before_p50_ms'], '.1f')} ms, max {fmt(res['before_max_ms'], '.1f')} ms; "
            f"after: p50 {fmt(res['after_p50_ms'], '.1f')} ms, p99 {fmt(res['after_p99_ms'], '.1f')} "
            f"ms, max {fmt(res['after_max_ms'], '.1f')} ms (pushed "
            f"{fmt(res['worst_pushed_at_s'], '+.2f')} s from due); {lost} probes not picked up; "
            f"when stopped {remaining} ready and {still_delayed} delayed jobs were left on 'default'")
        self.results["extra"]["delayed_burst"] = res
        self.flush()

    # -- rows of the other scripts, run only when named

    def balance_rows(self):
        """bench/balance.py's rows (`off`, `simple`, `auto`, `horizon-like`)
        on this run's Redis, with this run's binary."""
        slots, seconds = self.size["balance"]
        self.flush()
        rows = []
        for row in balance.rows(self, slots, seconds):
            log(f"balance: {balance.line(row)}")
            rows.append(row)
        self.results["extra"]["balance"] = {"slots": slots, "seconds": seconds, "rows": rows}
        self.flush()

    def pool_memory_rows(self):
        """bench/pool_memory.py's setups (needs the PHP app)."""
        if not self.app:
            log("note: skipping pool_memory: the PHP bridge cannot run here")
            return
        processes, jobs, idle_timeout = self.size["pool_memory"]
        rows = pool_memory.PoolMemory(self, processes, jobs, idle_timeout).rows()
        self.results["extra"]["pool_memory"] = {"processes": processes, "jobs": jobs,
                                                "idle_timeout": idle_timeout, "rows": rows}
        self.flush()

    def database_rows(self):
        """bench/database.py's rows: the database queue on SQLite, PostgreSQL
        and MariaDB against queue:work database, and the MariaDB deadlock row."""
        jobs, deadlock_jobs = self.size["database"]
        self.flush()
        self.results["extra"]["database"] = database.DatabaseBench(
            self, jobs, self.size["reps"], deadlock_jobs,
            self.args.databases.split(","), self.bins(),
            queue_work=not self.args.no_queue_work).rows()
        self.flush()

    def beanstalkd_rows(self):
        """bench/beanstalkd.py's rows: the beanstalkd queue against
        queue:work beanstalkd."""
        self.flush()
        self.results["extra"]["beanstalkd"] = beanstalkd.BeanstalkdBench(
            self, self.size["beanstalkd"], self.size["reps"], self.bins()).rows()
        self.flush()

    def finish_rows(self):
        """bench/finish.py's rows: chained jobs finished by the PHP bridge
        against jobs that need no finish."""
        self.flush()
        self.results["extra"]["finish"] = finish.FinishBench(
            self, self.size["finish"], self.size["reps"], self.bins()).rows()
        self.flush()

    def cluster_rows(self):
        """bench/cluster.py's setups: one redis-server and a 3-master
        cluster of its own (TCP on 127.0.0.1), Redis's CPU per job on each."""
        self.results["extra"]["cluster"] = cluster.ClusterBench(
            self, self.size["jobs"], self.size["reps"]).rows()

    # -- report

    def machine(self):
        def sh(cmd):
            try:
                return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
            except OSError:
                return "?"
        return {
            "nproc": sh("nproc"),
            "cpu": sh("lscpu | sed -n 's/^Model name: *//p' | head -1"),
            "memory": sh("free -h | awk '/^Mem:/ {print $2}'"),
            "redis": sh("redis-server --version | sed 's/.* v=\\([^ ]*\\).*/\\1/'"),
            "php": sh("php -r 'echo PHP_VERSION;' 2>/dev/null"),
            "commit": sh(f"git -C {ROOT} rev-parse --short HEAD"),
            "src_commit": sh(f"git -C {ROOT} log -1 --format=%h -- src Cargo.toml Cargo.lock"),
            "dirty": bool(sh(f"git -C {ROOT} status --porcelain -- src Cargo.toml Cargo.lock")),
        }

    def report(self):
        rows = self.results["rows"]
        one = next((r for r in rows if r["row"] == "queue:work x1"), None)
        base = one["steady"] if one else None
        ceil = next((r["steady"] for r in rows
                     if r["row"] == "ceiling: pop script, 8 clients, pipelined -P 16"), None)
        m = self.results["machine"]
        print()
        print(f"laravel-worker at {m['commit']} (src last changed in {m['src_commit']})"
              f"{' + uncommitted changes in src' if m['dirty'] else ''}; "
              f"{m['nproc']} CPUs ({m['cpu']}), {m['memory']} RAM, redis {m['redis']}, "
              f"PHP {m['php'] or 'absent'}; size {self.args.size}")
        print(f"load average at start {self.results['load_start']}, at end {self.results['load_end']}")
        print()
        if rows:
            print("| row | jobs | jobs/s (steady) | jobs/s (wall) | × queue:work x1 | × ceiling "
                  "| peak RSS | worker CPU/job | Redis CPU/job | machine CPU/job "
                  "| switches/job | load |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in rows:
                rate = r["steady"] or r["wall"]
                print(f"| {r['row']} | {r['jobs']:,} | {fmt(r['steady'])} | {fmt(r['wall'])} | "
                      f"{ratio(rate, base)} | {ratio(rate, ceil)} | "
                      f"{mib(r['peak_kib'])} | {usec(r.get('cpu_us_per_job'))} | "
                      f"{usec(r.get('redis_us_per_job'))} | {usec(r.get('machine_us_per_job'))} | "
                      f"{switches(r.get('switches_per_job'))} | {r['load']:.2f} |")
        counted = [r for r in rows if "instructions" in r]
        if counted:
            print()
            print(f"Instructions (callgrind, the whole worker process, rows at "
                  f"--concurrency={self.args.callgrind}, median of the repetitions):")
            print()
            for r in counted:
                print(f"- {r['row']}: {r['instructions'] / 1e6:.1f} M "
                      f"({r['instructions'] / r['jobs']:,.0f} per job)")
        x = self.results["extra"]
        print()
        if "pickup" in x:
            p = x["pickup"]
            print(f"- idle pickup, default settings (--sleep=3, block_for null), push → handler "
                  f"start, {p['samples']} samples, gaps uniform in 0–3 s: p50 {p['p50_ms']:.1f} ms, "
                  f"p99 {p['p99_ms']:.1f} ms, max {p['max_ms']:.1f} ms "
                  f"(idle worker peak RSS {p['idle_peak_kib'] / 1024:.1f} MiB)")
        if "first_poll" in x:
            f = x["first_poll"]
            print(f"- exec → first poll (redis-cli MONITOR, first command naming the queue's ready "
                  f"or notify key): {f['first_poll_ms']:.1f} ms (first Redis command "
                  f"{f['first_command_ms']:.1f} ms), median of {f['runs']}")
        if "backlog" in x:
            b = x["backlog"]
            sizes = [k for k in b if k not in ("jobs_run", "concurrency")]
            parts = [f"{int(k):,} queued: {fmt(b[k]['steady'])} jobs/s (load {b[k]['load']:.2f})"
                     for k in sizes]
            print(f"- backlog, warm no-op c=32, {b['jobs_run']:,} jobs run (steady): " + "; ".join(parts))
        if "delayed_burst" in x:
            d = x["delayed_burst"]
            print(f"- {d['delayed']:,} delayed jobs due at once on `default`, probes pushed on "
                  f"`high` every 20 ms (--queue=high,default --sleep=0, c=8): probe pickup "
                  f"before p50 {fmt(d['before_p50_ms'], '.1f')} ms, max "
                  f"{fmt(d['before_max_ms'], '.1f')} ms; after p50 "
                  f"{fmt(d['after_p50_ms'], '.1f')} ms, p99 {fmt(d['after_p99_ms'], '.1f')} ms, "
                  f"max (stall) {fmt(d['after_max_ms'], '.1f')} ms, for a probe pushed "
                  f"{fmt(d['worst_pushed_at_s'], '+.2f')} s from due; {d['not_picked_up']} "
                  f"probes not picked up; {d['delayed_left']:,} still delayed and "
                  f"{d['default_left_when_stopped']:,} ready on `default` when stopped")
        if "horizon_cost" in x:
            print("- Horizon's records, warm no-op, [horizon] on against off (each repetition's "
                  "ratio, their median; goal: jobs/s ≥ 0.75×, Redis CPU/job ≤ 1.5×):")
            for h in x["horizon_cost"]:
                print(f"  - {h['row']}: {fmt(h['off_rate'])} → {fmt(h['on_rate'])} jobs/s "
                      f"({h['rate_ratio']:.2f}×), Redis CPU {h['off_redis_us']:.0f} → "
                      f"{h['on_redis_us']:.0f} µs/job ({fmt(h['redis_ratio'], '.2f')}×), "
                      f"{h['reps']} repetitions")
        if "balance" in x:
            b = x["balance"]
            print("Balanced queues (bench/balance.py's rows):\n")
            for text in balance.header(b["slots"], b["seconds"]):
                print(text)
            for row in b["rows"]:
                print(balance.line(row))
        if "pool_memory" in x:
            m = x["pool_memory"]
            for text in pool_memory.table(m["rows"], m["jobs"]):
                print(text)
        parts = (
            ("database", database.table,
             "The database queue (bench/database.py's rows; jobs/s = jobs / exec to exit "
             "of the one worker process; × queue:work: against queue:work's median of the "
             "same run; per repetition: each repetition's ratio, their median):"),
            ("beanstalkd", beanstalkd.table,
             "The beanstalkd queue (bench/beanstalkd.py's rows; jobs/s = jobs / exec to exit "
             "of the one worker process; × queue:work: against queue:work beanstalkd's median "
             "of the same run; per repetition: each repetition's ratio, their median):"),
            ("finish", finish.table,
             "The PHP bridge's finish mode (bench/finish.py's rows; jobs/s = jobs / exec to "
             "exit of the one worker process; ms per finish: (chained time - unchained time) "
             "/ chains, each repetition's, their median):"),
            ("cluster", cluster.table,
             "Redis's CPU per job, one server and a 3-master cluster (bench/cluster.py; "
             "Redis CPU/job: the server's, or each master's, utime + stime over exec to exit "
             "of the worker, per job; × one server: against the one server's):"),
        )
        for key, table, heading in parts:
            if key in x:
                print(f"\n{heading}\n")
                for text in table(x[key]):
                    print(text)
        if any(k in x for k in ("balance", "pool_memory", "database", "beanstalkd", "finish",
                                "cluster")):
            print()
        print(f"- took {self.results['seconds']:.0f} s")

    def run(self):
        t0 = time.monotonic()
        if not self.args.binary and not self.args.no_build:
            self.build()
        self.results["machine"] = self.machine()
        self.results["load_start"] = load()
        self.start_redis()
        self.setup_app()
        self.write_files()
        if self.wanted("http"):
            self.start_http()
        if self.wanted("ceiling"):
            self.ceiling()
        self.throughput_rows()
        if self.wanted("first_poll"):
            self.first_poll()
        if self.wanted("backlog"):
            self.backlog()
        if self.wanted("delayed"):
            self.delayed_burst()
        if self.wanted("pickup"):
            self.pickup()
        if self.named("balance"):
            self.balance_rows()
        if self.named("pool_memory"):
            self.pool_memory_rows()
        if self.named("database"):
            self.database_rows()
        if self.named("beanstalkd"):
            self.beanstalkd_rows()
        if self.named("finish"):
            self.finish_rows()
        if self.named("cluster"):
            self.cluster_rows()
        self.results["load_end"] = load()
        self.results["seconds"] = time.monotonic() - t0
        self.report()
        if self.args.json:
            with open(self.args.json, "w") as f:
                json.dump(self.results, f, indent=2)



# ---------------------------------------------------------------- small helpers

def pop_script():
    with open(os.path.join(ROOT, "src", "queue", "redis_queue", "scripts.rs")) as f:
        text = f.read()
    m = re.search(r'pub const POP: &str = r#"(.*?)"#;', text, re.S)
    if not m:
        raise RuntimeError("cannot find the POP script in src/queue/redis_queue/scripts.rs")
    return m.group(1)


def keys_and_args(pop, expiry, per_call):
    """The EVALSHA arguments of the pop script on the ceiling's queue: the
    key count, the keys, then expiry and jobs per call (and, for a script
    with KEYS[4], the set-aside threshold and piece size in bytes)."""
    ready, reserved, _, notify = keys("bench-ceiling")
    if "KEYS[4]" not in pop:
        return ["3", ready, reserved, notify, expiry, str(per_call)]
    mib = str(1024 * 1024)
    return ["4", ready, reserved, notify, ready + ":popped:bench", expiry, str(per_call), mib, mib]


def parse_benchmark_csv(out):
    for line in reversed(out.strip().splitlines()):
        cells = [c.strip('"') for c in line.split(",")]
        if len(cells) > 1:
            try:
                return float(cells[1])
            except ValueError:
                continue
    raise RuntimeError(f"cannot read redis-benchmark's output: {out!r}")


def steady_rate(samples, n):
    """jobs/s while the ready list falls from 90 % to 10 % of n."""
    return steady_window(samples, n, n)


def steady_window(samples, start_len, run):
    hi, lo = start_len - 0.1 * run, start_len - 0.9 * run
    a = next((s for s in samples if s[1] <= hi), None)
    b = next((s for s in samples if s[1] <= lo), None)
    if not a or not b or b[0] - a[0] < 0.05:
        return None
    return (a[1] - b[1]) / (b[0] - a[0])


def find_stamp(path, jid):
    with open(path) as f:
        for line in f:
            if line.startswith(jid + " "):
                return int(line.split()[1])
    return None


def read_stamps(path):
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                out.setdefault(parts[0], int(parts[1]))
    return out


def pct(sorted_values, p):
    if not sorted_values:
        return None
    k = (len(sorted_values) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def usec(us):
    return "" if us is None else f"{us:.0f} µs"


def switches(n):
    return "" if n is None else f"{n:.1f}"


def mib(kib):
    return "" if not kib else f"{kib / 1024:.1f} MiB"


def fmt(v, spec=",.0f"):
    return "n/a" if v is None else format(v, spec)


def ratio(v, base):
    return "" if not v or not base else f"{v / base:.2f}×"


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="quick",
                    help="quick: a smoke run of a few minutes; full: the README table")
    ap.add_argument("--reps", type=int, help="repetitions of each throughput row (median)")
    ap.add_argument("--only", help="comma list of parts: queue:work, bridge, warm, horizon "
                                   "(warm no-op with [horizon] off and on), http, process "
                                   "(/bin/true and the spawn loop), ceiling, first_poll, backlog, "
                                   "delayed, pickup; and, run only when named: ahead (warm "
                                   "no-op at c=1/processes=1, c=32/8 and c=32/32; c=32/8 with "
                                   "pipeline = true and reserve_ahead = 24, and without "
                                   "decode_command; the bridge at c=4 "
                                   "with and without pipeline), balance "
                                   "(bench/balance.py's rows), pool_memory "
                                   "(bench/pool_memory.py's setups), database (bench/database.py: "
                                   "the database queue against queue:work database on SQLite, "
                                   "PostgreSQL and MariaDB, and the MariaDB deadlock row), "
                                   "beanstalkd (bench/beanstalkd.py: the beanstalkd queue "
                                   "against queue:work beanstalkd), finish (bench/finish.py: "
                                   "chained jobs finished by the PHP bridge against jobs that "
                                   "need no finish), cluster (bench/cluster.py: Redis's CPU per job on one "
                                   "server and per master of a 3-master Redis Cluster)")
    ap.add_argument("--databases", default="sqlite,postgres,mariadb",
                    help="with --only database: which of sqlite, postgres, mariadb")
    ap.add_argument("--callgrind", type=int, metavar="C",
                    help="run the laravel-worker rows at --concurrency=C under valgrind's "
                         "callgrind and give each one's instruction count (the whole "
                         "process; steady on a loaded machine, unlike the time figures; "
                         "the row's own times are then valgrind's)")
    ap.add_argument("--commandstats", action="store_true",
                    help="log Redis's INFO commandstats of each row, per job (where Redis's "
                         "CPU goes)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--no-build", action="store_true", help="use target/release as it is")
    ap.add_argument("--binary", help="the laravel-worker binary to measure (default: "
                                     "target/release, built first unless --no-build)")
    ap.add_argument("--baseline", action="append",
                    help="another laravel-worker binary (repeat the flag for more): every "
                         "laravel-worker row runs with each one too, in the same repetitions "
                         "(before/after)")
    ap.add_argument("--no-queue-work", action="store_true",
                    help="with --only database: leave out the queue:work rows and the deadlock "
                         "row (a before/after of laravel-worker builds with --baseline, without "
                         "PHP's slow rows)")
    args = ap.parse_args()
    bench = Bench(args)
    return run_guarded(bench.run, bench.cleanup)

if __name__ == "__main__":
    sys.exit(main())
