/* SPDX-License-Identifier: Apache-2.0 */
/*
 * From a decoded outbox INSERT to the parts of its Kafka record: the work ID,
 * key, payload and type columns, and the topic rendered from the --topic
 * template ("outbox.${kind}": each ${column} replaced by that column's text),
 * and the extra Kafka headers: columns published as headers
 * (--column-header) and the pairs of the headers column (a JSON object of
 * strings). Checks what would make the row unpublishable and says which column and
 * why. Knows wal2json's decoded form, nothing of librdkafka or libpq.
 */
#ifndef RELAY_RECORD_H
#define RELAY_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wal2json.h"

/* Kafka's limit on topic name length (Topic.MAX_NAME_LENGTH). */
#define RECORD_TOPIC_MAX 249

/*
 * Bounds on a row's extra headers: column headers and headers column pairs
 * together per row, and bytes per name; at most RECORD_COLUMN_HEADERS_MAX of
 * them are column headers (record_spec_add_column_header()).
 */
#define RECORD_HEADERS_MAX 64
#define RECORD_HEADER_NAME_MAX 255
#define RECORD_COLUMN_HEADERS_MAX 16

struct record_spec;

/* One extra Kafka header of a row: a column header, or a pair of the headers column. */
struct record_header {
        const char *name;   /* NUL-terminated, 1 to RECORD_HEADER_NAME_MAX bytes */
        const char *value;  /* UTF-8 bytes, NUL-terminated (never inside): the column's text,
                             * or the JSON string's */
        size_t len;         /* bytes of value, without the terminator */
};

struct outbox_row {
        const struct w2j_value *id;       /* work ID; never NULL or empty */
        const struct w2j_value *key;      /* Kafka key; never NULL or empty */
        const struct w2j_value *payload;  /* Kafka value; SQL NULL only if allowed (tombstone) */
        const struct w2j_value *type;     /* ce_type, or NULL if the row lacks the column */
        const char *topic;                /* rendered topic, NUL-terminated, owned by the spec */
        size_t topic_len;
        const struct record_header *headers; /* the column headers, then the headers column's
                                              * pairs; owned by the spec */
        size_t nheaders;                  /* at most RECORD_HEADERS_MAX; 0 on error */
};

/*
 * record_spec_new() - compile the column names and topic @template. The
 * strings are copied. Returns 0 and *ret_spec (owned by the caller, freed
 * with record_spec_free()), -EINVAL with the reason in @err for a template
 * with an unterminated or empty "${", or -ENOMEM.
 */
int record_spec_new(const char *id_column, const char *key_column, const char *payload_column,
                    const char *type_column, const char *template, struct record_spec **ret_spec,
                    char *err, size_t errlen);

/* record_spec_allow_null_payload() - a NULL payload is a tombstone, not an error. */
void record_spec_allow_null_payload(struct record_spec *spec, bool allow);

/*
 * record_spec_set_headers_column() - read extra Kafka headers from column
 * @name (copied) of the rows that have it; rows without it, or with SQL NULL
 * in it, get none. Returns 0 or -ENOMEM.
 */
int record_spec_set_headers_column(struct record_spec *spec, const char *name);

/*
 * record_header_reserved() - true for a header name the relay keeps for its
 * own headers: the "ce_" and "outbox_relay_" prefixes and "content-type", in
 * any case (CloudEvents Kafka protocol binding, binary mode; outbox-relay(7), "The
 * Kafka record"). Neither the headers column nor --column-header may use them.
 */
bool record_header_reserved(const char *name);

/*
 * record_spec_add_column_header() - publish the text of column @column as
 * Kafka header @header (both copied) on every row: the value as wal2json
 * wrote it (text as stored, numbers as written, booleans as true/false),
 * no header for SQL NULL. Column headers come before the headers column's
 * pairs, in the order they were added. A row without the column is an error
 * (record_extract(), -ENOENT). Returns 0; -ENOMEM; or -EINVAL with the reason
 * in @err (@errlen bytes) for an empty column name, a header name that is
 * empty, longer than RECORD_HEADER_NAME_MAX bytes, reserved
 * (record_header_reserved()) or already added, or a spec that already has
 * RECORD_COLUMN_HEADERS_MAX column headers.
 */
int record_spec_add_column_header(struct record_spec *spec, const char *column, const char *header,
                                  char *err, size_t errlen);

/*
 * record_spec_set_json_types() - the type OIDs, besides json (114) and jsonb
 * (3802), whose text PostgreSQL checked as JSON on input: domains over json
 * or jsonb (@n OIDs, copied). A payload column of another type is checked
 * against PostgreSQL's json grammar (pgjson.h). Returns 0 or -ENOMEM.
 */
int record_spec_set_json_types(struct record_spec *spec, const uint32_t *oids, size_t n);

/* record_spec_free() - NULL-safe; returns NULL. */
struct record_spec *record_spec_free(struct record_spec *spec);

/*
 * record_spec_template_columns() - the columns the topic template refers to:
 * sets *ret_names to an array of @*ret_n names, borrowed from @spec.
 */
void record_spec_template_columns(const struct record_spec *spec, const char *const **ret_names,
                                  size_t *ret_n);

/*
 * record_render_topic() - the topic the template gives for @values, one
 * text per template column in record_spec_template_columns() order (NULL for
 * SQL NULL). *ret_topic is borrowed from @spec until its next use. Returns
 * 0, -EINVAL for a NULL column, -EDOM for a name Kafka refuses (reason in
 * @err; *ret_topic is still set when it could be rendered), -ENOMEM.
 */
int record_render_topic(struct record_spec *spec, const char *const *values, const char **ret_topic,
                        char *err, size_t errlen);

/*
 * record_extract() - find the parts of @rec's Kafka record. Pointers in
 * @ret_row borrow from @rec and @spec (the topic), valid until the next call
 * or the next w2j_decode(). On failure @ret_row still holds the columns found
 * (NULL where missing), and the topic whenever it could be rendered (also
 * a name Kafka refuses, unless too long), so the row can be dead-lettered
 * with its intended topic. The row's own problems (ID, key, payload) are
 * reported before the topic's. The type column may be missing (ce_type is then
 * left out), and so may the headers column; the others, column headers'
 * columns included, may not.
 *
 * @ret_row->headers holds the column headers first (those not SQL NULL, in
 * the order added), then the pairs of the headers column in the order of its
 * text. The headers column, when set and present and not SQL NULL, must hold
 * a JSON object (the text PostgreSQL prints for json, jsonb or text; wal2json
 * README, format-version 2) of string values, names of 1 to
 * RECORD_HEADER_NAME_MAX bytes, not reserved (record_header_reserved()), no
 * "\u0000" escape, and at most RECORD_HEADERS_MAX pairs less the row's
 * column headers.
 *
 * Returns 0, or with a reason naming the column in @err:
 *   -ENOENT  the row lacks the ID, key, payload, a template column or a
 *            column header's column;
 *   -EINVAL  the ID or key is NULL or empty, the payload (unless allowed)
 *            or a template column is NULL;
 *   -EILSEQ  the payload column is not of type json or jsonb (or a domain of
 *            record_spec_set_json_types()) and its text is not what
 *            PostgreSQL's json type accepts (pgjson.h; the records say
 *            content-type application/json);
 *   -EBADMSG the headers column breaks the rules above (also when cJSON runs
 *            out of memory parsing it: it does not tell the two apart);
 *   -EDOM    the rendered topic is not a valid Kafka topic name (1 to 249 of
 *            [a-zA-Z0-9._-], not "." or "..").
 */
int record_extract(struct record_spec *spec, const struct w2j_record *rec, struct outbox_row *ret_row,
                   char *err, size_t errlen);

/*
 * record_error_code() - the dead-letter error code (the outbox_relay_error_code
 * header; outbox-relay(7), "Rows that cannot be published") of an error record_extract()
 * returned: INVALID_TOPIC (-EDOM), INVALID_JSON (-EILSEQ), INVALID_HEADERS
 * (-EBADMSG), MISSING_COLUMN (-ENOENT), NULL_VALUE (any other). Static string.
 */
const char *record_error_code(int err);

/*
 * record_error_code_is_row_fault() - whether @code (@len bytes, not
 * NUL-terminated) is one of record_error_code()'s: a fault of the row itself,
 * so that the same record fails again until the row is fixed (unlike a
 * record Kafka refused, which may pass once the topic or limit is changed).
 */
bool record_error_code_is_row_fault(const char *code, size_t len);

#endif
