#!/usr/bin/env python3
"""SQS requests per 1,000 no-op jobs and when idle, for one laravel-worker daemon
against a private moto server (issue 28's benchmark), beside what `queue:work sqs` sends
for the same jobs, computed from Laravel's SqsQueue (the PHP AWS SDK is not installed).

A counting proxy sits between the worker and moto and counts each request by its
`X-Amz-Target` (the SQS JSON protocol names the call there). Usage, from the repository
root after `cargo build` (or with --binary target/release/laravel-worker):

    python3 bench/sqs_requests.py [--jobs 1000] [--idle 60] [--concurrency 10] [--no-pace]

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
    ap.add_argument("--idle", type=float, default=60.0, help="seconds to watch an idle worker")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--sleep", type=int, default=3, help="--sleep, for queue:work's idle polls")
    ap.add_argument("--binary", default="target/debug/laravel-worker")
    ap.add_argument("--no-pace", action="store_true", help="skip measuring moto alone")
    args = ap.parse_args()

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


def run(args, moto_port):
    endpoint = f"http://127.0.0.1:{moto_port}"
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test")
    url = sqs.create_queue(QueueName="bench")["QueueUrl"]
    body = ('{"uuid":"u","displayName":"App\\\\Jobs\\\\Noop","job":"Illuminate\\\\Queue\\\\'
            'CallQueuedHandler@call","maxTries":null,"maxExceptions":null,"failOnTimeout":false,'
            '"backoff":null,"timeout":null,"retryUntil":null,"data":{"commandName":'
            '"App\\\\Jobs\\\\Noop","command":"O:13:\\"App\\\\Jobs\\\\Noop\\":0:{}"}}')
    paces = None if args.no_pace else (pace(sqs, body, args.jobs, 1), pace(sqs, body, args.jobs, 10))
    fill(sqs, url, body, args.jobs)
    proxy = Proxy(moto_port)
    tmp = tempfile.mkdtemp(prefix="lw-sqs-bench-")
    config = os.path.join(tmp, "worker.toml")
    with open(config, "w") as f:
        f.write(f'[queue]\nconnection = "sqs"\n\n[sqs]\nprefix = "http://127.0.0.1:{proxy.port}/123456789012"\n'
                f'endpoint = "http://127.0.0.1:{proxy.port}"\nkey = "test"\nsecret = "test"\n\n'
                '[failed]\ndriver = "null"\n\n[cache]\nstore = "none"\n\n'
                '[[handlers]]\nmatch = "*"\ncommand = ["true"]\n')
    env = dict(os.environ, RUST_LOG="warn")
    started = time.time()
    subprocess.run([args.binary, "--config", config, "work", "--queue=bench",
                    "--stop-when-empty", "--sleep=0", f"--concurrency={args.concurrency}"],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    took = time.time() - started
    busy = proxy.take()
    left = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert left["ApproximateNumberOfMessages"] == "0", left

    worker = subprocess.Popen([args.binary, "--config", config, "work", "--queue=bench",
                               f"--sleep={args.sleep}"], env=env, stdout=subprocess.DEVNULL)
    time.sleep(args.idle)
    worker.send_signal(signal.SIGTERM)
    worker.wait()
    idle = proxy.take()

    per_1000 = sum(busy.values()) * 1000 / args.jobs
    laravel = 2 * args.jobs + 1  # a receive and a delete per job, one empty receive at the end
    idle_per_min = sum(idle.values()) * 60 / args.idle
    laravel_idle = 60 / args.sleep  # one short poll per --sleep (queue attribute wait 0)
    print(f"jobs: {args.jobs} no-op (handler `true`), concurrency {args.concurrency}, binary {args.binary}")
    print(f"busy calls: {dict(busy)}")
    print(f"idle calls over {args.idle:.0f} s: {dict(idle)}")
    print("| | laravel-worker | queue:work sqs (computed) |")
    print("|---|---|---|")
    print(f"| requests per 1,000 jobs | {per_1000:.0f} | {laravel * 1000 / args.jobs:.0f} |")
    print(f"| jobs/s, one daemon | {args.jobs / took:.0f} | not measured (no PHP AWS SDK here) |")
    print(f"| requests a minute per idle queue (--sleep={args.sleep}) | {idle_per_min:.1f} | {laravel_idle:.0f} |")
    if paces:
        print(f"moto alone, one boto3 client, {args.jobs} jobs: receive 1 + DeleteMessage "
              f"(queue:work's calls) {paces[0]:.0f} jobs/s; receive 10 + DeleteMessageBatch "
              f"{paces[1]:.0f} jobs/s")


if __name__ == "__main__":
    main()
