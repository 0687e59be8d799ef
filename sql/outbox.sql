-- SPDX-License-Identifier: Apache-2.0
--
-- The outbox table outbox-relay publishes from, the outbox_enqueue()
-- function that writes to it, outbox_emit() that writes a message without a
-- row, and how to clean the table up.
--
-- Write one row per message in the same transaction as the business change
-- that calls for it: the row commits if and only if the change commits.
--
--     BEGIN;
--     INSERT INTO orders ...;
--     SELECT outbox_enqueue('order-103-ack', 'order_received',
--             '{"order_id":103,"customer_id":1,"total":"29.00",
--               "message":"Order received; payment still pending"}');
--     COMMIT;
--
-- A plain INSERT INTO outbox (work_id, kind, payload) VALUES (...) works too;
-- outbox_enqueue() adds the check of a repeated work ID (below). An error
-- from either must abort the business transaction: never catch it and commit
-- the change without its message.
--
-- The relay does not poll this table. It reads committed INSERTs from the
-- write-ahead log through a logical replication slot (plugin wal2json), in
-- commit order, so the table needs no "unsent" flag and no polling index.
-- Updates and deletes of outbox rows are not published.
--
-- The relay confirms a commit to the slot only after Kafka acknowledged every
-- message up to that commit; the slot, not this table, remembers progress.
-- Delivery is at-least-once: consumers deduplicate by work ID (the record key
-- by default, and the ce_id header). What deleting rows changes is described
-- under "Cleanup" at the end of this file.
--
-- Requires wal_level = logical. Column names other than these can be used
-- with the relay's --id-column, --key-column, --payload-column and
-- --headers-column options. The relay's login: sql/role.sql. Watching the
-- slot: sql/monitoring.sql.

-- The prefix of outbox_emit()'s messages (below): -v message_prefix=...,
-- default outbox. Refused before anything is created when the relay's
-- --message-prefix could not take it.
\if :{?message_prefix}
\else
\set message_prefix outbox
\endif
SET outbox.message_prefix = :'message_prefix';
DO $$
BEGIN
    IF current_setting('outbox.message_prefix') !~ '^[A-Za-z0-9_.:/-]{1,128}$' THEN
        RAISE EXCEPTION 'message_prefix "%" cannot be a --message-prefix',
                        current_setting('outbox.message_prefix')
            USING ERRCODE = '22023',
                  HINT = 'Use 1 to 128 ASCII letters, digits and _ . : / - (wal2json''s '
                         'add-msg-prefixes cannot name a blank, a comma or a backslash).';
    END IF;
END $$;
RESET outbox.message_prefix;

-- The relay's rules for the headers column (src/record.c checks the same):
-- NULL, or an object of at most 64 string values whose names have 1 to 255
-- bytes and are not reserved ("ce_*", "outbox_relay_*", "content-type",
-- compared without regard to case).
CREATE FUNCTION outbox_headers_valid(h jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT h IS NULL OR (
        jsonb_typeof(h) = 'object' AND
        (SELECT count(*) <= 64 AND
                coalesce(bool_and(jsonb_typeof(value) = 'string'
                                  AND octet_length(key) BETWEEN 1 AND 255
                                  AND lower(key) NOT LIKE 'ce\_%'
                                  AND lower(key) NOT LIKE 'outbox\_relay\_%'
                                  AND lower(key) <> 'content-type'), true)
         FROM jsonb_each(h)))
$$;

CREATE TABLE outbox (
    -- Stable identity of this piece of work, chosen by the application (for
    -- example 'order-103-ack'). It stays the same through every redelivery,
    -- so receivers deduplicate on it. Published as the CloudEvents id
    -- (ce_id header) and, unless --key-column says otherwise, as the Kafka key.
    work_id     text PRIMARY KEY,

    -- What happened, e.g. 'order_received'. Selects the topic through the
    -- relay's --topic template (default 'outbox.${kind}') and is published as
    -- the CloudEvents type (ce_type header).
    kind        text NOT NULL,

    -- The message body, published as the Kafka record value exactly as
    -- PostgreSQL prints the jsonb (normalized: key order and spacing may
    -- differ from what was inserted; numbers keep their precision).
    payload     jsonb NOT NULL,

    -- Optional business entity the message is about (e.g. an order or a
    -- customer). Run the relay with --key-column entity_id to key records by
    -- it: Kafka then keeps each entity's messages in commit order within one
    -- partition.
    entity_id   text,

    -- When the row was written (wall clock at insert, not transaction start).
    -- For housekeeping only; the relay uses the commit time from the WAL as
    -- the record timestamp and ce_time.
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),

    -- Optional extra Kafka headers: NULL for none, or a JSON object whose
    -- values are all strings, e.g. '{"traceparent": "00-4bf9...-01"}'. Each
    -- pair becomes one header (name = key, value = the string's UTF-8 bytes),
    -- published after the relay's own ce_* headers. At most 64 pairs, names
    -- of 1 to 255 bytes; names beginning with "ce_" or "outbox_relay_" and
    -- "content-type" (any case) are the relay's. A value outside these rules
    -- makes the row unpublishable (the relay's --on-error policy decides).
    -- Read through --headers-column (default headers); a table without the
    -- column publishes no extra headers. The CHECK below refuses such values
    -- at the writer, where the transaction can still be fixed.
    headers     jsonb CHECK (outbox_headers_valid(headers))
);


-- outbox_enqueue() - write one message to the outbox, idempotently.
--
-- Call it inside the business transaction. Returns true when it inserted the
-- row (the relay will publish it once the transaction commits), false when a
-- row with this work ID already exists with the same kind, payload, entity_id
-- and headers: the call is then a no-op, nothing new is written to the WAL
-- and nothing is published again.
--
-- A work ID names one intention. When the stored row differs (a changed total,
-- another kind, entity or headers), the function does not keep either one
-- silently: it raises SQLSTATE WK001 (letters W, K: "work ID reused"), which
-- aborts the transaction, with
--     ERROR:  work ID "order-103-ack" is already in the outbox with a different payload
--     DETAIL:  payload: stored {"total": "29.00"}, new {"total": "31.00"}
--     HINT:  A work ID names one intention and its message must not change: ...
-- (or "with a different kind", "... entity_id", "with different headers").
-- Catch it by SQLSTATE ('WK001'), not as unique_violation (23505), so that a
-- handler for plain duplicates cannot mistake it for a harmless repeat.
--
-- Payloads and headers are compared as PostgreSQL prints the jsonb, which is
-- the text the relay publishes: key order and spacing do not matter, but
-- 29.00 and 29.0 differ (jsonb's = would call them equal, and a receiver could
-- be handed either text under one work ID).
--
-- Concurrency: INSERT ... ON CONFLICT DO NOTHING waits for another
-- transaction that inserted the same work ID and has not finished. If that
-- one commits, this call compares against its row; if it rolls back, this call
-- inserts. So two transactions can never both commit different messages under
-- one work ID. Under REPEATABLE READ or SERIALIZABLE a conflicting row that
-- committed after this transaction's snapshot raises serialization_failure
-- (40001) instead: retry the whole transaction. If the row is deleted between
-- the conflict and the comparison, the insert is tried again (up to 10 times).
-- A conflicting row the caller cannot read (row-level security on the outbox)
-- raises WK001 too: 'work ID "..." is already in the outbox, in a row this
-- transaction cannot read'.
--
-- The caller needs INSERT and SELECT on outbox, nothing more; no role of the
-- application needs UPDATE or DELETE on it except the cleanup job. The
-- comparison needs the earlier row to be there: see "Cleanup" below for what
-- deleting rows gives up.
CREATE FUNCTION outbox_enqueue(p_work_id text, p_kind text, p_payload jsonb,
                               p_entity_id text DEFAULT NULL, p_headers jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    stored outbox%ROWTYPE;
    what text;
BEGIN
    FOR attempt IN 1..10 LOOP
        INSERT INTO outbox (work_id, kind, payload, entity_id, headers)
        VALUES (p_work_id, p_kind, p_payload, p_entity_id, p_headers)
        ON CONFLICT (work_id) DO NOTHING;
        IF FOUND THEN
            RETURN true;
        END IF;
        -- Comparing with this copy is right even if the row is deleted
        -- meanwhile: its message was published from the WAL. (No FOR SHARE,
        -- which would need UPDATE privilege.)
        SELECT * INTO stored FROM outbox WHERE work_id = p_work_id;
        EXIT WHEN FOUND;
    END LOOP;
    -- Still a conflict and nothing to read: not a deletion race but a row
    -- this caller cannot see (a row-level security policy). Retrying would
    -- loop forever inside the business transaction.
    IF stored.work_id IS NULL THEN
        RAISE EXCEPTION 'work ID "%" is already in the outbox, in a row this transaction cannot read',
                        p_work_id
            USING ERRCODE = 'WK001',
                  DETAIL = 'INSERT conflicts with a row that SELECT does not return '
                           '(a row-level security policy on the outbox?).',
                  HINT = 'Work IDs must be unique across the whole table: give this message '
                         'a work ID no other writer can choose (e.g. prefix the tenant).';
    END IF;

    IF stored.kind IS DISTINCT FROM p_kind THEN
        what := format('kind: stored %L, new %L', stored.kind, p_kind);
    ELSIF stored.payload::text IS DISTINCT FROM p_payload::text THEN
        what := format('payload: stored %s, new %s', stored.payload, p_payload);
    ELSIF stored.entity_id IS DISTINCT FROM p_entity_id THEN
        what := format('entity_id: stored %L, new %L', stored.entity_id, p_entity_id);
    ELSIF stored.headers::text IS DISTINCT FROM p_headers::text THEN
        what := format('headers: stored %s, new %s',
                       coalesce(stored.headers::text, 'NULL'), coalesce(p_headers::text, 'NULL'));
    ELSE
        RETURN false;
    END IF;
    RAISE EXCEPTION 'work ID "%" is already in the outbox with %', p_work_id,
                    CASE split_part(what, ':', 1) WHEN 'headers' THEN 'different headers'
                    ELSE 'a different ' || split_part(what, ':', 1) END
        USING ERRCODE = 'WK001',
              DETAIL = what,
              HINT = 'A work ID names one intention and its message must not change: '
                     'repeat the stored message unchanged, or give a corrected message '
                     'a new work ID (and say which one it replaces).';
END;
$$;

-- outbox_emit() - write one message to the WAL only, without a row: a
-- transactional logical message for a relay started with
-- --message-prefix=outbox (README, "An outbox with no table").
--
--     BEGIN;
--     INSERT INTO orders ...;
--     SELECT outbox_emit('order-103-ack', 'order_received',
--             '{"order_id":103,"customer_id":1,"total":"29.00"}');
--     COMMIT;
--
-- Same arguments as outbox_enqueue(), and the relay publishes the same key,
-- value, topic and headers as for a row of this table with these values
-- (ce_source names the message prefix instead of the table). The message is
-- pg_logical_emit_message(true, prefix, envelope): it reaches the WAL, and so
-- the relay, if and only if the transaction commits. It returns that
-- function's LSN (just past the message's WAL record), the one the relay's
-- logs and errors name for the message. It leaves no row: no
-- table to vacuum or clean up, but also
--   * nothing to compare a repeat against: calling it twice with one work ID
--     publishes twice (receivers deduplicate; outbox_enqueue() would have
--     returned false, or raised WK001 for a changed payload);
--   * nothing to republish from if the slot is lost: a message the relay
--     had not published when the slot was dropped or invalidated is gone.
--
-- The envelope (src/envelope.h): {"version": 1, "columns": {"work_id": ...,
-- "kind": ..., "payload": "<the jsonb's text>", "entity_id": ..., "headers":
-- "<the jsonb's text>" or null}}. It raises, before anything reaches the
-- WAL, where the relay would find the message unpublishable: 22004 for a NULL
-- work ID, kind or payload (the table's NOT NULL), 22023 for an empty work
-- ID, 23514 for headers outbox_headers_valid() refuses (the table's CHECK),
-- 54000 for an envelope over 16 MiB (the relay's bound). The prefix is fixed
-- when this file is loaded (psql -v message_prefix=..., default outbox:
-- letters, digits and _ . : / - only, as the relay's --message-prefix) and
-- read back with outbox_message_prefix(). The caller needs nothing but
-- EXECUTE on it (PUBLIC has it on pg_logical_emit_message()).
CREATE FUNCTION outbox_message_prefix() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN :'message_prefix';

CREATE FUNCTION outbox_emit(p_work_id text, p_kind text, p_payload jsonb,
                            p_entity_id text DEFAULT NULL, p_headers jsonb DEFAULT NULL)
RETURNS pg_lsn
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    envelope text;
BEGIN
    IF p_work_id IS NULL OR p_kind IS NULL OR p_payload IS NULL THEN
        RAISE EXCEPTION 'outbox_emit(): the % is NULL',
                        CASE WHEN p_work_id IS NULL THEN 'work ID'
                             WHEN p_kind IS NULL THEN 'kind' ELSE 'payload' END
            USING ERRCODE = '22004';
    END IF;
    IF p_work_id = '' THEN
        RAISE EXCEPTION 'outbox_emit(): the work ID is empty'
            USING ERRCODE = '22023',
                  HINT = 'A work ID names one intention; receivers deduplicate on it.';
    END IF;
    IF NOT outbox_headers_valid(p_headers) THEN
        RAISE EXCEPTION 'outbox_emit(): the headers % break the relay''s rules', p_headers
            USING ERRCODE = '23514',
                  HINT = 'NULL, or an object of at most 64 string values whose names have 1 to '
                         '255 bytes and do not begin with ce_ or outbox_relay_ nor are '
                         'content-type.';
    END IF;
    envelope := jsonb_build_object('version', 1, 'columns', jsonb_build_object(
        'work_id', p_work_id, 'kind', p_kind, 'payload', p_payload::text,
        'entity_id', p_entity_id, 'headers', p_headers::text))::text;
    IF octet_length(envelope) > 16777216 THEN
        RAISE EXCEPTION 'outbox_emit(): the message of work ID "%" has % bytes, more than the '
                        '16777216 the relay takes', p_work_id, octet_length(envelope)
            USING ERRCODE = '54000',
                  HINT = 'Publish large messages from the outbox table (outbox_enqueue()).';
    END IF;
    RETURN pg_logical_emit_message(true, outbox_message_prefix(), envelope);
END;
$$;

-- Cleanup
--
-- The relay never reads this table, so deleting rows never makes it lose or
-- re-publish a message: a row is published from its INSERT in the WAL, also
-- when the row is gone by then. What a deletion gives up is evidence:
--   * the comparison in outbox_enqueue(): after the row is gone, a repeat
--     with the same work ID is inserted as new and published again (receivers
--     that still remember the work ID drop it; those past their deduplication
--     horizon act again), and a changed payload is no longer detected;
--   * the row itself as the way to recover messages that the relay never
--     published if the slot is lost (dropped, or invalidated by
--     max_slot_wal_keep_size): a new slot starts at the current WAL.
-- Choose one of:
--
-- (a) Insert and delete in the same transaction. The table stays empty and
--     needs no vacuuming of old rows; the INSERT still reaches the WAL and is
--     published, the DELETE is ignored by the relay:
--
--         BEGIN;
--         INSERT INTO orders ...;
--         INSERT INTO outbox (work_id, kind, payload) VALUES (...);
--         DELETE FROM outbox WHERE work_id = 'order-103-ack';
--         COMMIT;
--
--     Nothing is left to compare a repeat against (outbox_enqueue() then
--     always inserts), and nothing is left to recover from if the slot is
--     lost. Use it when the application itself never repeats an enqueue
--     (e.g. the business row's own key already rejects a repeated request)
--     and the receivers deduplicate.
--
-- (b) Keep rows for a retention period and delete older ones, but only those
--     that the slot has confirmed. A row counts as confirmed when its
--     inserting transaction is older than the slot's catalog_xmin: every such
--     transaction ended before a WAL position that the slot has confirmed
--     (catalog_xmin only advances once confirmed_flush_lsn passes the
--     running-transactions record it was taken from, which PostgreSQL writes
--     about every 15 s while the server is busy and at each checkpoint). So
--     the retention only has to exceed the longest repeat window of the
--     application; rows the relay has not confirmed yet (the relay stopped,
--     Kafka down, the relay lagging) stay whatever their age, and while the
--     slot does not exist nothing is deleted. Run this periodically, e.g. from
--     cron or pg_cron, with your slot's name and retention:
--
--         DELETE FROM outbox
--         WHERE created_at < clock_timestamp() - interval '7 days'
--           AND age(xmin) > (SELECT age(catalog_xmin) FROM pg_replication_slots
--                            WHERE slot_name = 'outbox_relay');
--
--     (age() compares transaction IDs across wraparound; "older than" is a
--     larger age.) Rows written before the slot was created also count as
--     confirmed, although the relay never published them (it warns about
--     them when it creates the slot). With several relays on one table, use
--     the oldest catalog_xmin of their slots: max(age(catalog_xmin)). Delete
--     in batches (LIMIT through a subquery on work_id) when the backlog is
--     large, and let autovacuum (or a partition drop) reclaim the space.
--
--     Without the catalog_xmin condition, a purely time-based DELETE is safe
--     only while the retention exceeds the relay's lag (the time from commit
--     to the slot's confirmed_flush_lsn); watch that lag with
--     sql/monitoring.sql.

-- The guard: refuse DDL that would let outbox rows bypass the WAL.
--
-- Rows of an UNLOGGED (or TEMPORARY) table are not written to the WAL, so
-- logical decoding never sees them: rows inserted while the outbox was
-- unlogged are never published, not even after ALTER TABLE ... SET LOGGED
-- (which copies the table into the WAL as pages, not as inserts). A table
-- renamed or moved to another schema is one the relay no longer reads (it
-- follows names, --table). The running relay checks both on its side
-- connection and stops (exit 3) without confirming past them, but a round
-- trip through UNLOGGED that fits between two of its checks cannot be seen
-- from outside. This event trigger refuses such DDL where it happens, for the
-- tables registered in outbox_guard (the table above is; add others with
-- SELECT outbox_guard_protect('schema.table')). DROP TABLE is allowed: the
-- relay stops when its table is gone. Event triggers need a superuser; the
-- file skips the trigger (with a notice) for other roles.

CREATE TABLE outbox_guard (
    relid       oid PRIMARY KEY,     -- pg_class.oid of a protected outbox table
    schema_name name NOT NULL,       -- its name when it was protected
    table_name  name NOT NULL
);

CREATE FUNCTION outbox_guard_protect(t regclass) RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO outbox_guard (relid, schema_name, table_name)
    SELECT c.oid, n.nspname, c.relname
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = t
    ON CONFLICT (relid) DO UPDATE SET schema_name = excluded.schema_name,
                                      table_name = excluded.table_name
$$;

CREATE FUNCTION outbox_guard_check() RETURNS event_trigger
LANGUAGE plpgsql
AS $$
DECLARE
    cmd record;
    g record;
BEGIN
    FOR cmd IN SELECT * FROM pg_catalog.pg_event_trigger_ddl_commands()
               WHERE object_type = 'table' LOOP
        SELECT o.schema_name, o.table_name, n.nspname AS now_schema, c.relname AS now_name,
               c.relpersistence
          INTO g
          FROM outbox_guard o
          JOIN pg_catalog.pg_class c ON c.oid = o.relid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE o.relid = cmd.objid;
        CONTINUE WHEN NOT FOUND;
        IF g.relpersistence <> 'p' THEN
            RAISE EXCEPTION 'outbox table "%"."%" must stay LOGGED', g.schema_name, g.table_name
                USING ERRCODE = 'WK003',
                      DETAIL = 'Rows of an unlogged table never reach the WAL, so outbox-relay '
                               'never publishes them, not even after SET LOGGED.',
                      HINT = 'Drop the table from outbox_guard first if this is really meant.';
        END IF;
        IF g.now_schema <> g.schema_name OR g.now_name <> g.table_name THEN
            RAISE EXCEPTION 'outbox table "%"."%" must keep its name (now "%"."%")',
                            g.schema_name, g.table_name, g.now_schema, g.now_name
                USING ERRCODE = 'WK003',
                      DETAIL = 'outbox-relay reads its tables by name (--table): rows inserted '
                               'under another name are not published.',
                      HINT = 'Stop the relay, change its --table, and re-register the table with '
                             'outbox_guard_protect() in the same change.';
        END IF;
    END LOOP;
END;
$$;

DO $$ BEGIN PERFORM outbox_guard_protect('outbox'); END $$;

SELECT rolsuper AS outbox_guard_superuser FROM pg_catalog.pg_roles
 WHERE rolname = current_user \gset
\if :outbox_guard_superuser
CREATE EVENT TRIGGER outbox_guard ON ddl_command_end
    WHEN TAG IN ('ALTER TABLE')
    EXECUTE FUNCTION outbox_guard_check();
\else
\echo 'outbox_guard: not a superuser, so no event trigger; the relay still stops on an unlogged or renamed outbox'
\endif
