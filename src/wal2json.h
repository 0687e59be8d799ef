/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decoder for the lines of wal2json's format-version 2 (wal2json README,
 * "format-version 2"; wal2json.c pg_decode_*_v2), one JSON object per
 * XLogData, as requested with include-transaction, include-lsn, include-xids
 * and include-timestamp:
 *
 *   {"action":"B","xid":729,"timestamp":"2026-11-30 04:07:34.336545+00",
 *    "lsn":"0/1551438","nextlsn":"0/1551468"}
 *   {"action":"I","xid":729,"timestamp":"...","lsn":"0/1551298","schema":"public",
 *    "table":"outbox","columns":[{"name":"work_id","typeoid":25,"value":"order-103-ack"},
 *    {"name":"order_id","typeoid":20,"value":103}, ...]}
 *
 * A column carries "type" (the type's name, include-types, wal2json's default)
 * and/or "typeoid" (include-type-oids). The relay asks for OIDs only: names
 * cost the walsender a catalog lookup per column, and wal2json prints some
 * of them unescaped (an enum in a schema whose name needs quotes, e.g.
 * "int".doc_type, makes a line that is not JSON).
 *   {"action":"C","xid":729,"timestamp":"...","lsn":"0/1551438","nextlsn":"0/1551468"}
 *
 * Actions: B begin, C commit, I insert, U update, D delete, T truncate,
 * M logical message. In B and C, "lsn" is the commit record's LSN and
 * "nextlsn" the LSN just past it (the transaction's end LSN).
 *
 * Column values are kept byte-exact as the server wrote them: wal2json writes
 * numeric types as bare JSON numbers, and cJSON would keep only a double, so
 * the decoder first rewrites every bare number N of the line as ["N"], an
 * array holding its text, then parses the result with cJSON.
 *
 * A logical message (pg_logical_emit_message(); wal2json.c
 * pg_decode_message_v2) as wal2json 2.5 writes it, captured from a real
 * server (tests/data/wal2json-v2-messages.jsonl):
 *
 *   {"action":"M","xid":725,"timestamp":"2026-12-01 06:35:34.559182+00",
 *    "lsn":"0/191FE10","transactional":true,"prefix":"outbox","content":"..."}
 *   {"action":"M","xid":null,"timestamp":null,"lsn":"0/191FE88",
 *    "transactional":false,"prefix":"outbox","content":"..."}
 *
 * Its "lsn" is the end of the message's WAL record (PostgreSQL's decode.c
 * queues it at the record's end), which is what pg_logical_emit_message()
 * returned to its caller. A transactional one comes between its
 * transaction's B and C lines, at the commit (it commits or rolls back with
 * the transaction); a non-transactional
 * one comes alone, when it was written, whatever became of its transaction.
 * "content" is the message's bytes as a JSON string: wal2json copies them as
 * a C string, so content with a NUL byte arrives cut at it, and escapes only
 * '"', '\' and bytes below 0x20, so content that is not UTF-8 (a bytea
 * message) arrives as raw bytes. It knows nothing of Kafka, of the
 * replication protocol, of which tables are outboxes or of what a message
 * means.
 */
#ifndef RELAY_WAL2JSON_H
#define RELAY_WAL2JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Longest line accepted, in bytes: the number rewrite may grow a line
 * fivefold and its length must fit an int. Far above any record Kafka takes
 * (message.max.bytes is at most 1,000,000,000).
 */
#define W2J_MAX_LINE ((size_t)(2147483647 - 16) / 5)

enum w2j_action {
        W2J_BEGIN,
        W2J_COMMIT,
        W2J_INSERT,
        W2J_UPDATE,
        W2J_DELETE,
        W2J_TRUNCATE,
        W2J_MESSAGE,
        W2J_UNKNOWN,
};

struct w2j_value {
        const char *ptr;  /* text as the server output it; NUL-terminated; NULL if SQL NULL */
        size_t len;       /* bytes, without the terminator */
        bool is_null;     /* the value was JSON null (SQL NULL) */
        bool was_number;  /* wal2json wrote it as a bare JSON number */
};

struct w2j_column {
        const char *name;   /* column name, unquoted */
        const char *type;   /* type name as wal2json wrote it ("text", "jsonb", ...), or NULL
                             * when the line has none (include-types=false) */
        struct w2j_value value;
        uint32_t typeoid;   /* the type's OID (include-type-oids: "typeoid"), or 0 when absent */
};

struct w2j_record {
        enum w2j_action action;
        char action_code;        /* the raw action letter */
        uint32_t xid;            /* 0 if the line has none */
        uint64_t lsn;            /* "lsn": LSN of the change, or of the commit record in B/C */
        uint64_t next_lsn;       /* "nextlsn" (B and C only): the transaction's end LSN */
        const char *timestamp;   /* commit time as wal2json wrote it, or NULL */
        int64_t commit_time_us;  /* @timestamp as microseconds since the Unix epoch, or 0 */
        const char *schema;      /* I/U/D/T: schema of the table, unescaped; else NULL */
        const char *table;       /* I/U/D/T: table name, unescaped; else NULL */
        size_t ncolumns;
        const struct w2j_column *columns;  /* I/U: the new row's columns */
        /* M only: */
        bool transactional;      /* "transactional":true (false when absent) */
        const char *prefix;      /* the message's prefix, unescaped, or NULL when absent */
        const char *content;     /* its content, unescaped, NUL-terminated, or NULL when absent */
        size_t content_len;      /* bytes of @content, without the terminator */
        bool suspect;            /* the line held a NUL byte, a \u0000 escape or a raw control
                                  * character, which wal2json never writes (it cuts content at a
                                  * NUL and escapes the rest): @prefix or @content may be cut short */
};

struct w2j_decoder;

/*
 * w2j_decoder_new() - allocate a decoder. Returns NULL when out of memory.
 * The caller owns it and frees it with w2j_decoder_free().
 */
struct w2j_decoder *w2j_decoder_new(void);

/* w2j_decoder_free() - free @d and everything it decoded; NULL-safe; returns NULL. */
struct w2j_decoder *w2j_decoder_free(struct w2j_decoder *d);

/*
 * w2j_decode() - decode one wal2json format-version 2 line of @len bytes
 * (not necessarily NUL-terminated) into @ret_rec.
 *
 * Everything @ret_rec points to is owned by @d and borrowed by the caller
 * until the next call of w2j_decode() or w2j_decoder_free().
 *
 * Returns 0 on success, or
 *   -EBADMSG  the line is not valid JSON, not an object, lacks "action", has
 *             a field of the wrong type (also an M line's "prefix" or "content"
 *             that is not a string, or "transactional" that is not a boolean),
 *             a malformed LSN or timestamp, or is
 *             a table's record (I, U, D, T) with a string holding a NUL
 *             (raw or \u0000) or a raw control character, which no
 *             PostgreSQL value contains and at which cJSON would cut it;
 *   -E2BIG    the line is longer than W2J_MAX_LINE;
 *   -ENOMEM   out of memory.
 * An unknown action letter is not an error: it decodes as W2J_UNKNOWN.
 */
int w2j_decode(struct w2j_decoder *d, const char *line, size_t len, struct w2j_record *ret_rec);

/*
 * w2j_parse_timestamp() - parse a timestamptz in PostgreSQL's ISO output
 * ("2026-11-30 04:07:34.336545+00", offsets "+05:30" or "-03:00:00" too) of
 * @len bytes into microseconds since the Unix epoch. Returns 0, or -EINVAL
 * if the text is not of that form; *ret_us is untouched on failure.
 */
int w2j_parse_timestamp(const char *text, size_t len, int64_t *ret_us);

/*
 * w2j_escape_table_name() - write @ident in wal2json's "add-tables" escaping
 * (wal2json README: "special characters (space, single quote, comma, period,
 * asterisk) must be escaped with backslash"; we escape every ASCII byte that
 * is not a letter, digit or underscore, which its parser also accepts) into
 * @buf of @size bytes, NUL-terminated. Returns the length written, or -ENOSPC
 * if @buf is too small.
 */
int w2j_escape_table_name(const char *ident, char *buf, size_t size);

/*
 * w2j_value_from_text() - the value wal2json (format-version 2, its
 * pg_decode_write_value()) writes for a column of type @typeoid (the
 * attribute's own type, pg_attribute.atttypid: a domain is not its base
 * type) whose text output is @text (@len bytes, NUL-terminated, printed with
 * bytea_output=hex, as the relay's connections pin it) or SQL NULL
 * (@is_null): booleans "t"/"f" become true/false, bytea loses its "\x", NaN
 * and infinities of the numeric types become null, numbers are marked
 * was_number; everything else is the text itself. So a row read as text
 * (redrive's SELECT, pgoutput's text values) becomes what the relay gets
 * from wal2json, and its Kafka record is the same byte for byte.
 * @ret_val borrows @text or static strings. Pure; no errors.
 */
void w2j_value_from_text(uint32_t typeoid, const char *text, size_t len, bool is_null,
                         struct w2j_value *ret_val);

#endif
