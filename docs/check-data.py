#!/usr/bin/env python3
"""Parses the data files the book ships: the Grafana dashboard (JSON), the
Prometheus alert rules and the Kubernetes manifest (YAML). PyYAML is needed
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
        kinds = [doc["kind"] for doc in yaml.safe_load_all(f) if doc]
    assert "Deployment" in kinds, f"the manifest has no Deployment: {kinds}"

    autoscaling = check_autoscaling()

    print(f"check-data: dashboard ({len(dashboard['panels'])} panels), "
          f"{len(rules)} alert rules, Kubernetes manifest ({', '.join(kinds)}), "
          f"autoscaling recipes ({autoscaling}) parse")
    return 0


def check_autoscaling():
    """The KEDA ScaledObject and the HPA of the autoscaling recipes: the
    HPA against the Kubernetes schema (kubernetes-validate, when installed),
    the ScaledObject (a CRD the schema does not know) by its shape."""
    check_database_autoscaling()
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
        return "HPA not checked against the schema: pip install kubernetes-validate"
    kubernetes_validate.validate(hpa, "1.30.0", strict=True)
    return "HPA valid for Kubernetes 1.30"


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


if __name__ == "__main__":
    sys.exit(main())
