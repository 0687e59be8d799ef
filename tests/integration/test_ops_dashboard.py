# SPDX-License-Identifier: Apache-2.0
"""docker/grafana/outbox-relay.json, the Grafana dashboard, cannot rot: every
metric its expressions (and its variables' queries) name is one a running
relay exports, asked of a real relay with --exactly-once (whose Kafka
transaction metrics the dashboard shows too); every expression is PromQL
that Prometheus's promtool accepts; and compose.yaml's optional "monitoring"
profile wires Prometheus to the relay's port under the job name the alert
rules use, and Grafana to this dashboard.
"""

import json
import os
import re
import subprocess
import urllib.request

import harness
import pytest
import yaml
from harness.http import url, wait_http, wait_metric
from harness.promtool import ensure_promtool

DOCKER = os.path.join(harness.TOP, "docker")
DASHBOARD = os.path.join(DOCKER, "grafana", "outbox-relay.json")
METRIC = re.compile(r"\boutbox_relay_[a-z0-9_]+")


def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def expressions():
    """Every PromQL text of the dashboard: panel targets and query variables."""
    d = json.load(open(DASHBOARD))
    exprs = [t["expr"] for p in panels(d["panels"]) for t in p.get("targets", [])]
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]
            exprs.append(q["query"] if isinstance(q, dict) else q)
    return exprs


def exported(port):
    """Names a scrape of /metrics declares (# TYPE) or has samples of."""
    with urllib.request.urlopen(url(port, "/metrics"), timeout=5) as r:
        text = r.read().decode()
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    names |= set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))
    return names, text


@pytest.mark.exactly_once
def test_every_metric_of_the_dashboard_is_exported(case):
    exprs = expressions()
    assert len(exprs) >= 15, exprs
    port = harness.free_port()
    case.relay("--exactly-once", "--http", "127.0.0.1:%d" % port)
    wait_http(port, "/readyz", 200, 30)
    harness.insert_rows(case.connect(autocommit=False), harness.simple_rows("dash", 3))
    wait_metric(port, "outbox_relay_kafka_transactions_committed_total",
                             lambda v: v >= 1)
    names, text = exported(port)
    wanted = {}
    for e in exprs:
        for name in METRIC.findall(e):
            wanted.setdefault(name, e)
    missing = {n: e for n, e in wanted.items() if n not in names}
    assert not missing, "the dashboard names metrics the relay does not export:\n  %s" % \
        "\n  ".join("%s in %r" % kv for kv in sorted(missing.items()))
    # what the issue asks the dashboard to show, each in at least one expression
    for name in ["slot_lag_bytes", "oldest_unpublished_seconds", "rows_published_total",
                 "commit_to_ack_seconds_bucket", "delivery_errors_total", "dead_lettered_total",
                 "reconnects_total", "kafka_transactions_committed_total", "role"]:
        assert "outbox_relay_" + name in wanted, name


def test_every_expression_is_promql(tmp_path):
    """promtool parses each expression, as a recording rule, with Grafana's
    variables given values as Grafana would."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": "dashboard:expr_%d" % i,
         "expr": e.replace("$__rate_interval", "5m").replace("$slot", ".*")}
        for i, e in enumerate(expressions()) if not e.startswith("label_values(")]}]}
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    cp = subprocess.run([ensure_promtool(), "check", "rules", str(path)], capture_output=True,
                        text=True)
    assert cp.returncode == 0, cp.stdout + cp.stderr


def test_compose_monitoring_profile_scrapes_the_relay():
    compose = yaml.safe_load(open(os.path.join(DOCKER, "compose.yaml")))["services"]
    assert "profiles" not in compose["relay"], "the relay runs without the profile"
    for name in ("prometheus", "grafana"):
        assert compose[name].get("profiles") == ["monitoring"], (name, compose[name])
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", open(os.path.join(DOCKER, "Dockerfile")).read(),
                      re.M)
    argv = json.loads(entry.group(1))
    port = argv[argv.index("--http") + 1].rsplit(":", 1)[1]

    mounts = dict(v.split(":")[:2] for v in compose["prometheus"]["volumes"])
    assert mounts["./prometheus.yml"] == "/etc/prometheus/prometheus.yml", mounts
    prometheus = yaml.safe_load(open(os.path.join(DOCKER, "prometheus.yml")))
    (job,) = prometheus["scrape_configs"]
    # the alert rules of outbox-relay(7) read up{job="outbox-relay"}
    assert job["job_name"] == "outbox-relay", job
    assert job["static_configs"][0]["targets"] == ["relay:%s" % port], job

    mounts = dict(v.split(":")[:2] for v in compose["grafana"]["volumes"])
    assert mounts["./grafana/outbox-relay.json"].startswith("/var/lib/grafana/dashboards/")
    provider = yaml.safe_load(open(os.path.join(DOCKER, "grafana", "provisioning", "dashboards",
                                                "outbox-relay.yaml")))
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    source = yaml.safe_load(open(os.path.join(DOCKER, "grafana", "provisioning", "datasources",
                                              "prometheus.yaml")))
    assert source["datasources"][0]["url"] == "http://prometheus:9090", source
