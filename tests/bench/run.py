#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark outbox-relay against the physical limits (decode, broker) and
against Debezium, side by side in one run, and print one table.

Starts a throwaway PostgreSQL and Kafka (tests/harness), prepares the data,
runs each contestant on exactly the same work, one after the other:

  backlog drain   N rows already committed (as one transaction, and as many
                  transactions of 1 to 10 rows); the contestant starts on an
                  existing slot; time until the last record is acknowledged and
                  the slot is confirmed past the last commit.
  steady state    pgbench inserts one row per transaction at fixed rates;
                  commit-to-receipt latency as seen by one Kafka consumer.

Figures are rows/s, CPU seconds per million rows, peak RSS and latency; the
ratios of the relay against each limit and against Debezium are what to read,
since absolute times drift on shared machines. See tests/bench/README.md.

Usage: /usr/bin/python3 tests/bench/run.py [--smoke] [options]  (--help)
Exit status: 0 when every contestant delivered every row, 1 otherwise,
2 on usage errors. Targets are reported, never asserted.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))
_TOP = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(_TOP, "tests"))
sys.path.insert(0, _HERE)

import harness  # noqa: E402
from harness import procs  # noqa: E402

import contestants  # noqa: E402
import debezium  # noqa: E402
import measure  # noqa: E402
import workload  # noqa: E402

# Server settings for every run: room for a large transaction's WAL without
# checkpoints in the middle of a measurement.
PG_SETTINGS = {
    "shared_buffers": "512MB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "30min",
    "wal_sender_timeout": "60s",
}

DEFAULTS = dict(rows=1_000_000, small_txns=200_000, payload_bytes=256, rates="2000,5000",
                duration=15, warmup=10, status_interval=1.0)
SMOKE = dict(rows=2000, small_txns=400, rates="200", duration=5, warmup=1)

# The targets, one place: the help text, each round's ratio lines and the
# summary across rounds (target_figures()) all read them from here.
DECODE_RATIO = 0.9        # relay rows/s >= this x the decode limit's
DEBEZIUM_RATIO = 5.0      # relay rows/s >= this x Debezium's
RSS_MB = 32               # peak RSS < this, every relay
EOS_ROWS_RATIO = 0.95     # relay-eos backlog rows/s >= this x the default relay's
EOS_CPU_RATIO = 1.1       # relay-eos backlog CPU/row <= this x the default relay's
PGO_WALSENDER_RATIO = 0.75  # pgoutput walsender CPU/row <= this x wal2json's
RELAY_P99_MS = 20         # relay p99 < this at 2000 tx/s
EOS_P99_MS = 25           # relay-eos p99 <= this at 2000 tx/s
EOS_P99_RATIO_5000 = 2.0  # relay-eos p99 <= this x the default relay's at 5000 tx/s

TARGETS = """\
targets (goals reported, not asserted):
  backlog drain rows/s   relay >= %g x limit, decode;  relay >= %g x Debezium
                         relay-eos >= %g x relay, CPU/row <= %g x relay's
  peak RSS               relay < %g MB and <= Debezium / 10; relay, pgoutput < %g MB
  pgoutput               walsender CPU/row <= %g x wal2json's; relay CPU/row <= wal2json
                         relay's; drain rows/s >= wal2json relay's
  steady state           relay p99 commit-to-receipt < %g ms at 2000 transactions/s
                         relay-eos p99 <= %g ms at 2000 transactions/s (read_committed),
                         <= %g x relay's p99 at 5000""" % (
    DECODE_RATIO, DEBEZIUM_RATIO, EOS_ROWS_RATIO, EOS_CPU_RATIO, RSS_MB, RSS_MB, PGO_WALSENDER_RATIO,
    RELAY_P99_MS, EOS_P99_MS, EOS_P99_RATIO_5000)

ORDER = ("decode", "decode-pgoutput", "decode-names", "broker", "relay", "relay-base",
         "relay-pgoutput", "relay-eos", "relay-eos-base", "debezium")


def env_default(name, value, conv=str):
    v = os.environ.get("BENCH_" + name.upper())
    return conv(v) if v not in (None, "") else value


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Benchmark outbox-relay against pg_recvlogical, a bare librdkafka producer "
                    "and Debezium. Every option also reads BENCH_<OPTION> from the environment "
                    "(e.g. BENCH_ROWS=100000).",
        epilog=TARGETS, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", default=bool(os.environ.get("BENCH_SMOKE")),
                   help="tiny sizes and a few seconds of steady state (CI); Debezium is skipped "
                        "if its jars cannot be fetched")
    p.add_argument("--rows", type=int, help="N, rows of each backlog workload (default %d)"
                   % DEFAULTS["rows"])
    p.add_argument("--small-txns", type=int, help="transactions the small-transaction backlog "
                   "is split into, 1 to 10 rows each (default %d)" % DEFAULTS["small_txns"])
    p.add_argument("--payload-bytes", type=int, help="bytes of each payload (default %d)"
                   % DEFAULTS["payload_bytes"])
    p.add_argument("--rates", help="steady-state insert rates, transactions/s, comma-separated "
                   "(default %s)" % DEFAULTS["rates"])
    p.add_argument("--duration", type=float, help="seconds of each steady-state run (default %d)"
                   % DEFAULTS["duration"])
    p.add_argument("--warmup", type=float, help="seconds of load before each steady-state "
                   "measurement, left out of the latency figures (default %d)" % DEFAULTS["warmup"])
    p.add_argument("--workloads", default=env_default("workloads", "large,small,steady"),
                   help="any of large,small,steady (default all)")
    p.add_argument("--contestants",
                   default=env_default("contestants", "decode,decode-pgoutput,broker,relay,"
                                       "relay-pgoutput,relay-eos,debezium"),
                   help="any of %s (default all but decode-names)" % ",".join(ORDER))
    p.add_argument("--status-interval", type=float,
                   help="relay -s, pg_recvlogical -s and Debezium's offset flush interval, "
                        "seconds (default 1)")
    p.add_argument("--pg-socket", choices=("tcp", "unix"), default=env_default("pg_socket", "tcp"),
                   help="how the contestants reach PostgreSQL: TCP loopback (default) or its Unix-domain "
                   "socket, as a relay beside its database would")
    p.add_argument("--rounds", type=int, default=env_default("rounds", 1, int),
                   help="run every workload and contestant this many times over, interleaved, and "
                        "print each target's median across the rounds beside every round's figure "
                        "(default 1)")
    p.add_argument("--json", default=env_default("json", None), help="also write all figures here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    p.add_argument("--profile", action="store_true",
                   help="run the relay under `perf record -g` and print where it spends CPU "
                        "(its figures then include perf's overhead)")
    p.add_argument("--relay-bin", default=os.environ.get("OUTBOX_RELAY_BIN"),
                   help="outbox-relay binary (default $OUTBOX_RELAY_BIN or build/src/outbox-relay)")
    p.add_argument("--base-relay-bin", default=env_default("base_relay_bin", None),
                   help="another outbox-relay binary (an older commit, another librdkafka), run as "
                        "the contestants relay-base and relay-eos-base beside relay and relay-eos: "
                        "both in one run (default: none; those contestants then cannot run)")
    p.add_argument("--bare-producer", default=os.environ.get("BENCH_BARE_PRODUCER"),
                   help="bare_producer binary (default $BENCH_BARE_PRODUCER or "
                        "build/tests/bench/bare_producer)")
    a = p.parse_args(argv)
    base = dict(DEFAULTS)
    if a.smoke:
        base.update(SMOKE)
    for name in ("rows", "small_txns", "payload_bytes", "duration", "warmup", "status_interval"):
        if getattr(a, name) is None:
            conv = float if name in ("duration", "warmup", "status_interval") else int
            setattr(a, name, env_default(name, base[name], conv))
    if a.rates is None:
        a.rates = env_default("rates", base["rates"])
    a.rates = [int(r) for r in str(a.rates).split(",") if r.strip()]
    a.workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    a.contestants = [c.strip() for c in a.contestants.split(",") if c.strip()]
    for w in a.workloads:
        if w not in ("large", "small", "steady"):
            p.error("unknown workload %r" % w)
    for c in a.contestants:
        if c not in contestants.ALL:
            p.error("unknown contestant %r" % c)
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    if "small" in a.workloads and not a.small_txns <= a.rows <= 10 * a.small_txns:
        p.error("--rows must be between --small-txns and 10 x --small-txns")
    if any(c.endswith("-base") for c in a.contestants) and not a.base_relay_bin:
        p.error("the contestants relay-base and relay-eos-base need --base-relay-bin")
    if a.base_relay_bin and not os.access(a.base_relay_bin, os.X_OK):
        p.error("--base-relay-bin: no executable at %s" % a.base_relay_bin)
    a.relay_bin = a.relay_bin or os.path.join(_TOP, "build", "src", "outbox-relay")
    a.bare_producer = a.bare_producer or os.path.join(_TOP, "build", "tests", "bench",
                                                      "bare_producer")
    for path, what in ((a.relay_bin, "outbox-relay"), (a.bare_producer, "bare_producer")):
        if not os.access(path, os.X_OK):
            p.error("%s not found at %s: build with `meson setup build && meson compile -C build`"
                    % (what, path))
    return a


class Context:
    """What every contestant run needs: servers, paths, sizes, shared helpers."""

    partitions = 3
    pg_bindir = harness.pg.PG_BINDIR

    def __init__(self, env, args):
        self.env, self.args = env, args
        self.pg, self.kafka = env.pg, env.kafka
        self.workdir = env.base_dir
        self.run_id = "bench%d" % int(time.time())
        self.relay_bin, self.bare_producer = args.relay_bin, args.bare_producer
        self.base_relay_bin = args.base_relay_bin
        self.payload_bytes = args.payload_bytes
        self.warmup = args.warmup
        self.profile = args.profile
        self.status_interval = args.status_interval   # seconds
        self.offsets = measure.Offsets(self.kafka.bootstrap)
        self.ce_source = "postgresql://%s/%s/public.outbox" % (self.pg.system_identifier(),
                                                                workload.DBNAME)

    def conninfo(self, dbname):
        """The contestants' conninfo: TCP loopback, or with --pg-socket=unix
        the server's Unix-domain socket (a relay beside its database)."""
        if self.args.pg_socket == "unix":
            return self.pg.conninfo(dbname, host=self.pg.dir)
        return self.pg.conninfo(dbname)

    def env_meter(self):
        return contestants.EnvMeter(self.kafka.pid)

    def timeout(self, rows):
        """How long a backlog drain may take before it counts as failed, s."""
        return 120 + rows / 1000.0

    def create_topic(self, topic):
        measure.create_topic(self.kafka.bootstrap, topic, self.partitions)

    def wait_slot_active(self, slot, child, timeout=180):
        def active():
            if not child.alive:
                raise RuntimeError("%s exited before its slot became active:\n%s"
                                   % (child.argv[0], child.log_tail()))
            return self.pg.slot_active(slot)
        procs.wait_until(active, timeout, interval=0.1, what="slot %s active" % slot)

    def steady_run(self, child, slot, rate, duration, *, count, latencies, load=None):
        """Load at rate for warmup + duration seconds, wait until the contestant
        delivered every row of it, and measure. By default pgbench is the load
        and child (already streaming) the contestant; for the broker limit the
        load is the contestant's own process (load=child).

        count() is the number of rows the contestant delivered so far;
        latencies() the (origin time, receipt time) pairs so far, wall clock.
        Rows whose origin falls in the warm-up are left out of the percentiles
        (first records pay for connections, metadata and a cold JIT) but
        counted in rows and CPU."""
        ws = contestants.Walsender(self.pg, slot) if slot else None
        if ws:
            ws.poll()
        env = self.env_meter()
        child.stats.sample()
        cpu0, wcpu0 = child.stats.cpu_s, (ws.cpu_s() if ws else None)
        count0 = count()
        total = self.warmup + duration
        t_wall0 = time.time()
        if load is None:
            seq0 = workload.seq_value(self.pg)
            pb = workload.Pgbench(self.pg, self.workdir, rate, int(round(total)),
                                  self.payload_bytes).start()
            pb.wait(total + 120)
            expected = workload.seq_value(self.pg) - seq0
            tps = pb.tps
        else:
            load.wait_exit(total + 120)
            expected = int(rate * total)
            tps = expected / total
        t_wall1 = time.time()
        t_tail0 = time.monotonic()
        try:    # a run that does not finish in time is a result, not an error
            procs.wait_until(lambda: count() - count0 >= expected, max(30.0, duration), 0.02,
                             what="every row received")
            ok = True
        except procs.WaitTimeout:
            ok = False
        tail = time.monotonic() - t_tail0
        if child.rusage is None:
            child.stats.sample()
        cpu1 = child.cpu_s
        wcpu1 = ws.cpu_s() if ws else None
        if ws:
            ws.stop()
        window = (t_wall0 + self.warmup, t_wall1)
        lat = sorted((recv - origin) * 1000.0 for origin, recv in latencies()
                     if window[0] <= origin <= window[1])
        got = count() - count0
        return contestants.Result(
            env.figures(), ok=ok, rows=got, expected=expected, insert_tps=tps,
            measured_rows=len(lat),
            cpu_s=cpu1 - cpu0, rss_kb=child.rss_kb,
            walsender_cpu_s=(wcpu1 - wcpu0) if ws and wcpu0 is not None else None,
            p50_ms=measure.percentile(lat, 50), p99_ms=measure.percentile(lat, 99),
            max_ms=lat[-1] if lat else None, tail_s=tail if ok else None,
            keeps_up=bool(ok and tail < 1.0),
            note="" if ok else "%d of %d rows arrived" % (got, expected))


# --- the table -----------------------------------------------------------

def _f(v, fmt, none="-"):
    return none if v is None else fmt % v


def _rows_per_s(r):
    return r["rows"] / r["elapsed_s"] if r.get("ok") and r.get("elapsed_s") else None


def _per_mrow(cpu, rows):
    return cpu / rows * 1e6 if cpu is not None and rows else None


def _ratio(a, b):
    return a / b if a and b else None


def _against(r, ref):
    """(rows/s, CPU per row) of result @r as multiples of @ref's."""
    return (_ratio(_rows_per_s(r), _rows_per_s(ref)),
            _ratio(_per_mrow(r.get("cpu_s"), r.get("rows")), _per_mrow(ref.get("cpu_s"), ref.get("rows"))))


def _per_row(r, field):
    return _per_mrow(r.get(field), r.get("rows")) if r and r.get("ok") else None


def _pgoutput_backlog(rs):
    """The pgoutput relay against the wal2json relay on one backlog workload:
    (walsender CPU/row, relay CPU/row, rows/s) as multiples of wal2json's, and
    its peak RSS in MB; None when the pgoutput relay did not run or failed."""
    w2j, pgo = rs.get("relay"), rs.get("relay-pgoutput")
    if not pgo or not pgo.get("ok"):
        return None
    q = _ratio(_rows_per_s(pgo), _rows_per_s(w2j)) if w2j and w2j.get("ok") else None
    return (_ratio(_per_row(pgo, "walsender_cpu_s"), _per_row(w2j, "walsender_cpu_s")),
            _ratio(_per_row(pgo, "cpu_s"), _per_row(w2j, "cpu_s")), q, pgo["rss_kb"] / 1024.0)


BACKLOGS = (("large", "backlog, 1 transaction"), ("small", "backlog, small transactions"))


def target_figures(results, steady_2000):
    """Every target's figure in one round: a list of (what, value, test,
    bound), value None when its contestants did not both deliver. test is
    one of "<", "<=", ">="."""
    out = []
    for wl, title in BACKLOGS:
        rs = results.get(wl, {})
        relay = rs.get("relay")
        if relay and relay.get("ok"):
            for key, label, bound in (("decode", "relay rows/s / decode limit's", DECODE_RATIO),
                                      ("debezium", "relay rows/s / Debezium's", DEBEZIUM_RATIO)):
                if rs.get(key) and rs[key].get("ok"):
                    out.append(("%s: %s" % (title, label), _against(relay, rs[key])[0], ">=", bound))
            out.append(("%s: relay peak RSS MB" % title, relay["rss_kb"] / 1024.0, "<", RSS_MB))
            eos = rs.get("relay-eos")
            if eos:
                q, cpu = _against(eos, relay) if eos.get("ok") else (None, None)
                out.append(("%s: EOS rows/s / default's" % title, q, ">=", EOS_ROWS_RATIO))
                out.append(("%s: EOS CPU/row / default's" % title, cpu, "<=", EOS_CPU_RATIO))
        if "relay-pgoutput" in rs:
            ws, cpu, q, rss = _pgoutput_backlog(rs) or (None,) * 4
            out.append(("%s: pgoutput walsender CPU/row / wal2json's" % title, ws, "<=",
                        PGO_WALSENDER_RATIO))
            out.append(("%s: pgoutput relay CPU/row / wal2json's" % title, cpu, "<=", 1.0))
            out.append(("%s: pgoutput rows/s / wal2json's" % title, q, ">=", 1.0))
            out.append(("%s: pgoutput peak RSS MB" % title, rss, "<", RSS_MB))
    for rate, rs in sorted(results.get("steady", {}).items()):
        relay, eos = rs.get("relay"), rs.get("relay-eos")
        p99 = relay.get("p99_ms") if relay else None
        if relay and rate == steady_2000:
            out.append(("steady %d tx/s: relay p99 ms" % rate, p99, "<", RELAY_P99_MS))
        if eos and rate == steady_2000:
            out.append(("steady %d tx/s: EOS p99 ms" % rate, eos.get("p99_ms"), "<=", EOS_P99_MS))
        if eos and relay and rate == 5000:
            out.append(("steady %d tx/s: EOS p99 / default's" % rate, _ratio(eos.get("p99_ms"), p99),
                        "<=", EOS_P99_RATIO_5000))
    return out


def _meets(value, test, bound):
    return value < bound if test == "<" else value <= bound if test == "<=" else value >= bound


def rounds_lines(rounds, steady_2000):
    """Each target across the rounds: its median (of the rounds that gave
    it), every round's figure in order, and how many rounds met it."""
    per = {}
    for results in rounds:
        for what, value, test, bound in target_figures(results, steady_2000):
            per.setdefault((what, test, bound), []).append(value)
    out = ["targets across %d rounds (median of the rounds' figures; each round's figure in order)"
           % len(rounds)]
    for (what, test, bound), values in per.items():
        got = [v for v in values if v is not None]
        if not got:
            continue
        med = statistics.median(got)
        out.append("  %-64s median %6.2f (target %s %g)  %-6s  met in %d of %d: %s" % (
            what, med, test, bound, "met" if _meets(med, test, bound) else "MISSED",
            sum(_meets(v, test, bound) for v in got), len(values),
            ", ".join("-" if v is None else "%.2f" % v for v in values)))
    return out


def backlog_table(title, results, order, labels):
    lines = [title,
             "  %-15s %8s %8s %10s %11s %13s %12s %8s %6s  %s" % (
                 "contestant", "time s", "start s", "rows/s", "CPU s/Mrow", "server s/Mrow",
                 "kafka s/Mrow", "RSS MB", "busy%", "note")]
    for key in order:
        r = results.get(key)
        if r is None:
            continue
        lines.append("  %-15s %8s %8s %10s %11s %13s %12s %8s %6s  %s" % (
            labels[key], _f(r.get("elapsed_s"), "%.2f"), _f(r.get("start_s"), "%.2f"),
            _f(_rows_per_s(r), "%.0f"),
            _f(_per_mrow(r.get("cpu_s"), r.get("rows")), "%.2f"),
            _f(_per_mrow(r.get("walsender_cpu_s"), r.get("rows")), "%.2f"),
            _f(_per_mrow(r.get("kafka_cpu_s"), r.get("rows")), "%.2f"),
            _f(r.get("rss_kb") and r["rss_kb"] / 1024.0, "%.1f"),
            _f(r.get("machine_busy_pct"), "%.0f"),
            ("FAILED: " if not r.get("ok") else "") + (r.get("note") or "")))
    return lines


def steady_table(title, results, order, labels):
    lines = [title,
             "  %-15s %8s %8s %8s %8s %9s %7s %11s %13s %12s %8s %6s  %s" % (
                 "contestant", "rows", "tx/s in", "p50 ms", "p99 ms", "max ms", "tail s",
                 "CPU s/Mrow", "server s/Mrow", "kafka s/Mrow", "RSS MB", "busy%", "keeps up")]
    for key in order:
        r = results.get(key)
        if r is None:
            continue
        lines.append("  %-15s %8s %8s %8s %8s %9s %7s %11s %13s %12s %8s %6s  %s" % (
            labels[key], r.get("rows"), _f(r.get("insert_tps"), "%.0f"),
            _f(r.get("p50_ms"), "%.1f"), _f(r.get("p99_ms"), "%.1f"), _f(r.get("max_ms"), "%.1f"),
            _f(r.get("tail_s"), "%.2f"), _f(_per_mrow(r.get("cpu_s"), r.get("rows")), "%.2f"),
            _f(_per_mrow(r.get("walsender_cpu_s"), r.get("rows")), "%.2f"),
            _f(_per_mrow(r.get("kafka_cpu_s"), r.get("rows")), "%.2f"),
            _f(r.get("rss_kb") and r["rss_kb"] / 1024.0, "%.1f"),
            _f(r.get("machine_busy_pct"), "%.0f"),
            ("yes" if r.get("keeps_up") else "no") +
            ("" if r.get("ok") else "  FAILED: " + (r.get("note") or ""))))
    return lines


def ratio_lines(results, steady_2000):
    """Relay against each reference, and the targets."""
    out = ["ratios (relay against each reference, same run)"]

    def mark(ok):
        return "" if ok is None else ("  met" if ok else "  MISSED")
    for wl, title in BACKLOGS:
        rs = results.get(wl, {})
        relay = rs.get("relay")
        if not relay or not relay.get("ok"):
            continue
        for key, label, target in (("decode", "limit, decode", DECODE_RATIO),
                                   ("broker", "limit, broker", None),
                                   ("debezium", "Debezium", DEBEZIUM_RATIO)):
            other = rs.get(key)
            if not other or not other.get("ok"):
                continue
            q, cpu = _against(relay, other)
            t = "" if target is None else " (target >= %g)%s" % (target, mark(q >= target))
            extra = ""
            if key == "debezium":
                rss = _ratio(other.get("rss_kb"), relay.get("rss_kb"))
                extra = "; RSS %s smaller (target >= 10)%s" % (_f(rss, "%.1fx"), mark(rss >= 10))
            out.append("  %-28s relay rows/s = %s %s's%s; relay CPU/row = %s theirs%s" % (
                title + ":", _f(q, "%.2fx"), label, t, _f(cpu, "%.3gx"), extra))
        rss_mb = relay["rss_kb"] / 1024.0
        out.append("  %-28s relay peak RSS %.1f MB (target < %g MB)%s" % (
            title + ":", rss_mb, RSS_MB, mark(rss_mb < RSS_MB)))
    for rate, rs in sorted(results.get("steady", {}).items()):
        relay = rs.get("relay")
        if not relay or relay.get("p99_ms") is None:
            continue
        parts = []
        for key, label in (("decode", "limit, decode"), ("broker", "limit, broker"),
                           ("debezium", "Debezium")):
            other = rs.get(key)
            if other and other.get("p99_ms"):
                parts.append("%s %s's" % (_f(_ratio(relay["p99_ms"], other["p99_ms"]), "%.2fx"),
                                          label))
        t = (" (target < %g ms)%s" % (RELAY_P99_MS, mark(relay["p99_ms"] < RELAY_P99_MS))
             if rate == steady_2000 else "")
        out.append("  steady %5d tx/s:           relay p99 %.1f ms%s; relay p99 = %s" % (
            rate, relay["p99_ms"], t, ", ".join(parts) or "-"))
    return out + eos_lines(results, steady_2000, mark) + pgoutput_lines(results, mark) + \
        type_name_lines(results) + base_lines(results)


def base_lines(results):
    """--base-relay-bin: each relay contestant against the same run from the
    base binary (this binary's figure / the base's)."""
    out = []
    for key, base, what in (("relay", "relay-base", "relay"), ("relay-eos", "relay-eos-base", "EOS")):
        for wl, title in BACKLOGS:
            a, b = results.get(wl, {}).get(key), results.get(wl, {}).get(base)
            if a and b and a.get("ok") and b.get("ok"):
                q, cpu = _against(a, b)
                out.append("  %-28s %s, this binary / base binary: rows/s %s, CPU/row %s" % (
                    title + ":", what, _f(q, "%.2fx"), _f(cpu, "%.2fx")))
        for rate, rs in sorted(results.get("steady", {}).items()):
            a, b = rs.get(key), rs.get(base)
            if not a or not b or a.get("p99_ms") is None or b.get("p99_ms") is None:
                continue
            out.append("  steady %5d tx/s:           %s, this binary / base binary: p50 %.1f / %.1f ms, "
                       "p99 %.1f / %.1f ms (%s), CPU/row %s" % (
                           rate, what, a["p50_ms"], b["p50_ms"], a["p99_ms"], b["p99_ms"],
                           _f(_ratio(a["p99_ms"], b["p99_ms"]), "%.2fx"),
                           _f(_ratio(_per_row(a, "cpu_s"), _per_row(b, "cpu_s")), "%.2fx")))
    return out


def pgoutput_lines(results, mark):
    """--plugin=pgoutput against wal2json, same run: the walsender's CPU per
    row (relay against relay, decode limit against decode limit), the relay's
    CPU per row, drain rows/s, peak RSS."""
    out = []
    for wl, title in BACKLOGS:
        rs = results.get(wl, {})
        fig = _pgoutput_backlog(rs)
        if fig:
            ws, cpu, q, rss = fig
            out.append("  %-28s pgoutput relay: walsender CPU/row = %s wal2json's (target <= %g)%s; "
                       "relay CPU/row = %s (target <= 1)%s; rows/s = %s (target >= 1)%s; peak RSS "
                       "%.1f MB (target < %g MB)%s" % (
                           title + ":", _f(ws, "%.2fx"), PGO_WALSENDER_RATIO,
                           mark(ws <= PGO_WALSENDER_RATIO if ws else None),
                           _f(cpu, "%.2fx"), mark(cpu <= 1.0 if cpu else None), _f(q, "%.2fx"),
                           mark(q >= 1.0 if q else None), rss, RSS_MB, mark(rss < RSS_MB)))
        d, dp = rs.get("decode"), rs.get("decode-pgoutput")
        ws = _ratio(_per_row(dp, "walsender_cpu_s"), _per_row(d, "walsender_cpu_s"))
        if ws:
            out.append("  %-28s pgoutput decode limit: walsender CPU/row = %s wal2json's; rows/s = %s"
                       % (title + ":", _f(ws, "%.2fx"), _f(_ratio(_rows_per_s(dp), _rows_per_s(d)),
                                                           "%.2fx")))
    for rate, rs in sorted(results.get("steady", {}).items()):
        w2j, pgo = rs.get("relay"), rs.get("relay-pgoutput")
        if not pgo or not pgo.get("ok") or not w2j or not w2j.get("ok"):
            continue
        out.append("  steady %5d tx/s:           pgoutput relay: walsender CPU/row = %s wal2json's; "
                   "relay CPU/row = %s; p99 %s ms against %s ms" % (
                       rate, _f(_ratio(_per_row(pgo, "walsender_cpu_s"), _per_row(w2j, "walsender_cpu_s")),
                                "%.2fx"),
                       _f(_ratio(_per_row(pgo, "cpu_s"), _per_row(w2j, "cpu_s")), "%.2fx"),
                       _f(pgo.get("p99_ms"), "%.1f"), _f(w2j.get("p99_ms"), "%.1f")))
    return out


def eos_lines(results, steady_2000, mark):
    """--exactly-once against the default relay, same run."""
    out = []
    for wl, title in BACKLOGS:
        rs = results.get(wl, {})
        relay, eos = rs.get("relay"), rs.get("relay-eos")
        if not relay or not eos or not relay.get("ok") or not eos.get("ok"):
            continue
        q, cpu = _against(eos, relay)
        out.append("  %-28s EOS rows/s = %s default's (target >= %g)%s; EOS CPU/row = %s "
                   "default's (target <= %g)%s" % (
                       title + ":", _f(q, "%.2fx"), EOS_ROWS_RATIO, mark(q >= EOS_ROWS_RATIO if q else None),
                       _f(cpu, "%.3gx"), EOS_CPU_RATIO, mark(cpu <= EOS_CPU_RATIO if cpu else None)))
    for rate, rs in sorted(results.get("steady", {}).items()):
        relay, eos = rs.get("relay"), rs.get("relay-eos")
        if not eos or eos.get("p99_ms") is None:
            continue
        t = (" (target <= %g ms)%s" % (EOS_P99_MS, mark(eos["p99_ms"] <= EOS_P99_MS))
             if rate == steady_2000 else "")
        vs = ""
        if relay and relay.get("p99_ms") and rate == 5000:
            t = " (target <= %g x default's)%s" % (
                EOS_P99_RATIO_5000, mark(eos["p99_ms"] <= EOS_P99_RATIO_5000 * relay["p99_ms"]))
        if relay and relay.get("p99_ms"):
            vs = "; default p50 %.1f ms, p99 %.1f ms" % (relay["p50_ms"], relay["p99_ms"])
        out.append("  steady %5d tx/s:           EOS p50 %.1f ms, p99 %.1f ms%s%s" % (
            rate, eos["p50_ms"], eos["p99_ms"], t, vs))
    return out


def type_name_lines(results):
    """wal2json with type names (decode-names) against type OIDs (decode)."""
    out = []
    for wl, title in BACKLOGS:
        rs = results.get(wl, {})
        oids, names = rs.get("decode"), rs.get("decode-names")
        if not oids or not names or not oids.get("ok") or not names.get("ok"):
            continue
        q = _ratio(_rows_per_s(names), _rows_per_s(oids))
        ws = _ratio(_per_mrow(names.get("walsender_cpu_s"), names.get("rows")),
                    _per_mrow(oids.get("walsender_cpu_s"), oids.get("rows")))
        out.append("  %-28s type names: decode rows/s = %s type OIDs'; walsender CPU/row = %s "
                   "type OIDs'" % (title + ":", _f(q, "%.2fx"), _f(ws, "%.3gx")))
    for rate, rs in sorted(results.get("steady", {}).items()):
        oids, names = rs.get("decode"), rs.get("decode-names")
        if not oids or not names or not oids.get("ok") or not names.get("ok"):
            continue
        ws = _ratio(_per_mrow(names.get("walsender_cpu_s"), names.get("rows")),
                    _per_mrow(oids.get("walsender_cpu_s"), oids.get("rows")))
        out.append("  steady %5d tx/s:           type names: walsender CPU/row = %s type OIDs'"
                   % (rate, _f(ws, "%.3gx")))
    return out


def machine_line():
    try:
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
    except OSError:
        load = "?"
    return "machine: %s, %d cores, Python %s, load average %s at the end" % (
        platform.platform(terse=True), os.cpu_count(), platform.python_version(), load)


def render(args, results, labels, order, notes, title=""):
    lines = ["", "outbox-relay benchmark%s: N=%d rows, %d small transactions, %d-byte payloads, "
             "steady %s tx/s for %g s, PostgreSQL over %s%s" % (
                 title and ", " + title, args.rows, args.small_txns, args.payload_bytes,
                 ",".join(map(str, args.rates)), args.duration,
                 "its Unix-domain socket" if args.pg_socket == "unix" else "TCP loopback",
                 " (smoke)" if args.smoke else ""),
             machine_line(), ""]
    if "large" in results:
        lines += backlog_table("backlog drain: 1 transaction of %d rows" % args.rows,
                               results["large"], order, labels) + [""]
    if "small" in results:
        lines += backlog_table("backlog drain: %d rows in %d transactions of 1-10 rows"
                               % (args.rows, args.small_txns), results["small"], order,
                               labels) + [""]
    for rate, rs in sorted(results.get("steady", {}).items()):
        lines += steady_table("steady state: %d transactions/s (1 row each) for %g s after %g s "
                              "of warm-up" % (rate, args.duration, args.warmup), rs, order,
                              labels) + [""]
    lines += ratio_lines(results, 2000) + [""]
    lines += ["time s: from the contestant's start until the last record is acknowledged and "
              "the slot confirmed past the last commit (decode: until pg_recvlogical -E exits; "
              "broker: until every delivery report); start s: of which until its slot was "
              "active; rows/s: N / time s.",
              "CPU s/Mrow: user+sys of the contestant's processes; server s/Mrow: of the "
              "walsender serving its slot; kafka s/Mrow: of the broker's JVM meanwhile (same "
              "cores); busy%: the whole machine's busy CPU share meanwhile, other tenants "
              "included. RSS: peak (VmHWM).",
              "latency: commit timestamp (track_commit_timestamp) to receipt by one Kafka consumer; "
              "decode: to receipt of the commit by pg_recvlogical's reader; broker: produce time "
              "to receipt; rows committed in the warm-up are left out. tail s: last row received "
              "after the load ended; keeps up: every row arrived, the last within 1 s."]
    lines += notes
    return "\n".join(lines)


# --- the run -------------------------------------------------------------

def warm_up_broker(ctx, rows, transactions):
    """Write rows records through the bare producer before anything is
    measured: a fresh broker first creates its transaction coordinator for the
    idempotent producer and runs its produce path in a cold JVM, and that must
    not be charged to whichever contestant happens to come first."""
    t0 = time.monotonic()
    topic = "%s.warmup" % ctx.run_id
    ctx.create_topic(topic)
    child = contestants.Child(contestants.Broker(ctx).argv(topic, ["-n", str(rows)]),
                              os.path.join(ctx.workdir, "broker-warmup.log"))
    rc, _ = child.wait_exit(ctx.timeout(rows))
    if rc != 0:
        child.stop()
        raise RuntimeError("warming up the broker failed (exit %s):\n%s" % (rc, child.log_tail()))
    print("bench: broker warmed up with %d records in %.1f s" % (rows, time.monotonic() - t0),
          flush=True)
    if transactions:
        # The first transactional producer on a fresh broker waits while it
        # creates __transaction_state (50 partitions): a one-time cost of the
        # cluster, not of whichever exactly-once contestant comes first.
        t0 = time.monotonic()
        measure.one_transaction(ctx.kafka.bootstrap, topic, "%s.warmup" % ctx.run_id)
        print("bench: transaction coordinator warmed up in %.1f s" % (time.monotonic() - t0),
              flush=True)


def one_round(args, env, players, tag, failed, notes):
    """Every workload with every contestant, one after the other: the
    round's results ({workload: {contestant: Result}}, steady ones by rate).
    Appends what failed to @failed and profiles to @notes; @tag prefixes
    the progress lines."""
    results = {}
    for wl in ("large", "small"):
        if wl not in args.workloads:
            continue
        workload.truncate(env.pg)
        for p in players.values():
            p.prepare_backlog(wl)
        t0 = time.monotonic()
        if wl == "large":
            target = workload.load_large(env.pg, args.rows, args.payload_bytes)
        else:
            target = workload.load_small(env.pg, args.rows, args.small_txns, args.payload_bytes)
        print("bench: %s%s: loaded %d rows in %.1f s, target LSN %s" % (
            tag, wl, args.rows, time.monotonic() - t0, harness.format_lsn(target)), flush=True)
        results[wl] = {}
        for key, p in players.items():
            try:
                r = p.backlog(wl, args.rows, target)
            except Exception as e:  # noqa: BLE001 -- report it in the table, go on
                traceback.print_exc()
                r = contestants.Result(ok=False, note=str(e).splitlines()[0][:200])
            p.cleanup()
            if args.profile and isinstance(p, contestants.Relay):
                report = p.profile_report(wl)
                if report:
                    notes.append("perf profile of %s, %s backlog:\n%s"
                                 % (p.label, wl, report))
            results[wl][key] = r
            print("bench: %s%s %s: %s" % (tag, wl, key, json.dumps(r)), flush=True)
            if not r.get("ok"):
                failed.append("%s%s/%s" % (tag, wl, key))
    if "steady" in args.workloads:
        workload.truncate(env.pg)
        results["steady"] = {rate: {} for rate in args.rates}
        for key, p in players.items():
            try:
                rs = p.steady("steady", args.rates, args.duration)
            except Exception as e:  # noqa: BLE001 -- report it in the table, go on
                traceback.print_exc()
                rs = {rate: contestants.Result(ok=False, note=str(e).splitlines()[0][:200])
                      for rate in args.rates}
            for rate, r in rs.items():
                results["steady"][rate][key] = r
                print("bench: %ssteady %d %s: %s" % (tag, rate, key, json.dumps(r)), flush=True)
                if not r.get("ok"):
                    failed.append("%ssteady%d/%s" % (tag, rate, key))
    return results


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    notes = []
    order = [k for k in ORDER if k in args.contestants]
    if "debezium" in order:
        try:
            debezium.ensure_jars()
        except Exception as e:  # noqa: BLE001 -- a smoke run may go on without it
            if not args.smoke:
                raise
            order.remove("debezium")
            notes.append("note: Debezium skipped (smoke only): its jars could not be fetched: %s"
                         % str(e).splitlines()[0])
    failed = []
    env = harness.Environment(pg_settings=PG_SETTINGS, keep=args.keep or None)
    env.start()
    try:
        workload.setup(env.pg)
        ctx = Context(env, args)
        players = {k: contestants.ALL[k](ctx) for k in order}
        labels = {k: players[k].label for k in order}
        if any(k != "decode" for k in order):
            warm_up_broker(ctx, min(args.rows, 200_000),
                           any(k.startswith("relay-eos") for k in order))
        rounds = []
        base_id = ctx.run_id
        for n in range(args.rounds):
            tag = "round %d of %d: " % (n + 1, args.rounds) if args.rounds > 1 else ""
            # Topics and transactional IDs of their own in each round.
            ctx.run_id = base_id if n == 0 else "%s.r%d" % (base_id, n + 1)
            rounds.append(one_round(args, env, players, tag, failed, notes))
        ctx.offsets.close()
        if args.keep:
            notes.append("logs and data kept in %s" % env.base_dir)
    finally:
        env.close()
    for n, results in enumerate(rounds):
        print(render(args, results, labels, order, notes if n == len(rounds) - 1 else [],
                     "round %d of %d" % (n + 1, len(rounds)) if len(rounds) > 1 else ""))
    if len(rounds) > 1:
        print("\n".join([""] + rounds_lines(rounds, 2000)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"params": {k: v for k, v in vars(args).items()}, "results": rounds[0],
                       "rounds": rounds, "failed": failed}, f, indent=1, default=str)
    if failed:
        print("bench: FAILED: %s" % ", ".join(failed))
        return 1
    print("bench: every contestant delivered every row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
