/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The envelope of an outbox message written without a table: the content of
 * a transactional logical message (pg_logical_emit_message(true, PREFIX,
 * CONTENT), as sql/outbox.sql's outbox_emit() writes it; wal2json.h has the
 * "M" line that carries it) read as the outbox row it stands for, so that
 * record_extract() maps it to the same key, value, topic and headers as a
 * table row with the same values. The envelope, version 1 (outbox-relay(7), "An
 * outbox with no table"):
 *
 *   {"version": 1, "columns": {"work_id": "order-103-ack", "kind": "order_received",
 *    "payload": "{\"total\": \"29.00\", \"order_id\": 103}", "entity_id": null,
 *    "headers": "{\"traceparent\": \"00-...-01\"}"}}
 *
 * One JSON object (UTF-8, PostgreSQL's json grammar) of exactly two members:
 * "version", the number 1, and "columns", an object of 1 to
 * ENVELOPE_COLUMNS_MAX members named like columns (1 to ENVELOPE_NAME_MAX
 * bytes, each once) whose values are the column's text as a JSON string
 * (what PostgreSQL prints for it: "103", not 103, so that no number passes
 * through a double) or null for SQL NULL. The payload column's text must be
 * JSON, as the json type accepts it (pgjson.h). At most ENVELOPE_MAX_BYTES.
 * Which columns must be there, and what their values may hold, is
 * record_extract()'s business, as for a table's row.
 *
 * Knows the wal2json record form and the envelope, nothing of Kafka, of the
 * relay's options or of the replication protocol. Pure: no I/O.
 */
#ifndef RELAY_ENVELOPE_H
#define RELAY_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>

#include "wal2json.h"

#define ENVELOPE_VERSION 1
/*
 * Bytes of an envelope, at most: the default --max-inflight-bytes, which a
 * record must fit anyway, and far above Kafka's default message.max.bytes
 * (1 MB). outbox_emit() refuses a larger one before it reaches the WAL.
 */
#define ENVELOPE_MAX_BYTES ((size_t)16 * 1024 * 1024)
/* Members of "columns", at most: a table with more has nothing more to publish. */
#define ENVELOPE_COLUMNS_MAX 64
/* Bytes of a column name, at most: PostgreSQL's identifiers (NAMEDATALEN - 1). */
#define ENVELOPE_NAME_MAX 63

/* A parsed envelope; zero it before the first envelope_parse(). */
struct envelope {
        void *tree;                                      /* the parsed JSON (cJSON), owned */
        struct w2j_column columns[ENVELOPE_COLUMNS_MAX]; /* point into @tree */
};

/*
 * envelope_parse() - read the content of the logical message @msg (an M
 * record, wal2json.h) as an envelope and fill @ret_row as the decoder fills
 * an insert: every field of @msg, with the envelope's columns as the row's
 * columns, in the envelope's order. A column's type is "text" (OID 25),
 * except @payload_column's, which is checked here against PostgreSQL's json
 * grammar and then typed "json" (OID 114) so that record_extract() trusts
 * it. @ret_row and what it points to are borrowed from @env and @msg, valid
 * until envelope_clear() or the next envelope_parse() on @env, and the next
 * w2j_decode() (@msg's prefix).
 *
 * Returns 0, or with a one-line reason in @err (@errlen bytes):
 *   -E2BIG    the content is longer than ENVELOPE_MAX_BYTES;
 *   -EBADMSG  @msg has no content, or its line was suspect (wal2json.h) so
 *             its content may be cut short; the content is not UTF-8 (a
 *             bytea message), not JSON as PostgreSQL's json type accepts it,
 *             holds a \u0000 escape (PostgreSQL text cannot hold NUL) or a
 *             lone surrogate escape, or is not an envelope of version
 *             ENVELOPE_VERSION as above (also when cJSON runs out of memory
 *             reading it: it does not tell the two apart);
 *   -EILSEQ   the payload column's text is not JSON (json's grammar);
 *             @ret_row is filled all the same, that column typed "text", so
 *             that the message can be named and dead-lettered like a row.
 */
int envelope_parse(struct envelope *env, const struct w2j_record *msg, const char *payload_column,
                   struct w2j_record *ret_row, char *err, size_t errlen);

/* envelope_clear() - free what the last envelope_parse() kept; the envelope can be parsed into again. */
void envelope_clear(struct envelope *env);

/*
 * envelope_valid_utf8() - whether the @len bytes at @s are UTF-8 (RFC 3629:
 * no overlong forms, no surrogates, nothing above U+10FFFF). When not, the
 * offset of the first byte of the first bad sequence goes to *@ret_offset
 * (when not NULL).
 */
bool envelope_valid_utf8(const char *s, size_t len, size_t *ret_offset);

#endif
