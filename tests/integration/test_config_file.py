# SPDX-License-Identifier: Apache-2.0
"""Configuration from a file and the environment: the relay runs with
nothing but -c FILE on its command line, the environment overrides the
file, *_FILE variables hold secrets, errors name the file and line, and
without -d libpq's PG* variables say where the database is. Reloads:
test_config_reload.py; logs: test_config_log.py."""

import os
import signal

from config_helpers import base_config, insert, relay_env, start
from harness import EXIT_ENV, EXIT_OK, EXIT_USAGE, has_ids, run_relay, write_file

def test_file_and_environment_with_no_secret_on_the_command_line(case, tmp_path):
    """Settings from the file, overridden by the environment (the file names a
    broker that does not exist), the conninfo from a *_FILE secret: the command
    line holds only -c FILE, and a row is published."""
    conninfo = write_file(tmp_path / "conninfo", case.dsn + "\n", 0o400)
    conf = write_file(tmp_path / "relay.conf", base_config(case, brokers="127.0.0.1:1"))
    env = relay_env(OUTBOX_RELAY_BROKERS=case.kafka.bootstrap,
                    OUTBOX_RELAY_DBNAME_FILE=conninfo, OUTBOX_RELAY_SLOTT="typo")
    reader = case.reader([case.topic("cfg")])
    relay = start(case, ["-c", conf], "relay-conf.log", env)

    with open("/proc/%d/cmdline" % relay.pid, "rb") as f:
        argv = f.read().split(b"\0")[:-1]
    assert argv[1:] == [b"-c", conf.encode()], argv
    assert case.dsn.encode() not in b" ".join(argv)

    insert(case, "cfg-1")
    assert reader.read_until(has_ids(["cfg-1"]), 30), \
        "cfg-1 did not arrive; read %r\n%s" % (reader.records, relay.log)
    assert relay.stop(signal.SIGTERM) == EXIT_OK, relay.log
    # the broker of the file was overridden, so it was never tried
    assert "127.0.0.1:1" not in relay.log, relay.log
    assert ("outbox-relay: warning: ignoring environment variables that are not settings: "
            "OUTBOX_RELAY_SLOTT\n") in relay.log, relay.log


def test_kafka_property_from_a_file_reaches_librdkafka(case, tmp_path):
    """OUTBOX_RELAY_KAFKA_LINGER_MS_FILE's content is the value librdkafka is
    given (it refuses this one: exit 2, naming it)."""
    value = write_file(tmp_path / "linger", "soon\n", 0o400)
    rc, out = run_relay(["-d", case.dsn, "-b", case.kafka.bootstrap, "-S", case.slot], timeout=30,
                        env=relay_env(OUTBOX_RELAY_KAFKA_LINGER_MS_FILE=value))
    assert rc == EXIT_USAGE, out
    assert "linger.ms=soon" in out, out


def test_file_errors_name_file_and_line(case, tmp_path):
    conf = write_file(tmp_path / "bad.conf", "slot = a\n\nslott = b\n")
    rc, out = run_relay(["-c", conf], timeout=10, env=relay_env())
    assert rc == EXIT_USAGE, out
    assert '%s:3: unknown setting "slott"' % conf in out, out

    conf = write_file(tmp_path / "unsafe.conf", "slot = a\nkafka.acks = 1\n")
    rc, out = run_relay(["-c", conf], timeout=10, env=relay_env())
    assert rc == EXIT_USAGE, out
    assert "%s:2: kafka.acks=1 refused" % conf in out, out
    assert case.slot_info() is None


def test_conninfo_from_pg_environment(case):
    """Without -d, libpq's PG* variables say where the database is (the
    relay's help promises it); proven by reaching the slot check."""
    args = case.relay_args(create_slot=False)
    del args[0:2]
    env = dict(os.environ, PGHOST=case.pg.host, PGPORT=str(case.pg.port), PGUSER=case.pg.user,
               PGDATABASE=case.dbname)
    rc, out = run_relay(args, timeout=30, env=env)
    assert rc == EXIT_ENV, out
    assert "--create-slot" in out, out
