-- SPDX-License-Identifier: Apache-2.0
--
-- The receiver's inbox: the processed_messages table, the inbox_receive()
-- function a consumer calls before its effect, and inbox_cleanup(). It lives
-- in the consumer's own database, not in the shop's: apply it there with
--
--     psql -X -v ON_ERROR_STOP=1 -d mailer -f sql/inbox.sql \
--          -v inbox_schema=public -v dedup_horizon='7 days'
--
-- (the -v settings shown are the defaults; the schema must exist, and the
-- functions only ever look in it).
--
-- The relay delivers at least once: a record can arrive again after the relay
-- or the broker failed, after the consumer crashed before committing its
-- offset, or when someone redrives it. Every record carries its work ID (the
-- ce_id header, and the key by default). A consumer makes its effect happen
-- once per work ID by recording the work ID in the same transaction as the
-- effect, and skipping the effect when the work ID is already recorded:
--
--     BEGIN;
--     SELECT inbox_receive('order-mailer', 'order-103-ack', '{"total": "29.00", ...}');
--     -- true: do the work, e.g. INSERT INTO outgoing_mail ...;
--     -- false: a repeat of what this consumer already did: do nothing
--     COMMIT;
--     -- only now commit the Kafka offset
--
-- The inbox row commits if and only if the effect commits: a crash before
-- COMMIT leaves neither, so the redelivery is "first" again and applies the
-- effect; a crash after COMMIT leaves both, so the redelivery is a repeat.
-- Called outside a transaction (autocommit), the row would commit alone and a
-- crash before the effect would lose the effect: always call it inside the
-- transaction that makes the effect, before the effect.
--
-- What this protects is the effect in this database, for one consumer name,
-- while the work ID is remembered (the deduplication horizon, see Cleanup).
-- An effect outside this database (an email sent, an API called) is not
-- made atomic with the COMMIT and can still repeat; see README, "The
-- receiver's inbox".

\if :{?inbox_schema}
\else
\set inbox_schema public
\endif
\if :{?dedup_horizon}
\else
\set dedup_horizon '7 days'
\endif

SET search_path TO :"inbox_schema";

-- Refuse a horizon that is not a positive interval before creating anything.
SET inbox.dedup_horizon = :'dedup_horizon';
DO $$
BEGIN
    IF current_setting('inbox.dedup_horizon')::interval <= interval '0' THEN
        RAISE EXCEPTION 'dedup_horizon must be a positive interval, not "%"',
                        current_setting('inbox.dedup_horizon')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE TABLE processed_messages (
    -- Who applied the message: one name per consumer (per effect), e.g.
    -- 'order-mailer'. Two consumers of one topic keep separate entries, so
    -- each applies every work ID once. 1 to 255 bytes.
    consumer            text NOT NULL
                        CHECK (octet_length(consumer) BETWEEN 1 AND 255),

    -- The work ID of the message (the record's ce_id header). 1 to 1024
    -- bytes: the primary key's index needs a bound (a B-tree entry must fit
    -- in a third of a page), and work IDs are names, not documents.
    work_id             text NOT NULL
                        CHECK (octet_length(work_id) BETWEEN 1 AND 1024),

    -- SHA-256 of the payload as PostgreSQL prints it as jsonb (see
    -- inbox_receive()); NULL for a record with no value (a tombstone). A
    -- digest rather than the payload, so a row has a bounded size whatever
    -- the payload's: the payload itself is in Kafka and in the outbox.
    payload_sha256      bytea CHECK (octet_length(payload_sha256) = 32),

    -- When this consumer first applied it (wall clock at the insert). What
    -- inbox_cleanup() measures the deduplication horizon from.
    first_processed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),

    PRIMARY KEY (consumer, work_id)
);

-- inbox_cleanup() deletes oldest first.
CREATE INDEX processed_messages_first_processed_at ON processed_messages (first_processed_at);


-- inbox_receive() - record that a consumer is applying a message; say whether
-- it is the first delivery.
--
-- Call it inside the consumer's transaction, before the effect. Returns
--   true   the first delivery of this work ID to this consumer: apply the
--          effect in the same transaction, then COMMIT;
--   false  a repeat with the same payload: this consumer already applied it
--          (committed). Skip the effect; COMMIT (or roll back) and move on.
-- A repeat with a different payload raises SQLSTATE WK002 (class WK, "work
-- ID", as outbox_enqueue()'s WK001 "work ID reused"), which aborts the
-- transaction:
--     ERROR:  work ID "order-103-ack" was already processed by consumer "order-mailer" with a different payload
--     DETAIL:  payload SHA-256: stored 6f1e..., new 9a0c...; first processed at 2026-12-01 10:16:03.25+00
--     HINT:  A work ID names one intention and its payload must not change: ...
-- Do not apply that message: set it aside (a dead-letter topic, a log with
-- its payload) and find out where the changed payload came from; a corrected
-- intention needs a new work ID. Catch it by SQLSTATE ('WK002'), not as
-- unique_violation (23505): it is not a harmless repeat.
--
-- Payloads are compared as jsonb, by a SHA-256 of PostgreSQL's text of the
-- jsonb (the same text outbox_enqueue() compares, and the text the relay
-- publishes for the kit's jsonb payload column). So what the relay sends
-- twice digests the same, and so does the same message re-encoded by some
-- JSON library on the way (another key order, other spacing, "\u00e9" for
-- "é"), which a digest of the raw text would call a changed payload. As in
-- outbox_enqueue(), 29.00 and 29.0 differ: jsonb's = would call them equal,
-- but their text differs, and the outbox refuses that pair under one work ID.
-- Pass the record's value as text; PostgreSQL parses it as jsonb. A value
-- that is not JSON raises invalid_text_representation (22P02) and stores
-- nothing (the payload column of the kit's outbox is jsonb, so the relay
-- never publishes one); for a text payload column that is not JSON, pass
-- to_jsonb(value) to compare the text exactly. A NULL value (a tombstone)
-- matches only NULL.
--
-- Bounds: consumer names of 1 to 255 bytes and work IDs of 1 to 1024 bytes;
-- NULL or empty raises invalid_parameter_value (22023), longer raises
-- string_data_right_truncation (22001), and nothing is stored. The payload
-- can be as large as a jsonb; only its 32-byte digest is stored. The table
-- grows by one row per consumer and distinct work ID until inbox_cleanup()
-- deletes it.
--
-- Concurrency: two transactions receiving the same work ID for the same
-- consumer never both get true. INSERT ... ON CONFLICT DO NOTHING waits for
-- another transaction that inserted the same key and has not finished: if it
-- commits, this call compares with its row (false, or WK002); if it rolls
-- back (its consumer crashed before COMMIT), this call inserts and returns
-- true. So the second consumer waits until the first one's effect committed
-- or was undone. Under REPEATABLE READ or SERIALIZABLE a conflicting row that
-- committed after this transaction's snapshot raises serialization_failure
-- (40001) instead: roll back and process the message again. If inbox_cleanup()
-- deletes the row between the conflict and the comparison, the insert is
-- tried again (up to 10 times).
--
-- The caller needs INSERT and SELECT on processed_messages (and USAGE on its
-- schema), nothing more.
CREATE FUNCTION inbox_receive(p_consumer text, p_work_id text, p_payload jsonb)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    digest bytea := sha256(convert_to(p_payload::text, 'UTF8'));
    stored processed_messages%ROWTYPE;
BEGIN
    IF p_consumer IS NULL OR p_consumer = '' THEN
        RAISE EXCEPTION 'consumer name must not be empty or NULL'
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF octet_length(p_consumer) > 255 THEN
        RAISE EXCEPTION 'consumer name of % bytes is longer than the inbox keeps (255 bytes)',
                        octet_length(p_consumer)
            USING ERRCODE = 'string_data_right_truncation';
    ELSIF p_work_id IS NULL OR p_work_id = '' THEN
        RAISE EXCEPTION 'work ID must not be empty or NULL'
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF octet_length(p_work_id) > 1024 THEN
        RAISE EXCEPTION 'work ID of % bytes is longer than the inbox keeps (1024 bytes)',
                        octet_length(p_work_id)
            USING ERRCODE = 'string_data_right_truncation',
                  DETAIL = format('work ID begins %L', left(p_work_id, 64));
    END IF;

    FOR attempt IN 1..10 LOOP
        INSERT INTO processed_messages (consumer, work_id, payload_sha256)
        VALUES (p_consumer, p_work_id, digest)
        ON CONFLICT (consumer, work_id) DO NOTHING;
        IF FOUND THEN
            RETURN true;
        END IF;
        SELECT * INTO stored FROM processed_messages
        WHERE consumer = p_consumer AND work_id = p_work_id;
        EXIT WHEN FOUND;
    END LOOP;
    -- Still a conflict and nothing to read: a row-level security policy hides
    -- it. Retrying would loop forever inside the consumer's transaction.
    IF stored.work_id IS NULL THEN
        RAISE EXCEPTION 'work ID "%" of consumer "%" is in the inbox, in a row this transaction cannot read',
                        p_work_id, p_consumer
            USING ERRCODE = 'insufficient_privilege';
    END IF;

    IF stored.payload_sha256 IS NOT DISTINCT FROM digest THEN
        RETURN false;
    END IF;
    RAISE EXCEPTION 'work ID "%" was already processed by consumer "%" with a different payload',
                    p_work_id, p_consumer
        USING ERRCODE = 'WK002',
              DETAIL = format('payload SHA-256: stored %s, new %s; first processed at %s',
                              coalesce(encode(stored.payload_sha256, 'hex'), 'NULL (no value)'),
                              coalesce(encode(digest, 'hex'), 'NULL (no value)'),
                              stored.first_processed_at),
              HINT = 'A work ID names one intention and its payload must not change: do not '
                     'apply this message; set it aside and compare it with the outbox row of '
                     'this work ID. A corrected intention needs a new work ID.';
END;
$$;


-- Cleanup
--
-- inbox_cleanup([horizon [, consumer [, batch]]]) deletes at most batch
-- (default 10000) entries first processed more than horizon ago, oldest
-- first, of one consumer or (NULL, the default) of all; it returns how many
-- it deleted. Call it until it returns less than batch, e.g. from cron or
-- pg_cron:
--
--     SELECT inbox_cleanup();                       -- the default horizon, 7 days
--     SELECT inbox_cleanup('30 days', 'order-mailer');
--
-- The deduplication horizon is how long the inbox remembers a work ID. After
-- cleanup deleted it, a delivery of that work ID is "first" again and the
-- effect happens again: the protection has ended. So the horizon must exceed
-- the age at which a message can still arrive: resends after a relay or
-- broker failure (minutes to hours: the relay's lag), a consumer group reset
-- to its earliest offset (as old as the topic's retention; Kafka deletes
-- whole segments, so up to retention.ms plus segment.ms, 14 days with
-- Kafka's defaults), and a deliberate redrive (the relay's planned
-- `redrive --dedup-horizon`, default 7 days, asks for --yes past it). Choose
-- one horizon for both sides, and treat anything older as a reconciliation,
-- not a repeat.
--
-- The horizon is elapsed time: a day is 86400 seconds, also across a
-- daylight saving change in the session's time zone. It must be positive
-- (NULL or less raises invalid_parameter_value); its default is the
-- dedup_horizon psql variable at load time, '7 days' unless set. The entries
-- are measured from their first processing, which is after the outbox row's
-- created_at and its commit, so an entry is kept at least as long after the
-- commit as a redrive that respects the same horizon can come. A wall clock
-- stepped forward shortens it; run the database with a disciplined clock.
--
-- The cleanup role needs SELECT and DELETE on processed_messages; the
-- consumers need neither DELETE nor this function.
CREATE FUNCTION inbox_cleanup(p_horizon interval DEFAULT :'dedup_horizon',
                              p_consumer text DEFAULT NULL, p_batch integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    deleted bigint;
BEGIN
    IF p_horizon IS NULL OR p_horizon <= interval '0' THEN
        RAISE EXCEPTION 'deduplication horizon must be a positive interval, not %',
                        coalesce(p_horizon::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_batch IS NULL OR p_batch < 1 THEN
        RAISE EXCEPTION 'batch must be at least 1, not %', coalesce(p_batch::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM processed_messages
    WHERE (consumer, work_id) IN (
        SELECT consumer, work_id FROM processed_messages
        WHERE first_processed_at < clock_timestamp()
                                   - make_interval(secs => extract(epoch FROM p_horizon))
          AND (p_consumer IS NULL OR consumer = p_consumer)
        ORDER BY first_processed_at
        LIMIT p_batch);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END;
$$;
