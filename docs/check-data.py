#!/usr/bin/env python3
"""Parses the data files the book ships: the Grafana dashboard (JSON), the
Prometheus alert rules, the Kubernetes manifest and the autoscaling recipes
(YAML). PyYAML is needed
for the YAML files (`pip install pyyaml`). Exit status 1 on the first file
that does not parse, or whose shape is not the expected one."""

import json
import os
import sys

import yaml

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "src")


def path(name):
    return os.path.join(DOCS, name)


def main():
    with open(path("operations/grafana-dashboard.json"), encoding="utf-8") as f:
        dashboard = json.load(f)
    assert dashboard.get("panels"), "the dashboard has no panels"
    for panel in dashboard["panels"]:
        assert panel.get("targets"), f"panel {panel.get('title')!r} has no query"

    with open(path("operations/prometheus-alerts.yml"), encoding="utf-8") as f:
        alerts = yaml.safe_load(f)
    rules = [rule for group in alerts["groups"] for rule in group["rules"]]
    assert rules, "no alert rules"
    for rule in rules:
        assert rule.get("alert") and rule.get("expr"), f"a rule without alert or expr: {rule}"

    with open(path("migrating/kubernetes.yaml"), encoding="utf-8") as f:
        manifest = [doc for doc in yaml.safe_load_all(f) if doc]
    kinds = [doc["kind"] for doc in manifest]
    assert "Deployment" in kinds, f"the manifest has no Deployment: {kinds}"
    drivers = check_deploy_files(manifest)

    autoscaling = check_autoscaling()

    print(f"check-data: dashboard ({len(dashboard['panels'])} panels), "
          f"{len(rules)} alert rules, Kubernetes manifest ({', '.join(kinds)}), "
          f"app environments ({drivers}), Compose file, "
          f"autoscaling recipes ({autoscaling}) parse")
    return 0


# The queue drivers laravel-worker runs (src/config/driver.rs SERVED_DRIVERS).
DRIVERS = ("redis", "database", "sqs", "beanstalkd")


def check_deploy_files(manifest):
    """The deploy files work as written on every driver: the Deployment and
    the Compose service run `work` without a connection (the app's
    QUEUE_CONNECTION) and ask the app at /app; kubernetes-env.yaml has one
    app-env ConfigMap per driver, naming it in QUEUE_CONNECTION, and the
    Deployment's envFrom names one of them. The Kubernetes objects are
    checked against the schema (kubernetes-validate, when installed)."""
    [deployment] = [d for d in manifest if d["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    check_work_command(container["args"], "the Deployment")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env.get("LARAVEL_WORKER_APP") == "/app", env
    with open(path("migrating/kubernetes-env.yaml"), encoding="utf-8") as f:
        envs = [doc for doc in yaml.safe_load_all(f) if doc]
    by_name = {doc["metadata"]["name"]: doc for doc in envs}
    assert set(by_name) == {f"app-env-{d}" for d in DRIVERS}, set(by_name)
    for driver in DRIVERS:
        data = by_name[f"app-env-{driver}"]["data"]
        assert data["QUEUE_CONNECTION"] == driver, data
        assert all(isinstance(v, str) for v in data.values()), data
    refs = [e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e]
    assert refs and all(r in by_name for r in refs), refs
    with open(path("migrating/compose.yaml"), encoding="utf-8") as f:
        compose = yaml.safe_load(f)
    worker = compose["services"]["worker"]
    check_work_command(worker["command"], "the Compose service")
    assert worker["environment"]["LARAVEL_WORKER_APP"] == "/app", worker
    assert ".:/app" in worker["volumes"], worker
    try:
        import kubernetes_validate
    except ImportError:
        return "not checked against the schema: pip install kubernetes-validate"
    for doc in manifest + envs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    return ", ".join(DRIVERS) + ", with the manifest, valid for Kubernetes 1.30"


def check_work_command(args, where):
    """`work` and queue:work's options: no connection argument, so the
    app's own connection is served, never a `redis` written in."""
    assert args[0] == "work", (where, args)
    assert all(a.startswith("--") for a in args[1:]), (where, "names a connection", args)


def check_autoscaling():
    """The KEDA ScaledObject and the HPA of the autoscaling recipes: the
    HPA against the Kubernetes schema (kubernetes-validate, when installed),
    the ScaledObject (a CRD the schema does not know) by its shape."""
    check_database_autoscaling()
    sqs = check_sqs_autoscaling()
    with open(path("migrating/kubernetes-autoscaling.yaml"), encoding="utf-8") as f:
        docs = {doc["kind"]: doc for doc in yaml.safe_load_all(f) if doc}
    scaled, hpa = docs["ScaledObject"], docs["HorizontalPodAutoscaler"]
    triggers = {t["type"]: t["metadata"] for t in scaled["spec"]["triggers"]}
    assert "max(laravel_worker_queue_backlog" in triggers["prometheus"]["query"], triggers
    assert "queues:" in triggers["redis"]["listName"], triggers
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]["name"]
    assert metric == "laravel_worker_queue_backlog", metric
    try:
        import kubernetes_validate
    except ImportError:
        return ("HPA and the SQS recipe's ServiceAccount not checked against the schema: "
                "pip install kubernetes-validate")
    kubernetes_validate.validate(hpa, "1.30.0", strict=True)
    kubernetes_validate.validate(sqs["ServiceAccount"], "1.30.0", strict=True)
    return "HPA and the SQS recipe's ServiceAccount valid for Kubernetes 1.30"


def check_database_autoscaling():
    """The database queue's KEDA recipe: a ScaledObject whose postgresql
    and mysql triggers each count one queue's rows of the jobs table
    (tests/integration/database_worker.rs runs the queries themselves)."""
    with open(path("migrating/kubernetes-autoscaling-database.yaml"), encoding="utf-8") as f:
        scaled = yaml.safe_load(f)
    assert scaled["kind"] == "ScaledObject", scaled["kind"]
    triggers = {t["type"]: t["metadata"] for t in scaled["spec"]["triggers"]}
    for kind in ("postgresql", "mysql"):
        assert triggers[kind]["query"].startswith("SELECT count(*) FROM jobs"), triggers[kind]


def check_sqs_autoscaling():
    """The SQS queue's KEDA recipe: a ServiceAccount for the worker pods
    (IRSA), a TriggerAuthentication (KEDA's own AWS identity) and a
    ScaledObject on the worker Deployment whose aws-sqs-queue trigger uses
    it and counts what the backlog gauge counts (visible + in flight: the
    trigger's default, not turned off; delayed messages left out). Returns
    the documents by kind; the ServiceAccount is checked against the
    Kubernetes schema by the caller."""
    with open(path("migrating/kubernetes-autoscaling-sqs.yaml"), encoding="utf-8") as f:
        docs = {doc["kind"]: doc for doc in yaml.safe_load_all(f) if doc}
    assert set(docs) == {"ServiceAccount", "TriggerAuthentication", "ScaledObject"}, set(docs)
    with open(path("migrating/kubernetes.yaml"), encoding="utf-8") as f:
        deployment = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "Deployment"][0]
    account = docs["ServiceAccount"]
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith(
        "arn:aws:iam::"), account
    auth = docs["TriggerAuthentication"]
    assert auth["apiVersion"] == "keda.sh/v1alpha1", auth
    assert auth["spec"]["podIdentity"]["provider"] == "aws", auth
    scaled = docs["ScaledObject"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1", scaled
    target = scaled["spec"]["scaleTargetRef"]["name"]
    assert target == deployment["metadata"]["name"], (target, deployment["metadata"]["name"])
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "aws-sqs-queue", trigger
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"], trigger
    meta = trigger["metadata"]
    url = meta["queueURL"]
    assert url.startswith(f"https://sqs.{meta['awsRegion']}.amazonaws.com/"), meta
    assert meta.get("scaleOnInFlight", "true") == "true", "in-flight messages are backlog"
    assert meta.get("scaleOnDelayed", "false") == "false", "delayed messages are not"
    assert int(meta["queueLength"]) > 0, meta
    return docs


if __name__ == "__main__":
    sys.exit(main())
