# SPDX-License-Identifier: Apache-2.0
"""Helpers of the config area (test_config_*.py): the test's environment
without OUTBOX_RELAY_* settings, a configuration file's text for a test's
slot and topics, a relay started from such settings, one row inserted.
"""

import os

from harness import insert_rows
from harness.relay import RelayProcess


def relay_env(**extra):
    """The test's environment without OUTBOX_RELAY_* settings, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_RELAY_")}
    env.update(extra)
    return env


def base_config(case, **extra):
    """A configuration file's text for this test's database, slot and topics."""
    lines = ["# written by config_helpers.py",
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
