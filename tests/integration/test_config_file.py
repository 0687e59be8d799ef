# SPDX-License-Identifier: Apache-2.0
"""Configuration from a file and the environment, SIGHUP and the log formats:
the relay runs with nothing but -c FILE on its command line, reloads its log
level and reopens its log file on SIGHUP, and writes JSON lines that parse."""

import json
import os
import re
import signal

from harness import EXIT_OK, EXIT_USAGE, run_relay, wait_until
from harness.relay import RelayProcess
from helpers import has_ids, insert_rows, read_file, write_file

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")



def relay_env(**extra):
    """The test's environment without OUTBOX_RELAY_* settings, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    env.update(extra)
    return env


def base_config(case, **extra):
    """A configuration file's text for this test's database, slot and topics."""
    lines = ["# written by test_config_file.py",
             "slot = %s" % case.slot,
             "create-slot = true",
             "topic = %s.${kind}" % case.prefix,
             "status-interval = 1",
             "kafka.linger.ms = 5"]
    lines += ["%s = %s" % (k.replace("_", "-"), v) for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def start(case, args, log_name, env):
    relay = RelayProcess(args, os.path.join(case.env.base_dir, log_name), env=env)
    case.relays.append(relay)
    relay.start()
    relay.wait_ready(case.pg, case.slot)
    return relay


def insert(case, work_id):
    conn = case.connect(autocommit=False)
    try:
        insert_rows(conn, [{"work_id": work_id, "kind": "cfg", "payload": {"id": work_id}}])
    finally:
        conn.close()


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


def test_sighup_reloads_log_level_and_reopens_the_log(case, tmp_path):
    log = tmp_path / "relay.log"
    conf_path = tmp_path / "relay.conf"
    env = relay_env(OUTBOX_RELAY_DBNAME=case.dsn, OUTBOX_RELAY_BROKERS=case.kafka.bootstrap)
    conf = write_file(conf_path, base_config(case, log_file=log, log_level="info"))
    reader = case.reader([case.topic("cfg")])
    relay = start(case, ["-c", conf], "relay-hup.log", env)

    def logged(pattern, path=log):
        return lambda: re.search(pattern, read_file(path), re.M)

    insert(case, "hup-1")
    assert reader.read_until(has_ids(["hup-1"]), 30), read_file(log)
    assert re.search(r"^\S+Z outbox-relay: info: streaming from slot", read_file(log), re.M), read_file(log)
    assert "debug:" not in read_file(log), read_file(log)

    # log level: debug lines after SIGHUP; a slot change is refused until restart
    write_file(conf_path, base_config(case, log_file=log, log_level="debug").replace(
        "slot = %s" % case.slot, "slot = other_slot"))
    os.kill(relay.pid, signal.SIGHUP)
    wait_until(logged(r"reloaded log-level: debug \(was info\)"), 30, what="log-level reloaded")
    wait_until(logged(r'warning: setting "slot" changed: it takes effect only after a restart'),
               30, what="slot change refused")
    insert(case, "hup-2")
    assert reader.read_until(has_ids(["hup-2"]), 30), read_file(log)
    wait_until(logged(r'debug: published work ID "hup-2"'), 30, what="debug line of hup-2")
    assert case.slot_info()["active"], "the relay left its slot"

    # log rotation: the file is moved away, SIGHUP opens a new one at the path
    rotated = tmp_path / "relay.log.1"
    os.rename(log, rotated)
    os.kill(relay.pid, signal.SIGHUP)
    wait_until(logged("SIGHUP: reloading the configuration"), 30, what="a new log file")
    insert(case, "hup-3")
    assert reader.read_until(has_ids(["hup-3"]), 30), read_file(log)
    wait_until(logged(r'debug: published work ID "hup-3"'), 30, what="hup-3 in the new log")
    assert "hup-3" not in read_file(rotated), "the moved file still gets lines"
    assert "hup-2" in read_file(rotated)

    assert relay.stop(signal.SIGTERM) == EXIT_OK, read_file(log)
    assert "outbox-relay: info: stopped:" in read_file(log), read_file(log)


def test_json_log_lines(case, tmp_path):
    """Every line of --log-format=json parses as a JSON object with ts, level
    and msg, even with a work ID holding quotes, a backslash, a tab and
    non-ASCII text."""
    env = relay_env(OUTBOX_RELAY_LOG_FORMAT="json", OUTBOX_RELAY_DBNAME=case.dsn)
    reader = case.reader([case.topic("cfg")])
    relay = start(case, ["-b", case.kafka.bootstrap, "-S", case.slot, "--create-slot",
                         "--topic", case.prefix + ".${kind}", "-s", "1", "-v"],
                  "relay-json.log", env)
    odd = 'json-"quoted"\\back\tslash-\u00e9\u20ac'
    insert(case, odd)
    assert reader.read_until(has_ids([odd]), 30), relay.log
    wait_until(lambda: "published work ID" in relay.log, 30, what="the row's debug line")
    assert relay.stop(signal.SIGTERM) == EXIT_OK, relay.log

    objects = []
    for line in relay.log.splitlines():
        if line.startswith("=== "):  # the harness's own header line
            continue
        obj = json.loads(line)
        assert set(obj) == {"ts", "level", "msg"}, line
        assert RFC3339_MS.match(obj["ts"]), line
        assert obj["level"] in ("debug", "info", "warning", "error"), line
        objects.append(obj)
    levels = {o["level"] for o in objects}
    assert {"debug", "info"} <= levels, levels
    msgs = [o["msg"] for o in objects]
    assert 'published work ID "%s" to topic "%s"' % (odd, case.topic("cfg")) in "\n".join(msgs), msgs
    assert any(m.startswith("stopped:") for m in msgs), msgs
