# SPDX-License-Identifier: Apache-2.0
"""Test harness for outbox-relay: throwaway PostgreSQL and Kafka servers on
free loopback ports, the relay under test as a child process, and helpers to
read back the slot and the published records.

Used by the pytest suite (tests/integration), tests/quickstart.sh and
benchmarks. Typical use:

    from harness import Environment
    with Environment() as env:          # temp dir, PostgreSQL, Kafka
        env.pg.psql(file=env.schema_sql)
        relay = env.relay(["-d", env.pg.dsn, "-b", env.kafka.bootstrap, "--create-slot"])
        ...

Everything started is stopped on exit from the with block, at interpreter
exit, on SIGTERM/SIGHUP, and (via PR_SET_PDEATHSIG) when this process dies.

Modules: procs (child processes, free ports, wait_until: the one bounded
wait), pg, kafka, relay (the binary under test, its settings files and log
lines), consumer (TopicReader), outbox (writing rows, reading records back,
waiting for the slot to confirm), tls (throwaway certificates:
CertificateAuthority). Imported on their own, for the tests that need them:
http (/metrics, /healthz, /readyz), faults (the load, collectors and verdict
of the fault scenarios), promtool, pgbouncer, pgmajor, pgminor.
"""

import os
import shutil
import tempfile

from . import procs
from .consumer import Record, TopicReader, consume
from .kafka import SCRAM_KAFKA_VERSION, KafkaBroker, SaslKafkaBroker, TlsKafkaBroker, ensure_jars
from .pg import (PostgresServer, TlsPostgresServer, format_lsn, parse_lsn, plugin_settings,
                 restricts_output_plugins, server_version)
from .tls import CertificateAuthority
from .outbox import (CE_HEADERS, RFC3339_US, Commit, arrive_and_confirm, by_id,
                     delivered_and_confirmed, has_ids, insert_rows, read_while_alive, simple_rows,
                     wait_confirmed)
from .procs import WaitTimeout, free_port, wait_until
from .relay import (EXIT_ENV, EXIT_OK, EXIT_RUNTIME, EXIT_UNPUBLISHABLE, EXIT_USAGE,
                    RelayProcess, RelayStopTimeout, error_lines, log_lines, read_file, relay_bin,
                    run_relay, relay_librdkafka, the_error, write_file)

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA_SQL = os.path.join(TOP, "sql", "outbox.sql")


def make_tempdir(prefix="outbox-relay-"):
    """A fresh directory readable by the 'postgres' user (its own subdir is 0700)."""
    path = tempfile.mkdtemp(prefix=prefix)
    os.chmod(path, 0o755)
    return path


class Environment:
    """A temp dir with a PostgreSQL server and (unless kafka=False) a Kafka broker.

    keep: leave the temp dir (logs, data) behind; also when $OUTBOX_RELAY_KEEP_TMP
    is set.
    """

    def __init__(self, kafka=True, pg_settings=None, keep=None, base_dir=None):
        self.base_dir = base_dir or make_tempdir()
        self.keep = keep if keep is not None else bool(os.environ.get("OUTBOX_RELAY_KEEP_TMP"))
        self.pg = PostgresServer(self.base_dir, settings=pg_settings)
        self.kafka = KafkaBroker(self.base_dir) if kafka else None
        self.schema_sql = SCHEMA_SQL
        self._relays = []
        self._n = 0

    def start(self):
        try:
            self.pg.start()
            if self.kafka is not None:
                self.kafka.start()
        except BaseException:
            self.close()
            raise
        return self

    def relay(self, args, start=True, name=None, env=None):
        """A RelayProcess logging to <temp dir>/relay-N.log (started unless
        start=False), with env as its environment (default: this process's)."""
        self._n += 1
        log = os.path.join(self.base_dir, "%s.log" % (name or "relay-%d" % self._n))
        r = RelayProcess(args, log, env=env)
        self._relays.append(r)
        return r.start() if start else r

    def close(self):
        for r in self._relays:
            if r.alive:
                r.kill()
        if self.kafka is not None and self.kafka.running:
            self.kafka.kill()
        if self.pg.running:
            self.pg.stop("immediate")
        if not self.keep:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


__all__ = [
    "Environment", "PostgresServer", "TlsPostgresServer", "KafkaBroker", "SaslKafkaBroker",
    "TlsKafkaBroker", "SCRAM_KAFKA_VERSION", "CertificateAuthority", "RelayProcess",
    "RelayStopTimeout",
    "Record", "TopicReader", "consume", "ensure_jars", "parse_lsn", "format_lsn",
    "free_port", "wait_until", "WaitTimeout", "relay_bin", "run_relay", "relay_librdkafka", "make_tempdir",
    "SCHEMA_SQL",
    "plugin_settings", "restricts_output_plugins", "server_version",
    "EXIT_OK", "EXIT_RUNTIME", "EXIT_USAGE", "EXIT_ENV", "EXIT_UNPUBLISHABLE", "procs",
    "CE_HEADERS", "RFC3339_US", "Commit", "arrive_and_confirm", "by_id",
    "delivered_and_confirmed", "has_ids", "insert_rows", "read_while_alive",
    "simple_rows", "wait_confirmed",
    "error_lines", "log_lines", "read_file", "the_error", "write_file",
]
