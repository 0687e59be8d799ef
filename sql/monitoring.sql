-- SPDX-License-Identifier: Apache-2.0
--
-- Queries to alert on, run on the primary in the outbox's database as a
-- role with pg_monitor (GRANT pg_monitor TO monitoring_role): any role can
-- read pg_replication_slots, but pg_stat_replication shows the walsender's
-- state and reply times only to pg_read_all_stats (part of pg_monitor) or a
-- superuser, so without it the relay_connection alerts can never fire. The
-- last query also needs SELECT on the outbox. Each query is one statement after a "-- query: NAME" line, so a
-- monitoring agent can take them one by one; psql -f runs them all. They
-- cover every logical slot whose plugin is wal2json; add
-- "AND slot_name = 'outbox_relay'" to watch one. The relay's own view of the
-- same figures is its /metrics endpoint (outbox_relay_slot_lag_bytes,
-- outbox_relay_confirmed_flush_lsn, outbox_relay_oldest_unpublished_seconds).
--
-- Two distances matter, both in bytes of WAL from the server's current
-- write position (pg_current_wal_lsn()):
--   retained_bytes = current - restart_lsn: what the slot makes the server
--       keep in pg_wal. This is the disk risk.
--   lag_bytes = current - confirmed_flush_lsn: what the relay has not yet
--       confirmed (published and acknowledged by Kafka, or known to hold no
--       outbox rows). This is the delivery delay. restart_lsn trails
--       confirmed_flush_lsn (decoding must restart at the oldest transaction
--       still open there), so retained_bytes >= lag_bytes.
-- An idle server writes a little WAL now and then (checkpoints, running
-- transaction records), and the relay confirms it within its status interval
-- (10 s by default), so a healthy slot shows a small, non-zero lag.


-- query: slot
-- One row per outbox slot. Suggested alerts:
--   * active = false for more than 5 minutes: no relay holds the slot, nothing
--     is published and WAL piles up. (PostgreSQL 15 does not record since when
--     a slot is inactive, pg_replication_slots.inactive_since arrived in 17:
--     let the monitoring system count consecutive samples.)
--   * wal_status = 'extended' (the slot holds more than max_wal_size):
--     warning; 'unreserved' (past max_slot_wal_keep_size, the WAL may be
--     removed at the next checkpoint): page someone now; 'lost': the slot is
--     invalidated, the relay stops with exit status 3 and rows committed
--     since its confirmed_flush_lsn must be recovered from the outbox table.
--   * retained_pct_of_keep_size > 50 (warning) or > 80 (critical) when
--     max_slot_wal_keep_size is set; safe_wal_size is the same headroom in
--     bytes (NULL while max_slot_wal_keep_size is -1, unlimited).
--     Without max_slot_wal_keep_size, alert on retained_bytes against the free
--     space of the pg_wal file system instead (e.g. > 25 % of it).
--   * lag_bytes growing for more than a few status intervals, or larger than
--     what your outbox writes in a minute: the relay is stuck or Kafka is
--     slow (compare the relay's outbox_relay_outstanding_messages).
SELECT s.slot_name,
       s.active,
       s.active_pid,
       s.wal_status,
       s.restart_lsn,
       s.confirmed_flush_lsn,
       pg_current_wal_lsn() AS current_lsn,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn) AS retained_bytes,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn) AS lag_bytes,
       s.safe_wal_size,
       nullif(pg_size_bytes(current_setting('max_slot_wal_keep_size')), -1)
           AS max_slot_wal_keep_bytes,
       round(100 * pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)
             / nullif(greatest(pg_size_bytes(current_setting('max_slot_wal_keep_size')), 0), 0), 1)
           AS retained_pct_of_keep_size
FROM pg_replication_slots s
WHERE s.slot_type = 'logical' AND s.plugin = 'wal2json'
ORDER BY s.slot_name;


-- query: relay_connection
-- The walsender serving each active slot and the relay's last standby status
-- update. Suggested alerts:
--   * seconds_since_reply > 3 x the relay's --status-interval (default 10 s,
--     so 30): the relay stopped answering although its connection is open
--     (wal_sender_timeout, 60 s by default, will end it soon).
--   * state other than 'streaming' for more than a minute ('startup' and
--     'catchup' are normal right after a start).
-- flush_lsn here is what the relay reported; the slot's confirmed_flush_lsn
-- follows it.
SELECT s.slot_name,
       r.pid,
       r.application_name,
       r.client_addr,
       r.state,
       r.backend_start,
       r.sent_lsn,
       r.flush_lsn,
       r.reply_time,
       extract(epoch FROM clock_timestamp() - r.reply_time) AS seconds_since_reply,
       pg_wal_lsn_diff(r.sent_lsn, r.flush_lsn) AS sent_not_confirmed_bytes
FROM pg_replication_slots s
JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_type = 'logical' AND s.plugin = 'wal2json'
ORDER BY s.slot_name;


-- query: oldest_unconfirmed_row
-- The age of the oldest outbox row that the slot may not have confirmed yet,
-- per slot of this database. Suggested alert: oldest_unconfirmed_seconds
-- above a few minutes (what your consumers can tolerate).
--
-- SQL cannot map a row to the LSN of its commit (pg_xact_commit_timestamp()
-- gives a time, not an LSN, and needs track_commit_timestamp), so this uses
-- transaction IDs instead: a row whose inserting transaction (xmin) is older
-- than the slot's catalog_xmin ended before a WAL position the slot has
-- confirmed. The rest are counted as possibly unconfirmed. The figure is
-- therefore an upper bound: catalog_xmin advances only at running-transaction
-- records, which PostgreSQL writes about every 15 s on a busy server and at
-- checkpoints, so a healthy relay shows up to about 15 s plus its own lag;
-- it never shows 0 for a row the relay has not confirmed. Rows already
-- deleted are not seen (cleanup with the catalog_xmin condition of
-- sql/outbox.sql keeps unconfirmed rows). Rows committed before the slot was
-- created count as confirmed.
--
-- This reads the whole outbox table (xmin has no index): with a large
-- retention run it rarely, or restrict it with a created_at condition and an
-- index on created_at. Replace "outbox" for another table.
SELECT s.slot_name,
       count(o.work_id) AS unconfirmed_rows,
       min(o.created_at) AS oldest_unconfirmed_created_at,
       coalesce(extract(epoch FROM clock_timestamp() - min(o.created_at)), 0)
           AS oldest_unconfirmed_seconds
FROM pg_replication_slots s
LEFT JOIN outbox o ON age(o.xmin) <= age(s.catalog_xmin)
WHERE s.slot_type = 'logical' AND s.plugin = 'wal2json' AND s.database = current_database()
GROUP BY s.slot_name
ORDER BY s.slot_name;
