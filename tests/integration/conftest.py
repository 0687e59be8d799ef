# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the integration suite: one PostgreSQL and one Kafka broker for
the whole session (started by tests/harness on free loopback ports), and per
test a fresh database with the outbox table, a unique slot name and a unique
topic prefix.

If PostgreSQL or Kafka cannot be started the fixtures raise, so every test
errors: the suite fails, it never skips.
"""

import contextlib
import os
import re
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import harness  # noqa: E402

_metrics = []
_counter = [0]


@pytest.fixture(scope="session")
def env():
    e = harness.Environment()
    e.start()
    yield e
    e.close()


@pytest.fixture
def pg(env):
    if not env.pg.running:
        env.pg.start()
    return env.pg


@pytest.fixture
def kafka(env):
    # a test that stopped the shared broker and failed must not break the next one
    if not env.kafka.running:
        env.kafka.start()
    return env.kafka


class Case:
    """Names and helpers that belong to one test.

    name:   short unique id, also the database name
    slot:   replication slot name for the relay
    prefix: topic prefix; topic(kind) is where the relay publishes kind
    """

    def __init__(self, env, pg, kafka, node_name):
        _counter[0] += 1
        short = re.sub(r"[^a-z0-9]+", "_", node_name.lower()).strip("_")[:30]
        self.name = "t%d_%s" % (_counter[0], short)
        self.env = env
        self.pg = pg
        self.kafka = kafka
        self.dbname = self.name
        self.slot = "slot_" + self.name
        self.prefix = self.name.replace("_", "-")
        self.relays = []
        self.readers = []
        self.extra_slots = []

    def setup_db(self, schema=True):
        self.pg.create_database(self.dbname)
        if schema:
            self.pg.psql(file=harness.SCHEMA_SQL, dbname=self.dbname)

    @property
    def dsn(self):
        return self.pg.conninfo(self.dbname)

    def connect(self, autocommit=True):
        return self.pg.connect(self.dbname, autocommit=autocommit)

    def query(self, sql, params=None):
        return self.pg.query(sql, params, dbname=self.dbname)

    def scalar(self, sql, params=None):
        return self.pg.scalar(sql, params, dbname=self.dbname)

    def topic(self, kind):
        return "%s.%s" % (self.prefix, kind)

    @property
    def topic_pattern(self):
        return "^%s\\..*" % re.escape(self.prefix)

    def relay_args(self, *extra, create_slot=True, brokers=None, status_interval=1,
                   slot=None):
        args = ["-d", self.dsn, "-S", slot or self.slot,
                "-b", brokers or self.kafka.bootstrap,
                "--topic", self.prefix + ".${kind}",
                "-s", str(status_interval)]
        if create_slot:
            args.append("--create-slot")
        return args + list(extra)

    def relay(self, *extra, start=True, ready=True, **kw):
        """Start the relay with this test's db, slot and topic prefix (plus extra
        args) and wait until its slot is active."""
        r = self.env.relay(self.relay_args(*extra, **kw), start=start,
                           name="%s-relay-%d" % (self.name, len(self.relays) + 1))
        self.relays.append(r)
        if start and ready:
            r.wait_ready(self.pg, kw.get("slot") or self.slot)
        return r

    def reader(self, topics=None, bootstrap=None):
        rd = harness.TopicReader(bootstrap or self.kafka.bootstrap, topics or [self.topic_pattern])
        self.readers.append(rd)
        return rd

    def slot_info(self, slot=None):
        return self.pg.slot(slot or self.slot)

    def confirmed(self, slot=None):
        return self.pg.confirmed_flush_lsn(slot or self.slot)

    def metric(self, name, value, unit=""):
        _metrics.append("%s %s %s %s" % (self.name, name, value, unit))

    def fence_transactional_ids(self):
        """End what this test's --exactly-once relays left open on the
        worker's broker. A relay killed in a commit (SIGKILL, or a test that
        failed before restarting it) leaves its Kafka transaction open for
        transaction.timeout.ms (15 minutes in the tests): the shared
        checkpoint topic's last stable offset then stays behind, and every
        later relay of the worker waits on it before it streams (seen in CI
        after one failed test: three more failed). init_transactions() with
        the same transactional.id aborts it, as the next relay's would."""
        tids = set()
        for r in self.relays:
            if self.kafka.bootstrap not in r.args:
                continue
            tids.update(re.findall(r'exactly-once: Kafka transactions as "([^"]+)"',
                                   harness.procs.tail(r.log_path, 1 << 28)))
        from confluent_kafka import Producer

        def fence(tid):
            try:
                Producer({"bootstrap.servers": self.kafka.bootstrap,
                          "transactional.id": tid}).init_transactions(30)
            except Exception as e:  # the broker may be down: the test said why already
                print("teardown: cannot fence transactional.id %s: %s" % (tid, e))

        # the id with ".1" as well: the second of a pair (--kafka-transactional-producers);
        # all at once, so that a broker left down costs one timeout, not one per id
        fences = [threading.Thread(target=fence, args=(t,))
                  for t in sorted(tids | {t + ".1" for t in tids})]
        for f in fences:
            f.start()
        for f in fences:
            f.join()

    @contextlib.contextmanager
    def own_server(self, suffix="own"):
        """A PostgreSQL server of this test's own as case.pg for the block, for
        what holds or breaks a whole cluster (a failover, a setting every
        commit obeys). However the block ends, the relays are killed, case.pg
        is the shared server again (the case's database lives there) and the
        server is stopped and removed."""
        shared = self.pg
        server = harness.PostgresServer(self.env.base_dir, name="%s-%s" % (self.name, suffix))
        self.pg = server.start()
        try:
            yield server
        finally:
            for r in self.relays:
                if r.alive:
                    r.kill()
            self.pg = shared
            if server.running:
                server.stop("immediate")
            server.remove()

    def logs(self):
        out = []
        for r in self.relays:
            out.append("--- %s (exit %s)\n%s" % (r.log_path, r.returncode,
                                                  harness.procs.tail(r.log_path, 20000)))
        return "\n".join(out)

    def teardown(self):
        for r in self.relays:
            if r.alive:
                r.kill()
        self.fence_transactional_ids()
        for rd in self.readers:
            rd.close()
        if self.pg.running:
            for s in [self.slot] + self.extra_slots:
                try:
                    self.pg.drop_slot(s)
                except Exception:
                    pass
            try:
                self.pg.drop_database(self.dbname)
            except Exception:
                pass


@pytest.fixture
def own_broker(env, case):
    """A broker of this test's own, for tests that stop, kill or freeze it
    without disturbing the shared one."""
    b = harness.KafkaBroker(env.base_dir, name=case.name + "-kafka", quick_start=True)
    b.start()
    yield b
    b.kill()


@pytest.fixture
def case(request, env, pg, kafka):
    c = Case(env, pg, kafka, request.node.name)
    c.setup_db()
    yield c
    c.teardown()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        c = item.funcargs.get("case") if hasattr(item, "funcargs") else None
        if isinstance(c, Case) and c.relays:
            report.sections.append(("relay logs", c.logs()))


def pytest_terminal_summary(terminalreporter):
    if _metrics:
        terminalreporter.section("metrics")
        for line in _metrics:
            terminalreporter.write_line("METRIC " + line)


# Parallel runs (pytest-xdist, `-n auto --dist loadgroup` in tests/integration/
# meson.build): each worker is its own pytest session with its own PostgreSQL
# and Kafka broker (the session fixture env), its own slice of loopback ports
# (harness.procs.free_port) and its own names. WORKERS_DEFAULT was chosen by
# measuring the suite on the 2-core CI machine (README's "Tests" gives the
# figures); PYTEST_XDIST_AUTO_NUM_WORKERS overrides it.
WORKERS_DEFAULT = 4


def pytest_xdist_auto_num_workers(config):
    env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(env) if env else WORKERS_DEFAULT


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "smoke: a quick test of the basics, run first on its own (tests/integration/"
        "meson.build's integration-smoke) so that a relay that does not work fails in a minute")
    config.addinivalue_line(
        "markers", "exactly_once: runs the relay (or check) with --exactly-once; "
        "tests/run-librdkafka.sh runs these against librdkafka 2.8 too")


# tryfirst: before xdist's own hook, which turns the marks into node ids
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Keep tests that share a module- or class-scoped fixture (a broker of
    their own module, a server of one PostgreSQL major) on one worker, one
    after the other: an xdist_group per such fixture and parameter, so the
    fixture is set up once, as in a serial run."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        shared = []
        for name in item.fixturenames:
            defs = info.name2fixturedefs.get(name)
            if defs and defs[-1].scope in ("module", "class", "package"):
                param = getattr(item, "callspec", None)
                param = param.params.get(name) if param is not None else None
                shared.append("%s:%s%s" % (item.module.__name__, name,
                                           "" if param is None else "[%s]" % param))
        if shared:
            item.add_marker(pytest.mark.xdist_group("+".join(sorted(shared))))


@pytest.hookimpl(tryfirst=True)   # before xdist's own choice of scheduler
def pytest_xdist_make_scheduler(config, log):
    import scheduling
    return scheduling.LongestFirstScheduling(config, log)


def pytest_report_header(config):
    """Which PostgreSQL the suite runs on (OUTBOX_RELAY_PG_BINDIR picks another)."""
    return "postgresql: %s at %s, %s output_plugin_libraries" % (
        harness.server_version(), harness.pg.PG_BINDIR,
        "with" if harness.restricts_output_plugins() else "without")
