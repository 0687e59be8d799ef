# SPDX-License-Identifier: Apache-2.0
"""Configuration reloads an operator gets wrong: a SIGHUP after the file
names a log file the relay cannot open must leave the log where it was, by
its real name, through later reloads too."""

import os
import re
import signal
import subprocess

from harness import EXIT_OK, wait_until
from harness.relay import RelayProcess, relay_bin
from helpers import has_ids, insert_rows, read_file, wait_confirmed, write_file



def config(case, log_file):
    return "\n".join(["slot = %s" % case.slot, "create-slot = true",
                      "topic = %s.${kind}" % case.prefix, "status-interval = 1",
                      "log-level = debug", "log-file = %s" % log_file]) + "\n"


def test_unopenable_log_file_on_reload_keeps_the_old_log(case, tmp_path):
    log = str(tmp_path / "relay.log")
    bad = str(tmp_path / "no-such-dir" / "relay.log")
    conf_path = tmp_path / "relay.conf"
    conf = write_file(conf_path, config(case, log))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    env.update(OUTBOX_RELAY_DBNAME=case.dsn, OUTBOX_RELAY_BROKERS=case.kafka.bootstrap)
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    env.update(OUTBOX_RELAY_DBNAME=case.dsn, OUTBOX_RELAY_BROKERS=case.kafka.bootstrap)
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


def test_log_file_with_stderr_closed(case, tmp_path):
    """Started with descriptor 2 closed (a supervisor that closes it, or
    2>&-): the log file itself gets descriptor 2 from open(). log_open() must
    not close it after dup2() onto itself, or the log goes nowhere and a later
    socket (librdkafka's, or the replication connection) inherits number 2
    and receives the log lines."""
    log = str(tmp_path / "relay.log")
    out = str(tmp_path / "stdout")
    args = [relay_bin()] + case.relay_args("-v", "--log-file", log)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}

    def close_stderr():
        os.close(2)
    with open(out, "wb") as stdout:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=stdout, env=env,
                                preexec_fn=close_stderr)
    try:
        reader = case.reader([case.topic("bl")])
        wait_until(lambda: "streaming from slot" in read_file(log) or proc.poll() is not None, 60,
                   what="streaming, in the log file")
        conn = case.connect(autocommit=False)
        insert_rows(conn, [{"work_id": "fd2-1", "kind": "bl", "payload": {}}])
        assert reader.read_until(has_ids(["fd2-1"]), 30), read_file(log)
        wait_until(lambda: 'published work ID "fd2-1"' in read_file(log) or proc.poll() is not None, 30,
                   what="the row's debug line in the log file")
        assert proc.poll() is None, read_file(log)
        # fd 2 is the log file, nothing else
        assert os.readlink("/proc/%d/fd/2" % proc.pid) == log
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == EXIT_OK, read_file(log)
