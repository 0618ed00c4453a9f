#!/usr/bin/env python3
"""SQS requests per 1,000 no-op jobs and when idle, for one laravel-worker daemon
against a private moto server (issue 28's benchmark), beside what `queue:work sqs` sends
for the same jobs, computed from Laravel's SqsQueue (the PHP AWS SDK is not installed).

A counting proxy sits between the worker and moto and counts each request by its
`X-Amz-Target` (the SQS JSON protocol names the call there). Usage, from the repository
root after `cargo build` (or with --binary target/release/laravel-worker):

    python3 bench/sqs_requests.py [--jobs 1000] [--idle 60] [--concurrency 10] [--no-pace]

To compare builds in one run, give several binaries (LABEL=PATH), several concurrencies and
rounds: each round runs every concurrency with every binary in turn, each on a fresh queue,
and the table gives the medians (requests per 1,000 jobs and jobs/s):

    python3 bench/sqs_requests.py --binary before=/tmp/lw-before --binary after=target/debug/laravel-worker \
        --concurrency 1,10,20 --rounds 3 --jobs 500 --idle 0 --no-pace

jobs/s against moto is moto's pace more than the worker's: moto answers one call at a time, in
Python, and a receive costs more the more messages the queue holds. So the script also measures
moto alone (unless --no-pace): one boto3 client draining the same number of jobs with Laravel's
calls (receive 1, delete) and with a receive of 10 and a batch delete, the most one client in a
loop gets from this server.
"""

import argparse
import asyncio
import collections
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import boto3

TARGET = re.compile(rb"x-amz-target:\s*AmazonSQS\.(\w+)", re.IGNORECASE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy:
    """A TCP proxy counting SQS calls, on its own thread and event loop."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.counts = collections.Counter()
        self.port = free_port()
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("proxy did not start")

    def take(self):
        with self.lock:
            counts, self.counts = self.counts, collections.Counter()
        return counts

    def _run(self):
        asyncio.run(self._serve())

    async def _serve(self):
        server = await asyncio.start_server(self._client, "127.0.0.1", self.port)
        async with server:
            await server.serve_forever()

    async def _client(self, reader, writer):
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)

        async def pump(src, dst, count):
            try:
                while data := await src.read(65536):
                    if count:
                        with self.lock:
                            for m in TARGET.finditer(data):
                                self.counts[m.group(1).decode()] += 1
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--idle", type=float, default=60.0,
                    help="seconds to watch an idle worker (0: skip), once per binary")
    ap.add_argument("--concurrency", default="10",
                    help="--concurrency of the busy runs; a comma list runs each (1,10,20)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="busy runs per binary and concurrency, alternated; the table gives medians")
    ap.add_argument("--sleep", type=int, default=3, help="--sleep, for queue:work's idle polls")
    ap.add_argument("--binary", action="append",
                    help="LABEL=PATH or PATH; repeat to compare builds in one run "
                         "(default target/debug/laravel-worker)")
    ap.add_argument("--no-pace", action="store_true", help="skip measuring moto alone")
    args = ap.parse_args()
    args.binaries = []
    for given in args.binary or ["target/debug/laravel-worker"]:
        label, _, path = given.rpartition("=")
        args.binaries.append((label or path, path))
    args.concurrencies = [int(c) for c in args.concurrency.split(",")]

    moto_port = free_port()
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{moto_port}/moto-api/", timeout=1)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        run(args, moto_port)
    finally:
        os.killpg(moto.pid, signal.SIGKILL)
        moto.wait()


def fill(sqs, url, body, jobs):
    """Sends `jobs` copies of `body` to `url`, 10 a call."""
    for start in range(0, jobs, 10):
        n = min(10, jobs - start)
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": body} for i in range(n)])


def pace(sqs, body, jobs, batch):
    """Jobs/s of one boto3 client draining `jobs` messages of a queue of its own on moto,
    receiving up to `batch` at a time (no wait) and deleting them (one DeleteMessage for a
    receive of 1, else a DeleteMessageBatch)."""
    url = sqs.create_queue(QueueName=f"pace-{batch}")["QueueUrl"]
    fill(sqs, url, body, jobs)
    started = time.time()
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=batch, WaitTimeSeconds=0,
                                  MessageSystemAttributeNames=["ApproximateReceiveCount"]
                                  ).get("Messages", [])
        if not got:
            break
        if batch == 1:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
        else:
            sqs.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])
    return jobs / (time.time() - started)


def busy_run(args, sqs, proxy, body, binary, concurrency, run_no, tmp):
    """One daemon draining `args.jobs` jobs from a fresh queue through the proxy: the calls
    it made (by name) and its jobs/s."""
    name = f"bench-{run_no}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    fill(sqs, url, body, args.jobs)
    config = write_config(tmp, proxy)
    proxy.take()
    started = time.time()
    subprocess.run([binary, "--config", config, "work", f"--queue={name}",
                    "--stop-when-empty", "--sleep=0", f"--concurrency={concurrency}"],
                   env=worker_env(), check=True, stdout=subprocess.DEVNULL)
    took = time.time() - started
    calls = proxy.take()
    left = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert left["ApproximateNumberOfMessages"] == "0", left
    assert left["ApproximateNumberOfMessagesNotVisible"] == "0", left
    return calls, args.jobs / took


def idle_run(args, sqs, proxy, binary, tmp):
    """Calls a minute of an idle worker (`--sleep`) on an empty queue."""
    sqs.create_queue(QueueName="bench-idle")
    config = write_config(tmp, proxy)
    proxy.take()
    worker = subprocess.Popen([binary, "--config", config, "work", "--queue=bench-idle",
                               f"--sleep={args.sleep}"], env=worker_env(),
                              stdout=subprocess.DEVNULL)
    time.sleep(args.idle)
    worker.send_signal(signal.SIGTERM)
    worker.wait()
    return proxy.take()


def write_config(tmp, proxy):
    config = os.path.join(tmp, "worker.toml")
    with open(config, "w") as f:
        f.write(f'[queue]\nconnection = "sqs"\n\n[sqs]\nprefix = "http://127.0.0.1:{proxy.port}/123456789012"\n'
                f'endpoint = "http://127.0.0.1:{proxy.port}"\nkey = "test"\nsecret = "test"\n\n'
                '[failed]\ndriver = "null"\n\n[cache]\nstore = "none"\n\n'
                '[[handlers]]\nmatch = "*"\ncommand = ["true"]\n')
    return config


def worker_env():
    # LW_BENCH_LOG: the worker's RUST_LOG (its stderr is left on the terminal), to see
    # e.g. laravel_worker::queue::sqs=trace (each receive's size, each delete call's).
    return dict(os.environ, RUST_LOG=os.environ.get("LW_BENCH_LOG", "warn"))


def median(values):
    return statistics.median(values)


def run(args, moto_port):
    endpoint = f"http://127.0.0.1:{moto_port}"
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test")
    body = ('{"uuid":"u","displayName":"App\\\\Jobs\\\\Noop","job":"Illuminate\\\\Queue\\\\'
            'CallQueuedHandler@call","maxTries":null,"maxExceptions":null,"failOnTimeout":false,'
            '"backoff":null,"timeout":null,"retryUntil":null,"data":{"commandName":'
            '"App\\\\Jobs\\\\Noop","command":"O:13:\\"App\\\\Jobs\\\\Noop\\":0:{}"}}')
    paces = None if args.no_pace else (pace(sqs, body, args.jobs, 1), pace(sqs, body, args.jobs, 10))
    proxy = Proxy(moto_port)
    tmp = tempfile.mkdtemp(prefix="lw-sqs-bench-")
    laravel = 2 * args.jobs + 1  # a receive and a delete per job, one empty receive at the end
    laravel_per_1000 = laravel * 1000 / args.jobs
    print(f"jobs: {args.jobs} no-op (handler `true`) a run, {args.rounds} round(s), "
          f"binaries alternated: {', '.join(f'{l}={p}' for l, p in args.binaries)}")
    results = collections.defaultdict(list)
    run_no = 0
    for round_no in range(args.rounds):
        for concurrency in args.concurrencies:
            for label, binary in args.binaries:
                run_no += 1
                calls, rate = busy_run(args, sqs, proxy, body, binary, concurrency, run_no, tmp)
                results[(label, concurrency)].append((calls, rate))
                print(f"round {round_no + 1}, {label}, c={concurrency}: {dict(calls)}, "
                      f"{rate:.1f} jobs/s", flush=True)
    print()
    print(f"Medians of {args.rounds} run(s); queue:work sqs computed: "
          f"{laravel_per_1000:.0f} requests per 1,000 jobs (a receive of 1 and a DeleteMessage a job).")
    print()
    print("| binary | --concurrency | requests per 1,000 jobs | ReceiveMessage / DeleteMessageBatch "
          "/ DeleteMessage | of queue:work sqs's | jobs/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for concurrency in args.concurrencies:
        for label, _ in args.binaries:
            runs = results[(label, concurrency)]
            per = lambda calls, name=None: (sum(calls.values()) if name is None else calls[name]) * 1000 / args.jobs
            total = median([per(c) for c, _ in runs])
            parts = " / ".join(f"{median([per(c, n) for c, _ in runs]):.0f}"
                               for n in ("ReceiveMessage", "DeleteMessageBatch", "DeleteMessage"))
            rate = median([r for _, r in runs])
            print(f"| {label} | {concurrency} | {total:.0f} | {parts} | "
                  f"{100 * total / laravel_per_1000:.1f} % | {rate:.1f} |")
    if args.idle > 0:
        print()
        print(f"| binary | requests a minute, one idle queue, --sleep={args.sleep} | queue:work sqs |")
        print("|---|---:|---:|")
        for label, binary in args.binaries:
            idle = idle_run(args, sqs, proxy, binary, tmp)
            print(f"| {label} | {sum(idle.values()) * 60 / args.idle:.1f} ({dict(idle)}) | "
                  f"{60 / args.sleep:.0f} |")
    if paces:
        print(f"moto alone, one boto3 client, {args.jobs} jobs: receive 1 + DeleteMessage "
              f"(queue:work's calls) {paces[0]:.0f} jobs/s; receive 10 + DeleteMessageBatch "
              f"{paces[1]:.0f} jobs/s")


if __name__ == "__main__":
    main()
