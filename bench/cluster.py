#!/usr/bin/env python3
"""Redis's CPU per job: one server against each master of a 3-master
Redis Cluster (issue 29).

    bench/compare.py --only cluster [--size quick|full] [--reps N]
                     [--binary PATH | --no-build]

Run by bench/compare.py when `--only` names `cluster` (never in the
default run), with that run's binary, job payload (the real Laravel 8
`NoopJob`) and warm no-op handler (mawk answering `{"action":"done"}` on
fd 3, the one of the `warm` and `ahead` rows). It starts, on 127.0.0.1
TCP ports nobody else uses (nor their cluster bus ports, +10000), with
nothing saved (`--save '' --appendonly no`):

  * one plain `redis-server` (the queue on database 0, the cache on
    database 1, as Laravel's defaults have them);
  * three `--cluster-enabled yes` servers made a cluster of 3 masters, no
    replicas (`redis-cli --cluster create ... --cluster-replicas 0`),
    waited for until every node says `cluster_state:ok` and knows the
    three; the worker's config has `[redis] cluster = true` and the three
    as seeds (`url` and `nodes`), so the queue is `queues:{default}` and
    the cache keys sit in their own slots, on whichever master owns them;
  * another such cluster whose cache keys' slots (the restart key's and
    both pause keys') are moved, empty, to the queue's master (`CLUSTER
    SETSLOT`): one master serves the queue and every key the worker reads.

Per repetition (the one server first, then last, in turn), on each setup: every
master flushed, the cache's restart key set (as a past `queue:restart`
leaves it; with none the worker would look for it under other prefixes
at start), N no-op jobs preloaded with their `:notify` entries, then one
`laravel-worker work --stop-when-empty --sleep=0 --concurrency=32` with a
persistent pool of 8 warm no-op processes and `[cache] store = "redis"`
(it reads the restart and pause keys, at most every 250 ms while jobs
keep coming). Measured over exec to exit of the worker:

  * jobs/s: N / (exec to exit), and "steady" (the ready list sampled
    every 20 ms by LLEN on its master, jobs/s while it falls from 90 % to
    10 % of N);
  * the daemon's CPU per job (its own utime + stime; the handlers not
    counted);
  * each redis-server's CPU per job (utime + stime from /proc);
  * each server's `INFO commandstats` and `INFO stats` before and after:
    calls per job of each command (the sampler's LLEN and the script's
    INFO left out), the commands' own time per job (`usec`), and
    `total_reads_processed` per job (the reads of a client's input: one
    per round trip the server sees, when clients do not pipeline), and
    `INFO errorstats` (error replies such as MOVED and ASK).

A warm-up drain of N/10 jobs on each setup comes first and is not counted.
The idle CPU of each server over 5 s (the cluster bus's pings and cron)
is read once before the repetitions. Medians over the repetitions.
"""

import os
import socket
import statistics
import subprocess
import time

from benchlib import (PREFIX, PROCS, QUEUE, LengthSampler, Redis, cpu_seconds, log, push,
                      wait_all)

HOST = "127.0.0.1"
CACHE_PREFIX = "laravel_cache"
# The cache's full keys: Redis prefix + cache prefix + Laravel <= 10's ":".
CACHE_KEYS = PREFIX + CACHE_PREFIX + ":"
RESTART_KEY = CACHE_KEYS + "illuminate:queue:restart"
PAUSE_KEYS = {
    f"pause key ({QUEUE})": CACHE_KEYS + f"illuminate:queue:paused:redis:{QUEUE}",
    "pause key (all)": CACHE_KEYS + "illuminate:queues:paused",
}
# Commands the script itself sends during a run, left out of the counts.
OWN_COMMANDS = {"llen", "info"}
START_TRIES = 5


# ---------------------------------------------------------------- servers

def free_port(taken):
    """A 127.0.0.1 TCP port free a moment ago, below 55,000, whose bus port
    (+10000) is free too, neither clashing with a port in `taken`; added
    to `taken`."""
    while True:
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port >= 55_000 or any(port == t or abs(port - t) == 10_000 for t in taken):
            continue
        try:
            with socket.socket() as s:
                s.bind((HOST, port + 10_000))
        except OSError:
            continue
        taken.add(port)
        return port


class Node:
    """One redis-server on 127.0.0.1:`port` (in PROCS), its log in
    `directory`; `r` a client to it."""

    def __init__(self, directory, port, proc):
        self.port = port
        self.proc = proc
        self.dir = directory
        self.r = Redis((HOST, port))

    @staticmethod
    def start(directory, taken, *extra):
        """Starts a server on a free port (another one when that port was
        taken meanwhile); waits until it answers PING."""
        for _ in range(START_TRIES):
            port = free_port(taken)
            logfile = os.path.join(directory, f"redis-{port}.log")
            proc = PROCS.start(
                ["redis-server", "--port", str(port), "--bind", HOST, "--save", "",
                 "--appendonly", "no", "--dir", directory, "--logfile", logfile, *extra],
                stdout=subprocess.DEVNULL)
            for _ in range(200):
                if proc.poll() is not None:
                    break
                try:
                    probe = Redis((HOST, port))
                    probe.cmd("PING")
                    probe.close()
                    return Node(directory, port, proc)
                except OSError:
                    time.sleep(0.025)
            PROCS.stop(proc)
        raise RuntimeError(f"no redis-server started after {START_TRIES} tries "
                           f"(see {directory}/redis-*.log)")

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def info(self, section):
        """`INFO section` as {field: value} (values as text)."""
        text = self.r.cmd("INFO", section).decode()
        out = {}
        for line in text.splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def counters(self):
        """(CPU s, {command: (calls, usec)}, reads processed, {error
        reply kind (MOVED, ASK, ...): count})."""
        cpu = self.cpu()
        stats = {}
        for k, v in self.info("commandstats").items():
            fields = dict(p.split("=", 1) for p in v.split(","))
            stats[k[len("cmdstat_"):]] = (int(fields["calls"]), int(fields["usec"]))
        reads = int(self.info("stats").get("total_reads_processed", 0))
        errors = {k[len("errorstat_"):]: int(v.split("=", 1)[1])
                  for k, v in self.info("errorstats").items()}
        return cpu, stats, reads, errors


def counted(before, after, n):
    """Per job between two `counters()`: (CPU µs, {command: calls},
    command µs, reads, {error reply kind: count over the run})."""
    cpu0, s0, r0, e0 = before
    cpu1, s1, r1, e1 = after
    calls = {}
    usec = 0
    for name, (c1, u1) in s1.items():
        if name in OWN_COMMANDS:
            continue
        c0, u0 = s0.get(name, (0, 0))
        if c1 > c0:
            calls[name] = (c1 - c0) / n
        usec += u1 - u0
    errors = {k: v - e0.get(k, 0) for k, v in e1.items() if v > e0.get(k, 0)}
    return (cpu1 - cpu0) * 1e6 / n, calls, usec / n, (r1 - r0) / n, errors


# ---------------------------------------------------------------- the setups

class Setup:
    """One Redis setup (`nodes`, each a master) and the worker config that
    points at it; `owner(key)` is the node serving `key`."""

    def __init__(self, name, nodes, config):
        self.name = name
        self.nodes = nodes
        self.config = config

    def owner(self, key):
        return self.nodes[0]

    def ready(self):
        return f"{PREFIX}queues:{QUEUE}"

    def roles(self):
        """{port: [what it holds]}."""
        return {self.nodes[0].port: ["queue", "restart key", *PAUSE_KEYS]}


class ClusterSetup(Setup):
    def __init__(self, name, nodes, config):
        super().__init__(name, nodes, config)
        self.slots = []  # (first, last, port)
        for first, last, master, *_ in nodes[0].r.cmd("CLUSTER", "SLOTS"):
            self.slots.append((first, last, int(master[1])))

    def slot(self, key):
        return self.nodes[0].r.cmd("CLUSTER", "KEYSLOT", key)

    def owner(self, key):
        slot = self.slot(key)
        port = next(p for a, b, p in self.slots if a <= slot <= b)
        return next(n for n in self.nodes if n.port == port)

    def ready(self):
        return f"{PREFIX}queues:{{{QUEUE}}}"

    def roles(self):
        out = {n.port: [] for n in self.nodes}
        held = [("queue", self.ready()), ("restart key", RESTART_KEY), *PAUSE_KEYS.items()]
        for what, key in held:
            out[self.owner(key).port].append(f"{what} (slot {self.slot(key)})")
        return out


def make_cluster(directory, taken):
    """Three cluster-enabled servers made one cluster of 3 masters;
    returns the nodes once every one says cluster_state:ok and knows the
    three."""
    for _ in range(START_TRIES):
        nodes = [Node.start(directory, taken, "--cluster-enabled", "yes",
                            "--cluster-config-file", f"nodes-{len(taken)}-{i}.conf",
                            "--cluster-node-timeout", "2000")
                 for i in range(3)]
        create = subprocess.run(
            ["redis-cli", "--cluster", "create", *[f"{HOST}:{n.port}" for n in nodes],
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True)
        if create.returncode == 0:
            break
        log(f"note: redis-cli --cluster create failed, again on new ports: "
            f"{create.stdout[-300:]}{create.stderr[-300:]}")
        for n in nodes:
            n.r.close()
            PROCS.stop(n.proc)
    else:
        raise RuntimeError("could not make a cluster")
    deadline = time.monotonic() + 30
    for n in nodes:
        while True:
            info = n.r.cmd("CLUSTER", "INFO").decode()
            if "cluster_state:ok" in info and "cluster_known_nodes:3" in info:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster never became ok: {info}")
            time.sleep(0.1)
    return nodes


def node_of_slot(node, slot):
    """The port of the master serving `slot`, as `node` sees it."""
    for first, last, master, *_ in node.r.cmd("CLUSTER", "SLOTS"):
        if first <= slot <= last:
            return int(master[1])
    return None


def move_slot(nodes, slot, to):
    """Moves the (empty) `slot` to the master `to`, as `redis-cli --cluster
    reshard` would for a slot with no keys; waits until every node agrees."""
    source = next(n for n in nodes if n.port == node_of_slot(nodes[0], slot))
    if source is to:
        return
    to_id = to.r.cmd("CLUSTER", "MYID").decode()
    source_id = source.r.cmd("CLUSTER", "MYID").decode()
    to.r.cmd("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    source.r.cmd("CLUSTER", "SETSLOT", slot, "MIGRATING", to_id)
    for n in [to, source] + [n for n in nodes if n is not to and n is not source]:
        n.r.cmd("CLUSTER", "SETSLOT", slot, "NODE", to_id)
    deadline = time.monotonic() + 30
    while not all(node_of_slot(n, slot) == to.port for n in nodes):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the nodes never agreed that :{to.port} serves slot {slot}")
        time.sleep(0.1)


class ClusterBench:
    """The rows on `lab` (compare.py's Bench: its binary, payloads, warm
    handler, output files): `jobs` per drain, `reps` repetitions."""

    def __init__(self, lab, jobs, reps, concurrency=32, processes=8):
        self.lab = lab
        self.jobs = jobs
        self.reps = reps
        self.concurrency = concurrency
        self.processes = processes
        self.dir = os.path.join(lab.dir, "cluster")
        os.makedirs(self.dir, exist_ok=True)
        self.taken = set()

    def config(self, name, redis_section, cache_extra=""):
        path = os.path.join(self.dir, f"{name}.toml")
        handlers = self.lab.handler_persistent([self.lab.warm], self.processes)
        with open(path, "w") as f:
            f.write(f"""[app]
laravel = "8.83"

[redis]
{redis_section}prefix = "{PREFIX}"

[queue]
connection = "redis"
queue = "{QUEUE}"
retry_after = 90

[cache]
store = "redis"
{cache_extra}prefix = "{CACHE_PREFIX}"
colon = true

[failed]
driver = "null"

{handlers}""")
        return path

    def setups(self):
        one = Node.start(self.dir, self.taken)
        server = Setup("one server", [one], self.config(
            "server", f'url = "redis://{HOST}:{one.port}/0"\n', "database = 1\n"))
        nodes = make_cluster(self.dir, self.taken)
        seeds = ", ".join(f'"redis://{HOST}:{n.port}"' for n in nodes[1:])
        cluster = ClusterSetup("3-master cluster", nodes, self.config(
            "cluster", f'url = "redis://{HOST}:{nodes[0].port}"\nnodes = [{seeds}]\n'
                       f'cluster = true\n'))
        # The same, with the cache keys' slots moved to the queue's master:
        # the one master then serves the queue and every key the worker reads.
        nodes = make_cluster(self.dir, self.taken)
        seeds = ", ".join(f'"redis://{HOST}:{n.port}"' for n in nodes[1:])
        queue_master = ClusterSetup("", nodes, "").owner(f"{PREFIX}queues:{{{QUEUE}}}")
        for key in (RESTART_KEY, *PAUSE_KEYS.values()):
            move_slot(nodes, nodes[0].r.cmd("CLUSTER", "KEYSLOT", key), queue_master)
        together = ClusterSetup("3-master cluster, cache keys on the queue's master", nodes,
                                self.config("together", f'url = "redis://{HOST}:{nodes[0].port}"'
                                                        f'\nnodes = [{seeds}]\ncluster = true\n'))
        return server, cluster, together

    def idle(self, setups, seconds=5.0):
        """CPU ms per second of each server, idle, over `seconds`."""
        nodes = [n for s in setups for n in s.nodes]
        before = [n.cpu() for n in nodes]
        time.sleep(seconds)
        return {n.port: (n.cpu() - b) * 1e3 / seconds for n, b in zip(nodes, before)}

    def prepare(self, setup, n):
        for node in setup.nodes:
            node.r.cmd("FLUSHALL")
        # the cache's restart key as a past queue:restart leaves it (db 1 on
        # one server, where the worker's cache connection reads it)
        owner = setup.owner(RESTART_KEY)
        if isinstance(setup, ClusterSetup):
            owner.r.cmd("SET", RESTART_KEY, str(int(time.time())))
        else:
            owner.r.cmd("SELECT", 1)
            owner.r.cmd("SET", RESTART_KEY, str(int(time.time())))
            owner.r.cmd("SELECT", 0)
        ready = setup.ready()
        push(setup.owner(ready).r, ready, (self.lab.payloads.make() for _ in range(n)),
             ready + ":notify")

    def drain(self, setup, n):
        """One drain of `n` jobs on `setup`; returns its numbers."""
        self.prepare(setup, n)
        ready = setup.ready()
        queue_node = setup.owner(ready)
        sampler = LengthSampler((HOST, queue_node.port), ready, 0.02)
        before = {node.port: node.counters() for node in setup.nodes}
        t0 = time.monotonic()
        worker = self.lab.worker(setup.config, "--stop-when-empty", "--sleep=0",
                                 f"--concurrency={self.concurrency}")
        sampler.start()
        try:
            _, daemon_cpu = wait_all([worker], timeout=max(600, n / 50))
        finally:
            samples = sampler.stop()
        wall = time.monotonic() - t0
        after = {node.port: node.counters() for node in setup.nodes}
        if worker.returncode != 0:
            log(f"warning: the worker on {setup.name} exited with {worker.returncode}")
        PROCS.stop(worker)
        left = queue_node.r.cmd("LLEN", ready)
        jobs_done, other = self.lab.outcomes()
        if left or jobs_done != n or other:
            log(f"WARNING: {setup.name}: {jobs_done} of {n} jobs done, {other} failed or "
                f"released, {left} left on {ready}")
        nodes = {}
        for node in setup.nodes:
            cpu, calls, usec, reads, errors = counted(before[node.port], after[node.port], n)
            nodes[node.port] = {"cpu_us": cpu, "calls": calls, "command_us": usec,
                                "reads": reads, "errors": errors}
        return {"wall": n / wall, "steady": steady(samples, n),
                "daemon_us": daemon_cpu * 1e6 / n, "nodes": nodes,
                "load": os.getloadavg()[0]}

    def rows(self):
        """Every setup, `reps` times; returns the results (see `table`).
        The servers are stopped at the end."""
        setups = self.setups()
        try:
            return self.measure(setups)
        finally:
            for s in setups:
                for node in s.nodes:
                    node.r.close()
                    PROCS.stop(node.proc)

    def measure(self, setups):
        idle = self.idle(setups)
        for s in setups:
            log(f"{s.name}: " + "; ".join(f":{p} holds {', '.join(r) or 'none of them'}"
                                         for p, r in s.roles().items()))
        for s in setups:  # warm-up, not counted
            self.drain(s, max(1, self.jobs // 10))
        runs = {s.name: [] for s in setups}
        for rep in range(self.reps):
            # the one server first, then last, in turn
            order = setups if rep % 2 == 0 else list(setups[1:]) + [setups[0]]
            for s in order:
                res = self.drain(s, self.jobs)
                runs[s.name].append(res)
                per_node = ", ".join(f":{p} {v['cpu_us']:.1f} µs ({v['reads']:.2f} reads)"
                                     for p, v in res["nodes"].items())
                log(f"[rep {rep + 1}] {s.name}: {self.jobs} jobs, {res['wall']:,.0f} jobs/s "
                    f"(steady {fmt(res['steady'])}), daemon {res['daemon_us']:.1f} µs/job, "
                    f"Redis {per_node}, load {res['load']:.2f}")
        out = {"jobs": self.jobs, "reps": self.reps, "concurrency": self.concurrency,
               "processes": self.processes, "setups": []}
        for s in setups:
            rs = runs[s.name]
            nodes = []
            roles = s.roles()
            for node in s.nodes:
                vs = [r["nodes"][node.port] for r in rs]
                names = sorted({c for v in vs for c in v["calls"]})
                nodes.append({
                    "port": node.port, "holds": roles[node.port],
                    "cpu_us": median(v["cpu_us"] for v in vs),
                    "command_us": median(v["command_us"] for v in vs),
                    "reads": median(v["reads"] for v in vs),
                    "calls": {c: median(v["calls"].get(c, 0) for v in vs) for c in names},
                    "idle_ms_per_s": idle[node.port],
                    # error replies (MOVED, ASK, ...) summed over the repetitions
                    "errors": {k: sum(v["errors"].get(k, 0) for v in vs)
                               for k in sorted({k for v in vs for k in v["errors"]})},
                })
            out["setups"].append({
                "setup": s.name, "jobs_per_s": median(r["wall"] for r in rs),
                "steady": median(r["steady"] for r in rs),
                "daemon_us": median(r["daemon_us"] for r in rs),
                "redis_us": median(sum(v["cpu_us"] for v in r["nodes"].values()) for r in rs),
                "load": [r["load"] for r in rs], "nodes": nodes})
        return out


# ---------------------------------------------------------------- report

def steady(samples, n):
    """jobs/s while the ready list falls from 90 % to 10 % of n."""
    a = next((s for s in samples if s[1] <= 0.9 * n), None)
    b = next((s for s in samples if s[1] <= 0.1 * n), None)
    if not a or not b or b[0] - a[0] < 0.05:
        return None
    return (a[1] - b[1]) / (b[0] - a[0])


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, spec=",.0f"):
    return "n/a" if v is None else format(v, spec)


def per_thousand(v):
    """Calls per job `v` as calls per 1,000 jobs: whole from 10 up, else
    two significant digits."""
    v *= 1000
    return f"{v:,.0f}" if v >= 10 else f"{v:.2g}"


def errors(node):
    """The error replies (MOVED, ASK, ...) over every repetition, or none."""
    return ", ".join(f"{k} {v}" for k, v in node.get("errors", {}).items()) or "none"


def holds(node):
    return ", ".join(node["holds"]) or "none of these keys"


def table(results):
    """The results as Markdown lines."""
    one = next(s for s in results["setups"] if s["setup"] == "one server")
    base = one["redis_us"]
    out = [f"{results['jobs']:,} jobs per drain, `--concurrency={results['concurrency']}`, "
           f"{results['processes']} warm no-op processes, medians of {results['reps']}:",
           "",
           "| setup | holds | jobs/s (wall) | jobs/s (steady) | daemon CPU/job | Redis CPU/job "
           "| × one server |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for s in results["setups"]:
        label = s["setup"] if s is one else f"{s['setup']}, all masters"
        what = holds(s["nodes"][0]) if s is one else ""
        out.append(f"| {label} | {what} | {fmt(s['jobs_per_s'])} | {fmt(s['steady'])} | "
                   f"{s['daemon_us']:.1f} µs | {s['redis_us']:.1f} µs | "
                   f"{s['redis_us'] / base:.2f}× |")
        if s is one:
            continue
        for node in sorted(s["nodes"], key=lambda v: (-v["cpu_us"], v["port"])):
            out.append(f"| – master :{node['port']} | {holds(node)} | | | | "
                       f"{node['cpu_us']:.1f} µs | {node['cpu_us'] / base:.2f}× |")
    out.append("")
    out.append("Per job on each server (`INFO commandstats` and `INFO stats` before and after; "
               "the sampler's LLEN and the script's INFO left out): calls of each command "
               "(those a Lua script makes counted too: the pop script's LPOPs and ZADD), "
               "the commands' own time, reads of client input (about one per round trip), "
               "error replies (MOVED, ASK, ...) over all repetitions; "
               "idle CPU over 5 s before the repetitions:")
    out.append("")
    for s in results["setups"]:
        for node in sorted(s["nodes"], key=lambda v: (-v["cpu_us"], v["port"])):
            calls = ", ".join(f"{c.upper()} {per_thousand(v)}" for c, v in
                              sorted(node["calls"].items(), key=lambda x: -x[1]) if v > 0)
            total = sum(node["calls"].values())
            out.append(f"- {s['setup']} :{node['port']} ({holds(node)}): {total:.3f} "
                       f"calls/job (per 1,000 jobs: {calls or 'none'}); commands' time "
                       f"{node['command_us']:.1f} µs/job; {node['reads']:.2f} reads/job; "
                       f"error replies: {errors(node)}; "
                       f"idle {node['idle_ms_per_s']:.1f} ms CPU/s")
    loads = [x for s in results["setups"] for x in s["load"]]
    if loads:
        out.append(f"- load average after each drain: {min(loads):.2f}–{max(loads):.2f}")
    return out
