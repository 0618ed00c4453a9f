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

    print(f"check-data: dashboard ({len(dashboard['panels'])} panels), "
          f"{len(rules)} alert rules, Kubernetes manifest ({', '.join(kinds)}) parse")
    return 0


if __name__ == "__main__":
    sys.exit(main())
