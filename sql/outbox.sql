-- SPDX-License-Identifier: Apache-2.0
--
-- The outbox table outbox-relay publishes from.
--
-- Write one row per message in the same transaction as the business change
-- that calls for it: the row commits if and only if the change commits.
--
--     BEGIN;
--     INSERT INTO orders ...;
--     INSERT INTO outbox (work_id, kind, payload)
--     VALUES ('order-103-ack', 'order_received',
--             '{"order_id":103,"customer_id":1,"total":"29.00",
--               "message":"Order received; payment still pending"}');
--     COMMIT;
--
-- The relay does not poll this table. It reads committed INSERTs from the
-- write-ahead log through a logical replication slot (plugin wal2json), in
-- commit order, so the table needs no "unsent" flag and no polling index.
-- Updates and deletes of outbox rows are not published.
--
-- The relay confirms a commit to the slot only after Kafka acknowledged every
-- message up to that commit; the slot, not this table, remembers progress.
-- Deleting published rows (DELETE FROM outbox WHERE created_at < now() -
-- interval '7 days', or a partition drop) is therefore safe at any time and
-- never re-publishes or loses anything. Delivery is at-least-once: consumers
-- deduplicate by work ID (the record key by default, and the ce_id header).
--
-- Requires wal_level = logical. Column names other than these can be used
-- with the relay's --id-column, --key-column and --payload-column options.

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
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
