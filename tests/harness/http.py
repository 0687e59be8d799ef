# SPDX-License-Identifier: Apache-2.0
"""The relay's HTTP endpoints (--http) as a test reads them: GET a path,
scrape /metrics into samples keyed by name and labels, and wait for an
answer or a metric value.

/metrics is parsed with the Prometheus client library's own text parser, so
a format slip fails the test that reads it. A sample is identified by its
name and all of its labels: a per-topic counter (rows_published_total) or
a per-code one (delivery_errors_total) has one series per label value, and
reading it by name alone is an error, not one topic's value.

This module knows nothing about PostgreSQL or Kafka.
"""

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from . import procs


def url(port, path):
    return "http://127.0.0.1:%d%s" % (port, path)


def http_get(port, path, timeout=5):
    """(status, body text) of GET path on 127.0.0.1:port. An error status
    (404, 503) is an answer and returned; a connection that fails or times
    out raises OSError (urllib.error.URLError, socket.timeout)."""
    try:
        with urllib.request.urlopen(url(port, path), timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Samples:
    """One scrape of /metrics.

    series: {(name, labels): value}, labels a tuple of sorted (label, value)
    pairs, the relay's slot label included.

    m[name], m.value(name, **labels): the value of the one series of name
    whose labels include the given ones; KeyError when there is none,
    AssertionError when several match (pick one by label, or sum them).
    m.get(name, default, **labels) is m.value() or default when there is
    none; m.sum(name, **labels) adds every match (0 when none);
    m.by(name, label) is {label value: value}; m.kind(name) is the
    family's type ("counter", "gauge", "histogram").
    """

    def __init__(self, text):
        self.series = {}
        self._kinds = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                self.series[(s.name, tuple(sorted(s.labels.items())))] = s.value
                self._kinds[s.name] = fam.type

    def _matches(self, name, labels):
        want = {k: str(v) for k, v in labels.items()}
        return [(lbl, v) for (n, lbl), v in self.series.items()
                if n == name and all(dict(lbl).get(k) == v2 for k, v2 in want.items())]

    def value(self, name, **labels):
        found = self._matches(name, labels)
        if not found:
            raise KeyError("no series %s%s in /metrics" % (name, _text(labels.items())))
        if len(found) > 1:
            raise AssertionError("%d series of %s%s: pick one by label or sum them: %s" % (
                len(found), name, _text(labels.items()), [_text(lbl) for lbl, _ in found]))
        return found[0][1]

    def __getitem__(self, name):
        return self.value(name)

    def get(self, name, default=None, **labels):
        try:
            return self.value(name, **labels)
        except KeyError:
            return default

    def sum(self, name, **labels):
        return sum(v for _, v in self._matches(name, labels))

    def by(self, name, label):
        return {dict(lbl)[label]: v for lbl, v in self._matches(name, {}) if label in dict(lbl)}

    def names(self):
        return sorted({n for n, _ in self.series})

    def kind(self, name):
        return self._kinds[name]

    def items(self):
        return self.series.items()

    def __contains__(self, name):
        return any(n == name for n, _ in self.series)

    def __repr__(self):
        return "{%s}" % ", ".join("%s%s: %r" % (n, _text(lbl), v)
                                  for (n, lbl), v in sorted(self.series.items()))


def _text(labels):
    labels = list(labels)
    return "{%s}" % ",".join('%s="%s"' % kv for kv in labels) if labels else ""


def scrape(port, timeout=5):
    """GET /metrics; returns its Samples. Raises OSError when the endpoint does
    not answer, or answers other than 200 (urllib.error.HTTPError)."""
    with urllib.request.urlopen(url(port, "/metrics"), timeout=timeout) as r:
        return Samples(r.read().decode("utf-8"))


def wait_http(port, path, want_status, timeout, contains=""):
    """Poll GET path until it answers want_status with contains in its body
    (a relay still starting, not listening yet, is retried); returns
    (status, body)."""
    def ok():
        try:
            st, body = http_get(port, path)
        except urllib.error.URLError:
            return None     # not listening yet: the relay is still starting
        return (st, body) if st == want_status and contains in body else None
    return procs.wait_until(ok, timeout, interval=0.2, what="%s to answer %d%s" % (
        path, want_status, " with %r" % contains if contains else ""))


def wait_metric(port, name, predicate, timeout=30, **labels):
    """Poll /metrics until predicate(the value of the one series of name with
    labels) holds; returns that scrape's Samples."""
    last = [None]

    def ok():
        try:
            last[0] = scrape(port)
        except OSError:
            return None
        v = last[0].get(name, **labels)
        return last[0] if v is not None and predicate(v) else None
    return procs.wait_until(ok, timeout, interval=0.2,
                            what=lambda: "metric %s%s; last scrape: %r" % (
                                name, _text(labels.items()), last[0]))
