# SPDX-License-Identifier: Apache-2.0
"""A connection pooler in -d (issue 10): PgBouncer (Debian's 1.18) cannot
carry logical replication. Whether it refuses the relay's startup
parameters or drops them (ignore_startup_parameters), the relay and
`check` say "connect to PostgreSQL directly, not through a pooler" and the
relay exits 3, before it creates a slot; it must neither restart forever
(exit 1) nor make a slot that retains WAL with nobody reading it."""

import pytest
from harness import EXIT_ENV, run_relay
from harness.pgbouncer import PgBouncer


@pytest.mark.parametrize("ignore", [(), ("options", "replication", "extra_float_digits")],
                         ids=["refuses", "ignores"])
def test_relay_through_pgbouncer_exits_3_without_a_slot(case, ignore):
    with PgBouncer(case.env.base_dir, case.pg, ignore=ignore, name=case.name + "-bouncer") as pb:
        args = case.relay_args()            # --create-slot
        args[1] = pb.conninfo(case.dbname)
        rc, out = run_relay(args, timeout=60)
        assert rc == EXIT_ENV, out
        assert "not through a pooler" in out or "connect it directly" in out, out
        assert case.slot_info() is None, "a slot was created through the pooler"

        check_args = case.relay_args(create_slot=False)
        check_args[1] = pb.conninfo(case.dbname)
        rc, out = run_relay(["check"] + check_args, timeout=60)
        assert rc == EXIT_ENV, out
        assert "pooler" in out, out
