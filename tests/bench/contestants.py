# SPDX-License-Identifier: Apache-2.0
"""The contestants and how each is run on a workload:

  decode    "limit, decode": pg_recvlogical with the relay's wal2json options,
            writing to /dev/null (backlog) or to a pipe the benchmark reads
            (steady state): what the server decodes and sends on one slot.
  decode-names
            the same with type names instead of type OIDs (include-types=true,
            include-type-oids=false): what the relay's choice of OIDs saves
            the walsender.
  broker    "limit, broker": tests/bench/bare_producer, a bare librdkafka
            producer with the relay's producer settings, writing the same
            number of same-sized records to the same broker.
  decode-pgoutput
            the decode limit with pgoutput (protocol version 1, text values,
            the relay's kind of publication): what the server decodes and
            sends for the relay's --plugin=pgoutput (backlogs only: its
            binary output has no line to count in steady state).
  relay     outbox-relay with its defaults (and -s 1, see README.md).
  relay-pgoutput
            the same with --plugin=pgoutput: the same records, another
            decoder on both sides of the slot.
  relay-eos the same with --exactly-once (its own slot, transactional.id and
            checkpoint topic), measured with a read_committed consumer.
  relay-base, relay-eos-base
            relay and relay-eos run from --base-relay-bin, another build (an
            older commit, another librdkafka): both binaries in one run, on
            the same servers and the same load, so that their ratios hold on
            a noisy machine.
  debezium  Debezium's PostgreSQL connector + Outbox Event Router on a Kafka
            Connect standalone worker.

Each run returns a Result. Timing starts when the contestant's process is
spawned, so start-up cost is part of every figure.
"""

import datetime
import json
import os
import signal
import subprocess
import threading
import time

import debezium
import measure
import workload
from harness import procs

WAL2JSON_OPTIONS = [  # the options outbox-relay passes (src/relay.c session()), in its order
    ("format-version", "2"), ("include-transaction", "true"), ("include-lsn", "true"),
    ("include-xids", "true"), ("include-timestamp", "true"),
    ("include-types", "false"), ("include-type-oids", "true"),
    ("add-tables", "public.outbox"),
]

# The same, with the type names wal2json gives by default instead of the OIDs.
WAL2JSON_OPTIONS_TYPE_NAMES = [
    (k, {"include-types": "true", "include-type-oids": "false"}.get(k, v))
    for k, v in WAL2JSON_OPTIONS]


class Result(dict):
    """Figures of one contestant on one workload (a dict, for --json)."""


class Child:
    """A contestant's process: spawned through the harness (own session,
    PDEATHSIG, stopped on exit), its CPU and RSS sampled from /proc."""

    def __init__(self, argv, log_path, stdout=None, env=None):
        self.argv = argv
        self.log_path = log_path
        with open(log_path, "ab") as f:
            f.write(("=== %s\n" % " ".join(argv)).encode())
        self.t0 = time.monotonic()
        if stdout is None:
            self.proc = procs.spawn(argv, log_path=log_path, env=env)
        else:
            log = open(log_path, "ab", buffering=0)
            try:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout,
                                             stderr=log, env=env, start_new_session=True,
                                             preexec_fn=procs._child_setup)
            finally:
                log.close()
        procs.register(self)
        self.stats = measure.ProcStats(self.proc.pid)
        self.rusage = None

    @property
    def pid(self):
        return self.proc.pid

    @property
    def alive(self):
        return self.proc.poll() is None

    def wait_exit(self, timeout):
        """Wait for the process to exit by itself; returns (exit code, seconds
        since spawn) and keeps its rusage (exact CPU and peak RSS). On timeout
        returns (None, None) with the process still running."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                t = time.monotonic() - self.t0
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.rusage = ru
                self.stats.stop()
                procs.unregister(self)
                return self.proc.returncode, t
            if time.monotonic() > deadline:
                return None, None
            time.sleep(0.01)  # poll interval of the bounded wait4 loop above

    @property
    def cpu_s(self):
        if self.rusage is not None:
            return self.rusage.ru_utime + self.rusage.ru_stime
        return self.stats.cpu_s

    @property
    def rss_kb(self):
        if self.rusage is not None:
            return max(self.rusage.ru_maxrss, self.stats.rss_kb)
        return self.stats.rss_kb

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Send sig, wait (SIGKILL past timeout); returns the exit code."""
        if self.rusage is not None:
            return self.proc.returncode
        self.stats.sample()
        self.stats.stop()
        rc, _ = procs.terminate(self.proc, sig, timeout)
        procs.unregister(self)
        return rc

    def _emergency_stop(self):
        if self.proc.poll() is None:
            procs.terminate(self.proc, signal.SIGKILL, 10)

    def log_tail(self, n=3000):
        return procs.tail(self.log_path, n)


class Walsender:
    """CPU of the walsender serving a slot, sampled from /proc (PostgreSQL
    runs it; it is the server-side cost of the contestant's slot)."""

    def __init__(self, pg, slot):
        self.pg, self.slot = pg, slot
        self.stats = None
        self.active_at = None   # time.monotonic() when the slot was first seen active

    def poll(self):
        if self.stats is None:
            pid = workload.walsender_pid(self.pg, self.slot)
            if pid:
                self.active_at = time.monotonic()
                self.stats = measure.ProcStats(pid, interval=0.05, children=False)

    def cpu_s(self):
        if self.stats is None:
            return None
        self.stats.sample()
        return self.stats.cpu_s

    def stop(self):
        if self.stats is not None:
            self.stats.stop()


def _pg_time(text):
    """PostgreSQL timestamptz text ('2026-11-30 04:15:36.123456+00') -> epoch seconds."""
    if text.endswith("+00"):
        text = text + ":00"
    return datetime.datetime.fromisoformat(text).timestamp()


def _rfc3339(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class EnvMeter:
    """What else the machine did during a run: CPU seconds of the Kafka
    broker's JVM (every contestant but the decode limit makes it work, on the
    same cores) and the machine's busy share (other tenants included)."""

    def __init__(self, kafka_pid):
        self.kafka_pid = kafka_pid
        self.kafka0 = measure.cpu_of(kafka_pid)
        self.machine = measure.MachineBusy()

    def figures(self):
        k = measure.cpu_of(self.kafka_pid)
        return {"kafka_cpu_s": None if k is None or self.kafka0 is None else k - self.kafka0,
                "machine_busy_pct": self.machine.busy()}


class Base:
    key = label = plugin = None
    writes_kafka = True

    def __init__(self, ctx):
        self.ctx = ctx

    @property
    def slot(self):
        return "bench_%s" % self.key.replace("-", "_")   # slot names: [a-z0-9_]

    def topic(self, tag):
        return "%s.%s.%s" % (self.ctx.run_id, tag, self.key)

    def log(self, tag):
        return os.path.join(self.ctx.workdir, "%s-%s.log" % (self.key, tag))

    def make_slot(self, tag):
        """A fresh slot for workload tag, made as this contestant's users make it."""
        workload.create_slot(self.ctx.pg, self.slot, self.plugin)

    def prepare_backlog(self, tag):
        """Before the rows are loaded: a fresh slot (and topic) for this contestant."""
        if self.plugin:
            self.make_slot(tag)
        if self.writes_kafka:
            self.ctx.create_topic(self.topic(tag))

    def cleanup(self):
        if self.plugin:
            workload.drop_slot(self.ctx.pg, self.slot)


class Decode(Base):
    key, label, plugin = "decode", "limit, decode", "wal2json"
    writes_kafka = False
    options = WAL2JSON_OPTIONS

    def argv(self, output, endpos=None):
        pg = self.ctx.pg
        argv = [os.path.join(self.ctx.pg_bindir, "pg_recvlogical"),
                "-d", self.ctx.conninfo(workload.DBNAME), "-S", self.slot, "--start", "--no-loop",
                "-f", output, "-F", "0", "-s", "%g" % self.ctx.status_interval]
        if endpos is not None:
            argv += ["-E", endpos]
        for k, v in self.options:
            argv += ["-o", "%s=%s" % (k, v)]
        return argv

    def backlog(self, tag, rows, target):
        from harness import format_lsn
        ws = Walsender(self.ctx.pg, self.slot)
        env = self.ctx.env_meter()
        child = Child(self.argv("/dev/null", format_lsn(target)), self.log(tag))
        done = threading.Event()

        def watch_walsender():
            while not done.is_set():
                ws.poll()
                if ws.stats is not None:
                    return
                time.sleep(0.02)  # poll interval until the walsender shows up
        threading.Thread(target=watch_walsender, daemon=True).start()
        rc, elapsed = child.wait_exit(self.ctx.timeout(rows))
        done.set()
        wcpu = ws.stats.cpu_s if ws.stats else None
        ws.stop()
        if rc is None:
            child.stop()
            return Result(ok=False, note="no exit within the timeout")
        confirmed = workload.confirmed_lsn(self.ctx.pg, self.slot) or 0
        ok = rc == 0
        return Result(env.figures(), ok=ok, elapsed_s=elapsed, rows=rows, cpu_s=child.cpu_s,
                      rss_kb=child.rss_kb, walsender_cpu_s=wcpu, confirmed_past_target=confirmed >= target,
                      start_s=ws.active_at - child.t0 if ws.active_at else None,
                      note="" if ok else "exit %s: %s" % (rc, child.log_tail(500)))

    def steady(self, tag, rates, duration):
        ctx = self.ctx
        workload.create_slot(ctx.pg, self.slot, self.plugin)
        child = Child(self.argv("-"), self.log(tag), stdout=subprocess.PIPE)
        received = []       # (receipt time, commit time text) per transaction
        rows = [0]

        def reader():
            begin_ts = None
            for line in child.proc.stdout:
                now = time.time()
                if line.startswith(b'{"action":"B"'):
                    begin_ts = json.loads(line).get("timestamp")
                elif line.startswith(b'{"action":"I"'):
                    rows[0] += 1
                elif line.startswith(b'{"action":"C"'):
                    ts = json.loads(line).get("timestamp") or begin_ts
                    received.append((now, ts))
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        try:
            ctx.wait_slot_active(self.slot, child)
            return {rate: ctx.steady_run(child, self.slot, rate, duration, count=lambda: rows[0],
                                         latencies=lambda: [(_pg_time(ts), now)
                                                            for now, ts in received])
                    for rate in rates}
        finally:
            child.stop()
            t.join(timeout=5)
            workload.drop_slot(ctx.pg, self.slot)


class DecodePgoutput(Decode):
    """The decode limit with pgoutput, as the relay's --plugin=pgoutput asks for it."""
    key, label, plugin = "decode-pgoutput", "decode, pgoutput", "pgoutput"
    options = [("proto_version", "1"), ("publication_names", workload.PGOUTPUT_PUBLICATION)]

    def steady(self, tag, rates, duration):
        return {}


class DecodeNames(Decode):
    """The decode limit with type names instead of OIDs (wal2json's default)."""
    key, label = "decode-names", "decode, names"
    options = WAL2JSON_OPTIONS_TYPE_NAMES


class Broker(Base):
    key, label, plugin = "broker", "limit, broker", None

    def argv(self, topic, extra):
        return [self.ctx.bare_producer, "-b", self.ctx.kafka.bootstrap, "-t", topic,
                "-k", str(workload.KEY_LEN), "-V", workload.payload_text(self.ctx.payload_bytes),
                "--type", workload.KIND, "--source", self.ctx.ce_source] + extra

    def _summary(self, child):
        for line in reversed(child.log_tail(4000).splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        return {}

    def backlog(self, tag, rows, target):
        topic = self.topic(tag)
        env = self.ctx.env_meter()
        child = Child(self.argv(topic, ["-n", str(rows)]), self.log(tag))
        rc, elapsed = child.wait_exit(self.ctx.timeout(rows))
        if rc is None:
            child.stop()
            return Result(ok=False, note="no exit within the timeout")
        acked = self.ctx.offsets.count(topic, self.ctx.partitions)
        summary = self._summary(child)
        ok = rc == 0 and acked == rows
        return Result(env.figures(), ok=ok, elapsed_s=elapsed, rows=acked, cpu_s=child.cpu_s,
                      rss_kb=child.rss_kb, walsender_cpu_s=None,
                      note="" if ok else "exit %s, %d of %d in Kafka: %s" % (rc, acked, rows, summary))

    def steady(self, tag, rates, duration):
        ctx = self.ctx
        topic = self.topic(tag)
        ctx.create_topic(topic)
        consumer = measure.LatencyConsumer(ctx.kafka.bootstrap, [topic], ctx.partitions,
                                           want_ce_time=True)

        def latencies():
            return [(_rfc3339(ce), now) for _, now, ce in consumer.received if ce]
        try:
            out = {}
            for rate in rates:
                # the producer is the load: one run of warm-up + duration per rate
                child = Child(self.argv(topic, ["-r", str(rate),
                                                "-D", "%g" % (duration + ctx.warmup)]),
                              self.log("%s-%d" % (tag, rate)))
                out[rate] = ctx.steady_run(child, None, rate, duration,
                                           count=lambda: consumer.count, latencies=latencies,
                                           load=child)
            return out
        finally:
            consumer.stop()


class _ToKafka(Base):
    """Contestants that read the slot and publish to Kafka: relay, Debezium."""

    transactional = False   # writes in Kafka transactions: offsets count their markers too

    def spawn(self, tag, topic):
        raise NotImplementedError

    def backlog(self, tag, rows, target):
        ctx = self.ctx
        topic = self.topic(tag)
        ws = Walsender(ctx.pg, self.slot)
        env = ctx.env_meter()
        child = self.spawn(tag, topic)
        acked = [0]

        def done():
            if not child.alive:
                raise RuntimeError("%s exited with %s\n%s"
                                   % (self.label, child.proc.returncode, child.log_tail()))
            ws.poll()
            if acked[0] < rows:
                acked[0] = ctx.offsets.count(topic, ctx.partitions)
                if acked[0] < rows:
                    return False
            return (workload.confirmed_lsn(ctx.pg, self.slot) or 0) >= target
        try:
            try:        # a run that does not finish in time is a result, not an error
                procs.wait_until(done, ctx.timeout(rows), interval=0.1,
                                 what="every row acknowledged and confirmed")
                ok = True
            except procs.WaitTimeout:
                ok = False
            elapsed = time.monotonic() - child.t0
            child.stats.sample()
            cpu, rss, wcpu = child.stats.cpu_s, child.stats.rss_kb, ws.cpu_s()
            envf = env.figures()
        finally:
            ws.stop()
            rc = child.stop()
        note = "" if ok else "timed out: %d of %d acknowledged, confirmed %s" % (
            acked[0], rows, workload.confirmed_lsn(ctx.pg, self.slot))
        if ok and self.transactional:
            # The offsets also count one commit marker per partition and Kafka
            # transaction, so they end above N: count what a read_committed
            # consumer gets (after the clock stopped), which must be N exactly.
            acked[0] = measure.count_records(ctx.kafka.bootstrap, topic, ctx.partitions, rows)
            if acked[0] != rows:
                ok = False
                note = "a read_committed consumer got %d records of %d" % (acked[0], rows)
        if ok and rc not in (0, 130, 143, -15):
            note = "exit code %s on SIGTERM" % rc
        return Result(envf, ok=ok, elapsed_s=elapsed, rows=acked[0], cpu_s=cpu, rss_kb=rss,
                      walsender_cpu_s=wcpu, exit_code=rc, note=note,
                      start_s=ws.active_at - child.t0 if ws.active_at else None)

    def steady(self, tag, rates, duration):
        ctx = self.ctx
        topic = self.topic(tag)
        self.make_slot(tag)
        ctx.create_topic(topic)
        child = self.spawn(tag, topic)
        consumer = None
        try:
            ctx.wait_slot_active(self.slot, child)
            # no wait for it to connect: rows of the warm-up are left out of the latencies
            consumer = measure.LatencyConsumer(ctx.kafka.bootstrap, [topic], ctx.partitions)

            def latencies():
                keys = [k.decode() for k, _, _ in consumer.received]
                commits = workload.commit_times(ctx.pg, keys)
                return [(commits[k.decode()], now) for k, now, _ in consumer.received
                        if k.decode() in commits]
            return {rate: ctx.steady_run(child, self.slot, rate, duration,
                                         count=lambda: consumer.count, latencies=latencies)
                    for rate in rates}
        finally:
            if consumer is not None:
                consumer.stop()
            child.stop()
            workload.drop_slot(ctx.pg, self.slot)


class Relay(_ToKafka):
    key, label, plugin = "relay", "outbox-relay", "wal2json"

    @property
    def relay_bin(self):
        return self.ctx.relay_bin

    def topic(self, tag):
        return "%s.%s.%s.%s" % (self.ctx.run_id, tag, self.key, workload.KIND)

    def extra_args(self, tag):
        # Its own checkpoint topic per workload: the slot's name is the same in
        # each, the topic template is not, and a relay refuses to start on a
        # checkpoint written with another row mapping (--accept-config-change).
        return ["--checkpoint-topic", "%s.%s.%s.checkpoints" % (self.ctx.run_id, tag, self.key)]

    def common_args(self, tag):
        return ["-d", self.ctx.conninfo(workload.DBNAME), "-S", self.slot, "-t", "public.outbox",
                "-b", self.ctx.kafka.bootstrap] + self.extra_args(tag)

    def make_slot(self, tag):
        """`outbox-relay slot create`, as the guide says: it also writes the
        slot's first checkpoint, without which a relay with --exactly-once
        refuses a slot it did not create itself (it cannot tell a new slot
        from one whose checkpoints were lost)."""
        workload.drop_slot(self.ctx.pg, self.slot)
        cp = subprocess.run([self.relay_bin, "slot", "create"] + self.common_args(tag),
                            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if cp.returncode != 0:
            raise RuntimeError("%s: slot create exited with %s\n%s%s"
                               % (self.label, cp.returncode, cp.stdout, cp.stderr))

    def spawn(self, tag, topic):
        ctx = self.ctx
        # the default template is outbox.${kind}; only the prefix differs
        template = topic[:-len(workload.KIND)] + "${kind}"
        argv = [self.relay_bin] + self.common_args(tag) + ["--topic", template,
                                                          "-s", "%g" % ctx.status_interval]
        if ctx.profile:
            # perf stays the parent; the relay's CPU is counted with perf's own.
            # DWARF call graphs: libc and librdkafka have no frame pointers.
            argv = ["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,8192", "-o",
                    os.path.join(ctx.workdir, "%s-%s.perf.data" % (self.key, tag)), "--"] + argv
        return Child(argv, self.log(tag))

    def profile_report(self, tag, lines=28):
        """Where the relay spent CPU on workload tag (--profile): the symbols
        with the most inclusive time (unresolved addresses left out), then the
        most self time."""
        data = os.path.join(self.ctx.workdir, "%s-%s.perf.data" % (self.key, tag))
        if not os.path.exists(data):
            return None
        out = []
        for mode, limit in (("--children", "3"), ("--no-children", "1.5")):
            cp = subprocess.run(["perf", "report", "-i", data, "--stdio", mode, "--sort", "sym",
                                 "-g", "none", "--percent-limit", limit],
                                capture_output=True, text=True, timeout=600)
            body = [ln.rstrip() for ln in cp.stdout.splitlines()
                    if ln.strip() and not ln.startswith("#") and " 0x" not in ln
                    and "[k] entry_SYSCALL" not in ln]
            out.append("  %s:" % ("inclusive (children)" if mode == "--children" else "self"))
            out += ["  " + ln for ln in body[:lines]]
        return "\n".join(out)


class RelayPgoutput(Relay):
    """outbox-relay --plugin=pgoutput, otherwise as the relay contestant (its
    own slot, and a publication of the relay's kind made beforehand)."""
    key, label, plugin = "relay-pgoutput", "relay, pgoutput", "pgoutput"

    def extra_args(self, tag):
        return super().extra_args(tag) + ["--plugin", "pgoutput", "--publication",
                                          workload.PGOUTPUT_PUBLICATION]


class RelayEOS(Relay):
    """outbox-relay --exactly-once, otherwise as the relay contestant (its own
    slot and checkpoint topic, and a transactional.id per workload, so that
    no run fences another's producer)."""
    key, label = "relay-eos", "relay, EOS"
    transactional = True

    def extra_args(self, tag):
        return super().extra_args(tag) + [
            "--exactly-once", "--transactional-id", "%s/%s/%s" % (self.ctx.run_id, tag, self.key)]


class _FromBase:
    """A relay contestant run from --base-relay-bin instead of --relay-bin."""

    @property
    def relay_bin(self):
        return self.ctx.base_relay_bin


class RelayBase(_FromBase, Relay):
    key, label = "relay-base", "relay, base bin"


class RelayEOSBase(_FromBase, RelayEOS):
    key, label = "relay-eos-base", "EOS, base bin"


class Debezium(_ToKafka):
    key, label, plugin = "debezium", "Debezium", "pgoutput"

    def topic(self, tag):
        return "%s.%s.debezium.%s" % (self.ctx.run_id, tag, workload.KIND)

    def spawn(self, tag, topic):
        ctx = self.ctx
        # EventRouter routes to route.topic.replacement with ${routedByValue} = kind
        prefix = topic[:-len(workload.KIND) - 1]
        argv = debezium.prepare(os.path.join(ctx.workdir, "debezium-%s" % tag),
                                bootstrap=ctx.kafka.bootstrap, pg=ctx.pg, dbname=workload.DBNAME,
                                slot=self.slot, publication="bench_pub", topic_prefix=prefix,
                                name="bench-%s" % tag,
                                flush_interval_ms=int(ctx.status_interval * 1000))
        return Child(argv, self.log(tag))


ALL = {"decode": Decode, "decode-pgoutput": DecodePgoutput, "decode-names": DecodeNames,
       "broker": Broker, "relay": Relay, "relay-pgoutput": RelayPgoutput, "relay-eos": RelayEOS,
       "relay-base": RelayBase, "relay-eos-base": RelayEOSBase, "debezium": Debezium}
