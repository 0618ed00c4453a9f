#!/usr/bin/env python3
"""How long the worker takes to stop while its database hangs.

A hung server is one stopped with SIGSTOP: its connections stay open and
nothing answers (a frozen VM, a stalled disk, a network partition that drops
packets). This script starts its own PostgreSQL and MariaDB on private unix
sockets, makes Laravel's `jobs` table (failed jobs go to a SQLite file, so
only the queue hangs), and measures, each case RUNS times (median):

  a-start  `work --stop-when-empty --sleep=0` started while the server hangs:
           seconds from start to exit, exit status, stop reason
  a-poll   the same worker draining a backlog of no-op jobs when the server
           is stopped: seconds from SIGSTOP to exit
  b        `work --sleep=0` idle; SIGSTOP, SIGTERM 1 s later: seconds from
           SIGTERM to exit, without and with `[worker] drain_timeout = 10`
  c        as b with a job in flight (its handler sleeps 2 s)

Each run ends with SIGCONT; a worker still running after CAP seconds is
reported as "no exit" and killed. Everything started is stopped at the end.

Usage: python3 bench/hung-database.py BINARY [postgres|mariadb ...]
Environment: RUNS (3), CAP (240 s), ONLY (cases to run, e.g. "b10,cNone":
the case name and its drain_timeout), KEEP=1 keeps the server's directory
and the worker logs (worker-CASE-DRAIN.log, the last run's).
PostgreSQL runs as the `postgres` user when this runs as root.
A run that never exits costs CAP seconds, so one engine takes up to about
40 minutes; the cases can run at once (ONLY=... in several shells), each
with servers of its own.
"""

import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = int(os.environ.get("RUNS", "3"))
CAP = float(os.environ.get("CAP", "240"))
PG_BIN = "/usr/lib/postgresql/15/bin"

PG_JOBS = (
    'create table "jobs" ("id" bigserial primary key not null, '
    '"queue" varchar(255) not null, "payload" text not null, '
    '"attempts" smallint not null, "reserved_at" integer null, '
    '"available_at" integer not null, "created_at" integer not null); '
    'create index "jobs_queue_index" on "jobs" ("queue");'
)
MARIA_JOBS = (
    "create table `jobs` (`id` bigint unsigned not null auto_increment primary key, "
    "`queue` varchar(255) not null, `payload` longtext not null, "
    "`attempts` tinyint unsigned not null, `reserved_at` int unsigned null, "
    "`available_at` int unsigned not null, `created_at` int unsigned not null) "
    "default character set utf8mb4 collate 'utf8mb4_unicode_ci'; "
    "alter table `jobs` add index `jobs_queue_index`(`queue`);"
)


def wait_for(check, what, limit=30.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.1)
    sys.exit(f"{what} did not happen within {limit} s")


class Postgres:
    """A cluster in `dir`, listening only on a unix socket there; run as
    the `postgres` user when this script runs as root."""

    name = "postgres"

    def __init__(self, dir):
        self.dir = dir
        as_user = []
        if os.geteuid() == 0:
            shutil.chown(dir, "postgres", "postgres")
            as_user = ["runuser", "-u", "postgres", "--"]
        data = os.path.join(dir, "data")
        log = open(os.path.join(dir, "postgres.log"), "w")
        subprocess.run(as_user + [f"{PG_BIN}/initdb", "-D", data, "-U", "postgres",
                                  "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                       check=True, stdout=log, stderr=log)
        self.server = subprocess.Popen(
            as_user + [f"{PG_BIN}/postgres", "-D", data, "-k", dir, "-c", "listen_addresses=",
                       "-c", "fsync=off"],
            stdout=log, stderr=log, start_new_session=True)
        self.url = f"postgres:///postgres?host={dir}&user=postgres"
        wait_for(lambda: self.sql("select 1", check=False) == 0, "postgres accepting")
        self.sql(PG_JOBS)

    def sql(self, statement, check=True):
        done = subprocess.run(["psql", "-h", self.dir, "-U", "postgres", "-d", "postgres",
                               "-q", "-c", statement],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if check and done.returncode:
            sys.exit(f"psql failed: {statement}")
        return done.returncode


class MariaDb:
    """A server in `dir` on a unix socket only, its temporary files there too."""

    name = "mariadb"

    def __init__(self, dir):
        self.dir = dir
        data, tmp = os.path.join(dir, "data"), os.path.join(dir, "tmp")
        os.mkdir(tmp)
        self.socket = os.path.join(dir, "mariadb.sock")
        user = ["--user=root"] if os.geteuid() == 0 else []
        log = open(os.path.join(dir, "install.log"), "w")
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}",
                        "--auth-root-authentication-method=normal", "--skip-test-db",
                        "--skip-name-resolve", f"--tmpdir={tmp}"] + user,
                       check=True, stdout=log, stderr=log, cwd=dir)
        self.server = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={self.socket}",
             f"--pid-file={dir}/mariadb.pid", f"--log-error={dir}/mariadb.log",
             "--skip-networking", "--skip-name-resolve", "--innodb-buffer-pool-size=16M",
             "--innodb-flush-log-at-trx-commit=0", f"--tmpdir={tmp}"] + user,
            cwd=dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        wait_for(lambda: self.sql("select 1", db="mysql", check=False) == 0,
                 "mariadbd accepting")
        self.sql("create database lw", db="mysql")
        self.sql(MARIA_JOBS)
        self.url = f"mysql://root@localhost/lw?socket={self.socket}"

    def sql(self, statement, db="lw", check=True):
        done = subprocess.run(["mariadb", "--no-defaults", "-uroot", f"--socket={self.socket}",
                               db, "-e", statement],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if check and done.returncode:
            sys.exit(f"mariadb failed: {statement}")
        return done.returncode


def tree(pid):
    """`pid` and its descendants, parents first (PostgreSQL's backends call
    setsid(), so a process group does not reach them)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop(0))
        todo += children.get(found[-1], [])
    return found


def hang(server, sig):
    """SIGSTOP (parents first, so no new backend escapes) or SIGCONT every
    process of the server: stopping the postmaster alone hangs nothing."""
    pids = tree(server.server.pid)
    for pid in pids if sig == signal.SIGSTOP else reversed(pids):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def write_config(dir, server, drain_timeout, handler):
    script = os.path.join(dir, "handler.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat > /dev/null\ntouch '{dir}/started'\n{handler}\n")
    failed = os.path.join(dir, "failed.sqlite")
    with sqlite3.connect(failed) as c:
        c.execute("create table if not exists failed_jobs (id integer primary key "
                  "autoincrement not null, uuid varchar not null, connection text not null, "
                  "queue text not null, payload text not null, exception text not null, "
                  "failed_at datetime not null default CURRENT_TIMESTAMP)")
    worker = f"\n[worker]\ndrain_timeout = {drain_timeout}\n" if drain_timeout else ""
    path = os.path.join(dir, "worker.toml")
    with open(path, "w") as f:
        f.write(f'[queue]\nconnection = "database"\nretry_after = 90\n\n'
                f'[redis]\nurl = "unix:///nonexistent.sock"\n\n'
                f'[database]\nurl = "{server.url}"\n\n'
                f'[failed]\ndriver = "database-uuids"\nurl = "sqlite://{failed}"\n\n'
                f'[cache]\nstore = "none"\n{worker}\n'
                f'[[handlers]]\nmatch = "*"\ncommand = ["sh", "{script}"]\n')
    return path


def push(binary, config, count):
    subprocess.run([binary, "push", "--config", config, "--job", "App\\Jobs\\Hung",
                    "--count", str(count), "-q", "default"], check=True,
                   stdout=subprocess.DEVNULL)


def start_worker(binary, config, log_path, stop_when_empty):
    flags = ["--sleep=0", "--tries=1"] + (["--stop-when-empty"] if stop_when_empty else [])
    log = open(log_path, "w")
    return subprocess.Popen([binary, "work", "--config", config, "--queue", "default"] + flags,
                            stdout=log, stderr=subprocess.STDOUT)


def ended(worker, since):
    """(seconds from `since` to the worker's exit or None, exit status)."""
    try:
        status = worker.wait(timeout=max(0.0, since + CAP - time.monotonic()))
        return time.monotonic() - since, status
    except subprocess.TimeoutExpired:
        worker.kill()
        return None, worker.wait()


def reason(log_path):
    with open(log_path, errors="replace") as f:
        text = f.read()
    found = re.findall(r"worker stopped\S*\s+reason=\"?([a-z_]+)", text)
    found = found or re.findall(r'"reason":"([a-z_]+)"', text)
    if not found and "unreachable after" in text:
        return "unreachable_at_start"
    return found[-1] if found else "-"


def one_run(binary, server, case, drain_timeout, dir):
    for stale in ["started"]:
        if os.path.exists(os.path.join(dir, stale)):
            os.remove(os.path.join(dir, stale))
    server.sql("delete from jobs")
    handler = "sleep 2" if case == "c" else ""
    config = write_config(dir, server, drain_timeout, handler)
    log = os.path.join(dir, f"worker-{case}-{drain_timeout}.log")
    try:
        if case == "a-start":
            hang(server, signal.SIGSTOP)
            since = time.monotonic()
            worker = start_worker(binary, config, log, True)
            return ended(worker, since) + (reason(log),)
        if case == "a-poll":
            push(binary, config, 5000)
            worker = start_worker(binary, config, log, True)
            wait_for(lambda: os.path.exists(os.path.join(dir, "started")), "a first job")
            time.sleep(1)
            hang(server, signal.SIGSTOP)
            since = time.monotonic()
            return ended(worker, since) + (reason(log),)
        if case == "c":
            push(binary, config, 1)
        worker = start_worker(binary, config, log, False)
        if case == "c":
            wait_for(lambda: os.path.exists(os.path.join(dir, "started")), "the job's start")
        else:
            time.sleep(2)
        hang(server, signal.SIGSTOP)
        time.sleep(1)
        worker.send_signal(signal.SIGTERM)
        since = time.monotonic()
        return ended(worker, since) + (reason(log),)
    finally:
        hang(server, signal.SIGCONT)


CASES = [c for c in [("a-start", None), ("a-poll", None), ("b", None), ("b", 10), ("c", None), ("c", 10)] if not os.environ.get("ONLY") or c[0] + str(c[1]) in os.environ["ONLY"].split(",")]


def measure(binary, kind):
    dir = tempfile.mkdtemp(prefix=f"lw-hung-{kind}-")
    server = None
    try:
        server = Postgres(dir) if kind == "postgres" else MariaDb(dir)
        for case, drain_timeout in CASES:
            times, statuses, reasons = [], [], []
            for _ in range(RUNS):
                seconds, status, why = one_run(binary, server, case, drain_timeout, dir)
                times.append(seconds)
                statuses.append(status)
                reasons.append(why)
                print(f"  {kind} {case} drain_timeout={drain_timeout}: "
                      f"{'no exit' if seconds is None else f'{seconds:.1f} s'} "
                      f"status {status} reason {why}", flush=True)
            done = [t for t in times if t is not None]
            median = f"{statistics.median(done):.1f} s" if len(done) == len(times) else \
                f"no exit in {CAP:.0f} s ({len(times) - len(done)} of {len(times)})"
            print(f"{kind:8} {case:7} drain_timeout={str(drain_timeout):4} median {median:10} "
                  f"[{', '.join('-' if t is None else f'{t:.1f}' for t in times)}] "
                  f"status {sorted(set(statuses))} reason {sorted(set(reasons))}", flush=True)
    finally:
        if server is not None:
            hang(server, signal.SIGCONT)
            os.killpg(server.server.pid, signal.SIGTERM)
            try:
                server.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.server.kill()
                server.server.wait()
        if not os.environ.get("KEEP"):
            shutil.rmtree(dir, ignore_errors=True)
        else:
            print(f"kept {dir}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    print(f"machine: {os.cpu_count()} cpus; runs {RUNS}, cap {CAP:.0f} s", flush=True)
    for kind in sys.argv[2:] or ["postgres", "mariadb"]:
        measure(binary, kind)


if __name__ == "__main__":
    main()
