#!/usr/bin/env python3
"""The database queue (issue 27) against `php artisan queue:work database`.

    bench/compare.py --only database [--size quick|full] [--reps N]

Run by bench/compare.py when `--only` names `database` (never in the
default run), on that run's Redis (the PHP app's cache store, which
`queue:work` reads for its restart signal, and the worker's), app and
binary. For each of SQLite (a file in the temporary directory),
PostgreSQL and MariaDB (private servers started here on unix sockets in
temporary directories, no TCP port, with their default durability: fsync
and a flush of the log at every commit; killed at the end; skipped with a
printed reason when not installed):

  * Laravel's `jobs` and `failed_jobs` tables, as Laravel 8.83's migrations
    make them;
  * per repetition, in turn: N no-op jobs (the run's real Laravel 8
    `NoopJob` payload without `id` and `attempts`, as the database driver
    writes it, a fresh uuid each) inserted as `pushToDatabase` would, then
    drained by (a) one `php artisan queue:work database --sleep=0
    --stop-when-empty` with the app's queue connection on that database,
    (b) one `laravel-worker work --stop-when-empty --sleep=0` with the warm
    no-op persistent handler at concurrency 1, (c) the same at 8 and 32;
  * jobs/s = N / (exec to exit) of the worker process, medians over the
    repetitions, the ratio to queue:work's median of the same run, the
    worker process's own CPU time per job (utime + stime from /proc, the
    handlers not counted) and the database server's (SQLite: none, it runs
    inside the workers).

Then, on MariaDB, the deadlock row: 2 `queue:work database` processes, and
4 workers (concurrency 8 each) started once both PHP workers run jobs, on
one table of M jobs whose handlers write
the job's uuid to a file (the PHP job `App\\Jobs\\UuidJob`, the worker's
handler an awk script): deadlock errors in every process's output and in
the app's log, jobs that ran more or less than once, rows left in `jobs`
and in `failed_jobs`.
"""

import csv
import io
import os
import pwd
import re
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
import uuid

from benchlib import PROCS, QUEUE, ROOT, log, wait_all

# The app's database connections for the queue, one per engine (written
# into the bench's copy of the app: tests/laravel/ has only SQLite).
DATABASE_PHP = r"""<?php

// The test app's SQLite connection (failed_jobs), and one connection per
// engine for bench/database.py's jobs tables (DB_QUEUE_CONNECTION picks one).
return [
    'default' => env('DB_CONNECTION', 'sqlite'),

    'connections' => [
        'sqlite' => [
            'driver' => 'sqlite',
            'database' => env('DB_DATABASE'),
            'prefix' => '',
            'foreign_key_constraints' => true,
        ],
        'bench_sqlite' => [
            'driver' => 'sqlite',
            'database' => env('BENCH_SQLITE'),
            'prefix' => '',
            'foreign_key_constraints' => true,
        ],
        'bench_pgsql' => [
            'driver' => 'pgsql',
            'host' => env('BENCH_PGSQL_HOST'),
            'port' => 5432,
            'database' => 'bench',
            'username' => 'postgres',
            'password' => '',
            'charset' => 'utf8',
            'prefix' => '',
            'schema' => 'public',
            'sslmode' => 'disable',
        ],
        'bench_mysql' => [
            'driver' => 'mysql',
            'unix_socket' => env('BENCH_MYSQL_SOCKET'),
            'host' => 'localhost',
            'database' => 'bench',
            'username' => 'root',
            'password' => '',
            'charset' => 'utf8mb4',
            'collation' => 'utf8mb4_unicode_ci',
            'prefix' => '',
            'strict' => true,
            'engine' => null,
        ],
    ],

    'migrations' => 'migrations',

    'redis' => require __DIR__.'/database-redis.php',
];
"""

# A no-op job that writes its uuid to the file named by BENCH_UUID_LOG (the
# same length of class name as NoopJob, so its serialized command is the
# NoopJob payload's with the name replaced).
UUID_JOB_PHP = r"""<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\SerializesModels;

/** Writes its uuid to BENCH_UUID_LOG: bench/database.py counts the runs. */
class UuidJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function handle(): void
    {
        file_put_contents(getenv('BENCH_UUID_LOG'), $this->job->uuid()."\n", FILE_APPEND | LOCK_EX);
    }
}
"""

# The worker's handler for the deadlock row: writes the request's uuid to a
# file, then answers done.
UUID_SH = """#!/bin/sh
exec mawk -W interactive -v out="$1" '{ match($0, /"uuid":"[^"]*"/); u = substr($0, RSTART + 8, RLENGTH - 9); print u >> out; fflush(out); match($0, /"call":[0-9]+/); c = substr($0, RSTART + 7, RLENGTH - 7); print "{\\"call\\":" c ",\\"action\\":\\"done\\"}" }' >&3
"""

# Laravel 8.83's jobs and failed_jobs tables per engine (the grammars'
# output for the framework's stubs; the same DDL as tests/common/).
DDL = {
    "sqlite": [
        'create table "jobs" ("id" integer not null primary key autoincrement, '
        '"queue" varchar not null, "payload" text not null, "attempts" integer not null, '
        '"reserved_at" integer, "available_at" integer not null, "created_at" integer not null)',
        'create index "jobs_queue_index" on "jobs" ("queue")',
        'create table "failed_jobs" ("id" integer not null primary key autoincrement, '
        '"uuid" varchar not null, "connection" text not null, "queue" text not null, '
        '"payload" text not null, "exception" text not null, '
        '"failed_at" datetime default CURRENT_TIMESTAMP not null)',
        'create unique index "failed_jobs_uuid_unique" on "failed_jobs" ("uuid")',
    ],
    "postgres": [
        'create table "jobs" ("id" bigserial primary key not null, '
        '"queue" varchar(255) not null, "payload" text not null, '
        '"attempts" smallint not null, "reserved_at" integer null, '
        '"available_at" integer not null, "created_at" integer not null)',
        'create index "jobs_queue_index" on "jobs" ("queue")',
        'create table "failed_jobs" ("id" bigserial not null primary key, '
        '"uuid" varchar(255) not null, "connection" text not null, "queue" text not null, '
        '"payload" text not null, "exception" text not null, '
        '"failed_at" timestamp(0) without time zone not null default CURRENT_TIMESTAMP)',
        'alter table "failed_jobs" add constraint "failed_jobs_uuid_unique" unique ("uuid")',
    ],
    "mariadb": [
        "create table `jobs` (`id` bigint unsigned not null auto_increment primary key, "
        "`queue` varchar(255) not null, `payload` longtext not null, "
        "`attempts` tinyint unsigned not null, `reserved_at` int unsigned null, "
        "`available_at` int unsigned not null, `created_at` int unsigned not null) "
        "default character set utf8mb4 collate 'utf8mb4_unicode_ci'",
        "alter table `jobs` add index `jobs_queue_index`(`queue`)",
        "create table `failed_jobs` (`id` bigint unsigned not null auto_increment primary key, "
        "`uuid` varchar(255) not null, `connection` text not null, `queue` text not null, "
        "`payload` longtext not null, `exception` longtext not null, "
        "`failed_at` timestamp not null default CURRENT_TIMESTAMP) "
        "default character set utf8mb4 collate 'utf8mb4_unicode_ci'",
        "alter table `failed_jobs` add unique `failed_jobs_uuid_unique`(`uuid`)",
    ],
}

LABELS = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mariadb": "MariaDB"}
PDO = {"sqlite": "pdo_sqlite", "postgres": "pdo_pgsql", "mariadb": "pdo_mysql"}
PHP_CONNECTION = {"sqlite": "bench_sqlite", "postgres": "bench_pgsql", "mariadb": "bench_mysql"}


# ---------------------------------------------------------------- /proc

def tree_cpu(pid):
    """CPU seconds of `pid`, its live children and its reaped children
    (utime + stime + cutime + cstime, plus each live child's own): a
    PostgreSQL postmaster's backends, which come and go with connections,
    are all counted. None if `pid` is gone."""
    def stat(p):
        with open(f"/proc/{p}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    try:
        fields = stat(pid)
    except OSError:
        return None
    total = sum(int(x) for x in fields[11:15])
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            child = stat(name)
        except OSError:
            continue
        if int(child[1]) == pid:
            total += int(child[11]) + int(child[12])
    return total / tick


# ---------------------------------------------------------------- servers

def find(name, dirs=("/usr/sbin", "/usr/local/sbin", "/usr/bin")):
    return shutil.which(name) or next(
        (os.path.join(d, name) for d in dirs if os.path.isfile(os.path.join(d, name))), None)


def wait_until(check, proc, what, logfile, timeout=60):
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited at start:\n{read(logfile)[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not accept connections in {timeout} s")
        time.sleep(0.05)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


class Postgres:
    """A private PostgreSQL cluster in its own temporary directory, unix
    socket only; as root it runs as the `postgres` user. Database `bench`."""

    label = "postgres"

    @staticmethod
    def missing():
        versions = sorted((int(v), v) for v in os.listdir("/usr/lib/postgresql")
                          if v.isdigit()) if os.path.isdir("/usr/lib/postgresql") else []
        for _, v in reversed(versions):
            b = f"/usr/lib/postgresql/{v}/bin"
            if os.path.isfile(f"{b}/initdb") and os.path.isfile(f"{b}/postgres"):
                Postgres.bin = b
                break
        else:
            if not (shutil.which("initdb") and shutil.which("postgres")):
                return "PostgreSQL (initdb, postgres) is not installed"
            Postgres.bin = os.path.dirname(shutil.which("postgres"))
        if not shutil.which("psql"):
            return "psql is not installed"
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                return "running as root and there is no postgres user"
        return None

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="lw-bench-pg-")
        user = {}
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            user = dict(user=pw.pw_uid, group=pw.pw_gid)
        data = os.path.join(self.dir, "data")
        logfile = os.path.join(self.dir, "postgres.log")
        with open(logfile, "w") as lf:
            if os.geteuid() == 0:
                os.chown(logfile, user["user"], user["group"])
            subprocess.run([f"{self.bin}/initdb", "-D", data, "-U", "postgres", "-A", "trust",
                            "-E", "UTF8", "--locale=C", "--no-sync"],
                           stdout=lf, stderr=subprocess.STDOUT, check=True, cwd=self.dir, **user)
        self.proc = PROCS.start([f"{self.bin}/postgres", "-D", data, "-k", self.dir,
                                 "-c", "listen_addresses="],
                                stdout=open(logfile, "a"), stderr=subprocess.STDOUT,
                                cwd=self.dir, **user)
        wait_until(lambda: self.psql("select 1", db="postgres", check=False) == "1",
                   self.proc, "postgres", logfile)
        self.psql("create database bench", db="postgres")
        self.url = f"postgres:///bench?host={self.dir}&user=postgres"
        self.php_env = {"BENCH_PGSQL_HOST": self.dir}

    def psql(self, sql, db="bench", check=True, stdin=None):
        res = subprocess.run(["psql", "-h", self.dir, "-U", "postgres", "-d", db, "-At", "-q",
                              "-v", "ON_ERROR_STOP=1", "-c", sql], input=stdin,
                             capture_output=True, text=True)
        if check and res.returncode != 0:
            raise RuntimeError(f"psql {sql[:60]!r}: {res.stderr.strip()}")
        return res.stdout.strip()

    def execute(self, statements):
        for sql in statements:
            self.psql(sql)

    def insert(self, rows):
        buf = io.StringIO()
        csv.writer(buf).writerows(rows)
        self.psql("COPY jobs (queue, payload, attempts, reserved_at, available_at, created_at) "
                  "FROM STDIN WITH (FORMAT csv)", stdin=buf.getvalue())

    def scalar(self, sql):
        return int(self.psql(sql))

    def cpu(self):
        return tree_cpu(self.proc.pid)

    def counters(self):
        """(transactions committed, WAL fsyncs) so far; the statistics of
        backends that exited are in (PostgreSQL 14+: pg_stat_wal)."""
        commits = self.scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = 'bench'")
        syncs = self.scalar("SELECT wal_sync FROM pg_stat_wal")
        return commits, syncs

    def stop(self):
        PROCS.stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class MariaDb:
    """A private MariaDB server in its own temporary directory, unix socket
    only (`--skip-networking`), root without a password. Database `bench`."""

    label = "mariadb"

    @staticmethod
    def missing():
        if not (find("mariadb-install-db") and find("mariadbd")):
            return "MariaDB (mariadb-install-db, mariadbd) is not installed"
        if not shutil.which("mariadb"):
            return "the mariadb client is not installed"
        return None

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="lw-bench-maria-")
        data = os.path.join(self.dir, "data")
        self.socket = os.path.join(self.dir, "mariadb.sock")
        logfile = os.path.join(self.dir, "mariadb.log")
        tmp = os.path.join(self.dir, "tmp")
        os.mkdir(tmp)
        # root needs --user; temporary tables go to our own directory, not the shared /tmp
        user = (["--user=root"] if os.geteuid() == 0 else []) + [f"--tmpdir={tmp}"]
        with open(logfile, "w") as lf:
            subprocess.run([find("mariadb-install-db"), "--no-defaults", f"--datadir={data}",
                            "--auth-root-authentication-method=normal", "--skip-test-db",
                            "--skip-name-resolve", *user],
                           stdout=lf, stderr=subprocess.STDOUT, check=True, cwd=self.dir)
        self.proc = PROCS.start([find("mariadbd"), "--no-defaults", f"--datadir={data}",
                                 f"--socket={self.socket}",
                                 f"--pid-file={os.path.join(self.dir, 'mariadb.pid')}",
                                 f"--log-error={logfile}", "--skip-networking",
                                 "--skip-name-resolve", *user],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                cwd=self.dir)
        wait_until(lambda: os.path.exists(self.socket)
                   and self.mysql("select 1", db="mysql", check=False) == "1",
                   self.proc, "mariadbd", logfile)
        self.mysql("create database bench", db="mysql")
        self.url = f"mysql://root@localhost/bench?socket={self.socket}"
        self.php_env = {"BENCH_MYSQL_SOCKET": self.socket}

    def mysql(self, sql, db="bench", check=True):
        res = subprocess.run(["mariadb", f"--socket={self.socket}", "-uroot", "-N", "-B", db],
                             input=sql, capture_output=True, text=True)
        if check and res.returncode != 0:
            raise RuntimeError(f"mariadb {sql[:60]!r}: {res.stderr.strip()}")
        return res.stdout.strip()

    def execute(self, statements):
        for sql in statements:
            self.mysql(sql)

    def insert(self, rows):
        def lit(v):
            if v is None:
                return "NULL"
            if isinstance(v, int):
                return str(v)
            return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
        parts = []
        for i in range(0, len(rows), 500):
            values = ",".join("(" + ",".join(lit(v) for v in row) + ")"
                              for row in rows[i:i + 500])
            parts.append("INSERT INTO jobs (queue, payload, attempts, reserved_at, available_at, "
                         f"created_at) VALUES {values};")
        self.mysql("\n".join(parts))

    def scalar(self, sql):
        return int(self.mysql(sql))

    def cpu(self):
        return tree_cpu(self.proc.pid)

    def counters(self):
        """(commits, InnoDB redo log writes) so far (Handler_commit counts
        every transaction, autocommitted statements too; with the default
        innodb_flush_log_at_trx_commit = 1 a commit's log write is durable
        before the commit returns)."""
        got = dict(line.split("\t") for line in self.mysql(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_commit', "
            "'Innodb_log_writes')").splitlines())
        return int(got["Handler_commit"]), int(got["Innodb_log_writes"])

    def stop(self):
        PROCS.stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class Sqlite:
    """A SQLite file in the run's directory (the file's defaults: rollback
    journal, as a new Laravel app's database.sqlite)."""

    label = "sqlite"

    @staticmethod
    def missing():
        return None

    def __init__(self, directory):
        self.path = os.path.join(directory, "queue.sqlite")
        self.dir = None
        self.url = f"sqlite://{self.path}"
        self.php_env = {"BENCH_SQLITE": self.path}

    def connect(self):
        return sqlite3.connect(self.path, timeout=60)

    def execute(self, statements):
        with self.connect() as c:
            for sql in statements:
                c.execute(sql)

    def insert(self, rows):
        c = self.connect()
        with c:
            c.executemany("INSERT INTO jobs (queue, payload, attempts, reserved_at, available_at, "
                          "created_at) VALUES (?, ?, ?, ?, ?, ?)", rows)
        c.close()

    def scalar(self, sql):
        c = self.connect()
        try:
            return int(c.execute(sql).fetchone()[0])
        finally:
            c.close()

    def cpu(self):
        return None

    def counters(self):
        return None

    def stop(self):
        pass


# ---------------------------------------------------------------- the rows

def database_payload(template):
    """A Redis-dispatched payload without the `id` and `attempts` keys
    RedisQueue adds (the database driver never writes them)."""
    text = re.sub(r',"id":"[^"]*"', "", template, count=1)
    text = re.sub(r',"attempts":\d+', "", text, count=1)
    if '"id":' in text or '"attempts":' in text:
        raise RuntimeError(f"cannot take id/attempts out of the payload: {template[:200]}")
    return text


class DatabaseBench:
    """The rows on `lab` (a benchlib.Lab with Redis and the app started;
    `lab.app` None when PHP cannot run): `jobs` per throughput row,
    `reps` repetitions, `deadlock_jobs` in the MariaDB deadlock row."""

    def __init__(self, lab, jobs, reps, deadlock_jobs, engines=("sqlite", "postgres", "mariadb"),
                 bins=None, queue_work=True):
        self.lab = lab
        # False: no queue:work and no deadlock row (--no-queue-work)
        self.with_queue_work = queue_work
        # (label, binary) of each build the worker rows run (this one, then
        # any --baseline), in the same repetitions
        self.bins = bins or [("", None)]
        self.engines = engines
        self.jobs = jobs
        self.reps = reps
        self.deadlock_jobs = deadlock_jobs
        self.template = database_payload(lab.payloads.template)
        self.uuid = lab.payloads.uuid
        self.results = {"rows": [], "skipped": [], "deadlock": None}
        if lab.app:
            self.setup_app()
        self.uuid_sh = os.path.join(lab.dir, "uuid.sh")
        with open(self.uuid_sh, "w") as f:
            f.write(UUID_SH)
        os.chmod(self.uuid_sh, 0o755)

    def setup_app(self):
        app = self.lab.app
        cfg = os.path.join(app, "config")
        with open(os.path.join(cfg, "database.php")) as f:
            original = f.read()
        # The test app's Redis section, kept as it is.
        m = re.search(r"'redis' => (\[.*\]),\s*\];\s*$", original, re.S)
        if not m:
            raise RuntimeError("cannot find the redis section of the app's config/database.php")
        with open(os.path.join(cfg, "database-redis.php"), "w") as f:
            f.write("<?php\n\nuse Illuminate\\Support\\Str;\n\nreturn " + m.group(1) + ";\n")
        with open(os.path.join(cfg, "database.php"), "w") as f:
            f.write(DATABASE_PHP)
        with open(os.path.join(app, "app", "Jobs", "UuidJob.php"), "w") as f:
            f.write(UUID_JOB_PHP)

    def php_missing(self, engine):
        if not self.lab.app:
            return "PHP cannot run the app here"
        ext = PDO[engine]
        ok = subprocess.run(["php", "-r", f"exit(extension_loaded('{ext}') ? 0 : 3);"]).returncode
        if ok != 0:
            return f"php lacks the {ext} extension (Debian: php-{ext.split('_')[1]})"
        return None

    # -- jobs

    def rows_of(self, n, template=None):
        """`n` rows as `pushToDatabase` writes them: queue, payload (a fresh
        uuid each), attempts 0, not reserved, available and created now."""
        template = template or self.template
        now = int(time.time())
        return [(QUEUE, template.replace(self.uuid, str(uuid.uuid4()), 1), 0, None, now, now)
                for _ in range(n)]

    def reset(self, db):
        db.execute(["DELETE FROM jobs", "DELETE FROM failed_jobs"])

    # -- processes

    def php_env(self, db, extra=None):
        env = self.lab.php_env()
        env["DB_QUEUE_CONNECTION"] = PHP_CONNECTION[db.label]
        env.update(db.php_env)
        env.update(extra or {})
        return env

    def queue_work(self, db, extra_env=None, stdout=None):
        return PROCS.start(["php", "artisan", "queue:work", "database", "--sleep=0",
                            "--stop-when-empty"], cwd=self.lab.app,
                           env=self.php_env(db, extra_env),
                           stdout=stdout or self.lab.out_file(), stderr=subprocess.STDOUT)

    def config(self, db, name, handler, failed='driver = "null"'):
        path = os.path.join(self.lab.dir, f"db-{db.label}-{name}.toml")
        with open(path, "w") as f:
            f.write(f"""[app]
laravel = "8.83"

[redis]
url = "unix://{self.lab.sock}?db=0"

[queue]
connection = "database"
queue = "{QUEUE}"
retry_after = 90

[database]
url = "{db.url}"
table = "jobs"

[cache]
store = "redis"
database = 1
prefix = "laravel_cache"
colon = true

[failed]
{failed}

{handler}""")
        return path

    def worker(self, db, c, stderr=None, handler=None, name=None, failed='driver = "null"',
               binary=None):
        handler = handler or self.lab.handler_persistent([self.lab.warm], c)
        cfg = self.config(db, name or f"warm{c}", handler, failed)
        return self.lab.worker(cfg, "--stop-when-empty", "--sleep=0", f"--concurrency={c}",
                               stderr=stderr, binary=binary)

    # -- throughput

    def stderr_file(self, db, c):
        """A file for a worker's log (RUST_LOG=warn), read after the row."""
        self.stderr_path = os.path.join(self.lab.dir, f"stderr-{db.label}-{c}.log")
        return open(self.stderr_path, "w")

    def warnings(self):
        """The warnings in the last worker's log, by kind (sqlx's slow
        statements are the SQLite lock waits of its own connections)."""
        text = read(getattr(self, "stderr_path", ""))
        self.stderr_path = ""
        slow = sum(1 for line in text.splitlines() if "slow statement" in line)
        other = [line for line in text.splitlines()
                 if " WARN " in line and "slow statement" not in line or " ERROR " in line]
        for line in other[:3]:
            log(f"  worker: {line[:300]}")
        return slow, len(other)

    def drain(self, db, start):
        """Inserts the jobs, runs `start()`'s process to its exit; returns
        (jobs/s, worker CPU s, database CPU s, rows left, done, other,
        (commits, fsyncs) of the server over the run or None)."""
        self.reset(db)
        db.insert(self.rows_of(self.jobs))
        db_cpu = db.cpu()
        before = db.counters()
        t0 = time.monotonic()
        proc = start()
        _, cpu = wait_all([proc], timeout=max(600, self.jobs / 20))
        wall = time.monotonic() - t0
        time.sleep(0.1)  # PostgreSQL's backends exit after their connections close
        used = db.cpu() - db_cpu if db_cpu is not None else None
        after = db.counters()
        counted = tuple(a - b for a, b in zip(after, before)) if before else None
        if proc.returncode != 0:
            log(f"warning: {proc.args[:4]} exited with {proc.returncode}")
        PROCS.stop(proc)
        left = db.scalar("SELECT COUNT(*) FROM jobs")
        done, other = self.lab.outcomes()
        slow, warned = self.warnings()
        if slow or warned:
            log(f"  the worker logged {slow} slow statements (over 1 s) and {warned} other "
                f"warnings or errors")
        return self.jobs / wall, cpu, used, left, done, other, counted

    def throughput(self, db):
        kinds = []
        why = self.php_missing(db.label)
        if not self.with_queue_work:
            log(f"note: {LABELS[db.label]}: no queue:work row (--no-queue-work)")
        elif why:
            log(f"note: {LABELS[db.label]}: no queue:work row: {why}")
        else:
            kinds.append(("queue:work database", lambda: self.queue_work(db)))
        for c in (1, 8, 32):
            for label, binary in self.bins:
                kinds.append((f"warm no-op, c={c}{label}",
                              lambda c=c, binary=binary: self.worker(
                                  db, c, stderr=self.stderr_file(db, c), binary=binary)))
        runs = {name: [] for name, _ in kinds}
        for rep in range(self.reps):
            for name, start in kinds:
                rate, cpu, db_cpu, left, done, other, counted = self.drain(db, start)
                if left or done != self.jobs or other:
                    log(f"WARNING: {LABELS[db.label]} {name}: {done} of {self.jobs} jobs done, "
                        f"{other} failed or released, {left} rows left")
                per_job = cpu * 1e6 / self.jobs
                db_us = db_cpu * 1e6 / self.jobs if db_cpu is not None else None
                commits, syncs = ((c / self.jobs for c in counted) if counted
                                  else (None, None))
                runs[name].append((rate, per_job, db_us, os.getloadavg()[0], commits, syncs))
                log(f"[rep {rep + 1}] {LABELS[db.label]} {name}: {self.jobs} jobs, "
                    f"{rate:.0f} jobs/s, worker CPU {per_job:.0f} µs/job, database CPU "
                    f"{'n/a' if db_us is None else f'{db_us:.0f} µs/job'}, commits/job "
                    f"{'n/a' if commits is None else f'{commits:.2f}'}, log syncs/job "
                    f"{'n/a' if syncs is None else f'{syncs:.2f}'}, "
                    f"load {os.getloadavg()[0]:.2f}")
        php = [r[0] for r in runs.get("queue:work database", [])]
        base = median(php)
        for name, _ in kinds:
            rs = runs[name]
            rate = median([r[0] for r in rs])
            # each repetition's ratio to queue:work's run of that repetition
            # (the rows of one repetition ran minutes apart at most)
            per_rep = [r[0] / p for r, p in zip(rs, php)] if php else []
            self.results["rows"].append({
                "database": LABELS[db.label], "row": name, "jobs": self.jobs, "reps": len(rs),
                "jobs_per_s": rate, "ratio": rate / base if base else None,
                "ratios": per_rep, "ratio_per_rep": median(per_rep),
                "cpu_us_per_job": median([r[1] for r in rs]),
                "db_cpu_us_per_job": median([r[2] for r in rs]),
                "load": median([r[3] for r in rs]),
                "commits_per_job": median([r[4] for r in rs]),
                "fsyncs_per_job": median([r[5] for r in rs]),
            })

    # -- deadlocks

    def deadlocks(self, db, workers=4, concurrency=8, php_workers=2):
        """4 workers and 2 queue:work on one MariaDB table; counts deadlock
        errors and runs per job."""
        why = self.php_missing(db.label)
        if why:
            log(f"note: no deadlock row: {why}")
            self.results["skipped"].append(f"deadlock row: {why}")
            return
        n = self.deadlock_jobs
        self.reset(db)
        uuid_log = os.path.join(self.lab.dir, "uuids.log")
        open(uuid_log, "w").close()
        laravel_log = os.path.join(self.lab.app, "storage", "logs", "laravel.log")
        if os.path.exists(laravel_log):
            os.unlink(laravel_log)
        # UuidJob's payload: NoopJob's with the class name replaced (same length).
        template = self.template.replace("NoopJob", "UuidJob")
        rows = self.rows_of(n, template)
        uuids = [re.search(r'"uuid":"([^"]+)"', r[1]).group(1) for r in rows]
        db.insert(rows)
        handler = self.lab.handler_persistent([self.uuid_sh, uuid_log], concurrency)
        logs = []
        procs = []
        t0 = time.monotonic()
        # The PHP workers first: the workers start once both run jobs, so
        # that all six take rows from the table at the same time.
        for i in range(php_workers):
            path = os.path.join(self.lab.dir, f"deadlock-php-{i}.log")
            logs.append(path)
            procs.append(self.queue_work(db, {"BENCH_UUID_LOG": uuid_log},
                                         stdout=open(path, "w")))
        deadline = time.monotonic() + 60
        while (sum(read(p).count("Processed:") > 0 for p in logs) < php_workers
               and time.monotonic() < deadline):
            time.sleep(0.02)
        for i in range(workers):
            path = os.path.join(self.lab.dir, f"deadlock-worker-{i}.log")
            logs.append(path)
            # failed jobs kept in the table's database (0 expected)
            procs.append(self.worker(db, concurrency, stderr=open(path, "w"), handler=handler,
                                     name=f"uuid{i}",
                                     failed=f'driver = "database-uuids"\nurl = "{db.url}"'))
        wait_all(procs, timeout=max(600, n / 20))
        wall = time.monotonic() - t0
        codes = [p.returncode for p in procs]
        for p in procs:
            PROCS.stop(p)
        _, worker_failed = self.lab.outcomes()
        texts = [read(p) for p in logs] + [read(laravel_log)]
        deadlock_lines = [line for t in texts for line in t.splitlines()
                          if re.search(r"deadlock|SQLSTATE\[40001\]", line, re.I)]
        error_lines = [line for t in texts for line in t.splitlines()
                       if re.search(r"error|exception", line, re.I)]
        ran = {}
        for line in read(uuid_log).split():
            ran[line] = ran.get(line, 0) + 1
        lost = sum(1 for u in uuids if u not in ran)
        twice = sum(1 for u in uuids if ran.get(u, 0) > 1)
        by_php = sum(1 for t in texts[:php_workers] for line in t.splitlines()
                     if "Processed:" in line)
        res = {"workers": workers, "concurrency": concurrency, "php_workers": php_workers,
               "jobs": n, "seconds": wall, "deadlocks": len(deadlock_lines),
               "error_lines": len(error_lines), "lost": lost, "ran_twice": twice,
               "unknown": sum(1 for u in ran if u not in set(uuids)),
               "rows_left": db.scalar("SELECT COUNT(*) FROM jobs"),
               "failed_rows": db.scalar("SELECT COUNT(*) FROM failed_jobs"),
               "by_php": by_php, "worker_failed_or_released": worker_failed,
               "exit_codes": codes}
        for line in (deadlock_lines + error_lines)[:5]:  # the first few, to read
            log(f"  deadlock row: {line[:300]}")
        log(f"deadlock row (MariaDB, {workers} workers c={concurrency} + {php_workers} "
            f"queue:work, {n} jobs): {res['deadlocks']} deadlock lines, {res['error_lines']} "
            f"error lines, {lost} lost, {twice} ran twice, {res['rows_left']} rows left, "
            f"{res['failed_rows']} failed, {by_php} run by PHP, {wall:.1f} s, exits {codes}")
        self.results["deadlock"] = res

    # -- all

    def rows(self):
        """Every row; returns the results (see `table`)."""
        for kind in (Sqlite, Postgres, MariaDb):
            if kind.label not in self.engines:
                continue
            why = kind.missing()
            if why:
                log(f"note: skipping {LABELS[kind.label]}: {why}")
                self.results["skipped"].append(f"{LABELS[kind.label]}: {why}")
                continue
            db = kind(self.lab.dir) if kind is Sqlite else kind()
            try:
                db.execute(DDL[db.label])
                self.throughput(db)
                if kind is MariaDb and self.deadlock_jobs and self.with_queue_work:
                    self.deadlocks(db)
            finally:
                db.stop()
        return self.results


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def table(results, load_note=""):
    """The results as Markdown lines."""
    out = ["| database | row | jobs | reps | jobs/s (median) | × queue:work | × queue:work "
           "per repetition (median) | worker CPU/job | database CPU/job | commits/job "
           "| log syncs/job | load |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["rows"]:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}×"
        if r.get("ratio_per_rep") is not None:
            ratio += (f" | {r['ratio_per_rep']:.2f}× ("
                      + ", ".join(f"{x:.1f}" for x in r["ratios"]) + ")")
        else:
            ratio += " | "
        db_us = "" if r["db_cpu_us_per_job"] is None else f"{r['db_cpu_us_per_job']:.0f} µs"
        per = ["" if v is None else f"{v:.2f}" for v in (r["commits_per_job"],
                                                          r["fsyncs_per_job"])]
        out.append(f"| {r['database']} | {r['row']} | {r['jobs']:,} | {r['reps']} | "
                   f"{r['jobs_per_s']:,.0f} | {ratio} | {r['cpu_us_per_job']:.0f} µs | "
                   f"{db_us} | {per[0]} | {per[1]} | {r['load']:.2f} |")
    d = results.get("deadlock")
    if d:
        out.append("")
        out.append(f"- MariaDB, {d['workers']} workers (c={d['concurrency']}) + "
                   f"{d['php_workers']} `queue:work database` on one table, {d['jobs']:,} jobs "
                   f"({d['by_php']:,} run by PHP), {d['seconds']:.1f} s: **{d['deadlocks']} "
                   f"deadlock errors**, {d['error_lines']} error lines, {d['lost']} lost, "
                   f"{d['ran_twice']} ran twice, {d['rows_left']} rows left in `jobs`, "
                   f"{d['failed_rows']} in `failed_jobs`")
    for s in results["skipped"]:
        out.append(f"- skipped: {s}")
    return out
