# SPDX-License-Identifier: Apache-2.0
"""SIGHUP reloads the configuration file: the log level, a new log file
after rotation, a slot change refused until a restart. And reloads an
operator gets wrong: a file naming a log file the relay cannot open leaves
the log where it was, by its real name, through later reloads too; an
invalid file is refused with its reason, hundreds of times while rows flow,
without reconnecting or spinning."""

import os
import re
import signal

from config_helpers import base_config, insert, relay_env, start
from harness import (EXIT_OK, has_ids, insert_rows, read_file, wait_confirmed, wait_until,
                     write_file)
from harness.relay import RelayProcess



def config(case, log_file):
    return "\n".join(["slot = %s" % case.slot, "create-slot = true",
                      "topic = %s.${kind}" % case.prefix, "status-interval = 1",
                      "log-level = debug", "log-file = %s" % log_file]) + "\n"


def test_unopenable_log_file_on_reload_keeps_the_old_log(case, tmp_path):
    log = str(tmp_path / "relay.log")
    bad = str(tmp_path / "no-such-dir" / "relay.log")
    conf_path = tmp_path / "relay.conf"
    conf = write_file(conf_path, config(case, log))
    env = relay_env(OUTBOX_RELAY_DBNAME=case.dsn, OUTBOX_RELAY_BROKERS=case.kafka.bootstrap)
    relay = RelayProcess(["-c", conf], os.path.join(case.env.base_dir, "relay-badlog.log"), env=env)
    case.relays.append(relay)
    relay.start()
    relay.wait_ready(case.pg, case.slot)
    reader = case.reader([case.topic("bl")])

    def publish(work_id):
        conn = case.connect(autocommit=False)
        try:
            insert_rows(conn, [{"work_id": work_id, "kind": "bl", "payload": {"id": work_id}}])
        finally:
            conn.close()
        assert reader.read_until(has_ids([work_id]), 30), read_file(log)
        wait_until(lambda: 'published work ID "%s"' % work_id in read_file(log), 30,
                   what="%s in %s" % (work_id, log))

    publish("bl-1")
    write_file(conf_path, config(case, bad))
    os.kill(relay.pid, signal.SIGHUP)
    want = 'cannot open log file "%s": No such file or directory; logging goes on to "%s"' % (bad, log)
    wait_until(lambda: "SIGHUP: reloading" in read_file(log) and "logging goes on" in read_file(log), 30,
               what="the refused log file")
    assert want in read_file(log), read_file(log)
    publish("bl-2")

    # Two more reloads with the file unchanged: the log stays where it is, by its name.
    for n in (3, 4):
        os.kill(relay.pid, signal.SIGHUP)
        wait_until(lambda: read_file(log).count("SIGHUP: reloading") >= n - 1, 30, what="reload %d" % n)
        publish("bl-%d" % n)
    assert not re.search(r"cannot reopen log file", read_file(log)), read_file(log)
    assert sorted(os.listdir(tmp_path)) == ["relay.conf", "relay.log"], os.listdir(tmp_path)

    assert relay.stop(signal.SIGTERM) == EXIT_OK, read_file(log)
    assert "info: stopped:" in read_file(log), read_file(log)


def test_sighup_storm_while_streaming(case, tmp_path):
    """Hundreds of SIGHUPs while rows flow, the file turning invalid and back
    in between: every row arrives once confirmed, the relay keeps streaming,
    the invalid file is refused with its reason, and the loop does not spin."""
    log = str(tmp_path / "relay.log")
    conf_path = tmp_path / "relay.conf"
    good = config(case, log).replace("log-level = debug", "log-level = info")
    conf = write_file(conf_path, good)
    env = relay_env(OUTBOX_RELAY_DBNAME=case.dsn, OUTBOX_RELAY_BROKERS=case.kafka.bootstrap)
    relay = RelayProcess(["-c", conf], os.path.join(case.env.base_dir, "relay-storm.log"), env=env)
    case.relays.append(relay)
    relay.start()
    relay.wait_ready(case.pg, case.slot)
    reader = case.reader([case.topic("bl")])
    conn = case.connect(autocommit=False)
    ids, last = [], None
    for i in range(300):
        if i % 50 == 25:
            write_file(conf_path, good + "max-inflight-messages = 0\n")
        elif i % 50 == 0:
            write_file(conf_path, good)
        os.kill(relay.pid, signal.SIGHUP)
        if i % 3 == 0:
            last = insert_rows(conn, [{"work_id": "st-%d" % i, "kind": "bl", "payload": {"i": i}}])
            ids.append("st-%d" % i)
    assert reader.read_until(has_ids(ids), 60), read_file(log)
    wait_confirmed(case, last.lsn_before, timeout=60)
    assert relay.alive, read_file(log)
    text = read_file(log)
    assert "cannot reload the configuration, keeping the current settings: %s:" % conf in text, text
    assert "max-inflight-messages \"0\"" in text, text
    assert text.count("streaming from slot") == 1, text   # never reconnected
    assert relay.stop(signal.SIGTERM) == EXIT_OK, read_file(log)


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
