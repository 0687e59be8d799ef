// SPDX-License-Identifier: Apache-2.0
/* Unit tests of configuration parsing (config.c): command line, file, environment. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit_check.h"
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
        /* A renamed option names its new name. */
        CHECK_INT(PARSE(&c, err, "--kafka-transaction-time=0.1"), -EINVAL);
        CHECK_STR(err, "option \"--kafka-transaction-time\" is now called \"--kafka-commit-interval\": "
                  "rename it");
        CHECK_INT(PARSE(&c, err, "--kafka-transaction-fixed-time"), -EINVAL);
        CHECK(strstr(err, "\"--kafka-commit-fixed-interval\"") != NULL);
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

extern char **environ;

/* Remove every OUTBOX_RELAY_* variable, so that tests see only their own. */
static void clear_env(void)
{
        for (;;) {
                char name[256] = "";

                for (char **e = environ; *e; e++) {
                        if (strncmp(*e, "OUTBOX_RELAY_", 13) == 0) {
                                size_t n = strcspn(*e, "=");

                                snprintf(name, sizeof(name), "%.*s", (int)n, *e);
                                break;
                        }
                }
                if (!name[0])
                        return;
                unsetenv(name);
        }
}

static char tmpdir[] = "/tmp/test_config.XXXXXX";

/* Write @text to a new file in the test's directory; returns its path (static, one per @n). */
static char *write_file(int n, const char *text, mode_t mode)
{
        static char paths[8][64];
        FILE *f;

        snprintf(paths[n], sizeof(paths[n]), "%s/%d.conf", tmpdir, n);
        f = fopen(paths[n], "w");
        CHECK(f != NULL);
        if (!f)
                return paths[n];
        fputs(text, f);
        fclose(f);
        chmod(paths[n], mode);
        return paths[n];
}

static const char *prop(const struct relay_config *c, const char *name)
{
        for (size_t i = 0; i < c->nprops; i++)
                if (strcmp(c->props[i].name, name) == 0)
                        return c->props[i].value;
        return NULL;
}

/* Per setting, the command line wins over the environment, which wins over the file. */
static void test_precedence(void)
{
        struct relay_config c;
        char err[512];
        char *f = write_file(0,
                "# a comment\n"
                "slot = from_file\n"
                "brokers = file:9092\n"
                "  topic = file.${kind}   ; indented, with an inline comment\n"
                "on-error = dead-letter\n"
                "create-slot = true\n"
                "status-interval = 2.5\n", 0600);

        clear_env();
        CHECK_INT(PARSE(&c, err, "-c", f), 0);
        CHECK_STR(c.slot, "from_file");
        CHECK_STR(c.brokers, "file:9092");
        CHECK_STR(c.topic_template, "file.${kind}");
        CHECK(c.dead_letter);
        CHECK(c.create_slot);
        CHECK_INT(c.status_interval_ms, 2500);
        CHECK_STR(c.payload_column, "payload");  /* untouched: the default */
        config_free(&c);

        setenv("OUTBOX_RELAY_SLOT", "from_env", 1);
        setenv("OUTBOX_RELAY_BROKERS", "env:9092", 1);
        setenv("OUTBOX_RELAY_CREATE_SLOT", "false", 1);
        setenv("OUTBOX_RELAY_STATUS_INTERVAL", "3", 1);
        CHECK_INT(PARSE(&c, err, "-c", f, "-b", "cli:9092"), 0);
        CHECK_STR(c.slot, "from_env");
        CHECK_STR(c.brokers, "cli:9092");
        CHECK_STR(c.topic_template, "file.${kind}");
        CHECK(!c.create_slot);  /* a flag can be turned off by a stronger source */
        CHECK_INT(c.status_interval_ms, 3000);
        config_free(&c);

        /* An empty variable is unset (compose's ${VAR:-}): the file's value stays. */
        setenv("OUTBOX_RELAY_SLOT", "", 1);
        setenv("OUTBOX_RELAY_TOPIC_FILE", "", 1);
        CHECK_INT(PARSE(&c, err, "-c", f), 0);
        CHECK_STR(c.slot, "from_file");
        CHECK_STR(c.topic_template, "file.${kind}");
        config_free(&c);
        unsetenv("OUTBOX_RELAY_TOPIC_FILE");

        /* The file named by the environment; the command line's -c wins over it. */
        clear_env();
        setenv("OUTBOX_RELAY_CONFIG", f, 1);
        CHECK_INT(PARSE(&c, err, "-S", "from_cli"), 0);
        CHECK_STR(c.slot, "from_cli");
        CHECK_STR(c.brokers, "file:9092");
        config_free(&c);
        setenv("OUTBOX_RELAY_CONFIG", "/nonexistent/outbox-relay.conf", 1);
        CHECK_INT(PARSE(&c, err, "-c", f), 0);
        CHECK_STR(c.brokers, "file:9092");
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "-S", "x"), -EINVAL);
        CHECK(strstr(err, "/nonexistent/outbox-relay.conf") != NULL);
        clear_env();
}

/* A stronger source's tables replace the list; properties merge per name. */
static void test_lists(void)
{
        struct relay_config c;
        char err[512];
        char *f = write_file(1,
                "table = public.a\n"
                "table = shop.b\n"
                "kafka.linger.ms = 5\n"
                "kafka.compression.type = zstd\n"
                "kafka-property = batch.size=1000\n", 0600);

        clear_env();
        CHECK_INT(PARSE(&c, err, "-c", f), 0);
        CHECK_INT(c.ntables, 2);
        CHECK_STR(c.tables[1].schema, "shop");
        CHECK_STR(c.tables[1].table, "b");
        CHECK_INT(c.nprops, 3);
        CHECK_STR(prop(&c, "linger.ms"), "5");
        CHECK_STR(prop(&c, "batch.size"), "1000");
        config_free(&c);

        setenv("OUTBOX_RELAY_TABLE", "x.y, \"Odd,name\".z", 1);
        setenv("OUTBOX_RELAY_KAFKA_LINGER_MS", "7", 1);
        setenv("OUTBOX_RELAY_KAFKA_SASL_KERBEROS_KINIT__CMD", "kinit", 1);  /* "__" is '_' */
        CHECK_INT(PARSE(&c, err, "-c", f, "-X", "compression.type=lz4", "-X", "linger.ms=9"), 0);
        CHECK_INT(c.ntables, 2);
        CHECK_STR(c.tables[0].schema, "x");
        CHECK_STR(c.tables[1].schema, "Odd,name");
        CHECK_STR(c.tables[1].table, "z");
        CHECK_INT(c.nprops, 4);
        CHECK_STR(prop(&c, "linger.ms"), "9");
        CHECK_STR(prop(&c, "compression.type"), "lz4");
        CHECK_STR(prop(&c, "batch.size"), "1000");
        CHECK_STR(prop(&c, "sasl.kerberos.kinit_cmd"), "kinit");
        config_free(&c);

        /* The variables of the relay's --kafka-* options are not librdkafka properties. */
        setenv("OUTBOX_RELAY_KAFKA_COMMIT_INTERVAL", "0.01", 1);
        setenv("OUTBOX_RELAY_KAFKA_TRANSACTION_MESSAGES", "50", 1);
        CHECK_INT(PARSE(&c, err, "-c", f), 0);
        CHECK_INT(c.txn_max_ms, 10);
        CHECK_INT(c.txn_max_messages, 50);
        CHECK(prop(&c, "commit.interval") == NULL);
        CHECK(prop(&c, "transaction.messages") == NULL);
        config_free(&c);
        unsetenv("OUTBOX_RELAY_KAFKA_COMMIT_INTERVAL");
        unsetenv("OUTBOX_RELAY_KAFKA_TRANSACTION_MESSAGES");

        /* A renamed option's old variable is refused with the new name, not taken for a property. */
        setenv("OUTBOX_RELAY_KAFKA_TRANSACTION_TIME", "0.01", 1);
        CHECK_INT(PARSE(&c, err, "-c", f), -EINVAL);
        CHECK(strstr(err, "OUTBOX_RELAY_KAFKA_TRANSACTION_TIME is now called "
                     "OUTBOX_RELAY_KAFKA_COMMIT_INTERVAL") != NULL);
        unsetenv("OUTBOX_RELAY_KAFKA_TRANSACTION_TIME");

        CHECK_INT(PARSE(&c, err, "-c", f, "-t", "only.this"), 0);
        CHECK_INT(c.ntables, 1);
        CHECK_STR(c.tables[0].table, "this");
        config_free(&c);
        clear_env();
}

/* A *_FILE variable names a file holding the value; one trailing newline is dropped. */
static void test_secret_file(void)
{
        struct relay_config c;
        char err[512];
        char *secret = write_file(2, "s3cret;#=x\n", 0400);

        clear_env();
        setenv("OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE", secret, 1);
        setenv("OUTBOX_RELAY_KAFKA_SSL_KEY_PASSWORD", "keypw", 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), 0);
        CHECK_STR(prop(&c, "sasl.password"), "s3cret;#=x");
        CHECK_STR(prop(&c, "ssl.key.password"), "keypw");
        CHECK_INT(c.nnotes, 0);
        config_free(&c);

        setenv("OUTBOX_RELAY_DBNAME_FILE", secret, 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), 0);
        CHECK_STR(c.conninfo, "s3cret;#=x");
        config_free(&c);

        setenv("OUTBOX_RELAY_KAFKA_SASL_PASSWORD", "also", 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), -EINVAL);
        CHECK(strstr(err, "OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE") != NULL);
        clear_env();
        setenv("OUTBOX_RELAY_SLOT_FILE", write_file(7, "Bad-Slot\n", 0600), 1);
        CHECK_INT(PARSE(&c, err, "-b", "k"), -EINVAL);
        CHECK(strstr(err, "invalid OUTBOX_RELAY_SLOT_FILE \"Bad-Slot\"") != NULL);
        setenv("OUTBOX_RELAY_SLOT_FILE", "/nonexistent/secret", 1);
        CHECK_INT(PARSE(&c, err, "-b", "k"), -EINVAL);
        CHECK(strstr(err, "OUTBOX_RELAY_SLOT_FILE") != NULL);
        CHECK(strstr(err, "/nonexistent/secret") != NULL);
        clear_env();

        /* A password in a file everyone may read: a note for the caller to log. */
        CHECK_INT(PARSE(&c, err, "-c", write_file(3, "kafka.sasl.password = pw\n", 0644)), 0);
        CHECK_INT(c.nnotes, 1);
        CHECK(c.nnotes == 1 && strstr(c.notes[0], "password") != NULL);
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "-c", write_file(3, "kafka.sasl.password = pw\n", 0600)), 0);
        CHECK_INT(c.nnotes, 0);
        config_free(&c);
}

static void check_file_error(const char *text, const char *want1, const char *want2)
{
        struct relay_config c;
        char err[512], want[128];
        char *f = write_file(4, text, 0600);

        CHECK_INT(PARSE(&c, err, "-c", f), -EINVAL);
        snprintf(want, sizeof(want), "%s:%s", f, want1);
        if (!strstr(err, want) || !strstr(err, want2))
                fprintf(stderr, "error \"%s\" lacks \"%s\" or \"%s\"\n", err, want, want2);
        CHECK(strstr(err, want) == err);
        CHECK(strstr(err, want2) != NULL);
}

/* Every error in the file names the file and the line. */
static void test_file_errors(void)
{
        char longline[400];

        clear_env();
        check_file_error("slot = a\n\nslott = b\n", "3: ", "unknown setting \"slott\"");
        check_file_error("slot = a\njust words\n", "2: ", "malformed line");
        check_file_error("slot = a\n[outbox-relay]\nbrokers = b\n", "3: ", "section");
        check_file_error("max-inflight-messages = lots\n", "1: ", "max-inflight-messages \"lots\"");
        check_file_error("slot = Bad-Slot\n", "1: ", "lower-case");
        check_file_error("on-error = retry\n", "1: ", "expected stop or dead-letter");
        check_file_error("create-slot = perhaps\n", "1: ", "true or false");
        check_file_error("slot =\n", "1: ", "non-empty");
        check_file_error("help = true\n", "1: ", "cannot be given in a configuration file");
        check_file_error("config = other.conf\n", "1: ", "cannot be given");
        check_file_error("kafka-transaction-time = 0.1\n", "1: ",
                         "is now called \"kafka-commit-interval\"");
        check_file_error("kafka.enable.idempotence = false\n", "1: ", "kafka.enable.idempotence=false refused");
        check_file_error("# ok\nkafka.acks = 1\n", "2: ", "refused");
        check_file_error("kafka. = 1\n", "1: ", "property name");
        check_file_error("table = a.b.c\n", "1: ", "table");
        check_file_error("slot = a\nslott = b\nnonsense\n", "2: ", "slott");  /* the first error */
        memset(longline, 'x', sizeof(longline));
        memcpy(longline, "dbname = ", 9);
        longline[sizeof(longline) - 2] = '\n';
        longline[sizeof(longline) - 1] = '\0';
        check_file_error(longline, "1: ", "longer than");
}

/* Bad values from the environment name the variable. */
static void test_env_errors(void)
{
        struct relay_config c;
        char err[512];

        clear_env();
        setenv("OUTBOX_RELAY_MAX_INFLIGHT_MESSAGES", "0", 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), -EINVAL);
        CHECK(strstr(err, "OUTBOX_RELAY_MAX_INFLIGHT_MESSAGES \"0\"") != NULL);
        clear_env();
        setenv("OUTBOX_RELAY_KAFKA_ACKS", "0", 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), -EINVAL);
        CHECK(strstr(err, "OUTBOX_RELAY_KAFKA_ACKS: acks=0 refused") == err);
        clear_env();
        setenv("OUTBOX_RELAY_KAFKA_PROPERTY", "linger.ms=5", 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), -EINVAL);
        CHECK(strstr(err, "OUTBOX_RELAY_KAFKA_LINGER_MS") != NULL);
        clear_env();
        /* A variable that is no setting: noted, not refused (Kubernetes adds some). */
        setenv("OUTBOX_RELAY_SLOTT", "x", 1);
        setenv("OUTBOX_RELAY_SERVICE_PORT", "9187", 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), 0);
        CHECK_INT(c.nnotes, 1);
        CHECK(c.nnotes == 1 && strstr(c.notes[0], "OUTBOX_RELAY_SLOTT") != NULL &&
              strstr(c.notes[0], "OUTBOX_RELAY_SERVICE_PORT") != NULL);
        config_free(&c);
        clear_env();
        /*
         * $OUTBOX_RELAY_CONFIG is read as such, never from a file: its _FILE
         * form, easily taken for "the configuration file", is not silently dropped.
         */
        setenv("OUTBOX_RELAY_CONFIG_FILE", "/nonexistent/outbox-relay.conf", 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), 0);
        CHECK(c.config_file == NULL);
        CHECK_INT(c.nnotes, 1);
        CHECK(c.nnotes == 1 && strstr(c.notes[0], "OUTBOX_RELAY_CONFIG_FILE") != NULL);
        config_free(&c);
        clear_env();
        /* Command-line-only settings have no variable. */
        setenv("OUTBOX_RELAY_HELP", "true", 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), 0);
        CHECK(!c.show_help);
        CHECK_INT(c.nnotes, 1);
        config_free(&c);
        clear_env();
}

/* --help and --version work whatever the file and the environment hold. */
static void test_help_despite_errors(void)
{
        struct relay_config c;
        char err[512];

        clear_env();
        setenv("OUTBOX_RELAY_SLOT", "Not A Slot", 1);
        CHECK_INT(PARSE(&c, err, "-c", "/nonexistent.conf", "--help"), 0);
        CHECK(c.show_help);
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "-V"), 0);
        CHECK(c.show_version);
        config_free(&c);
        clear_env();
}

/* The log settings: choices checked, -v is --log-level=debug on the command line. */
static void test_log_settings(void)
{
        struct relay_config c;
        char err[512];
        char *f = write_file(5, "log-level = warning\nlog-format = json\nlog-file = /tmp/x.log\n", 0600);

        clear_env();
        CHECK_INT(PARSE(&c, err, "-S", "s"), 0);
        CHECK_STR(c.log_level, "info");
        CHECK_STR(c.log_format, "text");
        CHECK(c.log_file == NULL);
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "-c", f), 0);
        CHECK_STR(c.log_level, "warning");
        CHECK_STR(c.log_format, "json");
        CHECK_STR(c.log_file, "/tmp/x.log");
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "-c", f, "-v"), 0);
        CHECK_STR(c.log_level, "debug");
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "--log-format", "xml"), -EINVAL);
        CHECK(strstr(err, "expected text or json") != NULL);
}

struct changes {
        int reloaded, ignored;
        char last[128];
};

static void on_change(void *ctx, const char *name, const char *old_value, const char *new_value,
                      bool reloaded)
{
        struct changes *ch = ctx;

        if (reloaded) {
                ch->reloaded++;
                snprintf(ch->last, sizeof(ch->last), "%s:%s->%s", name, old_value, new_value);
        } else {
                ch->ignored++;
                CHECK(old_value == NULL && new_value == NULL);  /* may be secrets: not shown */
                snprintf(ch->last, sizeof(ch->last), "%s", name);
        }
}

/* SIGHUP's reload takes the log settings, and only reports the others. */
static void test_reload(void)
{
        struct relay_config c, next;
        struct changes ch = {0};
        char err[512];
        char *f = write_file(6, "slot = one\nlog-level = info\n", 0600);

        clear_env();
        CHECK_INT(PARSE(&c, err, "-c", f), 0);
        write_file(6, "slot = one\nlog-level = debug\n", 0600);
        CHECK_INT(PARSE(&next, err, "-c", f), 0);
        CHECK_INT(config_reload(&c, &next, on_change, &ch), 0);
        CHECK_INT(ch.reloaded, 1);
        CHECK_INT(ch.ignored, 0);
        CHECK_STR(ch.last, "log-level:info->debug");
        CHECK_STR(c.log_level, "debug");

        write_file(6, "slot = two\nlog-level = debug\nkafka.linger.ms = 1\n", 0600);
        CHECK_INT(PARSE(&next, err, "-c", f), 0);
        CHECK_INT(config_reload(&c, &next, on_change, &ch), 0);
        CHECK_INT(ch.reloaded, 1);
        CHECK_INT(ch.ignored, 2);  /* slot and kafka-property */
        CHECK_STR(c.slot, "one");
        CHECK_INT(c.nprops, 0);
        CHECK_STR(c.log_level, "debug");  /* still valid after next was freed */
        CHECK_INT(c.nstrs, 2);            /* "one" and "debug": the pool does not grow */
        config_free(&c);
}

/* --column-header: COLUMN[=HEADER], repeatable, as a list from a variable; reserved names refused. */
static void test_column_headers(void)
{
        struct relay_config c;
        char err[512], arg[300];
        char *f = write_file(7, "column-header = from_file\n", 0600);

        clear_env();
        CHECK_INT(PARSE(&c, err, "--column-header", "traceparent", "--column-header",
                        "tenant_id=x-tenant"), 0);
        CHECK_INT(c.ncolumn_headers, 2);
        CHECK_STR(c.column_headers[0].column, "traceparent");
        CHECK_STR(c.column_headers[0].header, "traceparent");
        CHECK_STR(c.column_headers[1].column, "tenant_id");
        CHECK_STR(c.column_headers[1].header, "x-tenant");
        CHECK(c.preset == NULL);
        config_free(&c);
        /* "=" after the first belongs to the header name. */
        CHECK_INT(PARSE(&c, err, "--column-header", "a=b=c"), 0);
        CHECK_STR(c.column_headers[0].column, "a");
        CHECK_STR(c.column_headers[0].header, "b=c");
        config_free(&c);

        /* A stronger source's list replaces the weaker one's, as for tables. */
        setenv("OUTBOX_RELAY_COLUMN_HEADER", " tp=traceparent , tenant ", 1);
        CHECK_INT(PARSE(&c, err, "-c", f), 0);
        CHECK_INT(c.ncolumn_headers, 2);
        CHECK_STR(c.column_headers[0].header, "traceparent");
        CHECK_STR(c.column_headers[1].column, "tenant");
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "-c", f, "--column-header", "cli"), 0);
        CHECK_INT(c.ncolumn_headers, 1);
        CHECK_STR(c.column_headers[0].column, "cli");
        config_free(&c);
        clear_env();
        CHECK_INT(PARSE(&c, err, "-c", f), 0);
        CHECK_INT(c.ncolumn_headers, 1);
        CHECK_STR(c.column_headers[0].column, "from_file");
        config_free(&c);

        /* Refused: the relay's own names in any case, empty parts, duplicates, bounds. */
        for (const char *const *a = (const char *const[]){"ce_id", "c=CE_TIME", "c=ce_",
                                                            "c=Content-Type",
                                                            "c=outbox_relay_topic", NULL}; *a; a++) {
                CHECK_INT(PARSE(&c, err, "--column-header", (char *)*a), -EINVAL);
                CHECK(strstr(err, "is reserved for the relay's own headers") != NULL);
                CHECK(strstr(err, "invalid --column-header") != NULL);
        }
        CHECK_INT(PARSE(&c, err, "--column-header", "=h"), -EINVAL);
        CHECK(strstr(err, "expected COLUMN or COLUMN=HEADER") != NULL);
        CHECK_INT(PARSE(&c, err, "--column-header", "c="), -EINVAL);
        CHECK_INT(PARSE(&c, err, "--column-header", "a=h", "--column-header", "b=h"), -EINVAL);
        CHECK(strstr(err, "header \"h\" is already published from column \"a\"") != NULL);
        snprintf(arg, sizeof(arg), "c=%0256d", 0);
        CHECK_INT(PARSE(&c, err, "--column-header", arg), -EINVAL);
        CHECK(strstr(err, "1 to 255 bytes, not 256") != NULL);
        arg[strlen(arg) - 1] = '\0';
        CHECK_INT(PARSE(&c, err, "--column-header", arg), 0);
        config_free(&c);
        setenv("OUTBOX_RELAY_COLUMN_HEADER", "c1,c2,c3,c4,c5,c6,c7,c8,c9,c10,c11,c12,c13,c14,c15,c16", 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), 0);
        CHECK_INT(c.ncolumn_headers, 16);
        config_free(&c);
        setenv("OUTBOX_RELAY_COLUMN_HEADER",
               "c1,c2,c3,c4,c5,c6,c7,c8,c9,c10,c11,c12,c13,c14,c15,c16,c17", 1);
        CHECK_INT(PARSE(&c, err, "-S", "s"), -EINVAL);
        CHECK(strstr(err, "OUTBOX_RELAY_COLUMN_HEADER \"c17\": at most 16 columns") != NULL);
        clear_env();
        write_file(7, "column-header = x=Ce_Id\n", 0600);
        CHECK_INT(PARSE(&c, err, "-c", f), -EINVAL);
        CHECK(strstr(err, "7.conf:1: invalid column-header \"x=Ce_Id\"") != NULL);
}

/* --preset=debezium sets the router's defaults where no source set a value. */
static void test_preset(void)
{
        struct relay_config c;
        char err[512];
        char *f = write_file(7, "preset = debezium\ntopic = file.${aggregatetype}\n", 0600);

        clear_env();
        CHECK_INT(PARSE(&c, err, "--preset", "debezium"), 0);
        CHECK_STR(c.preset, "debezium");
        CHECK_STR(c.topic_template, "outbox.event.${aggregatetype}");
        CHECK_STR(c.id_column, "id");
        CHECK_STR(c.key_column, "aggregateid");
        CHECK_STR(c.payload_column, "payload");
        CHECK_STR(c.type_column, "type");
        CHECK(c.null_tombstone);
        CHECK(c.no_headers_column);
        CHECK_INT(c.ncolumn_headers, 1);
        CHECK_STR(c.column_headers[0].column, "id");
        CHECK_STR(c.column_headers[0].header, "id");
        /* What the preset does not set keeps its default. */
        CHECK_STR(c.tables[0].table, "outbox");
        CHECK_STR(c.slot, "outbox_relay");
        CHECK(!c.dead_letter);
        config_free(&c);

        /* Explicit options win, from every source; the preset may come from any of them. */
        setenv("OUTBOX_RELAY_KEY_COLUMN", "entity", 1);
        setenv("OUTBOX_RELAY_NULL_PAYLOAD", "error", 1);
        CHECK_INT(PARSE(&c, err, "-c", f, "--id-column", "event_id", "--headers-column", "meta",
                        "--column-header", "traceparent"), 0);
        CHECK_STR(c.topic_template, "file.${aggregatetype}");
        CHECK_STR(c.id_column, "event_id");
        CHECK_STR(c.key_column, "entity");      /* not the ID column: the preset's rule is gone */
        CHECK_STR(c.payload_column, "payload");
        CHECK_STR(c.type_column, "type");
        CHECK(!c.null_tombstone);
        CHECK(!c.no_headers_column);            /* --headers-column keeps the column */
        CHECK_STR(c.headers_column, "meta");
        /* Given column headers come after the preset's "id". */
        CHECK_INT(c.ncolumn_headers, 2);
        CHECK_STR(c.column_headers[0].header, "id");
        CHECK_STR(c.column_headers[0].column, "id");
        CHECK_STR(c.column_headers[1].header, "traceparent");
        config_free(&c);
        clear_env();
        /* The preset's key column stays when only the ID column is given. */
        CHECK_INT(PARSE(&c, err, "--preset", "debezium", "--id-column", "event_id"), 0);
        CHECK_STR(c.key_column, "aggregateid");
        CHECK_STR(c.column_headers[0].column, "id");  /* the router's header column: still "id" */
        config_free(&c);
        /* A given header named "id" replaces the preset's; --no-headers-column=false wins too. */
        setenv("OUTBOX_RELAY_PRESET", "debezium", 1);
        setenv("OUTBOX_RELAY_NO_HEADERS_COLUMN", "false", 1);
        CHECK_INT(PARSE(&c, err, "--column-header", "event_id=id"), 0);
        CHECK_INT(c.ncolumn_headers, 1);
        CHECK_STR(c.column_headers[0].column, "event_id");
        CHECK(!c.no_headers_column);
        CHECK_STR(c.headers_column, "headers");
        config_free(&c);
        clear_env();
        CHECK_INT(PARSE(&c, err, "--preset", "debezium", "--column-header", "a=b", "--column-header",
                        "c=d", "--column-header", "e=id"), 0);
        CHECK_INT(c.ncolumn_headers, 3);
        CHECK_STR(c.column_headers[2].column, "e");
        config_free(&c);
        /* Sixteen given column headers leave no room for the preset's: refused, not dropped. */
        setenv("OUTBOX_RELAY_COLUMN_HEADER", "c1,c2,c3,c4,c5,c6,c7,c8,c9,c10,c11,c12,c13,c14,c15,c16", 1);
        CHECK_INT(PARSE(&c, err, "--preset", "debezium"), -EINVAL);
        CHECK(strstr(err, "invalid --column-header (of --preset=debezium) \"id\": at most 16 "
                      "columns") != NULL);
        clear_env();

        /* A reload reports changed column headers and preset, and applies neither. */
        {
                struct relay_config next;
                struct changes ch = {0};

                CHECK_INT(PARSE(&c, err, "--column-header", "a"), 0);
                CHECK_INT(PARSE(&next, err, "--column-header", "a=b"), 0);
                CHECK_INT(config_reload(&c, &next, on_change, &ch), 0);
                CHECK_INT(ch.ignored, 1);
                CHECK_STR(ch.last, "column-header");
                CHECK_STR(c.column_headers[0].header, "a");
                CHECK_INT(PARSE(&next, err, "--column-header", "a", "--preset", "debezium"), 0);
                CHECK_INT(config_reload(&c, &next, on_change, &ch), 0);
                CHECK(ch.ignored > 1);
                CHECK(c.preset == NULL);
                config_free(&c);
        }

        CHECK_INT(PARSE(&c, err, "--preset", "debezium1"), -EINVAL);
        CHECK(strstr(err, "invalid --preset \"debezium1\": expected debezium") != NULL);
}

static void test_message_prefix(void)
{
        struct relay_config c;
        char err[512], p129[130];

        CHECK_INT(PARSE(&c, err, "-d", "x"), 0);
        CHECK(c.message_prefix == NULL);  /* off unless given */
        config_free(&c);
        CHECK_INT(PARSE(&c, err, "--message-prefix", "com.shop:orders/v1_x-y"), 0);
        CHECK_STR(c.message_prefix, "com.shop:orders/v1_x-y");
        config_free(&c);
        /* what wal2json's add-msg-prefixes cannot name, and what needs quoting */
        CHECK_INT(PARSE(&c, err, "--message-prefix", "a b"), -EINVAL);
        CHECK(strstr(err, "invalid --message-prefix \"a b\"") != NULL);
        CHECK(strstr(err, "add-msg-prefixes") != NULL);
        CHECK_INT(PARSE(&c, err, "--message-prefix", "a,b"), -EINVAL);
        CHECK_INT(PARSE(&c, err, "--message-prefix", "a\\b"), -EINVAL);
        CHECK_INT(PARSE(&c, err, "--message-prefix", "caf\xc3\xa9"), -EINVAL);
        CHECK_INT(PARSE(&c, err, "--message-prefix="), -EINVAL);
        CHECK(strstr(err, "non-empty") != NULL);
        memset(p129, 'p', 129);
        p129[129] = '\0';
        CHECK(!config_valid_message_prefix(p129));
        p129[128] = '\0';
        CHECK(config_valid_message_prefix(p129));
        CHECK(!config_valid_message_prefix(""));
        CHECK(!config_valid_message_prefix("tab\there"));
        /* the file and the environment check it too, naming where it came from */
        check_file_error("message-prefix = out box\n", "1: ", "add-msg-prefixes");
        setenv("OUTBOX_RELAY_MESSAGE_PREFIX", "x,y", 1);
        CHECK_INT(PARSE(&c, err, "-d", "x"), -EINVAL);
        CHECK(strstr(err, "OUTBOX_RELAY_MESSAGE_PREFIX") != NULL);
        setenv("OUTBOX_RELAY_MESSAGE_PREFIX", "from_env", 1);
        CHECK_INT(PARSE(&c, err, "-d", "x"), 0);
        CHECK_STR(c.message_prefix, "from_env");
        config_free(&c);
        unsetenv("OUTBOX_RELAY_MESSAGE_PREFIX");
}

int main(void)
{
        if (!mkdtemp(tmpdir)) {
                perror("mkdtemp");
                return 1;
        }
        clear_env();
        test_precedence();
        test_lists();
        test_secret_file();
        test_file_errors();
        test_env_errors();
        test_help_despite_errors();
        test_log_settings();
        test_reload();
        test_defaults();
        test_options();
        test_refusals();
        test_table_names();
        test_help();
        test_explicit_zero();
        test_column_headers();
        test_preset();
        test_message_prefix();
        for (int i = 0; i < 8; i++) {
                char path[64];

                snprintf(path, sizeof(path), "%s/%d.conf", tmpdir, i);
                unlink(path);
        }
        rmdir(tmpdir);
        return check_summary();
}
