# SPDX-License-Identifier: Apache-2.0
"""The guide's alert rules (outbox-relay(7), WHAT TO ALERT ON), evaluated by Prometheus's own engine against the
metrics of a relay in the state each rule names.

The guide's "What to alert on" list is read as it is written (alert name,
PromQL expression, `for`, severity) and turned into a Prometheus rule file.
A test brings a real relay into a state (a warm standby, a broker outage, a
row that stopped it) and takes a Snapshot there: two scrapes of each relay's
/metrics some seconds apart, `up` as Prometheus would record it (0 when the
scrape fails), and the `slot` query of sql/monitoring.sql read from the
database as the guide says to export it (gauges `outbox_relay_pg_slot_<column>`,
labelled by slot_name and wal_status). The snapshot becomes promtool input
series that hold the state for half an hour: a gauge keeps its last value, a
counter keeps growing by what it grew between the two scrapes, every
interval of the same length (so a rate is the rate measured) when the state
is one that goes on, else it steps once from the first scrape's value to the
second's, 20 minutes in. Then
`promtool test rules` evaluates every rule after 30 minutes, and the test
says which alerts must fire: all others must not.

DRILLS maps each alert of the guide to the test that makes it fire, so that an
alert added to the guide without such a state fails test_ops_alerts.py.
"""

import os
import re
import shutil
import subprocess
import tempfile
import time

import harness
from harness import docs
from harness.http import scrape
from harness.promtool import ensure_promtool

MONITORING_SQL = os.path.join(harness.TOP, "sql", "monitoring.sql")
JOB = "outbox-relay"
HOLD_S = 35 * 60        # how long a state is held in the input series
EVAL_AT = "30m"

# Each alert of the guide and the test (file::function) that brings a relay into its state.
DRILLS = {
    "OutboxRelayUnpublished": "test_ops_alerts.py::test_kafka_down_drill",
    "OutboxRelayNotReady": "test_ops_alerts.py::test_kafka_down_drill",
    "OutboxRelaySlowDelivery": "test_ops_alerts.py::test_kafka_down_drill",
    "OutboxRelayNoActiveRelay": "test_ops_runbook.py::test_relay_failover_drill",
    "OutboxRelayDown": "test_ops_runbook.py::test_row_stops_relay_drill",
    "OutboxRelaySlotInactive": "test_ops_runbook.py::test_row_stops_relay_drill",
    "OutboxRelayDeadLettered": "test_ops_alerts.py::test_dead_letter_alert",
    "OutboxRelayReconnecting": "test_ops_alerts.py::test_stream_keeps_breaking",
    "OutboxRelaySlotRetention": "test_ops_alerts.py::test_slot_retention",
    "OutboxRelaySlotUnreserved": "test_ops_alerts.py::test_slot_retention",
}


# An alert of outbox-relay(7)'s WHAT TO ALERT ON, as its scdoc source writes it:
# "*Name* (severity, for 5m)" (the "for" left out when there is none), then
# the expression as one bold span on the next, tab-indented line.
ALERT = re.compile(r"^\*(OutboxRelay\w+)\* \((\w+)(?:, for (\w+))?\)\n\t\*(.+)\*$", re.M)


def readme_alerts():
    """[{name, expr, for, severity}] of the guide's alerts (WHAT TO ALERT ON
    in src/man/outbox-relay.7.scd), read as written."""
    text = docs.section("outbox-relay.7", "WHAT TO ALERT ON")
    alerts = [{"name": name, "expr": docs.unescape(expr), "for": for_ or "0m", "severity": sev}
              for name, sev, for_, expr in ALERT.findall(text)]
    named = re.findall(r"^\*(OutboxRelay\w+)\*", text, re.M)
    assert alerts and len(alerts) == len(named), \
        "alerts not written as \"*Name* (severity, for D)\" and a *expression* line: %s" % (
            sorted(set(named) - {a["name"] for a in alerts}))
    return alerts


def _label_value(v):
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _series(name, labels):
    return "%s{%s}" % (name, ",".join('%s="%s"' % (k, _label_value(v))
                                      for k, v in sorted(labels.items())))


def scrape_as_prometheus(port):
    """One scrape (harness.http.Samples), or None when it fails: Prometheus
    then records up 0."""
    try:
        return scrape(port)
    except OSError:
        return None


def kind(samples, name):
    """"counter" or "gauge", as the input series hold it."""
    return "counter" if samples.kind(name) in ("counter", "histogram") else "gauge"


def slot_query_rows(case):
    """The rows of sql/monitoring.sql's `slot` query, as dicts, run in the case's database."""
    text = open(MONITORING_SQL).read()
    m = re.search(r"^-- query: slot\n(.*?)(?=^-- query:|\Z)", text, re.S | re.M)
    assert m, "sql/monitoring.sql has no `slot` query"
    sql = "\n".join(l for l in m.group(1).splitlines() if not l.startswith("--"))
    sql = sql[:sql.index(";") + 1]
    conn = case.connect()
    try:
        cur = conn.cursor()
        cur.execute(sql)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        conn.close()


def slot_series(case):
    """The guide's export of the `slot` query: every numeric or boolean column as
    gauge outbox_relay_pg_slot_<column> labelled slot_name and wal_status; NULL
    gives no sample. Only this test's slot."""
    out = {}
    for row in slot_query_rows(case):
        if row["slot_name"] != case.slot:
            continue
        labels = {"slot_name": row["slot_name"], "wal_status": row["wal_status"] or "",
                  "job": "postgres", "instance": "db"}
        for col, v in row.items():
            if col in ("slot_name", "wal_status") or v is None:
                continue
            if isinstance(v, bool):
                v = 1 if v else 0
            try:
                v = float(v)
            except (TypeError, ValueError):
                continue        # LSN text columns
            out[_series("outbox_relay_pg_slot_" + col, labels)] = ("gauge", v, v)
    return out


class Snapshot:
    """A state, measured: scrapes of relays (by HTTP port) and the slot query."""

    def __init__(self, case, ports, gap=3.0, between=None, sustained=False):
        """Scrape each port twice, at least gap seconds apart, with between()
        (a change to the state, or a bounded wait for it) in between; then read
        the slot. sustained: what the counters did between the scrapes goes on
        (a stream that keeps breaking); else it happened once, 20 minutes into
        the series (a dead-lettered row)."""
        self.sustained = sustained
        self.first = {p: scrape_as_prometheus(p) for p in ports}
        t0 = time.monotonic()
        if between:
            between(self.first)
        harness.wait_until(lambda: time.monotonic() - t0 >= gap, gap + 1, interval=0.2,
                           what="the second scrape's time")
        self.second = {p: scrape_as_prometheus(p) for p in ports}
        self.interval_s = max(1, int(round(time.monotonic() - t0)))
        self.series = {}
        for p in ports:
            inst = {"job": JOB, "instance": "127.0.0.1:%d" % p}
            up = 1 if self.second[p] is not None else 0
            self.series[_series("up", inst)] = ("gauge", up, up)
            if self.second[p] is None:
                continue
            first = self.first[p].series if self.first[p] is not None else {}
            for (name, lbl), v1 in self.second[p].items():
                v0 = first.get((name, lbl), v1)
                self.series[_series(name, dict(lbl, **inst))] = (kind(self.second[p], name), v0, v1)
        self.series.update(slot_series(case))

    def input_series(self):
        n = HOLD_S // self.interval_s
        out = []
        for s, (kind, v0, v1) in sorted(self.series.items()):
            if kind == "counter" and v1 >= v0 and self.sustained:
                values = "%r+%rx%d" % (float(v0), float(v1 - v0), n)
            elif kind == "counter" and v1 >= v0:
                values = "%rx%d %rx%d" % (float(v0), n * 4 // 7, float(v1), n - n * 4 // 7)
            else:
                values = "%rx%d" % (float(v1), n)
            out.append({"series": s, "values": values})
        return out


def _yaml_str(s):
    return "'" + s.replace("'", "''") + "'"


def evaluate(snapshot, fires, tmpdir=None):
    """Evaluate the guide's alerts on snapshot with promtool: exactly the alerts
    named in fires must be firing after 30 minutes. Raises AssertionError
    with promtool's output otherwise, and keeps its files only then."""
    alerts = readme_alerts()
    names = {a["name"] for a in alerts}
    assert set(fires) <= names, "not alerts of the guide: %s" % (set(fires) - names)
    d = tempfile.mkdtemp(prefix="alerts-", dir=tmpdir)
    rules = ["groups:", "- name: readme", "  rules:"]
    for a in alerts:
        rules += ["  - alert: %s" % a["name"], "    expr: %s" % _yaml_str(a["expr"]),
                  "    for: %s" % (a["for"].replace(" ", "") or "0m"),
                  "    labels: {severity: %s}" % _yaml_str(a["severity"])]
    test = ["rule_files: [rules.yml]", "evaluation_interval: %ds" % snapshot.interval_s,
            "tests:", "- interval: %ds" % snapshot.interval_s, "  input_series:"]
    for s in snapshot.input_series():
        test += ["  - series: %s" % _yaml_str(s["series"]), "    values: %s" % _yaml_str(s["values"])]
    test.append("  promql_expr_test:")
    for a in alerts:
        test += ["  - expr: %s" % _yaml_str('(count(ALERTS{alertname="%s",alertstate="firing"}) > bool 0)'
                                          ' or vector(0)' % a["name"]),
                 "    eval_time: %s" % EVAL_AT,
                 "    exp_samples:", "    - labels: '{}'",
                 "      value: %d" % (1 if a["name"] in fires else 0)]
    with open(os.path.join(d, "rules.yml"), "w") as f:
        f.write("\n".join(rules) + "\n")
    with open(os.path.join(d, "test.yml"), "w") as f:
        f.write("\n".join(test) + "\n")
    cp = subprocess.run([ensure_promtool(), "test", "rules", "test.yml"], cwd=d, capture_output=True,
                        text=True, timeout=300)
    assert cp.returncode == 0, ("the guide's alerts on this state: expected firing %s\n%s\n%s\n(files in %s)"
                                % (sorted(fires), cp.stdout[-6000:], cp.stderr[-3000:], d))
    # Kept only when it failed: the message above points at it.
    shutil.rmtree(d, ignore_errors=True)
