#!/usr/bin/env python3
"""A laravel-worker handler in Python, for the process and persistent modes.

    [[handlers]]
    match = "App\\Jobs\\*"
    command = ["python3", "/srv/handlers/handler.py"]
    # mode = "persistent"   # keep it warm: one process takes job after job

handle() runs one job and returns the answer. This one does what the job's
`data.action` asks (done by default; "throw" raises), so every answer can be
tried with `laravel-worker push default --job 'App\\Jobs\\Try' --data
'{"action":"release","delay":5}'`. Replace its body with the real work.
"""
import json
import os
import sys


def handle(job):
    if job["mode"] == "failed":  # the failed hook: the worker failed the job
        print(f"failed hook for {job['name']}: {job['exception']}", file=sys.stderr)
        return {"action": "done"}
    data = job["payload"].get("data")
    data = data if isinstance(data, dict) else {}
    print(f"running {job['name']}, attempt {job['attempt']}", file=sys.stderr)
    if data.get("action") == "throw":
        raise RuntimeError("the job asked to throw")
    return data if "action" in data else {"action": "done"}


def failure(error):
    """An uncaught error, as the answer the worker records it with."""
    return {"action": "exception", "class": type(error).__name__, "message": str(error)}


if os.environ.get("LARAVEL_WORKER_PROTOCOL") == "persistent":
    # One request per line on stdin; exactly one answer per request on fd 3,
    # echoing its "call". End of stdin means exit.
    answers = os.fdopen(3, "w")
    for line in sys.stdin:
        request = json.loads(line)
        job = dict(request, payload=json.loads(request["payload"]))
        try:
            answer = handle(job)
        except Exception as error:
            answer = failure(error)
        answers.write(json.dumps(dict(answer, call=request["call"])) + "\n")
        answers.flush()
else:
    # One job per process: the payload on stdin, the rest in the environment.
    # Exit 0 = done; any other answer goes to the result file.
    job = {
        "mode": os.environ["LARAVEL_WORKER_MODE"],
        "name": os.environ["LARAVEL_WORKER_JOB_NAME"],
        "attempt": int(os.environ["LARAVEL_WORKER_ATTEMPT"]),
        "exception": os.environ.get("LARAVEL_WORKER_EXCEPTION", ""),
        "payload": json.load(sys.stdin),
    }
    try:
        answer = handle(job)
    except Exception as error:
        answer = failure(error)
    if answer.get("action") != "done":
        with open(os.environ["LARAVEL_WORKER_RESULT"], "w") as result:
            json.dump(answer, result)
