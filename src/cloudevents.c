// SPDX-License-Identifier: Apache-2.0
/*
 * CloudEvents attribute text: RFC 3339 time, the ce_source URI and its
 * reverse. See cloudevents.h. Pure.
 */
#include "cloudevents.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

char *ce_format_time(int64_t us, char *buf, size_t size)
{
        time_t secs = (time_t)(us >= 0 ? us / 1000000 : (us - 999999) / 1000000);
        int frac = (int)(us - (int64_t)secs * 1000000);
        struct tm tm;

        gmtime_r(&secs, &tm);
        snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
        return buf;
}

/*
 * Append @s percent-encoded (RFC 3986 unreserved characters kept, but '.'
 * encoded when @dot is false, so that it can separate schema and table).
 */
static size_t append_pct(char *buf, size_t o, size_t size, const char *s, bool dot)
{
        static const char hex[] = "0123456789ABCDEF";

        for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < size; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    *p == '-' || *p == '_' || *p == '~' || (*p == '.' && dot)) {
                        buf[o++] = (char)*p;
                } else {
                        buf[o++] = '%';
                        buf[o++] = hex[*p >> 4];
                        buf[o++] = hex[*p & 15];
                }
        }
        if (o < size)
                buf[o] = '\0';
        return o;
}

size_t ce_format_source(const char *system_id, const char *dbname, const char *schema,
                        const char *table, char *buf, size_t size)
{
        int n = snprintf(buf, size, "postgresql://%s/", system_id);
        size_t o = n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;

        o = append_pct(buf, o, size, dbname, true);
        if (o + 1 < size)
                buf[o++] = '/';
        o = append_pct(buf, o, size, schema, false);
        if (o + 1 < size)
                buf[o++] = '.';
        o = append_pct(buf, o, size, table, false);
        buf[o < size ? o : size - 1] = '\0';
        return o;
}

size_t ce_format_message_source(const char *system_id, const char *dbname, const char *prefix,
                                char *buf, size_t size)
{
        int n = snprintf(buf, size, "postgresql://%s/", system_id);
        size_t o = n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;

        o = append_pct(buf, o, size, dbname, true);
        n = snprintf(buf + o, size - o, "/message/");
        o = n < 0 ? o : o + (size_t)n >= size ? size - 1 : o + (size_t)n;
        o = append_pct(buf, o, size, prefix, true);
        buf[o < size ? o : size - 1] = '\0';
        return o;
}

static int hex_digit(char c)
{
        return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 :
               c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Append @s (up to @end) percent-decoded to @buf at @o; returns the new length. */
static size_t append_decoded(char *buf, size_t o, size_t size, const char *s, const char *end)
{
        for (const char *p = s; p < end && *p && o + 5 < size; p++) {
                if (*p == '%' && hex_digit(p[1]) >= 0 && hex_digit(p[2]) >= 0) {
                        buf[o++] = (char)(hex_digit(p[1]) * 16 + hex_digit(p[2]));
                        p += 2;
                } else {
                        buf[o++] = *p;
                }
        }
        return o;
}

const char *ce_table_of_source(const char *source, char *buf, size_t size)
{
        const char *p = strrchr(source, '/'), *auth = strstr(source, "://"), *db, *m;
        size_t o;

        /* postgresql://<system identifier>/<database>/message/<prefix> */
        db = auth ? strchr(auth + 3, '/') : NULL;
        m = db ? strchr(db + 1, '/') : NULL;
        if (m && p && strncmp(m, "/message/", 9) == 0 && m + 8 == p) {
                o = (size_t)snprintf(buf, size, "logical message prefix \"");
                o = append_decoded(buf, o < size ? o : size - 1, size, p + 1, p + strlen(p));
                snprintf(buf + o, size - o, "\"");
                return buf;
        }
        if (!p || !strchr(p, '.')) {
                snprintf(buf, size, "an unknown table");
                return buf;
        }
        o = (size_t)snprintf(buf, size, "table \"");
        for (p++; *p && o + 5 < size; p++) {
                if (*p == '.') {
                        o += (size_t)snprintf(buf + o, size - o, "\".\"");
                } else if (*p == '%' && hex_digit(p[1]) >= 0 && hex_digit(p[2]) >= 0) {
                        buf[o++] = (char)(hex_digit(p[1]) * 16 + hex_digit(p[2]));
                        p += 2;
                } else {
                        buf[o++] = *p;
                }
        }
        snprintf(buf + o, size - o, "\"");
        return buf;
}

size_t ce_record_headers(const struct outbox_row *row, const char *source, const char *time_text,
                         const char *lsn_text, const char *xid_text, struct producer_header *h,
                         size_t cap)
{
        size_t nh = 0;

        if (cap < CE_HEADERS_MAX + row->nheaders)
                return 0;
        h[nh++] = (struct producer_header){"ce_specversion", "1.0", 3};
        if (row->id && !row->id->is_null)
                h[nh++] = (struct producer_header){"ce_id", row->id->ptr, row->id->len};
        if (row->type && !row->type->is_null)
                h[nh++] = (struct producer_header){"ce_type", row->type->ptr, row->type->len};
        h[nh++] = (struct producer_header){"ce_source", source, strlen(source)};
        if (time_text)
                h[nh++] = (struct producer_header){"ce_time", time_text, strlen(time_text)};
        /* A tombstone (NULL payload, --null-payload=tombstone) has no data to describe. */
        if (row->payload && !row->payload->is_null)
                h[nh++] = (struct producer_header){"content-type", "application/json", 16};
        if (lsn_text)
                h[nh++] = (struct producer_header){"ce_pglsn", lsn_text, strlen(lsn_text)};
        if (xid_text)
                h[nh++] = (struct producer_header){"ce_pgxid", xid_text, strlen(xid_text)};
        for (size_t i = 0; i < row->nheaders; i++)
                h[nh++] = (struct producer_header){row->headers[i].name, row->headers[i].value,
                                                   row->headers[i].len};
        return nh;
}
