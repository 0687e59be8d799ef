# SPDX-License-Identifier: Apache-2.0
"""Which tables the relay reads: the outbox tables named with -t, in SQL
syntax (names that need quoting included), several at once, and no other
table, not even one whose name differs only in case. ce_source tells the
tables apart.
"""

from harness import EXIT_OK, arrive_and_confirm, by_id, has_ids


def test_table_names_that_need_quoting(case):
    tables = [
        ('public."Foo bar"', "space"),
        ('public."UPPER"', "upper"),
        ('public."it\'s"', "quote"),
        ('"My.Schema"."Out""box"', "dot-schema-double-quote"),
        ('"my schema"."a,b"', "comma"),
    ]
    case.query('CREATE SCHEMA "My.Schema"')
    case.query('CREATE SCHEMA "my schema"')
    for t, _ in tables:
        case.query("CREATE TABLE %s (LIKE public.outbox INCLUDING ALL)" % t)
    # a table whose name differs only in case must not be captured
    case.query('CREATE TABLE public.upper (LIKE public.outbox INCLUDING ALL)')
    args = []
    for t, _ in tables:
        args += ["-t", t]
    reader = case.reader()
    relay = case.relay(*args)
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    for t, tag in tables:
        cur.execute("INSERT INTO %s (work_id, kind, payload) VALUES (%%s, 'k', '{}')" % t, (tag,))
    cur.execute("INSERT INTO public.upper (work_id, kind, payload) VALUES ('lower', 'k', '{}')")
    cur.execute("INSERT INTO public.outbox (work_id, kind, payload) VALUES ('default', 'k', '{}')")
    conn.commit()
    ids = [tag for _, tag in tables]
    arrive_and_confirm(case, reader, relay, ids)
    assert relay.stop() == EXIT_OK, relay.log
    assert reader.drain(timeout=30)
    got = by_id(reader.records)
    assert set(got) == set(ids), "captured %s, expected %s" % (sorted(got), sorted(ids))
    sources = {got[tag][0].header("ce_source") for tag in ids}
    assert len(sources) == len(ids), "ce_source does not tell the tables apart: %s" % sources


def test_several_tables_and_other_tables_ignored(case):
    case.query('CREATE SCHEMA "Shop"')
    case.query('CREATE TABLE "Shop"."Outbox" (LIKE public.outbox INCLUDING ALL)')
    case.query("CREATE TABLE public.not_outbox (LIKE public.outbox INCLUDING ALL)")
    sysid = case.pg.system_identifier()
    reader = case.reader()
    relay = case.relay("-t", "public.outbox", "-t", '"Shop"."Outbox"')
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    for table, wid in (("public.outbox", "p-1"), ('"Shop"."Outbox"', "s-1"),
                       ("public.not_outbox", "n-1")):
        cur.execute("INSERT INTO %s (work_id, kind, payload) VALUES (%%s, 'k', '{}')" % table,
                    (wid,))
    conn.commit()
    assert reader.read_until(has_ids(["p-1", "s-1"]), 30), case.logs()
    assert relay.stop() == EXIT_OK, relay.log
    assert reader.drain(timeout=30)
    recs = by_id(reader.records)
    assert set(recs) == {"p-1", "s-1"}, "rows of unlisted tables were published"
    base = "postgresql://%s/%s/" % (sysid, case.dbname)
    assert recs["p-1"][0].header("ce_source") == base + "public.outbox"
    assert recs["s-1"][0].header("ce_source") in (base + "Shop.Outbox", base + '"Shop"."Outbox"')
    # one transaction: one xid and end LSN for both rows
    assert recs["p-1"][0].header("ce_pglsn") == recs["s-1"][0].header("ce_pglsn")
    assert recs["p-1"][0].header("ce_pgxid") == recs["s-1"][0].header("ce_pgxid")
