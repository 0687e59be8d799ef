# SPDX-License-Identifier: Apache-2.0
"""outbox_enqueue() where the row it conflicts with is there but cannot be
seen: row-level security on a multi-tenant outbox (a policy by entity_id).
The INSERT ... ON CONFLICT DO NOTHING conflicts with the other tenant's row,
the SELECT that should compare with it finds nothing, and retrying cannot
change that: the call must fail with an error, not loop inside the
business transaction until a statement_timeout (if any) ends it."""

import psycopg2
import pytest

ORDER = '{"order_id": 103, "total": "29.00"}'


def test_enqueue_with_an_invisible_conflicting_row_fails_instead_of_looping(case):
    app = "app_" + case.name[-40:]
    case.pg.query('CREATE ROLE "%s"' % app)
    try:
        case.query('GRANT INSERT, SELECT ON outbox TO "%s"' % app)
        case.query("ALTER TABLE outbox ENABLE ROW LEVEL SECURITY")
        case.query("CREATE POLICY tenant ON outbox USING "
                   "(entity_id = current_setting('app.tenant', true))")
        conn = case.connect(autocommit=False)
        cur = conn.cursor()
        cur.execute('SET SESSION AUTHORIZATION "%s"' % app)
        cur.execute("SET app.tenant = 'a'")
        cur.execute("SELECT outbox_enqueue('w-1', 'k', %s, 'a')", (ORDER,))
        assert cur.fetchone()[0] is True
        conn.commit()

        cur.execute("SET app.tenant = 'b'")
        cur.execute("SET statement_timeout = '20s'")
        with pytest.raises(psycopg2.Error) as e:
            cur.execute("SELECT outbox_enqueue('w-1', 'k', %s, 'b')", (ORDER,))
        conn.rollback()
        assert e.value.pgcode != "57014", "outbox_enqueue() looped until statement_timeout"
        assert e.value.pgcode == "WK001", (e.value.pgcode, e.value.pgerror)
        assert 'work ID "w-1" is already in the outbox' in e.value.pgerror, e.value.pgerror
        conn.close()
    finally:
        case.query('DROP OWNED BY "%s"' % app)
        case.pg.query('DROP ROLE "%s"' % app)
