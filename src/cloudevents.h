/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The text of the CloudEvents attributes the relay writes as Kafka headers
 * (CloudEvents 1.0, Kafka protocol binding, binary content mode): ce_time in
 * RFC 3339, ce_source as a URI naming the cluster, database and table (or
 * logical message prefix), and the way back from a ce_source to the table's
 * name for messages about a record. Pure formatting: no I/O, no state.
 */
#ifndef RELAY_CLOUDEVENTS_H
#define RELAY_CLOUDEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "producer.h"
#include "record.h"

/* Headers ce_record_headers() writes besides the row's own, at most. */
#define CE_HEADERS_MAX 8

/*
 * ce_format_time() - @us (µs since the Unix epoch, UTC) as RFC 3339 with
 * microseconds, e.g. "2026-11-30T04:07:34.336545Z", into @buf (@size bytes,
 * 28 suffice; truncated). Returns @buf.
 */
char *ce_format_time(int64_t us, char *buf, size_t size);

/*
 * ce_format_source() - "postgresql://<system identifier>/<database>/<schema>.<table>"
 * into @buf (@size bytes, truncated): the database, schema and table names
 * percent-encoded (RFC 3986: unreserved characters kept, '.' encoded in the
 * schema and table names so that it separates them). Returns the length
 * written.
 */
size_t ce_format_source(const char *system_id, const char *dbname, const char *schema,
                        const char *table, char *buf, size_t size);

/*
 * ce_format_message_source() - the ce_source of an outbox message written as
 * a logical message: "postgresql://<system identifier>/<database>/message/<prefix>"
 * into @buf (@size bytes, truncated), the database name and the prefix
 * percent-encoded as in ce_format_source() ('/' too, so the prefix stays one
 * segment). A table's source never has a third '/' after the authority, so
 * the two forms cannot be mistaken for each other. Returns the length
 * written.
 */
size_t ce_format_message_source(const char *system_id, const char *dbname, const char *prefix,
                                char *buf, size_t size);

/*
 * ce_table_of_source() - 'table "schema"."name"' from a ce_source written by
 * ce_format_source(), or 'logical message prefix "prefix"' from one written
 * by ce_format_message_source(), decoded, into @buf (@size bytes,
 * truncated); "an unknown table" if @source has neither form. Returns @buf.
 */
const char *ce_table_of_source(const char *source, char *buf, size_t size);

/*
 * ce_record_headers() - the Kafka headers of @row's record, in the order every
 * record of the relay carries them (outbox-relay(7), "The Kafka record"): ce_specversion,
 * ce_id, ce_type (when the row has one), ce_source (@source, from
 * ce_format_source()), ce_time (@time_text, RFC 3339), content-type (not for a
 * NULL payload, a tombstone: CloudEvents' datacontenttype describes data), ce_pglsn
 * (@lsn_text, the commit's LSN) and ce_pgxid (@xid_text), then the row's
 * extra headers (@row->headers). @time_text, @lsn_text and @xid_text may be
 * NULL: the header is left out (a redrive knows no LSN). Everything written
 * to @h borrows from the arguments. Returns the count written, or 0 when @cap
 * headers (CE_HEADERS_MAX + @row->nheaders suffice) are too few.
 */
size_t ce_record_headers(const struct outbox_row *row, const char *source, const char *time_text,
                         const char *lsn_text, const char *xid_text, struct producer_header *h,
                         size_t cap);

#endif
