# SPDX-License-Identifier: Apache-2.0
"""Shared machinery of the fault-injection tests (the integration suite's
scenarios where the broker, PostgreSQL or the relay fails under load):
a paced multi-client load that survives PostgreSQL going away, a compact Kafka
reader that remembers where every copy of every work ID landed, snapshots of
the slot and the topic taken at each fault, and the check that turns those
into the verdict every fault scenario ends with:

  - every committed work ID (the outbox table is the truth: a row is there iff
    its transaction committed) was delivered at least once, and nothing else;
  - duplicates are counted (printed and reported as a METRIC line) and each one
    must be explained by a fault: the extra copy was produced after a fault and
    its transaction was not yet confirmed to the slot when that fault hit.
    A duplicate before any fault, or a resend of a transaction the slot had
    confirmed before the fault, is a failure.

Sizes: OUTBOX_RELAY_SOAK=1 selects the full sizes of the issue (see each test
module); the defaults keep the whole fault set within about 12 minutes on a
small shared machine. OUTBOX_RELAY_FAULT_SEED fixes the random fault moments
(the seed in use is printed).

Every wait here is a bounded poll on a condition (harness.wait_until).
"""

import collections
import os
import random
import re
import signal
import threading
import time
import uuid

import psycopg2
import psycopg2.extras
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from . import procs
from .kafka import KafkaBroker
from .pg import format_lsn, parse_lsn
from .procs import wait_until

SOAK = os.environ.get("OUTBOX_RELAY_SOAK", "") not in ("", "0", "no", "false")
KIND = "fault"
PARTITIONS = 3
# long enough that no broker outage in these tests makes a delivery fail
NO_TIMEOUT = ["-X", "message.timeout.ms=900000"]


def sized(default, soak):
    """default normally, soak under OUTBOX_RELAY_SOAK=1."""
    return soak if SOAK else default


def seed():
    """The seed for random fault moments: $OUTBOX_RELAY_FAULT_SEED or a fresh one."""
    s = os.environ.get("OUTBOX_RELAY_FAULT_SEED")
    return int(s) if s else random.SystemRandom().randrange(1 << 30)


def say(msg):
    print(msg, flush=True)


def observe(seconds, check, interval=0.1):
    """Call check() (which asserts) every interval for `seconds`: a condition that
    must hold throughout a period. Returns how many times it was checked."""
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        check()
        n += 1
        time.sleep(interval)  # poll interval
    return n


# --- load ------------------------------------------------------------------

_CONN_LOST = (psycopg2.OperationalError, psycopg2.InterfaceError)


class Load:
    """`writers` client threads committing about `rows` outbox rows in all, at
    about `rate` rows/s together, in transactions of mostly 1-5 rows, some of
    10-30 and a few of 100-300; every 15th transaction rolls back.

    Work IDs are '<tag>-w<writer>-<n>', kind 'fault'. A writer that loses its
    connection (PostgreSQL stopping, restarting) reconnects with backoff for up
    to `outage_s` seconds and carries on with fresh IDs: the outcome of a commit
    interrupted by the server going away is unknown, so the outbox table, not
    the writer, is the truth about what committed (committed_ids()).
    """

    def __init__(self, case, tag, rows, writers=4, rate=800, rng=None, outage_s=240):
        self.case, self.tag = case, tag
        self.quota = [rows // writers + (1 if w < rows % writers else 0) for w in range(writers)]
        self.per_writer_rate = float(rate) / writers
        self.rng = rng or random.Random(seed())
        self.outage_s = outage_s
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.committed = 0                    # rows whose COMMIT returned
        self.seen_committed = []              # their work IDs
        self.rolled_back = []
        self.in_doubt = 0                     # rows of commits interrupted by a lost connection
        self.reconnects = 0
        self.errors = []
        self.threads = [threading.Thread(target=self._run,
                                         args=(w, random.Random(self.rng.random())),
                                         name="%s-writer-%d" % (tag, w), daemon=True)
                        for w in range(writers)]
        self.started_at = None
        self.finished_at = None

    def start(self):
        self.started_at = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def _connect(self):
        deadline = time.monotonic() + self.outage_s
        delay = 0.05
        while True:
            try:
                return self.case.pg.connect(self.case.dbname, autocommit=False)
            except _CONN_LOST:
                if time.monotonic() > deadline or self.stop_event.is_set():
                    raise
                # backoff while PostgreSQL is away
                self.stop_event.wait(delay)  # retry with backoff
                delay = min(delay * 2, 1.0)

    def _size(self, rng):
        x = rng.random()
        if x < 0.03:
            return rng.randint(100, 300)
        if x < 0.25:
            return rng.randint(10, 30)
        return rng.randint(1, 5)

    def _run(self, w, rng):
        try:
            conn = self._connect()
            n = done = txn = 0
            t0 = time.monotonic()
            while done < self.quota[w] and not self.stop_event.is_set():
                due = t0 + done / self.per_writer_rate
                if self.stop_event.wait(max(0.0, due - time.monotonic())):  # pace: wait until due
                    break
                txn += 1
                rollback = txn % 15 == 0
                if rollback:
                    k = rng.randint(1, 20)
                else:
                    k = min(self._size(rng), self.quota[w] - done)
                ids = ["%s-w%d-%d%s" % (self.tag, w, n + i, "-rb" if rollback else "")
                       for i in range(k)]
                n += k
                rows = [(wid, KIND, '{"w": %d, "n": %d, "pad": "%s"}' % (w, n, "p" * 40))
                        for wid in ids]
                try:
                    with conn.cursor() as cur:
                        psycopg2.extras.execute_values(
                            cur, "INSERT INTO outbox (work_id, kind, payload) VALUES %s", rows,
                            page_size=1000)
                    if rollback:
                        conn.rollback()
                        with self.lock:
                            self.rolled_back.extend(ids)
                        continue
                    conn.commit()
                except _CONN_LOST:
                    with self.lock:
                        self.in_doubt += 0 if rollback else k
                        self.reconnects += 1
                    try:
                        conn.close()
                    except psycopg2.Error:
                        pass
                    conn = self._connect()
                    continue
                done += k
                with self.lock:
                    self.committed += k
                    self.seen_committed.extend(ids)
            conn.close()
        except BaseException as e:      # reported by the test thread
            self.errors.append(e)

    @property
    def running(self):
        return any(t.is_alive() for t in self.threads)

    def check(self):
        if self.errors:
            raise AssertionError("a writer failed: %r" % self.errors[0])

    def wait_rows(self, n, timeout, tick=None, relays=()):
        """Poll until at least n rows were committed; the relays given must stay alive."""
        def reached():
            self.check()
            for r in relays:
                assert r.alive, "relay exited with %s during the load\n%s" % (r.returncode, r.log)
            return self.committed >= n or not self.running
        wait_until(reached, timeout, tick=tick,
                   what=lambda: "%d rows committed (have %d)" % (n, self.committed))

    def finish(self, timeout=600, tick=None, relays=()):
        """Wait for every writer to finish its quota; returns the committed work IDs
        as read back from the outbox table."""
        self.wait_rows(sum(self.quota), timeout, tick=tick, relays=relays)
        wait_until(lambda: not self.running, 60, what="writers to exit", tick=tick)
        self.finished_at = time.monotonic()
        self.check()
        return self.committed_ids()

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=30)

    def committed_ids(self):
        ids = {r[0] for r in self.case.query(
            "SELECT work_id FROM outbox WHERE work_id LIKE %s", (self.tag + "-%",))}
        lost_commits = set(self.seen_committed) - ids
        assert not lost_commits, \
            "PostgreSQL lost acknowledged commits: %s" % sorted(lost_commits)[:5]
        return ids


# --- reading Kafka -----------------------------------------------------------

class Collector:
    """Reads every partition of one topic from the beginning, without a consumer
    group (assign(), so broker restarts cause no rebalance), and remembers each
    copy of each work ID as (partition, offset, ce_pglsn).

    Offsets within a partition only grow, so a re-read (after a reconnect) is
    recognised by its offset and not counted twice.
    """

    def __init__(self, bootstrap, topic, partitions=PARTITIONS, isolation="read_uncommitted"):
        self.topic = topic
        self.partitions = partitions
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": "faults-%s" % uuid.uuid4().hex,
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
            "log_level": 2,         # the broker outages are deliberate: no connection noise
        })
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                              for p in range(partitions)])
        self.copies = collections.defaultdict(list)
        self.next_offset = {}
        self.count = 0
        self.errors = []

    def poll(self, timeout=0.1):
        for msg in self.consumer.consume(num_messages=10000, timeout=timeout):
            err = msg.error()
            if err is not None:
                if err.code() not in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART,
                                      KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                    self.errors.append(err)
                continue
            p, o = msg.partition(), msg.offset()
            if o < self.next_offset.get(p, 0):
                continue
            self.next_offset[p] = o + 1
            wid = lsn = None
            for k, v in msg.headers() or ():
                if k == "ce_id":
                    wid = v.decode()
                elif k == "ce_pglsn":
                    lsn = parse_lsn(v.decode())
            self.copies[wid].append((p, o, lsn))
            self.count += 1

    def ids(self):
        return self.copies.keys()

    def watermarks(self):
        """High watermark of each partition, asked of the broker now."""
        out = {}
        for p in range(self.partitions):
            low, high = self.consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                            timeout=10, cached=False)
            out[p] = high
        return out

    def stable_watermarks(self, timeout=10):
        """Watermarks that did not move over half a second (nothing still landing)."""
        last = self.watermarks()

        def settled():
            nonlocal last
            self.poll(0.5)  # poll: gives late writes time to land
            now = self.watermarks()
            same, last = now == last, now
            return now if same else None
        return wait_until(settled, timeout, what="the topic's high watermarks to settle")

    def drain(self, timeout=60):
        """Read up to the high watermarks as of now. The consumer's position
        counts: with read_committed the last offsets can be transaction
        markers, which are never delivered."""
        target = self.watermarks()

        def done():
            pos = {tp.partition: tp.offset for tp in self.consumer.position(
                [TopicPartition(self.topic, p) for p in target])}
            return all(max(self.next_offset.get(p, 0), pos.get(p, 0)) >= h
                       for p, h in target.items() if h)
        wait_until(done, timeout, what="reading up to the high watermarks %s" % target,
                   tick=self.poll)

    def max_lsn(self):
        return max(c[2] for cs in self.copies.values() for c in cs)

    def close(self):
        try:
            self.consumer.close()
        except RuntimeError:
            pass


class CountingCollector(Collector):
    """A Collector for work IDs '<prefix><i>', 0 <= i < n, that keeps only a
    per-ID count and the set of ce_pglsn values: a million records fit in a
    few megabytes. IDs of any other form are kept in `others`."""

    def __init__(self, bootstrap, topic, prefix, n, partitions=PARTITIONS):
        super().__init__(bootstrap, topic, partitions)
        self.prefix, self.n = prefix, n
        self.counts = bytearray(n)
        self.lsns = set()
        self.others = collections.Counter()
        self.distinct = 0

    def poll(self, timeout=0.1):
        for msg in self.consumer.consume(num_messages=10000, timeout=timeout):
            err = msg.error()
            if err is not None:
                if err.code() not in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                    self.errors.append(err)
                continue
            p, o = msg.partition(), msg.offset()
            if o < self.next_offset.get(p, 0):
                continue
            self.next_offset[p] = o + 1
            self.count += 1
            h = dict(msg.headers() or ())
            wid = h.get("ce_id", b"").decode()
            self.lsns.add(h.get("ce_pglsn", b"").decode())
            rest = wid[len(self.prefix):]
            i = int(rest) if wid.startswith(self.prefix) and rest.isdigit() else -1
            if 0 <= i < self.n:
                if self.counts[i] == 0:
                    self.distinct += 1
                if self.counts[i] < 255:
                    self.counts[i] += 1
            else:
                self.others[wid] += 1


def collector(case, bootstrap=None, broker=None, isolation="read_uncommitted", create=True):
    """A Collector for this test's topic (created first, with PARTITIONS partitions)."""
    b = broker or case.kafka
    topic = case.topic(KIND)
    if create:
        b.create_topic(topic, partitions=PARTITIONS)
    c = Collector(bootstrap or b.bootstrap, topic, isolation=isolation)
    case.readers.append(c)      # closed by the case's teardown
    return c


def verify_exactly_once(case, coll, expected, scenario, relays=(), timeout=300):
    """--exactly-once's verdict, for a read_committed collector: every
    committed work ID exactly once, nothing else. Returns the number of
    records read."""
    expected = set(expected)
    assert expected, "the load committed nothing"

    def complete():
        for r in relays:
            assert r.alive, "relay exited with %s before delivering everything\n%s" % (
                r.returncode, r.log)
        return expected <= coll.ids()
    try:
        wait_until(complete, timeout, what="every committed work ID to arrive", tick=coll.poll)
    except AssertionError:
        missing = expected - set(coll.ids())
        raise AssertionError("%d of %d committed work IDs never arrived, e.g. %s\n%s" % (
            len(missing), len(expected), sorted(missing)[:5], case.logs()))
    coll.drain()
    dups = {w: cs for w, cs in coll.copies.items() if len(cs) > 1}
    unexpected = set(coll.ids()) - expected
    say("%s: %d committed work IDs, %d records read with read_committed, %d work IDs more than once"
        % (scenario, len(expected), coll.count, len(dups)))
    case.metric("%s_duplicates" % scenario, sum(len(cs) - 1 for cs in dups.values()))
    case.metric("%s_rows" % scenario, len(expected))
    assert not unexpected, "published work IDs that never committed: %s" % sorted(unexpected)[:5]
    assert not dups, "%d work IDs more than once for a read_committed consumer, e.g. %s\n%s" % (
        len(dups), sorted(dups.items())[:3], case.logs())
    assert not coll.errors, coll.errors
    return coll.count


# --- faults and the verdict --------------------------------------------------

class Mark:
    """What held when a fault hit: the slot's confirmed_flush_lsn and each
    partition's high watermark.

    exact: the watermarks were read after the relay process was gone, so every
    record below them was produced before the fault and every one at or above
    after it. Otherwise they were read just before the fault (the relay keeps
    running and may still append copies it produced before the fault).
    """

    def __init__(self, label, confirmed, hw, exact):
        self.label, self.confirmed, self.hw, self.exact = label, confirmed, hw, exact

    def __repr__(self):
        return "Mark(%s, confirmed %s, hw %s%s)" % (
            self.label, format_lsn(self.confirmed) if self.confirmed is not None else None,
            self.hw, ", exact" if self.exact else "")


def mark(case, coll, label, exact=False, slot=None):
    confirmed = case.confirmed(slot)
    hw = coll.stable_watermarks() if exact else coll.watermarks()
    return Mark(label, confirmed, hw, exact)


def explain_duplicates(coll, marks):
    """(number of extra copies, list of unexplained ones as text)."""
    extra = 0
    bad = []
    for wid, copies in coll.copies.items():
        if len(copies) < 2:
            continue
        copies = sorted(copies)
        for prev, (p, o, lsn) in zip(copies, copies[1:]):
            extra += 1
            before = [m for m in marks if m.hw.get(p, 0) <= o]
            if not before:
                bad.append("%s: copy at %d/%d before any fault (first copy at %d/%d)"
                           % (wid, p, o, prev[0], prev[1]))
                continue
            m = before[-1]
            if m.confirmed is not None and lsn <= m.confirmed:
                bad.append("%s (transaction ending at %s): sent again after fault %r although "
                           "the slot had confirmed %s" % (wid, format_lsn(lsn), m.label,
                                                           format_lsn(m.confirmed)))
            elif m.exact and prev[0] == p and prev[1] >= m.hw.get(p, 0):
                bad.append("%s: copies at %d/%d and %d/%d both produced after fault %r"
                           % (wid, p, prev[1], p, o, m.label))
    return extra, bad


def verify(case, coll, expected, marks, scenario, relays=(), timeout=300):
    """The verdict every scenario ends with (see the module docstring).
    Returns the number of duplicates (extra copies)."""
    expected = set(expected)
    assert expected, "the load committed nothing"
    # every commit is before this; once the slot confirmed it, and the topic was
    # read to its end, a work ID still missing is lost, not late
    wal_end = parse_lsn(case.pg.scalar("SELECT pg_current_wal_flush_lsn()::text"))
    lost = []
    next_check = [time.monotonic() + 5]

    def complete():
        for r in relays:
            assert r.alive, "relay exited with %s before delivering everything\n%s" % (
                r.returncode, r.log)
        if expected <= coll.ids():
            return True
        if time.monotonic() > next_check[0]:
            next_check[0] = time.monotonic() + 5
            if (case.confirmed() or 0) >= wal_end:
                coll.drain()
                lost[:] = sorted(expected - set(coll.ids()))
                return bool(lost) or expected <= coll.ids()
        return False
    try:
        wait_until(complete, timeout, what="every committed work ID to arrive", tick=coll.poll)
        assert not lost
    except AssertionError:
        missing = expected - set(coll.ids())
        raise AssertionError("%d of %d committed work IDs never arrived%s, e.g. %s; slot %r\n%s"
                             % (len(missing), len(expected),
                                " although the slot confirmed past them" if lost else "",
                                sorted(missing)[:5], case.slot_info(), case.logs()))
    last = coll.max_lsn()
    wait_until(lambda: (case.confirmed() or 0) >= last, 120, tick=coll.poll,
               what=lambda: "the slot to confirm %s (the newest delivered transaction); it is "
               "at %s" % (format_lsn(last), format_lsn(case.confirmed() or 0)))
    coll.drain()
    unexpected = set(coll.ids()) - expected
    extra, bad = explain_duplicates(coll, marks)
    dup_ids = sum(1 for cs in coll.copies.values() if len(cs) > 1)
    say("%s: %d committed work IDs delivered, %d records, %d duplicates (%d work IDs more than "
        "once), faults %s" % (scenario, len(expected), coll.count, extra, dup_ids, marks))
    case.metric("%s_duplicates" % scenario, extra)
    case.metric("%s_rows" % scenario, len(expected))
    assert not unexpected, "published work IDs that never committed: %s" % sorted(unexpected)[:5]
    assert not bad, "%d duplicates not explained by a fault:\n  %s\n%s" % (
        len(bad), "\n  ".join(bad[:10]), case.logs())
    return extra


# --- the relay and the servers ----------------------------------------------

READY_S = 120       # a loaded machine can take longer than the harness's 30 s default
BROKER_START_S = 240


def start_relay(case, *args, **kw):
    """case.relay(*args, **kw), waiting up to READY_S for its slot to become active."""
    r = case.relay(*args, ready=False, **kw)
    r.wait_ready(case.pg, kw.get("slot") or case.slot, timeout=READY_S)
    return r


def metrics_args():
    port = procs.free_port()
    return port, ["--metrics-address", "127.0.0.1:%d" % port]


class wal_sender_timeout:
    """with wal_sender_timeout(pg, '5s'): set it cluster-wide (ALTER SYSTEM,
    pg_reload_conf) and reset it afterwards."""

    def __init__(self, pg, value):
        self.pg, self.value = pg, value

    def _set(self, sql, want):
        self.pg.query(sql)
        self.pg.query("SELECT pg_reload_conf()")
        wait_until(lambda: self.pg.scalar("SHOW wal_sender_timeout") == want, 30,
                   what="wal_sender_timeout to become %s" % want)

    def __enter__(self):
        self._set("ALTER SYSTEM SET wal_sender_timeout = '%s'" % self.value, self.value)
        return self

    def __exit__(self, *exc):
        if self.pg.running:
            self.pg.query("ALTER SYSTEM RESET wal_sender_timeout")
            self.pg.query("SELECT pg_reload_conf()")


_spare = {}


def spare_broker(env):
    """A second Kafka broker, started once per session, for tests that kill or
    freeze a broker: the shared one keeps serving the other tests. It is
    stopped with everything else the harness started, at exit."""
    b = _spare.get(id(env))
    if b is None:
        b = KafkaBroker(env.base_dir, name="faults-kafka", quick_start=True)
        _spare[id(env)] = b
    heal_broker(b)
    return b


def heal_broker(b):
    """Make sure a broker a test froze or killed is up again."""
    if b.running and b._frozen:
        b.thaw()
    if not b.running:
        b.start(timeout=BROKER_START_S)


def pg_ctl_stop_fast(pg, timeout_s):
    """`pg_ctl stop -m fast -t timeout_s` on the harness's server; returns
    (exit code, seconds taken, output). The harness then reaps the postmaster."""
    argv = [pg._bin("pg_ctl"), "stop", "-D", pg.datadir, "-m", "fast", "-w", "-t", str(timeout_s)]
    t0 = time.monotonic()
    cp = procs.run(argv, user=pg._run_as, timeout=timeout_s + 30, check=False)
    took = time.monotonic() - t0
    return cp.returncode, took, cp.stdout + cp.stderr


def commit_record_lsn(pg, xid32, start, end):
    """Start LSN of the COMMIT record of transaction xid32, found with pg_waldump
    between start and end: a transaction is decoded again after a restart as long
    as the slot's confirmed_flush_lsn is not past this point."""
    argv = [pg._bin("pg_waldump"), "-p", os.path.join(pg.datadir, "pg_wal"),
            "-s", format_lsn(start), "-e", format_lsn(end), "-x", str(xid32), "-r", "Transaction"]
    out = procs.run(argv, user=pg._run_as, timeout=60, check=False).stdout
    for line in out.splitlines():
        m = re.search(r"lsn: ([0-9A-F]+/[0-9A-F]+),.*\bCOMMIT\b", line)
        if m:
            return parse_lsn(m.group(1))
    raise AssertionError("no COMMIT of transaction %d between %s and %s in pg_waldump's output:\n%s"
                         % (xid32, format_lsn(start), format_lsn(end), out))


def sigkill(relay):
    rc = relay.kill()
    assert rc == -signal.SIGKILL, "relay had already exited with %s\n%s" % (rc, relay.log)
