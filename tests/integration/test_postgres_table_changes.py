# SPDX-License-Identifier: Apache-2.0
"""The outbox table changes identity or durability under a running relay
(issue 15): ALTER TABLE ... SET UNLOGGED (its rows stop reaching the WAL),
DROP or RENAME (rows go elsewhere), a table swapped in under the name. The
relay's side connection checks each configured name before it confirms and
at least every status interval, and stops (exit 3) without confirming past
what it verified. preflight and check refuse an unlogged table from the
start; sql/outbox.sql's event trigger refuses the DDL at the source.

The event trigger is dropped where a test needs the DDL to happen.
"""

import re
import threading

import psycopg2
import pytest
from harness import (EXIT_ENV, EXIT_OK, format_lsn, has_ids, insert_rows, parse_lsn, run_relay,
                     simple_rows, wait_confirmed, wait_until)
from harness.outbox import in_transaction


def without_guard(case):
    case.query("DROP EVENT TRIGGER IF EXISTS outbox_guard")


def running(case, *extra):
    reader = case.reader()
    relay = case.relay(*extra)
    conn = case.connect(autocommit=False)
    c = insert_rows(conn, simple_rows("before", 2))
    assert reader.read_until(has_ids(c.work_ids), 30), relay.log
    wait_confirmed(case, c.lsn_before)
    return relay, conn


@pytest.mark.parametrize("ddl,words", [
    ("ALTER TABLE outbox SET UNLOGGED", ["is UNLOGGED now", "not written to the WAL", "SET LOGGED"]),
    ("ALTER TABLE outbox RENAME TO outbox_old", ["no longer exists", "renamed"]),
    ("DROP TABLE outbox", ["no longer exists"]),
    ("ALTER TABLE outbox RENAME TO outbox_old; CREATE TABLE outbox (LIKE outbox_old INCLUDING ALL)",
     ["is another relation now", "OID"]),
], ids=["unlogged", "renamed", "dropped", "swapped"])
def test_table_changes_under_a_running_relay(case, ddl, words):
    without_guard(case)
    relay, conn = running(case)
    # The bound: the WAL insert position inside the DDL's transaction, just
    # before its COMMIT. pg_current_wal_lsn() before the DDL is too early: an
    # idle relay rightly confirms keepalives for other databases' commits
    # written while the DDL runs, all before the DDL's commit record.
    before_ddl = in_transaction(conn, [(ddl, None)])[0].lsn_pre_commit
    assert relay.wait(30) == EXIT_ENV, relay.log
    line = [l for l in relay.log.splitlines() if "error:" in l]
    assert line, relay.log
    for w in words:
        assert w in line[-1], "%r not in: %s" % (w, line[-1])
    assert "nothing after LSN" in line[-1], line[-1]
    # stopped without confirming anything it had not verified before the change
    assert case.confirmed() <= before_ddl, "confirmed past the change"
    conn.close()


def release_held(case, own, *threads):
    """The end of a test that held commits on its own server: its relays
    killed, synchronous_standby_names reset, the held commits' threads
    joined."""
    for r in case.relays:
        if r.alive:
            r.kill()
    if own.running:
        own.query("ALTER SYSTEM RESET synchronous_standby_names")
        own.query("SELECT pg_reload_conf()")
    for t in threads:
        if t is not None:
            t.join(30)


def push_multixacts(case, done):
    """Move the MultiXactId counter ahead, until done() (asked every twenty
    transactions, at most 1,000): twenty sessions share-lock a row group
    each and stay; each short transaction that share-locks every row then
    makes twenty MultiXactIds from one transaction ID (a backend reuses one
    per member set)."""
    case.query("CREATE TABLE share_locked AS SELECT g AS i FROM generate_series(0, 1999) g")
    holders = [case.connect(autocommit=False) for _ in range(20)]
    for k, h in enumerate(holders):
        h.cursor().execute("SELECT FROM share_locked WHERE i %% 20 = %s FOR SHARE", (k,))
    w = case.connect(autocommit=False)
    for n in range(1000):
        w.cursor().execute("SELECT FROM share_locked FOR SHARE")
        w.commit()
        if n % 20 == 19 and done():
            break
    for h in holders + [w]:
        h.close()


def test_an_open_change_of_the_table_holds_confirmation_back_and_says_so(case):
    """A transaction that altered the outbox table and has not ended: the
    catalog check reads the table's pg_class row as it was before the
    change (the row's xmax names the transaction) and cannot tell what the
    change will hide once committed, so the relay confirms nothing new while
    it is open (nothing lost, the slot waits), warns after 30 s naming the
    transaction, and confirms again once it has ended, here rolled back."""
    relay, conn = running(case)
    ddl = case.connect(autocommit=False)
    cur = ddl.cursor()
    cur.execute("ALTER TABLE outbox ADD COLUMN later text")
    cur.execute("SELECT txid_current()")
    xid = cur.fetchone()[0] % 2**32
    case.query("CREATE TABLE filler (i int)")
    case.query("INSERT INTO filler VALUES (1)")
    after = case.pg.current_wal_lsn()
    wait_until(lambda: "nothing new has been confirmed for" in relay.log, 60, what="the warning")
    warning = [l for l in relay.log.splitlines() if "nothing new has been confirmed for" in l][0]
    assert "transaction %d (or a subtransaction" % xid in warning, warning
    assert 'changed the pg_class row of "public"."outbox"' in warning, warning
    assert "the oldest is %d" % xid in warning, warning
    assert case.confirmed() < after, "confirmed past a change the catalog check could not see"
    ddl.rollback()
    wait_confirmed(case, after)
    wait_until(lambda: "confirming again" in relay.log, 30, what="the relay saying it confirms again")
    assert relay.alive, relay.log
    ddl.close()
    conn.close()


def test_a_lock_only_multixact_on_the_table_row_does_not_hold_confirmation(case):
    """Two sessions that share-locked the outbox's pg_class row (a tool run
    twice at once) leave a MultiXactId of lockers only as its xmax after
    both end. Where the MultiXactId counter is ahead of the transaction ID
    counter (two sessions share-locking the same N rows make N of them from
    two transaction IDs), that number, taken for a transaction ID, never
    precedes the snapshot's xmin: found by a breaker helper, confirmation
    stopped for good with no transaction open. An xmax past the next
    transaction ID is no transaction, and lockers change nothing."""
    with case.own_server():
        case.setup_db()
        relay, conn = running(case)
        push_multixacts(case, lambda: case.scalar("SELECT mxid_age('1'::xid) > "
                                                  "txid_current() % 4294967296 + 100"))
        a, b = case.connect(autocommit=False), case.connect(autocommit=False)
        for s in (a, b):
            s.cursor().execute("SELECT FROM pg_class WHERE oid = 'public.outbox'::regclass FOR SHARE")
        a.commit()
        b.commit()
        xmax, ahead = case.query("SELECT xmax::text, mxid_age(xmax) > 0 AND age(xmax) <= 0 FROM pg_class "
                                 "WHERE oid = 'public.outbox'::regclass")[0]
        assert ahead, "the outbox's pg_class xmax %s is not a MultiXactId past the next transaction ID" % xmax
        c = insert_rows(conn, simple_rows("after", 2))
        wait_confirmed(case, c.lsn_after)
        assert "nothing new has been confirmed for" not in relay.log, relay.log
        assert relay.alive, relay.log
        a.close()
        b.close()
        conn.close()


def test_a_truncated_multixact_number_does_not_fail_the_rounds(case):
    """The round asks pg_get_multixact_members() for an xmax only where it
    can be a live MultiXactId. It took the least datminmxid over all
    databases for the oldest live one; PostgreSQL (15.4 and later) leaves an
    invalid database (an interrupted DROP DATABASE, datconnlimit = -2) out of
    that least when it truncates, so the server's oldest moved past it, and
    a rolled-back DDL's xid left as the outbox's pg_class xmax, a number the
    MultiXactId counter had passed, made every round fail for good (found
    by a breaker helper): nothing was confirmed again. The bound is now this
    database's own datminmxid."""
    with case.own_server() as own:
        case.setup_db()
        relay, conn = running(case)
        own.query("CREATE DATABASE doomed")
        ddl = case.connect(autocommit=False)
        cur = ddl.cursor()
        cur.execute("ALTER TABLE outbox ADD COLUMN later text")
        cur.execute("SELECT txid_current() % 4294967296")
        x = cur.fetchone()[0]
        ddl.rollback()
        ddl.close()
        # the MultiXactId counter past x
        push_multixacts(case, lambda: case.scalar("SELECT mxid_age(%s::text::xid)", (str(x),)) > 200)
        # what an interrupted DROP DATABASE leaves, then every valid database vacuumed for
        # MultiXactIds, as autovacuum does against wraparound: the truncation leaves "doomed" out
        own.query("UPDATE pg_database SET datconnlimit = -2 WHERE datname = 'doomed'")
        own.query("UPDATE pg_database SET datallowconn = true WHERE datname = 'template0'")
        for db in ["template0", "template1", "postgres", case.dbname]:
            c = own.connect(db)
            for q in ("SET vacuum_multixact_freeze_min_age = 0", "SET vacuum_multixact_freeze_table_age = 0",
                      "VACUUM"):
                c.cursor().execute(q)
            c.close()
        own.query("UPDATE pg_database SET datallowconn = false WHERE datname = 'template0'")
        assert case.scalar("SELECT xmax::text FROM pg_class WHERE oid = 'public.outbox'::regclass") == str(x)
        with pytest.raises(psycopg2.Error):     # what the round asked before
            case.query("SELECT pg_get_multixact_members(%s::text::xid)", (str(x),))
        failed = relay.log.count("catalog check failed")
        c = insert_rows(conn, simple_rows("after", 2))
        wait_confirmed(case, c.lsn_after)
        assert relay.log.count("catalog check failed") == failed, relay.log
        own.query("DROP DATABASE doomed")
        conn.close()


def test_rows_inserted_while_unlogged_are_never_confirmed_past(case):
    """The UNLOGGED case in full: rows committed into the unlogged table never
    reach the WAL; the relay stops before confirming any LSN after the
    change, so the slot still points before the rows' time."""
    without_guard(case)
    relay, conn = running(case)
    cur = conn.cursor()
    cur.execute("ALTER TABLE outbox SET UNLOGGED")
    conn.commit()
    after_alter = case.pg.current_wal_lsn()
    lost = insert_rows(conn, simple_rows("unlogged", 3))
    assert relay.wait(30) == EXIT_ENV, relay.log
    assert case.confirmed() < after_alter, "confirmed past the moment the table went unlogged"
    # a restart refuses the unlogged table at preflight, naming the fix
    rc, out = run_relay(case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_ENV and "UNLOGGED" in out and "SET LOGGED" in out, out
    conn.close()
    assert lost.work_ids


def test_check_fails_on_an_unlogged_table(case):
    without_guard(case)
    case.query("ALTER TABLE outbox SET UNLOGGED")
    rc, out = run_relay(["check"] + case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_ENV, out
    assert re.search(r'^FAIL  table "public"\."outbox": .*UNLOGGED.*SET LOGGED', out, re.M), out


@pytest.mark.parametrize("ddl", ["ALTER TABLE outbox SET UNLOGGED", "ALTER TABLE outbox RENAME TO x",
                                 "CREATE SCHEMA other; ALTER TABLE outbox SET SCHEMA other"],
                         ids=["unlogged", "renamed", "schema"])
def test_event_trigger_refuses_the_ddl(case, ddl):
    with pytest.raises(psycopg2.Error) as e:
        case.query(ddl)
    assert e.value.pgcode == "WK003", (e.value.pgcode, e.value.pgerror)
    assert case.scalar("SELECT relpersistence FROM pg_class WHERE oid = 'outbox'::regclass") == "p"
    # harmless DDL passes
    case.query("ALTER TABLE outbox ADD COLUMN note text")
    case.query("ALTER TABLE outbox REPLICA IDENTITY FULL")


def commits_held(own):
    """After synchronous_standby_names was set and reloaded: a commit waits
    only once the checkpointer has reloaded too (it publishes the setting to
    committing backends), which a backend's SHOW does not tell. A probe
    transaction in database postgres commits until one is seen waiting,
    and that one is let go (pg_cancel_backend(): its commit stands)."""
    for _ in range(100):
        c = own.connect()
        pid = c.cursor()
        pid.execute("SELECT pg_backend_pid()")
        pid = pid.fetchone()[0]
        t = threading.Thread(target=lambda c=c: (c.cursor().execute("SELECT txid_current()"), c.close()))
        t.start()
        waits = lambda: own.query("SELECT coalesce(bool_or(wait_event = 'SyncRep'), false) "
                                  "FROM pg_stat_activity WHERE pid = %s", (pid,))[0][0]
        wait_until(lambda: not t.is_alive() or waits(), 30, what="the probe commit to end or wait")
        if t.is_alive():
            own.query("SELECT pg_cancel_backend(%s)", (pid,))
            t.join(30)
            assert not t.is_alive()
            return
        t.join()
    raise AssertionError("no commit waited for the standby that synchronous_standby_names names")


@pytest.mark.parametrize("plugin,ddl,table,words,locker", [
    ("wal2json", "ALTER TABLE outbox RENAME TO outbox_old", "outbox_old", "no longer exists", None),
    ("pgoutput", "ALTER PUBLICATION {slot} DROP TABLE outbox", "outbox", "no longer lists", None),
    ("pgoutput", "SAVEPOINT s; ALTER PUBLICATION {slot} DROP TABLE outbox; RELEASE SAVEPOINT s", "outbox",
     "no longer lists", None),
    ("pgoutput", "ALTER PUBLICATION {slot} SET (publish = 'update')", "outbox", "no longer publishes inserts",
     None),
    ("pgoutput", "ALTER PUBLICATION {slot} SET (publish = 'update')", "outbox", "no longer publishes inserts",
     "SELECT FROM pg_publication WHERE pubname = '{slot}' FOR KEY SHARE"),
], ids=["wal2json-renamed", "pgoutput-unpublished", "pgoutput-unpublished-in-savepoint", "pgoutput-no-inserts",
        "pgoutput-no-inserts-multixact"])
def test_a_change_committed_but_not_yet_visible_is_not_confirmed(case, plugin, ddl, table, words, locker):
    """A commit record is flushed, decoded and sent to the relay before its
    backend leaves the process array; until then no other session sees its
    changes, and the catalog check would read the table as it was. CI of
    162970b caught the relay confirming the LSN of the very ALTER TABLE it
    stopped for. Here the window is held open: every commit waits for a
    synchronous standby that does not exist (after its flush, before it is
    visible), and one transaction both takes the table out of the relay's
    sight and inserts a row it will not publish. The relay reads that
    transaction (its xid); no round may verify past it while the change is
    unseen. Released, the change shows, and the relay stops without having
    confirmed the transaction, so its row is not taken for published. The
    server is this test's own: the setting holds every commit of the
    cluster. With pgoutput the transaction takes the table out of the
    publication: PostgreSQL 15 and later send nothing of a transaction that
    publishes nothing, so the relay never learns its xid; the catalog
    check holds back instead while a catalog row it reads (here
    pg_publication_rel's or pg_publication's) was changed by a transaction
    its snapshot does not show ended (the row's xmax): a subtransaction's
    too, which the snapshot does not list, and the updater among the
    members of a MultiXactId, which is the row's xmax when another session
    holds a key-share lock on it (found by a breaker helper: the number was
    taken for a long-ended transaction ID)."""
    with case.own_server() as own:
        committer = hold = None
        try:
            case.setup_db()
            without_guard(case)
            relay, conn = running(case, "--plugin", plugin)
            if locker:
                hold = case.connect(autocommit=False)
                hold.cursor().execute(locker.format(slot=case.slot))
            own.query("ALTER SYSTEM SET synchronous_standby_names = 'no_such_standby'")
            own.query("SELECT pg_reload_conf()")
            commits_held(own)
            conn.commit()     # this session reads the new setting at its next statement
            cur = conn.cursor()
            cur.execute("SHOW synchronous_standby_names")
            assert cur.fetchone()[0] == "no_such_standby"
            cur.execute(ddl.format(slot=case.slot))
            cur.execute("INSERT INTO %s (work_id, kind, payload) VALUES ('held', 'order_received', '{}')" % table)
            cur.execute("SELECT pg_current_wal_insert_lsn()::text")
            pre_commit = parse_lsn(cur.fetchone()[0])
            committer = threading.Thread(target=conn.commit)
            committer.start()
            wait_until(lambda: own.query("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
                                         "AND datname = %s", (case.dbname,))[0][0] == 1, 30,
                       what="the commit waiting for the standby")
            # the walsender decoded the commit; other sessions do not see the change yet
            assert wait_until(lambda: own.query("SELECT coalesce(max(sent_lsn), '0/0') >= %s::pg_lsn "
                                                "FROM pg_stat_replication", (format_lsn(pre_commit),))[0][0],
                              30, what="the walsender past the commit")
            if locker:     # the publication's xmax is a MultiXactId of the locker and the updater
                assert own.query("SELECT EXISTS (SELECT FROM pg_get_multixact_members((SELECT xmax FROM "
                                 "pg_publication WHERE pubname = %s)) WHERE mode = 'nokeyupd')", (case.slot,),
                                 dbname=case.dbname)[0][0]
            assert own.query("SELECT to_regclass('public.outbox') IS NOT NULL AND (%s = 'wal2json' OR EXISTS "
                             "(SELECT FROM pg_publication_tables t JOIN pg_publication p USING (pubname) WHERE pubname = %s "
                             "AND tablename = 'outbox' AND pubinsert))",
                             (plugin, case.slot), dbname=case.dbname)[0][0], "the change is visible already"
            # Three standby status updates after that: the relay has read the commit, and its
            # rounds (every 50 ms while something is unverified) have had their say in them.
            replies = {t for (t,) in own.query("SELECT r.reply_time FROM pg_stat_replication r JOIN "
                                                "pg_replication_slots s ON s.active_pid = r.pid "
                                                "WHERE s.slot_name = %s", (case.slot,))}

            def replied():
                replies.update(t for (t,) in own.query(
                    "SELECT r.reply_time FROM pg_stat_replication r JOIN pg_replication_slots s "
                    "ON s.active_pid = r.pid WHERE s.slot_name = %s AND r.sent_lsn >= %s::pg_lsn",
                    (case.slot, format_lsn(pre_commit))))
                return len(replies) >= 4    # the one before and three after
            wait_until(replied, 30, what="three status updates after the commit was sent")
            assert case.confirmed() <= pre_commit, "confirmed a transaction whose change no round could see"
            assert relay.alive, relay.log
            own.query("ALTER SYSTEM RESET synchronous_standby_names")
            own.query("SELECT pg_reload_conf()")
            committer.join(30)
            assert not committer.is_alive()
            assert relay.wait(30) == EXIT_ENV, relay.log
            assert words in relay.log, relay.log
            assert case.confirmed() <= pre_commit, "confirmed the transaction that hid its row"
            conn.close()
        finally:
            release_held(case, own, committer)
            if hold is not None:
                hold.close()
