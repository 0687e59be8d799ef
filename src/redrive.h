/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `outbox-relay redrive`: publish again, on purpose, records of intentions
 * that already exist, keeping their identity and payload and saying who
 * restarted them, when and why.
 *
 * From the outbox table(s): rows still present, selected by work ID and/or
 * by a window of the --time-column (and --kind), read with SQL in one
 * REPEATABLE READ snapshot through a cursor, REDRIVE_BATCH_ROWS at a time,
 * and each turned into the record the relay makes of its INSERT: a SQL row
 * is rewritten into the form wal2json gives it (w2j_value_from_text())
 * and goes through record_extract(), so key, value, topic, ce_id, ce_type,
 * ce_source (the system identifier from pg_control_system(), else
 * IDENTIFY_SYSTEM), content-type and the extra headers are the relay's. What the
 * table does not keep is left out: ce_pglsn and ce_pgxid (the WAL position
 * and top-level transaction that carried the row; the row's xmin may be a
 * subtransaction's), and ce_time unless the server tracks commit timestamps
 * (track_commit_timestamp, then pg_xact_commit_timestamp(xmin)).
 *
 * From the dead-letter topic (--from-dead-letter): dead letters selected by
 * work ID (ce_id) and/or a window of ce_time (and --kind: ce_type), read
 * with topicscan.h up to the topic's end when the command started, and
 * published to the topic of their outbox_relay_topic header with their key,
 * value and headers less the relay's outbox_relay_* ones.
 *
 * Either way the records get the headers outbox_relay_redrive_reason,
 * _by (user@host), _at (RFC 3339) and _from ("table" or "dead-letter"),
 * the produce time as record timestamp, and go out through the relay's
 * idempotent producer within its in-flight bounds. Nothing is published when
 * the selection is over --max-records or reaches past --dedup-horizon
 * without --yes. Never touches the replication slot or the checkpoint.
 * Writes one line per acknowledged record to the caller's stream and logs
 * the rest; outbox-relay(7), "Redrive", is the operator's side.
 */
#ifndef RELAY_REDRIVE_H
#define RELAY_REDRIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "producer.h"
#include "record.h"
#include "wal2json.h"

/*
 * Rows fetched from the cursor at a time: what the redrive holds of the
 * table at once besides librdkafka's copies (rows of Kafka's default 1 MB
 * limit: 100 MB at most).
 */
#define REDRIVE_BATCH_ROWS 100
/* The most --work-id options one redrive takes. */
#define REDRIVE_MAX_WORK_IDS 10000
/* Bytes of --reason, at most. */
#define REDRIVE_REASON_MAX 1024
/* statement_timeout of the redrive's SQL (a window over a large table without an index), ms. */
#define REDRIVE_STATEMENT_TIMEOUT_MS 300000
/* Each Kafka metadata, offset and fetch request, and the broker check, ms. */
#define REDRIVE_KAFKA_TIMEOUT_MS 10000
/* Headers a redriven record can carry: the relay's, a row's, the redrive's. */
#define REDRIVE_MAX_HEADERS (16 + RECORD_HEADERS_MAX + 8)

/* What one redrive did; main.c turns it into the exit status. */
struct redrive_result {
        uint64_t selected;      /* records the selection chose (rows, or dead letters) */
        uint64_t acknowledged;  /* acknowledged by Kafka */
        uint64_t refused;       /* refused by Kafka for the record's own sake, or rows that
                                 * cannot be made a record (as the relay would refuse them) */
        uint64_t failed;        /* not acknowledged for another reason: brokers, the database;
                                 * includes selected records never sent after such a failure */
        uint64_t missing;       /* requested work IDs not found; dead letters that cannot be
                                 * redriven (no intended topic, or the row itself at fault) */
};

/*
 * redrive_usage_error() - whether the redrive options of @conf go together,
 * for the command `redrive` (@redrive true) or any other (false: none of
 * --work-id, --since, --until, --kind, --reason, --from-dead-letter may be
 * given). For redrive: --reason is required (1 to REDRIVE_REASON_MAX bytes,
 * not only blanks), the selection needs --work-id or --since, at most
 * REDRIVE_MAX_WORK_IDS work IDs, --since and --until must parse
 * (redrive_parse_time()) and --until come after --since. Returns NULL, or
 * the reason as one line in @buf (@size bytes).
 */
const char *redrive_usage_error(const struct relay_config *conf, bool redrive, char *buf, size_t size);

/*
 * redrive_run() - the redrive @conf describes (redrive_usage_error() found
 * nothing). Writes "acknowledged ..." lines to @out; logs refusals, gone
 * work IDs and failures (log.h) with what to do.
 *
 * Returns 0 with @ret_res once records were selected and sending began (or
 * none were selected): the counts say how it went. Before anything is
 * published it returns, with the reason in @err (@errlen bytes):
 *   -EINVAL        a Kafka property librdkafka refuses;
 *   -E2BIG         the selection has more than --max-records records;
 *   -EPERM         records older than --dedup-horizon without --yes (@err
 *                  says how many, the oldest, and what to check first);
 *   -ENOENT        a table, one of its columns, or the dead-letter topic is
 *                  missing, or the time column is not a time;
 *   -EACCES        the system identifier (for ce_source) cannot be read:
 *                  pg_control_system() is not granted and the replication
 *                  connection is refused (no REPLICATION, pg_hba.conf);
 *   -EPROTONOSUPPORT  that replication connection does not reach
 *                  PostgreSQL: a pooler;
 *   -ECONNREFUSED  the database or every Kafka broker cannot be reached;
 *   -EIO           a query or a read of the dead-letter topic failed;
 *   -ENOMEM.
 */
int redrive_run(const struct relay_config *conf, FILE *out, struct redrive_result *ret_res, char *err,
                size_t errlen);

/*
 * redrive_parse_time() - @text as RFC 3339 with a UTC offset:
 * "YYYY-MM-DD(T| )HH:MM[:SS[.fraction]](Z|+HH[:MM]|-HH[:MM]|+HHMM|-HHMM)",
 * 't' and 'z' also in lower case, up to 6 fraction digits kept (more are
 * cut). This is ce_time's form, "2026-11-30T04:07:34.336545Z", and
 * PostgreSQL's ISO output, "2026-11-30 04:07:34.336545+00". Returns 0 and
 * *ret_us (µs since the Unix epoch), or -EINVAL (*ret_us untouched).
 */
int redrive_parse_time(const char *text, int64_t *ret_us);


/*
 * redrive_row_headers() - the headers of a redriven row's record into @h
 * (@cap entries): the relay's CloudEvents headers in the relay's order
 * (relay_headers() in relay_row.c: ce_specversion, ce_id, ce_type unless
 * the row has none, ce_source @source, ce_time @time_text unless NULL,
 * content-type), then @row's own headers, then the @nextra @extra headers.
 * No ce_pglsn or ce_pgxid. Pointers are borrowed from the arguments.
 * Returns the number written, or 0 if @cap is too small.
 */
size_t redrive_row_headers(const struct outbox_row *row, const char *source, const char *time_text,
                           const struct producer_header *extra, size_t nextra,
                           struct producer_header *h, size_t cap);

/*
 * redrive_dead_letter_headers() - what a dead letter with headers @in (@nin,
 * as the relay wrote them: the record's own headers, then
 * outbox_relay_error, outbox_relay_error_code and outbox_relay_topic)
 * becomes: every header but those named outbox_relay_* (any case), in
 * order, then the @nextra @extra headers, into @h (@cap entries); its topic
 * (the last outbox_relay_topic's value, borrowed from @in) into *ret_topic
 * and *ret_topic_len. Returns the number of headers; -ENOENT when there is
 * no intended topic (header missing or empty) and -EPERM when
 * outbox_relay_error_code names a fault of the row itself, which the same
 * record would meet again (record_error_code_is_row_fault(): NULL_VALUE, INVALID_JSON,
 * INVALID_HEADERS, MISSING_COLUMN, INVALID_TOPIC), both with the reason in
 * @err; -E2BIG when @cap is too small.
 */
int redrive_dead_letter_headers(const struct producer_header *in, size_t nin,
                                const struct producer_header *extra, size_t nextra,
                                struct producer_header *h, size_t cap, const char **ret_topic,
                                size_t *ret_topic_len, char *err, size_t errlen);

#endif
