#!/usr/bin/env python3
"""The beanstalkd queue (issue 46) against `php artisan queue:work beanstalkd`.

    bench/compare.py --only beanstalkd [--size quick|full] [--reps N]

Run by bench/compare.py when `--only` names `beanstalkd` (never in the
default run), on that run's Redis (the app's cache store, which
`queue:work` reads for its restart signal, and the worker's), app and
binary. A private `beanstalkd` (Debian's package) listens on a free
127.0.0.1 port, without a binlog (as a server started with its defaults);
it is killed at the end, and the part is skipped with a printed reason when
the server or Debian's pheanstalk (php-pda-pheanstalk, for `queue:work`)
is missing.

Per repetition, in turn: N no-op jobs (the run's real Laravel 8 `NoopJob`
payload without `id` and `attempts`, as `BeanstalkdQueue` writes it, a
fresh uuid each) put into the tube as `BeanstalkdQueue::pushRaw` puts them
(priority 1024, no delay, ttr = retry_after = 90), then drained by (a) one
`php artisan queue:work beanstalkd --sleep=0 --stop-when-empty`, (b) one
`laravel-worker work --stop-when-empty --sleep=0` with the warm no-op
persistent handler at concurrency 1, 8 and 32 (as many processes as slots).

jobs/s = N / (exec to exit) of the one worker process, medians over the
repetitions, the ratio to queue:work's median of the same run and each
repetition's ratio; the worker process's own CPU per job (utime + stime,
handlers not counted) and the server's.
"""

import os
import shutil
import socket
import statistics
import subprocess
import time
import uuid

from benchlib import PROCS, QUEUE, log, wait_all
from database import database_payload, read, tree_cpu

# BeanstalkdQueue::pushRaw's priority and the skeleton's retry_after (the ttr).
PRIORITY = 1024
TTR = 90


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A private beanstalkd on 127.0.0.1:`port`, no binlog."""

    @staticmethod
    def missing():
        if not (shutil.which("beanstalkd") or os.path.isfile("/usr/bin/beanstalkd")):
            return "beanstalkd is not installed (Debian: beanstalkd)"
        return None

    def __init__(self, directory):
        self.port = free_port()
        self.log = os.path.join(directory, "beanstalkd.log")
        binary = shutil.which("beanstalkd") or "/usr/bin/beanstalkd"
        self.proc = PROCS.start([binary, "-l", "127.0.0.1", "-p", str(self.port)],
                                stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.conn = socket.create_connection(("127.0.0.1", self.port), timeout=30)
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"beanstalkd did not start:\n{read(self.log)[-2000:]}")
                time.sleep(0.02)
        self.buf = b""

    # -- the protocol: a command line, then a reply line (and a body for some)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.conn.recv(65536)
            if not chunk:
                raise RuntimeError("beanstalkd closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode()

    def _body(self, n):
        while len(self.buf) < n + 2:
            chunk = self.conn.recv(65536)
            if not chunk:
                raise RuntimeError("beanstalkd closed the connection")
            self.buf += chunk
        body, self.buf = self.buf[:n], self.buf[n + 2:]
        return body

    def put_all(self, bodies, tube=QUEUE, batch=500):
        """Puts `bodies` into `tube`, `batch` commands per write."""
        self.conn.sendall(f"use {tube}\r\n".encode())
        if not self._line().startswith("USING"):
            raise RuntimeError("beanstalkd refused `use`")
        for i in range(0, len(bodies), batch):
            chunk = bodies[i:i + batch]
            out = bytearray()
            for body in chunk:
                data = body.encode()
                out += f"put {PRIORITY} 0 {TTR} {len(data)}\r\n".encode() + data + b"\r\n"
            self.conn.sendall(bytes(out))
            for _ in chunk:
                reply = self._line()
                if not reply.startswith("INSERTED"):
                    raise RuntimeError(f"beanstalkd refused a put: {reply}")

    def tube_stats(self, tube=QUEUE):
        """`stats-tube` as a dict of strings ({} when the tube is gone)."""
        self.conn.sendall(f"stats-tube {tube}\r\n".encode())
        reply = self._line()
        if reply == "NOT_FOUND":
            return {}
        if not reply.startswith("OK "):
            raise RuntimeError(f"stats-tube: {reply}")
        body = self._body(int(reply.split()[1])).decode()
        return dict(line.split(": ", 1) for line in body.splitlines() if ": " in line)

    def left(self):
        """Jobs still in the tube: ready, reserved, delayed or buried."""
        s = self.tube_stats()
        return sum(int(s.get(k, 0)) for k in ("current-jobs-ready", "current-jobs-reserved",
                                              "current-jobs-delayed", "current-jobs-buried"))

    def cpu(self):
        return tree_cpu(self.proc.pid)

    def stop(self):
        try:
            self.conn.close()
        except OSError:
            pass
        PROCS.stop(self.proc)


def serves_beanstalkd(binary):
    """Whether `binary` has the beanstalkd driver (its text names the
    skeleton's `BEANSTALKD_QUEUE_HOST`); None is this run's build."""
    if binary is None:
        return True
    try:
        with open(binary, "rb") as f:
            return b"BEANSTALKD_QUEUE_HOST" in f.read()
    except OSError:
        return False


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


class BeanstalkdBench:
    """The rows on `lab` (compare.py's run: Redis and the app started;
    `lab.app` None when PHP cannot run): `jobs` per row, `reps`
    repetitions, every laravel-worker row with each of `bins`
    ((label, binary) pairs: this build, then any --baseline)."""

    def __init__(self, lab, jobs, reps, bins):
        self.lab = lab
        self.jobs = jobs
        self.reps = reps
        self.bins = bins
        self.template = database_payload(lab.payloads.template)
        self.uuid = lab.payloads.uuid
        self.results = {"rows": [], "skipped": []}

    def php_missing(self):
        if not self.lab.app:
            return "PHP cannot run the app here"
        probe = subprocess.run(
            ["php", "-r", "exit(stream_resolve_include_path('Pheanstalk/autoload.php') "
             "|| stream_resolve_include_path('Pda/Pheanstalk/autoload.php') ? 0 : 3);"])
        if probe.returncode != 0:
            return "Debian's pheanstalk is not installed (php-pda-pheanstalk)"
        return None

    def bodies(self, n):
        return [self.template.replace(self.uuid, str(uuid.uuid4()), 1) for _ in range(n)]

    def queue_work(self, server):
        env = self.lab.php_env()
        env.update({"BEANSTALKD_QUEUE_HOST": "127.0.0.1",
                    "BEANSTALKD_QUEUE_PORT": str(server.port),
                    "BEANSTALKD_QUEUE": QUEUE})
        return PROCS.start(["php", "artisan", "queue:work", "beanstalkd", "--sleep=0",
                            "--stop-when-empty"], cwd=self.lab.app, env=env,
                           stdout=self.lab.out_file(), stderr=subprocess.STDOUT)

    def config(self, server, c):
        path = os.path.join(self.lab.dir, f"beanstalkd-warm{c}.toml")
        handler = self.lab.handler_persistent([self.lab.warm], c)
        with open(path, "w") as f:
            f.write(f"""[app]
laravel = "8.83"

[redis]
url = "unix://{self.lab.sock}?db=0"

[queue]
connection = "beanstalkd"
host = "127.0.0.1"
port = {server.port}
queue = "{QUEUE}"
retry_after = {TTR}

[cache]
store = "redis"
database = 1
prefix = "laravel_cache"
colon = true

[failed]
driver = "null"

{handler}""")
        return path

    def worker(self, server, c, binary):
        return self.lab.worker(self.config(server, c), "--stop-when-empty", "--sleep=0",
                               f"--concurrency={c}", binary=binary)

    def drain(self, server, start):
        """Puts the jobs, runs `start()`'s process to its exit; returns
        (jobs/s, worker CPU s, server CPU s, jobs left, done, other)."""
        server.put_all(self.bodies(self.jobs))
        before = server.cpu()
        t0 = time.monotonic()
        proc = start()
        _, cpu = wait_all([proc], timeout=max(600, self.jobs / 20))
        wall = time.monotonic() - t0
        used = server.cpu() - before
        if proc.returncode != 0:
            log(f"warning: {proc.args[:4]} exited with {proc.returncode}")
        PROCS.stop(proc)
        done, other = self.lab.outcomes()
        return self.jobs / wall, cpu, used, server.left(), done, other

    def rows(self):
        why = Server.missing()
        if why:
            log(f"note: skipping beanstalkd: {why}")
            self.results["skipped"].append(why)
            return self.results
        server = Server(self.lab.dir)
        try:
            self.throughput(server)
        finally:
            server.stop()
        return self.results

    def throughput(self, server):
        kinds = []
        why = self.php_missing()
        if why:
            log(f"note: beanstalkd: no queue:work row: {why}")
            self.results["skipped"].append(f"queue:work beanstalkd: {why}")
        else:
            kinds.append(("queue:work beanstalkd", lambda: self.queue_work(server)))
        for c in (1, 8, 32):
            # A --baseline build from before the driver (issue 46) would not
            # serve the tube: it is left out unless it knows beanstalkd.
            for label, binary in [b for b in self.bins if serves_beanstalkd(b[1])]:
                kinds.append((f"warm no-op, c={c}{label}",
                              lambda c=c, binary=binary: self.worker(server, c, binary)))
        runs = {name: [] for name, _ in kinds}
        for rep in range(self.reps):
            for name, start in kinds:
                rate, cpu, server_cpu, left, done, other = self.drain(server, start)
                if left or done != self.jobs or other:
                    log(f"WARNING: beanstalkd {name}: {done} of {self.jobs} jobs done, "
                        f"{other} failed or released, {left} jobs left in the tube")
                per_job = cpu * 1e6 / self.jobs
                server_us = server_cpu * 1e6 / self.jobs
                runs[name].append((rate, per_job, server_us, os.getloadavg()[0]))
                log(f"[rep {rep + 1}] beanstalkd {name}: {self.jobs} jobs, {rate:.0f} jobs/s, "
                    f"worker CPU {per_job:.0f} µs/job, beanstalkd CPU {server_us:.0f} µs/job, "
                    f"load {os.getloadavg()[0]:.2f}")
        php = [r[0] for r in runs.get("queue:work beanstalkd", [])]
        base = median(php)
        for name, _ in kinds:
            rs = runs[name]
            per_rep = [r[0] / p for r, p in zip(rs, php)] if php else []
            self.results["rows"].append({
                "row": name, "jobs": self.jobs, "reps": len(rs),
                "jobs_per_s": median([r[0] for r in rs]),
                "ratio": median([r[0] for r in rs]) / base if base else None,
                "ratios": per_rep, "ratio_per_rep": median(per_rep),
                "cpu_us_per_job": median([r[1] for r in rs]),
                "server_cpu_us_per_job": median([r[2] for r in rs]),
                "load": median([r[3] for r in rs]),
            })


def table(results):
    """The results as Markdown lines."""
    out = ["| row | jobs | reps | jobs/s (median) | × queue:work | × queue:work per repetition "
           "(median) | worker CPU/job | beanstalkd CPU/job | load |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["rows"]:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}×"
        per = ("" if r["ratio_per_rep"] is None else
               f"{r['ratio_per_rep']:.2f}× (" + ", ".join(f"{x:.1f}" for x in r["ratios"]) + ")")
        out.append(f"| {r['row']} | {r['jobs']:,} | {r['reps']} | {r['jobs_per_s']:,.0f} | "
                   f"{ratio} | {per} | {r['cpu_us_per_job']:.0f} µs | "
                   f"{r['server_cpu_us_per_job']:.0f} µs | {r['load']:.2f} |")
    for s in results["skipped"]:
        out.append(f"- skipped: {s}")
    return out
