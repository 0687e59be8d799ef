# SPDX-License-Identifier: Apache-2.0
"""The relay's log: --log-format=json writes one JSON object per line that
parses, whatever the text; --log-file works even when the relay is started
with descriptor 2 closed. (Reopening on SIGHUP: test_config_reload.py.)
"""

import json
import os
import re
import signal
import subprocess

from config_helpers import insert, relay_env, start
from harness import EXIT_OK, has_ids, insert_rows, read_file, wait_until
from harness.relay import relay_bin


RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


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


def test_log_file_with_stderr_closed(case, tmp_path):
    """Started with descriptor 2 closed (a supervisor that closes it, or
    2>&-): the log file itself gets descriptor 2 from open(). log_open() must
    not close it after dup2() onto itself, or the log goes nowhere and a later
    socket (librdkafka's, or the replication connection) inherits number 2
    and receives the log lines."""
    log = str(tmp_path / "relay.log")
    out = str(tmp_path / "stdout")
    args = [relay_bin()] + case.relay_args("-v", "--log-file", log)
    env = relay_env()

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
