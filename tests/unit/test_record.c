// SPDX-License-Identifier: Apache-2.0
/* Unit tests of outbox row extraction and topic templates (record.c). */
#include <errno.h>
#include <string.h>

#include "unit_check.h"
#include "record.h"

#define V(s) {(s), sizeof(s) - 1, false, false}
#define VNULL {NULL, 0, true, false}

static struct w2j_record make(struct w2j_column *cols, size_t n)
{
        struct w2j_record r = {.action = W2J_INSERT, .schema = "public", .table = "outbox"};

        r.columns = cols;
        r.ncolumns = n;
        return r;
}

static void test_ok(void)
{
        struct record_spec *s;
        struct w2j_column cols[] = {
                {"work_id", "text", V("order-103-ack"), 0},
                {"kind", "text", V("order_received"), 0},
                {"payload", "jsonb", V("{\"a\": 1}"), 0},
                {"tenant", "text", V("eu-1"), 0},
        };
        struct w2j_record r = make(cols, 4);
        struct outbox_row row;
        char err[256];
        const char *const *names;
        size_t n;

        CHECK_INT(record_spec_new("work_id", "work_id", "payload", "kind", "outbox.${tenant}.${kind}",
                                  &s, err, sizeof(err)), 0);
        record_spec_template_columns(s, &names, &n);
        CHECK_INT(n, 2);
        CHECK_STR(names[0], "tenant");
        CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), 0);
        CHECK_STR(row.topic, "outbox.eu-1.order_received");
        CHECK_STR(row.id->ptr, "order-103-ack");
        CHECK_STR(row.key->ptr, "order-103-ack");
        CHECK_STR(row.payload->ptr, "{\"a\": 1}");
        CHECK_STR(row.type->ptr, "order_received");
        record_spec_free(s);
}

static void test_errors(void)
{
        struct record_spec *s;
        struct w2j_column cols[] = {
                {"work_id", "text", V("w1"), 0},
                {"kind", "text", V("k"), 0},
                {"payload", "jsonb", V("{}"), 0},
        };
        struct w2j_record r = make(cols, 3);
        struct outbox_row row;
        char err[256];

        CHECK_INT(record_spec_new("work_id", "work_id", "payload", "kind", "bad.${", &s, err,
                                  sizeof(err)), -EINVAL);
        CHECK_INT(record_spec_new("work_id", "work_id", "payload", "kind", "x.${}", &s, err,
                                  sizeof(err)), -EINVAL);
        CHECK_INT(record_spec_new("work_id", "order_id", "payload", "kind", "outbox.${kind}", &s, err,
                                  sizeof(err)), 0);
        CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -ENOENT);
        CHECK(strstr(err, "order_id") != NULL);
        record_spec_free(s);

        CHECK_INT(record_spec_new("work_id", "work_id", "payload", "kind", "outbox.${kind}", &s, err,
                                  sizeof(err)), 0);
        cols[0].value = (struct w2j_value)VNULL;
        CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "NULL") != NULL);
        cols[0].value = (struct w2j_value)V("");
        CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -EINVAL);
        cols[0].value = (struct w2j_value)V("w1");
        cols[2].value = (struct w2j_value)VNULL;
        CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -EINVAL);
        cols[2].value = (struct w2j_value)V("{}");
        cols[1].value = (struct w2j_value)VNULL;
        CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "topic template column \"kind\"") != NULL);
        cols[1].value = (struct w2j_value)V("order received!");
        CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -EDOM);
        cols[1].value = (struct w2j_value)V("..");
        CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), 0);  /* "outbox..." is legal */
        record_spec_free(s);

        CHECK_INT(record_spec_new("work_id", "work_id", "payload", "kind", "${kind}", &s, err,
                                  sizeof(err)), 0);
        CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -EDOM);  /* ".." */
        {
                static char longname[300];

                memset(longname, 'a', 250);
                cols[1].value = (struct w2j_value){longname, 250, false, false};
                CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -EDOM);
                cols[1].value = (struct w2j_value){longname, 249, false, false};
                CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), 0);
        }
        record_spec_free(s);
}

/* Run @text as the headers column "headers" (type @type) through record_extract(). */
static int headers_of(struct record_spec *s, const char *type, const char *text, struct outbox_row *row,
                      char *err, size_t errlen)
{
        struct w2j_column cols[] = {
                {"work_id", "text", V("w1"), 0},
                {"kind", "text", V("k"), 0},
                {"payload", "jsonb", V("{}"), 0},
                {"headers", type, VNULL, 0},
        };
        struct w2j_record r = make(cols, 4);

        if (text)
                cols[3].value = (struct w2j_value){text, strlen(text), false, false};
        err[0] = '\0';
        return record_extract(s, &r, row, err, errlen);
}

static void test_headers(void)
{
        struct record_spec *s;
        struct outbox_row row;
        char err[1024], big[8192];
        size_t o;

        CHECK_INT(record_spec_new("work_id", "work_id", "payload", "kind", "outbox.${kind}", &s, err,
                                  sizeof(err)), 0);
        /* Without record_spec_set_headers_column() the column is an ordinary one. */
        CHECK_INT(headers_of(s, "jsonb", "[1]", &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 0);
        CHECK_INT(record_spec_set_headers_column(s, "headers"), 0);

        /* Escapes decode to the exact UTF-8 bytes; order is kept. */
        CHECK_INT(headers_of(s, "jsonb", "{\"traceparent\": \"00-ab-01\", \"x-Note\": "
                             "\"q\\\"b\\\\c \\u00e9 \\ud83d\\ude00 \xc3\xa9\", \"empty\": \"\"}",
                             &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 3);
        CHECK_STR(row.headers[0].name, "traceparent");
        CHECK_STR(row.headers[0].value, "00-ab-01");
        CHECK_INT(row.headers[0].len, 8);
        CHECK_STR(row.headers[1].name, "x-Note");
        CHECK_STR(row.headers[1].value, "q\"b\\c \xc3\xa9 \xf0\x9f\x98\x80 \xc3\xa9");
        CHECK_INT(row.headers[1].len, strlen("q\"b\\c \xc3\xa9 \xf0\x9f\x98\x80 \xc3\xa9"));
        CHECK_STR(row.headers[2].name, "empty");
        CHECK_INT(row.headers[2].len, 0);

        /* SQL NULL and an empty object: no headers; a missing column too. */
        CHECK_INT(headers_of(s, "jsonb", NULL, &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 0);
        CHECK_INT(headers_of(s, "jsonb", "{}", &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 0);
        {
                struct w2j_column cols[] = {
                        {"work_id", "text", V("w1"), 0},
                        {"kind", "text", V("k"), 0},
                        {"payload", "jsonb", V("{}"), 0},
                };
                struct w2j_record r = make(cols, 3);

                CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), 0);
                CHECK_INT(row.nheaders, 0);
        }
        /* A text column holding a JSON object is accepted like jsonb. */
        CHECK_INT(headers_of(s, "text", " {\"a\":\"b\"} ", &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 1);

        /* What is refused, and the reason names the column or the header. */
        CHECK_INT(headers_of(s, "jsonb", "[\"a\"]", &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "the headers column \"headers\" holds a JSON array, not an object") != NULL);
        CHECK_INT(row.nheaders, 0);
        CHECK_INT(headers_of(s, "jsonb", "null", &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "JSON null, not an object") != NULL);
        CHECK_INT(headers_of(s, "jsonb", "\"a\"", &row, err, sizeof(err)), -EBADMSG);
        CHECK_INT(headers_of(s, "jsonb", "{\"a\": 1}", &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "the value of header \"a\" in the headers column \"headers\" is a JSON "
                      "number, not a string") != NULL);
        CHECK_INT(headers_of(s, "jsonb", "{\"a\": \"x\", \"b\": {\"c\": \"d\"}}", &row, err,
                             sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "header \"b\"") != NULL && strstr(err, "JSON object, not a string"));
        CHECK_INT(headers_of(s, "jsonb", "{\"a\": null}", &row, err, sizeof(err)), -EBADMSG);
        CHECK_INT(headers_of(s, "text", "{\"a\": \"x\"", &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "of type text does not hold valid JSON") != NULL);
        CHECK_INT(headers_of(s, "json", "{\"a\": \"x\\u0000y\"}", &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "\\u0000") != NULL);
        /* An escaped backslash before "u0000" is not the escape. */
        CHECK_INT(headers_of(s, "json", "{\"a\": \"x\\\\u0000\"}", &row, err, sizeof(err)), 0);
        CHECK_STR(row.headers[0].value, "x\\u0000");
        CHECK_INT(headers_of(s, "jsonb", "{\"\": \"x\"}", &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "names need 1 to 255 bytes") != NULL);
        for (const char *const *n = (const char *const[]){"ce_id", "CE_Subject", "ce_", "content-type",
                                                            "Content-Type", "outbox_relay_error",
                                                            NULL}; *n; n++) {
                snprintf(big, sizeof(big), "{\"%s\": \"x\"}", *n);
                CHECK_INT(headers_of(s, "jsonb", big, &row, err, sizeof(err)), -EBADMSG);
                CHECK(strstr(err, "is reserved for the relay's own headers") != NULL);
        }
        CHECK_INT(headers_of(s, "jsonb", "{\"cex\": \"x\", \"content-types\": \"y\", "
                             "\"outbox_relay\": \"z\"}", &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 3);

        /* Bounds: names of 255 bytes pass, 256 do not; 64 pairs pass, 65 do not. */
        o = (size_t)snprintf(big, sizeof(big), "{\"");
        memset(big + o, 'n', 255);
        o += 255;
        snprintf(big + o, sizeof(big) - o, "\": \"v\"}");
        CHECK_INT(headers_of(s, "jsonb", big, &row, err, sizeof(err)), 0);
        CHECK_INT(strlen(row.headers[0].name), 255);
        memmove(big + 3, big + 2, strlen(big + 2) + 1);
        big[2] = 'n';
        CHECK_INT(headers_of(s, "jsonb", big, &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "header name of 256 bytes") != NULL);
        for (int n = 64; n <= 65; n++) {
                o = (size_t)snprintf(big, sizeof(big), "{");
                for (int i = 0; i < n; i++)
                        o += (size_t)snprintf(big + o, sizeof(big) - o, "%s\"h%d\": \"v%d\"",
                                              i ? ", " : "", i, i);
                snprintf(big + o, sizeof(big) - o, "}");
                CHECK_INT(headers_of(s, "jsonb", big, &row, err, sizeof(err)), n == 64 ? 0 : -EBADMSG);
                if (n == 64) {
                        CHECK_INT(row.nheaders, 64);
                        CHECK_STR(row.headers[63].name, "h63");
                        CHECK_STR(row.headers[63].value, "v63");
                } else {
                        CHECK(strstr(err, "has more than 64 entries") != NULL);
                }
        }

        /* The row's own problems come first; a bad topic still gets the headers. */
        {
                struct w2j_column cols[] = {
                        {"work_id", "text", VNULL, 0},
                        {"kind", "text", V("bad kind"), 0},
                        {"payload", "jsonb", V("{}"), 0},
                        {"headers", "jsonb", V("[]"), 0},
                };
                struct w2j_record r = make(cols, 4);

                CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -EINVAL);
                cols[0].value = (struct w2j_value)V("w1");
                CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -EBADMSG);
                cols[3].value = (struct w2j_value)V("{\"a\": \"b\"}");
                CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -EDOM);
                CHECK_INT(row.nheaders, 1);
        }
        record_spec_free(s);
}

/* Run a row with "traceparent" @tp and "tenant" @tenant (NULL: SQL NULL) and headers column @hdr. */
static int column_headers_of(struct record_spec *s, const char *tp, const char *tenant,
                             const char *hdr, struct outbox_row *row, char *err, size_t errlen)
{
        struct w2j_column cols[] = {
                {"work_id", "text", V("w1"), 0},
                {"kind", "text", V("k"), 0},
                {"payload", "jsonb", V("{}"), 0},
                {"traceparent", "text", VNULL, 0},
                {"tenant", "integer", VNULL, 0},
                {"headers", "jsonb", VNULL, 0},
        };
        struct w2j_record r = make(cols, 6);

        if (tp)
                cols[3].value = (struct w2j_value){tp, strlen(tp), false, false};
        if (tenant)
                cols[4].value = (struct w2j_value){tenant, strlen(tenant), false, true};
        if (hdr)
                cols[5].value = (struct w2j_value){hdr, strlen(hdr), false, false};
        err[0] = '\0';
        return record_extract(s, &r, row, err, errlen);
}

static void test_column_headers(void)
{
        struct record_spec *s;
        struct outbox_row row;
        char err[1024], big[8192], name[300];
        size_t o;

        CHECK_INT(record_spec_new("work_id", "work_id", "payload", "kind", "outbox.${kind}", &s, err,
                                  sizeof(err)), 0);
        CHECK_INT(record_spec_set_headers_column(s, "headers"), 0);
        CHECK_INT(record_spec_add_column_header(s, "traceparent", "traceparent", err, sizeof(err)), 0);
        CHECK_INT(record_spec_add_column_header(s, "tenant", "x-tenant", err, sizeof(err)), 0);

        /* Column headers first, in the order added, then the headers column's pairs. */
        CHECK_INT(column_headers_of(s, "00-ab-01", "42", "{\"a\": \"b\"}", &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 3);
        CHECK_STR(row.headers[0].name, "traceparent");
        CHECK_STR(row.headers[0].value, "00-ab-01");
        CHECK_INT(row.headers[0].len, 8);
        CHECK_STR(row.headers[1].name, "x-tenant");
        CHECK_STR(row.headers[1].value, "42");  /* a number keeps the text wal2json wrote */
        CHECK_STR(row.headers[2].name, "a");

        /* SQL NULL: no header; the empty string: an empty header. */
        CHECK_INT(column_headers_of(s, NULL, "7", NULL, &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 1);
        CHECK_STR(row.headers[0].name, "x-tenant");
        CHECK_INT(column_headers_of(s, NULL, NULL, NULL, &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 0);
        CHECK_INT(column_headers_of(s, "", NULL, NULL, &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 1);
        CHECK_STR(row.headers[0].name, "traceparent");
        CHECK_INT(row.headers[0].len, 0);

        /* A row without a column header's column is refused, naming the column and header. */
        {
                struct w2j_column cols[] = {
                        {"work_id", "text", V("w1"), 0},
                        {"kind", "text", V("k"), 0},
                        {"payload", "jsonb", V("{}"), 0},
                        {"traceparent", "text", V("00-ab-01"), 0},
                };
                struct w2j_record r = make(cols, 4);

                CHECK_INT(record_extract(s, &r, &row, err, sizeof(err)), -ENOENT);
                CHECK(strstr(err, "no column \"tenant\" (published as header \"x-tenant\" by "
                              "--column-header)") != NULL);
                CHECK_INT(row.nheaders, 0);
        }

        /* Together at most 64: two column headers leave 62 pairs; a NULL one leaves its place. */
        for (int n = 62; n <= 63; n++) {
                o = (size_t)snprintf(big, sizeof(big), "{");
                for (int i = 0; i < n; i++)
                        o += (size_t)snprintf(big + o, sizeof(big) - o, "%s\"h%d\": \"v%d\"",
                                              i ? ", " : "", i, i);
                snprintf(big + o, sizeof(big) - o, "}");
                CHECK_INT(column_headers_of(s, "tp", "1", big, &row, err, sizeof(err)),
                          n == 62 ? 0 : -EBADMSG);
                if (n == 62) {
                        CHECK_INT(row.nheaders, 64);
                        CHECK_STR(row.headers[63].name, "h61");
                } else {
                        CHECK(strstr(err, "has more than 62 entries, the most a row may carry "
                                      "besides its 2 --column-header headers (64 in all)") != NULL);
                        CHECK_INT(row.nheaders, 0);
                }
                CHECK_INT(column_headers_of(s, NULL, "1", big, &row, err, sizeof(err)), 0);
                CHECK_INT(row.nheaders, (size_t)n + 1);
        }

        /* What record_spec_add_column_header() refuses. */
        for (const char *const *n = (const char *const[]){"ce_id", "CE_Type", "ce_", "Content-Type",
                                                            "OUTBOX_RELAY_error", NULL}; *n; n++) {
                CHECK_INT(record_spec_add_column_header(s, "c", *n, err, sizeof(err)), -EINVAL);
                CHECK(strstr(err, "is reserved for the relay's own headers") != NULL);
        }
        CHECK_INT(record_spec_add_column_header(s, "other", "x-tenant", err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "header \"x-tenant\" is already published from column \"tenant\"") != NULL);
        CHECK_INT(record_spec_add_column_header(s, "", "h", err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "the column name is empty") != NULL);
        CHECK_INT(record_spec_add_column_header(s, "c", "", err, sizeof(err)), -EINVAL);
        memset(name, 'n', 256);
        name[256] = '\0';
        CHECK_INT(record_spec_add_column_header(s, "c", name, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "the header name has 256 bytes; names need 1 to 255") != NULL);
        name[255] = '\0';
        CHECK_INT(record_spec_add_column_header(s, "tenant", name, err, sizeof(err)), 0);
        /* The same column under two names is allowed; 16 in all, not 17. */
        for (int i = 3; i <= RECORD_COLUMN_HEADERS_MAX; i++) {
                snprintf(name, sizeof(name), "h%d", i);
                CHECK_INT(record_spec_add_column_header(s, "tenant", name, err, sizeof(err)),
                          i < RECORD_COLUMN_HEADERS_MAX ? 0 : -EINVAL);
        }
        CHECK(strstr(err, "at most 16 columns") != NULL);
        CHECK_INT(column_headers_of(s, "tp", "5", NULL, &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, RECORD_COLUMN_HEADERS_MAX);
        if (row.nheaders == RECORD_COLUMN_HEADERS_MAX) {
                CHECK_INT(strlen(row.headers[2].name), 255);
                CHECK_STR(row.headers[RECORD_COLUMN_HEADERS_MAX - 1].name, "h15");
                CHECK_STR(row.headers[RECORD_COLUMN_HEADERS_MAX - 1].value, "5");
        }
        record_spec_free(s);

        /* A column header may be the ID column itself (Debezium's "id" header). */
        CHECK_INT(record_spec_new("work_id", "work_id", "payload", "kind", "outbox.${kind}", &s, err,
                                  sizeof(err)), 0);
        CHECK_INT(record_spec_add_column_header(s, "work_id", "id", err, sizeof(err)), 0);
        CHECK_INT(headers_of(s, "jsonb", NULL, &row, err, sizeof(err)), 0);
        CHECK_INT(row.nheaders, 1);
        CHECK_STR(row.headers[0].name, "id");
        CHECK_STR(row.headers[0].value, "w1");
        CHECK(row.headers[0].value == row.id->ptr);
        record_spec_free(s);
}

static void test_error_codes(void)
{
        CHECK_STR(record_error_code(-EDOM), "INVALID_TOPIC");
        CHECK_STR(record_error_code(-EILSEQ), "INVALID_JSON");
        CHECK_STR(record_error_code(-EBADMSG), "INVALID_HEADERS");
        CHECK_STR(record_error_code(-ENOENT), "MISSING_COLUMN");
        CHECK_STR(record_error_code(-EINVAL), "NULL_VALUE");
        CHECK_INT(record_error_code_is_row_fault("INVALID_JSON", 12), 1);
        CHECK_INT(record_error_code_is_row_fault("INVALID_JSONX", 12), 1); /* @len bytes only */
        CHECK_INT(record_error_code_is_row_fault("INVALID_JSO", 11), 0);
        /* Kafka's refusals pass once the topic or limit is fixed */
        CHECK_INT(record_error_code_is_row_fault("MSG_SIZE_TOO_LARGE", 18), 0);
        CHECK_INT(record_error_code_is_row_fault("UNKNOWN_TOPIC_OR_PART", 21), 0);
}

int main(void)
{
        test_error_codes();
        test_ok();
        test_errors();
        test_headers();
        test_column_headers();
        return check_summary();
}
