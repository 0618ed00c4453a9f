#!/usr/bin/env python3
"""What the PHP bridge's finish mode costs (issue 45): chained jobs run by a
non-PHP handler against the same number of jobs that need no finish.

    bench/compare.py --only finish [--size quick|full] [--reps N] [--baseline BIN]

Run by bench/compare.py when `--only` names `finish` (never in the default
run), on that run's Redis, app copy and binary; skipped with a printed
reason without PHP. Per repetition, in turn:

  * *chained*: N chains of two `App\\Jobs\\ChainStep` jobs dispatched by the
    app (`Bus::chain([a, b])`, N jobs queued, N more pushed by the finishes);
  * *unchained*: 2N one-step chains (`chained` empty: nothing to finish);

each drained by one `laravel-worker work --stop-when-empty --sleep=0
--concurrency=C` (C = 1, then 8) whose `App\\Jobs\\ChainStep` handler is the
warm no-op persistent handler of the Redis rows (one process per slot)
and whose other jobs, and the finishes, go to the PHP bridge (persistent,
2 processes). Both rows run 2N jobs; the first finishes N of them (a's
finish dispatches b). jobs/s = 2N / (exec to exit) of the worker, medians
over the repetitions; *ms per finish* = (chained time − unchained time) / N,
each repetition's, their median: what one finish adds to a job that needs
it (the bridge unserializes the command and dispatches the next step
through the app's bus). Jobs that need no finish pay nothing: compare the
unchained row with a `--baseline` build from before the finish mode.
"""

import os
import subprocess
import time

from benchlib import PROCS, QUEUE, ROOT, keys, log, wait_all
from database import median

STEP = "App\\Jobs\\ChainStep"


class FinishBench:
    """The rows on `lab` (compare.py's run): `chains` chains per row."""

    def __init__(self, lab, chains, reps, bins):
        self.lab = lab
        self.chains = chains
        self.reps = reps
        self.bins = bins
        self.results = {"rows": [], "skipped": [], "chains": chains}

    def config(self, c):
        bridge = ["php", os.path.join(ROOT, "php", "laravel-worker-bridge.php"),
                  f"--app={self.lab.app}"]
        handlers = (self.lab.handler_persistent([self.lab.warm], c, match=STEP)
                    + self.lab.handler_persistent(bridge, 2, decode_command=False))
        return self.lab.config(f"finish-c{c}", handlers)

    def dispatch(self, steps, count):
        """`count` chains of `steps` through the app's bus (artisan)."""
        spec = f'[{{"kind":"chain","tag":"c","steps":{steps},"count":{count}}}]'
        subprocess.run(["php", "artisan", "test:dispatch", spec], cwd=self.lab.app,
                       env=self.lab.php_env(), check=True, stdout=subprocess.DEVNULL)

    def drain(self, c, binary):
        """Runs one worker to its exit; (seconds, jobs done, other)."""
        t0 = time.monotonic()
        proc = self.lab.worker(self.config(c), "--stop-when-empty", "--sleep=0",
                               f"--concurrency={c}", binary=binary)
        wait_all([proc], timeout=max(600, self.chains))
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            log(f"warning: the worker exited with {proc.returncode}")
        PROCS.stop(proc)
        done, other = self.lab.outcomes()
        return wall, done, other

    def rows(self):
        if not self.lab.app:
            why = "the PHP app cannot run here (no PHP or Debian's Laravel)"
            log(f"note: skipping finish: {why}")
            self.results["skipped"].append(why)
            return self.results
        n = self.chains
        kinds = [("chained", '["a","b"]', n), ("unchained", '["a"]', 2 * n)]
        runs = {}
        for rep in range(self.reps):
            for c in (1, 8):
                for i, (label, binary) in enumerate(self.bins):
                    # A --baseline build may predate the finish mode (its
                    # chains would stop at a): it runs the unchained row.
                    for kind, steps, count in kinds if i == 0 else kinds[1:]:
                        self.lab.flush()
                        self.dispatch(steps, count)
                        wall, done, other = self.drain(c, binary)
                        left = self.lab.r.cmd("LLEN", keys(QUEUE)[0])
                        if done != 2 * n or other or left:
                            log(f"WARNING: finish {kind} c={c}{label}: {done} of {2 * n} "
                                f"jobs done, {other} other, {left} left")
                        runs.setdefault((c, label, kind), []).append(wall)
                        log(f"[rep {rep + 1}] finish {kind}, c={c}{label}: {2 * n} jobs, "
                            f"{2 * n / wall:.0f} jobs/s, load {os.getloadavg()[0]:.2f}")
        for c in (1, 8):
            for label, _ in self.bins:
                chained = runs.get((c, label, "chained"), [])
                plain = runs[(c, label, "unchained")]
                per_finish = [(a - b) * 1e3 / n for a, b in zip(chained, plain)]
                self.results["rows"].append({
                    "c": c, "build": label.strip() or "this build", "jobs": 2 * n,
                    "reps": len(plain),
                    "chained_jobs_per_s": median([2 * n / w for w in chained]),
                    "unchained_jobs_per_s": median([2 * n / w for w in plain]),
                    "ms_per_finish": median(per_finish),
                    "ms_per_finish_each": per_finish,
                })
        return self.results


def table(results):
    """The results as Markdown lines."""
    out = ["| concurrency | build | jobs per row | reps | unchained jobs/s | chained jobs/s "
           "(half finished) | ms per finish (median; each repetition) |",
           "|---:|---|---:|---:|---:|---:|---|"]
    for r in results["rows"]:
        each = ", ".join(f"{x:.2f}" for x in r["ms_per_finish_each"])
        chained = r["chained_jobs_per_s"]
        finish = r["ms_per_finish"]
        out.append(f"| {r['c']} | {r['build']} | {r['jobs']:,} | {r['reps']} | "
                   f"{r['unchained_jobs_per_s']:,.0f} | "
                   f"{'' if chained is None else f'{chained:,.0f}'} | "
                   f"{'' if finish is None else f'{finish:.2f} ({each})'} |")
    for s in results["skipped"]:
        out.append(f"- skipped: {s}")
    return out
