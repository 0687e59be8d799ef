// SPDX-License-Identifier: Apache-2.0
/* Unit tests of outbox row extraction and topic templates (record.c). */
#include <errno.h>
#include <string.h>

#include "check.h"
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
                {"work_id", "text", V("order-103-ack")},
                {"kind", "text", V("order_received")},
                {"payload", "jsonb", V("{\"a\": 1}")},
                {"tenant", "text", V("eu-1")},
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
                {"work_id", "text", V("w1")},
                {"kind", "text", V("k")},
                {"payload", "jsonb", V("{}")},
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

int main(void)
{
        test_ok();
        test_errors();
        return check_summary();
}
