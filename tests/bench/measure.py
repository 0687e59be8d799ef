# SPDX-License-Identifier: Apache-2.0
"""What the benchmark measures, and nothing about who is measured:

- ProcStats: CPU seconds (utime + stime, of a process and its live children)
  and peak RSS (VmHWM) read from /proc while the process runs;
- end_offsets(): how many records the broker holds for a topic (the sum of
  its partitions' high watermarks), i.e. how many were acknowledged;
- LatencyConsumer: the one Kafka consumer every contestant is measured with,
  noting when each record arrived;
- percentiles and formatting helpers.

Every figure is taken the same way for every contestant.
"""

import os
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import procs

_TICK = os.sysconf("SC_CLK_TCK")


def _read_stat(pid):
    """(utime + stime seconds, ppid) of pid, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    # after the command name: state(0) ppid(1) ... utime(11) stime(12)
    return (int(fields[11]) + int(fields[12])) / _TICK, int(fields[1])


def _descendants(pid):
    """pid's children, grandchildren, ... (from /proc; empty when none)."""
    parents = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            st = _read_stat(int(name))
            if st is not None:
                parents.setdefault(st[1], []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for kid in parents.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid)
    return out


class ProcStats:
    """CPU and peak RSS of one process tree, sampled every `interval` seconds
    from a thread, and on demand with sample().

    cpu_s: utime+stime of the process and of each descendant (the last value
    seen of each, so a child that exits keeps what it used). rss_kb: the
    highest VmHWM seen of any one process of the tree (for our contestants the
    tree is one process: the relay, pg_recvlogical, the JVM)."""

    def __init__(self, pid, interval=0.1, children=True):
        self.pid = pid
        self.children = children
        self._cpu = {}
        self.rss_kb = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval):
        while not self._stop.is_set():
            if not self.sample():
                break
            self._stop.wait(interval)

    def sample(self):
        """Read /proc now; returns False once the main process is gone."""
        pids = [self.pid] + (_descendants(self.pid) if self.children else [])
        alive = False
        with self._lock:
            for p in pids:
                st = _read_stat(p)
                if st is None:
                    continue
                if p == self.pid:
                    alive = True
                self._cpu[p] = max(st[0], self._cpu.get(p, 0.0))
                kb = procs.read_vmhwm_kb(p)
                if kb:
                    self.rss_kb = max(self.rss_kb, kb)
        return alive

    @property
    def cpu_s(self):
        with self._lock:
            return sum(self._cpu.values())

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)


class MachineBusy:
    """Share of the machine's CPU time (all cores, all processes, ours and any
    other tenant's) that was busy between start and busy(), from /proc/stat:
    tells whether a figure was taken on a saturated machine."""

    def __init__(self):
        self.t0 = self._read()

    @staticmethod
    def _read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)   # idle + iowait
        return sum(v[:8]), idle

    def busy(self):
        total, idle = self._read()
        dt, di = total - self.t0[0], idle - self.t0[1]
        return 100.0 * (dt - di) / dt if dt > 0 else None


def cpu_of(pid):
    """utime+stime seconds of one process now (None when gone)."""
    st = _read_stat(pid) if pid else None
    return None if st is None else st[0]


def create_topic(bootstrap, name, partitions, timeout=30):
    """Create a topic (like harness.KafkaBroker.create_topic, without the
    client's informational log lines in the benchmark's output)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  replication_factor=1)])[name].result(timeout=timeout)


class Offsets:
    """Reads high watermarks: how many records the broker acknowledged."""

    def __init__(self, bootstrap):
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets",
                                  "enable.auto.commit": False})

    def count(self, topic, partitions):
        total = 0
        for p in range(partitions):
            low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                            cached=False)
            total += max(high, 0)
        return total

    def close(self):
        self.consumer.close()


class LatencyConsumer:
    """The consumer all contestants are measured with: assigned every partition
    of the given topics from the beginning (no group rebalance to wait for),
    it notes for each record its key, its ce_time header (when present) and the
    wall-clock time consume() returned it. Runs in a thread until stop().

    Same settings for every contestant; fetch.wait.max.ms is low so that the
    consumer adds little latency of its own. isolation.level is
    read_committed (librdkafka's default, unlike the Java client's; said here
    so that it stays so): records of an open Kafka transaction (relay-eos) are
    received only once it commits, as its consumers see them. For a producer
    without transactions it changes nothing."""

    CONFIG = {
        "group.id": "bench-latency",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": 5,
        "fetch.min.bytes": 1,
        "enable.partition.eof": False,
    }

    def __init__(self, bootstrap, topics, partitions, want_ce_time=False):
        conf = dict(self.CONFIG)
        conf["bootstrap.servers"] = bootstrap
        self.consumer = Consumer(conf)
        self.consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING)
                              for t in topics for p in range(partitions)])
        self.want_ce_time = want_ce_time
        self.received = []      # (key bytes, receipt time s, ce_time text or None)
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            # poll() returns as soon as one record is there; then take what else
            # is already fetched without waiting, all stamped with the same time
            first = self.consumer.poll(0.05)
            if first is None:
                continue
            msgs = [first] + self.consumer.consume(num_messages=10000, timeout=0)
            now = time.time()
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        self.errors.append(str(err))
                    continue
                ce_time = None
                if self.want_ce_time:
                    for k, v in m.headers() or []:
                        if k == "ce_time":
                            ce_time = v.decode()
                self.received.append((m.key(), now, ce_time))

    @property
    def count(self):
        return len(self.received)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)
        self.consumer.close()


def count_records(bootstrap, topic, partitions, expected, idle_s=2.0, timeout=300):
    """Records of topic a read_committed consumer receives, read from the
    beginning until none came for idle_s seconds after reaching expected (or
    for 5 x idle_s before). More than expected means duplicates."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        n = 0
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            msgs = [m for m in c.consume(num_messages=10000, timeout=0.2) if m.error() is None]
            now = time.monotonic()
            if msgs:
                n += len(msgs)
                last = now
            elif now - last > (idle_s if n >= expected else 5 * idle_s):
                break
        return n
    finally:
        c.close()


def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list (q in 0..100); None if empty."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, int(round(q / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def one_transaction(bootstrap, topic, transactional_id, timeout=120):
    """Commit one Kafka transaction of one record to topic as
    transactional_id: on a fresh broker, this creates the transaction state
    log. Raises confluent_kafka.KafkaException on failure."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    p.init_transactions(timeout)
    p.begin_transaction()
    p.produce(topic, key=b"warmup", value=b"warmup")
    p.commit_transaction(timeout)
