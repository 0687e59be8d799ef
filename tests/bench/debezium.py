# SPDX-License-Identifier: Apache-2.0
"""Debezium as a benchmark contestant: its PostgreSQL connector with the Outbox
Event Router SMT on a Kafka Connect standalone worker, started as one JVM.

The jars come from Maven Central through tests/bench/debezium/pom.xml and are
cached in ${XDG_CACHE_HOME:-~/.cache}/outbox-relay/debezium-<version>/libs, as
tests/harness/kafka.py does for the broker.

Configuration follows Debezium's own advice for throughput, stated next to each
setting below; the producer gets the relay's settings (acks=all, idempotence,
linger.ms=5, 1 MB batches like librdkafka's default) so that both sides write
to Kafka the same way. Knows nothing of the other contestants.
"""

import os
import re
import shutil

import harness
from harness import procs

DEBEZIUM_VERSION = "3.6.1.Final"   # keep in step with debezium/pom.xml
CONNECT_VERSION = "4.1.1"          # = harness.kafka.KAFKA_VERSION, the broker's version
_HERE = os.path.dirname(os.path.abspath(__file__))
POM = os.path.join(_HERE, "debezium", "pom.xml")
MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"

# What bin/connect-standalone.sh and bin/kafka-run-class.sh give a JVM by default:
# the heap a user of the stock scripts gets, and the stock GC settings.
JVM_OPTS = ["-Xms256M", "-Xmx2G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
            "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true", "-XX:-UsePerfData"]

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.dbz.name = io.debezium.connector.postgresql
logger.dbz.level = INFO
"""


def jars_dir():
    return os.path.join(harness.kafka.cache_dir(), "debezium-%s" % DEBEZIUM_VERSION, "libs")


def ensure_jars(quiet=True):
    """The directory holding Debezium's and Connect's jars, fetched with mvn on
    first use (a marker file is written only after a complete download).
    Raises RuntimeError when they cannot be had."""
    libs = jars_dir()
    marker = os.path.join(os.path.dirname(libs), ".complete")
    if os.path.exists(marker):
        return libs
    if shutil.which("mvn") is None:
        raise RuntimeError("mvn not found: it is needed once to fetch Debezium %s into %s"
                           % (DEBEZIUM_VERSION, libs))
    tmp = libs + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    argv = ["mvn", "-B", "-f", POM, "dependency:copy-dependencies",
            "-Ddebezium.version=%s" % DEBEZIUM_VERSION, "-Dkafka.version=%s" % CONNECT_VERSION,
            "-DoutputDirectory=%s" % tmp, "-DincludeScope=runtime"]
    if quiet:
        argv.insert(1, "-q")
    procs.run(argv, timeout=900)
    names = os.listdir(tmp)
    for want in ("debezium-connector-postgres-", "connect-runtime-", "debezium-connect-plugins-"):
        if not any(n.startswith(want) for n in names):
            raise RuntimeError("mvn finished but no %s jar in %s" % (want, tmp))
    shutil.rmtree(libs, ignore_errors=True)
    os.rename(tmp, libs)
    with open(marker, "w") as f:
        f.write(DEBEZIUM_VERSION + "\n")
    return libs


def _write_props(path, props):
    with open(path, "w") as f:
        for k, v in props.items():
            f.write("%s=%s\n" % (k, v))


def bench_router(topic_prefix):
    """The benchmark's Outbox Event Router settings (transforms.outbox.*, less
    the prefix): sql/outbox.sql's columns, routed to topic_prefix.<kind> as
    the relay's --topic does."""
    return {
        "table.field.event.id": "work_id",
        "table.field.event.key": "work_id",
        "table.field.event.payload": "payload",
        "route.by.field": "kind",
        "route.topic.replacement": topic_prefix + ".${routedByValue}",
    }


def prepare(workdir, *, bootstrap, pg, dbname, slot, publication, topic_prefix=None, name,
            flush_interval_ms=1000, table="public.outbox", router=None):
    """Write worker.properties, connector.properties and log4j2.properties into
    workdir (created; a fresh offsets file, so the connector starts from its
    slot); returns the argv that runs the worker.

    table: the one table captured (schema.table). router: the Outbox Event
    Router's settings without the "transforms.outbox." prefix; None for the
    benchmark's (bench_router(topic_prefix)), {} for Debezium's defaults."""
    if router is None:
        router = bench_router(topic_prefix)
    libs = ensure_jars()
    os.makedirs(workdir, exist_ok=True)
    worker = {
        "bootstrap.servers": bootstrap,
        # the record key is the event key column (work_id), the value the payload
        # column's text: the same bytes the relay sends
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "offset.storage.file.filename": os.path.join(workdir, "offsets.dat"),
        # offsets, and with them the slot's confirmed LSN, are committed this
        # often: the same 1 s as the relay's -s 1 in this benchmark
        "offset.flush.interval.ms": str(flush_interval_ms),
        "listeners": "http://127.0.0.1:%d" % procs.free_port(),
        # the relay's producer settings; Connect's own default is one request in
        # flight per connection, which Kafka's docs say limits throughput
        "producer.acks": "all",
        "producer.enable.idempotence": "true",
        "producer.max.in.flight.requests.per.connection": "5",
        "producer.linger.ms": "5",
        "producer.batch.size": "1000000",
    }
    connector = {
        "name": name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": pg.host,
        "database.port": str(pg.port),
        "database.user": pg.user,
        "database.password": "unused",
        "database.dbname": dbname,
        "topic.prefix": name,
        "slot.name": slot,
        "publication.name": publication,
        "publication.autocreate.mode": "disabled",
        "table.include.list": table,
        # the slot exists and holds the backlog: stream it, snapshot nothing
        "snapshot.mode": "no_data",
        "tombstones.on.delete": "false",
        # Debezium's advice for high throughput: larger batches and queue than
        # the defaults (2048 and 8192), the queue several batches deep
        "max.batch.size": "10240",
        "max.queue.size": "40960",
        # the connector hands a batch to Connect when it is full or after
        # poll.interval.ms (default 500): at steady rates every record would
        # wait up to that long, so it gets the relay's linger-like 10 ms
        "poll.interval.ms": "10",
        # Debezium confirms a transaction's LSN to the slot only once a later
        # event (or heartbeat) arrives; the docs advise heartbeats so that the
        # slot advances when the table goes quiet, as after a backlog
        "heartbeat.interval.ms": str(flush_interval_ms),
        "transforms": "outbox",
        "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
        # the docs' way to keep heartbeats out of the outbox router
        "transforms.outbox.predicate": "isOutbox",
        "predicates": "isOutbox",
        "predicates.isOutbox.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.isOutbox.pattern": re.escape(name + "." + table),
    }
    connector.update(("transforms.outbox." + k, v) for k, v in router.items())
    _write_props(os.path.join(workdir, "worker.properties"), worker)
    _write_props(os.path.join(workdir, "connector.properties"), connector)
    with open(os.path.join(workdir, "log4j2.properties"), "w") as f:
        f.write(LOG4J2)
    return (["java"] + JVM_OPTS +
            ["-Dlog4j2.configurationFile=%s" % os.path.join(workdir, "log4j2.properties"),
             "-cp", os.path.join(libs, "*"), MAIN,
             os.path.join(workdir, "worker.properties"),
             os.path.join(workdir, "connector.properties")])
