// SPDX-License-Identifier: Apache-2.0
/* Unit tests of command-line parsing (config.c). */
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "config.h"

static int parse(struct relay_config *c, char *err, int argc, char **argv)
{
        return config_parse(argc, argv, c, err, 512);
}

#define ARGV(...) ((char *[]){"outbox-relay", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){"outbox-relay", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(c, err, ...) parse(c, err, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__))

static void test_defaults(void)
{
        struct relay_config c;
        char err[512];
        char *argv[] = {"outbox-relay", NULL};

        CHECK_INT(parse(&c, err, 1, argv), 0);
        CHECK_STR(c.slot, "outbox_relay");
        CHECK_STR(c.brokers, "localhost:9092");
        CHECK_STR(c.topic_template, "outbox.${kind}");
        CHECK_STR(c.id_column, "work_id");
        CHECK_STR(c.key_column, "work_id");
        CHECK_STR(c.payload_column, "payload");
        CHECK_INT(c.ntables, 1);
        CHECK_STR(c.tables[0].schema, "public");
        CHECK_STR(c.tables[0].table, "outbox");
        CHECK_INT(c.status_interval_ms, 10000);
        CHECK(!c.create_slot);
        config_free(&c);
}

static void test_options(void)
{
        struct relay_config c;
        char err[512];

        CHECK_INT(PARSE(&c, err, "-d", "dbname=shop", "-S", "s1", "--create-slot", "-t",
                        "public.\"Foo bar\"", "-t", "Shop.Outbox", "-b", "k:1", "--topic", "t.${x}",
                        "--key-column", "order_id", "-X", "linger.ms=20", "-s", "2.5", "-v", "-v"),
                  0);
        CHECK_STR(c.conninfo, "dbname=shop");
        CHECK_STR(c.slot, "s1");
        CHECK(c.create_slot);
        CHECK_INT(c.ntables, 2);
        CHECK_STR(c.tables[0].table, "Foo bar");
        CHECK_STR(c.tables[1].schema, "shop");  /* unquoted: folded */
        CHECK_STR(c.tables[1].table, "outbox");
        CHECK_STR(c.key_column, "order_id");
        CHECK_STR(c.id_column, "work_id");
        CHECK_INT(c.nprops, 1);
        CHECK_STR(c.props[0].name, "linger.ms");
        CHECK_STR(c.props[0].value, "20");
        CHECK_INT(c.status_interval_ms, 2500);
        CHECK_INT(c.verbose, 2);
        config_free(&c);
}

static void test_refusals(void)
{
        struct relay_config c;
        char err[512];

        CHECK_INT(PARSE(&c, err, "--bogus"), -EINVAL);
        CHECK(strstr(err, "--bogus") != NULL);
        CHECK_INT(PARSE(&c, err, "-X", "enable.idempotence=false"), -EINVAL);
        CHECK(strstr(err, "idempotent") != NULL);
        CHECK_INT(PARSE(&c, err, "-X", "acks=1"), -EINVAL);
        CHECK_INT(PARSE(&c, err, "-X", "request.required.acks=0"), -EINVAL);
        CHECK_INT(PARSE(&c, err, "-X", "acks=all"), 0);
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "-X", "novalue"), -EINVAL);
        CHECK(strstr(err, "NAME=VALUE") != NULL);
        CHECK_INT(PARSE(&c, err, "-S", "Bad-Slot"), -EINVAL);
        CHECK(strstr(err, "lower-case") != NULL);
        CHECK_INT(PARSE(&c, err, "-t", "a.b.c"), -EINVAL);
        CHECK_INT(PARSE(&c, err, "-t", "\"unterminated"), -EINVAL);
        CHECK_INT(PARSE(&c, err, "-s", "soon"), -EINVAL);
        CHECK_INT(PARSE(&c, err, "-s", "0"), -EINVAL);
        CHECK_INT(PARSE(&c, err, "stray"), -EINVAL);
        CHECK_INT(PARSE(&c, err, "-d"), -EINVAL);
}

/* Regression: --help was taken for an unknown option (getopt's '?'). */
static void test_help(void)
{
        struct relay_config c;
        char err[512];

        CHECK_INT(PARSE(&c, err, "--help"), 0);
        CHECK(c.show_help);
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "-?"), 0);
        CHECK(c.show_help);
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "-V"), 0);
        CHECK(c.show_version);
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "--version"), 0);
        CHECK(c.show_version);
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "-x"), -EINVAL);
        CHECK(strstr(err, "-x") != NULL);
}

/* Regression: an explicit 0 was replaced by the option's default. */
static void test_explicit_zero(void)
{
        struct relay_config c;
        char err[512];

        CHECK_INT(PARSE(&c, err, "--shutdown-timeout", "0"), 0);
        CHECK_INT(c.shutdown_timeout_ms, 0);
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "--topic", "x.${kind}"), 0);
        CHECK_STR(c.topic_template, "x.${kind}");
        CHECK_INT(c.shutdown_timeout_ms, 30000);
        config_free(&c);
}

static void test_table_names(void)
{
        struct table_name t;

        CHECK_INT(config_parse_table_name("outbox", &t), 0);
        CHECK_STR(t.schema, "public");
        CHECK_STR(t.table, "outbox");
        free(t.schema);
        free(t.table);
        CHECK_INT(config_parse_table_name("\"My.Schema\".\"we\"\"ird\"", &t), 0);
        CHECK_STR(t.schema, "My.Schema");
        CHECK_STR(t.table, "we\"ird");
        free(t.schema);
        free(t.table);
        CHECK_INT(config_parse_table_name("", &t), -EINVAL);
        CHECK_INT(config_parse_table_name("a.", &t), -EINVAL);
        CHECK_INT(config_parse_table_name("\"\"", &t), -EINVAL);
}

int main(void)
{
        test_defaults();
        test_options();
        test_refusals();
        test_table_names();
        test_help();
        test_explicit_zero();
        return check_summary();
}
