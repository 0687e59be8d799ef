// SPDX-License-Identifier: Apache-2.0
/*
 * Table-driven command-line parsing for outbox-relay. Knows the option names
 * and the guarantee-voiding librdkafka settings, nothing of how they are used.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lsn.h"

enum opt_type {
        OPT_STRING,   /* const char * */
        OPT_FLAG,     /* bool, no argument */
        OPT_COUNT,    /* int, no argument, incremented */
        OPT_INT,      /* int64_t, plain integer */
        OPT_SECONDS,  /* int64_t milliseconds, argument in seconds (decimals allowed) */
        OPT_TABLE,    /* appended to tables */
        OPT_PROP,     /* appended to props */
        OPT_LSN,      /* uint64_t, pg_lsn text */
};

struct opt_def {
        const char *name;
        int short_name;     /* 0: long only */
        enum opt_type type;
        size_t offset;      /* into struct relay_config */
        const char *def;    /* default, as on the command line; NULL: none */
        int64_t min, max;   /* OPT_INT / OPT_SECONDS (ms) bounds */
        const char *arg;    /* argument name in --help */
        const char *help;
};

#define OFF(f) offsetof(struct relay_config, f)

static const struct opt_def opt_defs[] = {
        {"dbname", 'd', OPT_STRING, OFF(conninfo), NULL, 0, 0, "CONNINFO",
         "database holding the outbox: connection string or URI (PG* variables apply)"},
        {"slot", 'S', OPT_STRING, OFF(slot), "outbox_relay", 0, 0, "NAME",
         "logical replication slot (wal2json)"},
        {"create-slot", 0, OPT_FLAG, OFF(create_slot), NULL, 0, 0, NULL,
         "create the slot if it does not exist (first start only)"},
        {"table", 't', OPT_TABLE, 0, "public.outbox", 0, 0, "SCHEMA.TABLE",
         "outbox table, SQL syntax ('public.\"Foo bar\"'); repeatable"},
        {"brokers", 'b', OPT_STRING, OFF(brokers), "localhost:9092", 0, 0, "LIST",
         "Kafka bootstrap servers"},
        {"topic", 0, OPT_STRING, OFF(topic_template), "outbox.${kind}", 0, 0, "TEMPLATE",
         "topic of each row; ${column} is replaced by the column's value"},
        {"id-column", 0, OPT_STRING, OFF(id_column), "work_id", 0, 0, "NAME",
         "column holding the work ID (ce_id header)"},
        {"key-column", 0, OPT_STRING, OFF(key_column), NULL, 0, 0, "NAME",
         "column used as the Kafka key (default: the ID column)"},
        {"payload-column", 0, OPT_STRING, OFF(payload_column), "payload", 0, 0, "NAME",
         "column used as the Kafka value"},
        {"type-column", 0, OPT_STRING, OFF(type_column), "kind", 0, 0, "NAME",
         "column used as the ce_type header"},
        {"kafka-property", 'X', OPT_PROP, 0, NULL, 0, 0, "NAME=VALUE",
         "librdkafka property; repeatable"},
        {"status-interval", 's', OPT_SECONDS, OFF(status_interval_ms), "10", 100, 3600000, "SECONDS",
         "standby status update interval"},
        {"max-inflight-messages", 0, OPT_INT, OFF(max_inflight_messages), "20000", 1, 10000000, "N",
         "messages handed to Kafka and not yet acknowledged, at most"},
        {"max-inflight-bytes", 0, OPT_INT, OFF(max_inflight_bytes), "16777216", 1024,
         INT64_C(1) << 40, "BYTES", "bytes of keys and values not yet acknowledged, at most"},
        {"shutdown-timeout", 0, OPT_SECONDS, OFF(shutdown_timeout_ms), "30", 0, 3600000, "SECONDS",
         "on SIGTERM, wait this long for outstanding acknowledgements"},
        {"on-error", 0, OPT_STRING, OFF(on_error), "stop", 0, 0, "stop|dead-letter",
         "a row that cannot be published stops the relay, or goes to the dead-letter topic"},
        {"dead-letter-topic", 0, OPT_STRING, OFF(dead_letter_topic), "outbox.dead-letter", 0, 0,
         "TOPIC", "where --on-error=dead-letter sends unpublishable rows"},
        {"skip-transaction", 0, OPT_LSN, OFF(skip_transaction), NULL, 0, 0, "LSN",
         "operator's remedy: skip the one transaction ending at LSN (its ce_pglsn)"},
        {"dead-letter-transaction", 0, OPT_LSN, OFF(dead_letter_transaction), NULL, 0, 0, "LSN",
         "operator's remedy: dead-letter the unpublishable rows of the transaction ending at LSN"},
        {"null-payload", 0, OPT_STRING, OFF(null_payload), "error", 0, 0, "error|tombstone",
         "a NULL payload is a row error, or is published as a Kafka tombstone"},
        {"metrics-address", 0, OPT_STRING, OFF(metrics_address), NULL, 0, 0, "HOST:PORT",
         "serve /metrics (Prometheus text) and /healthz over HTTP"},
        {"yes", 0, OPT_FLAG, OFF(yes), NULL, 0, 0, NULL,
         "slot drop: really drop the slot"},
        {"format", 0, OPT_STRING, OFF(format), NULL, 0, 0, "text|json",
         "slot status: output format (default: text)"},
        {"verbose", 'v', OPT_COUNT, OFF(verbose), NULL, 0, 0, NULL, "more output (debug)"},
        {"version", 'V', OPT_FLAG, OFF(show_version), NULL, 0, 0, NULL, "print version and exit"},
        {"help", '?', OPT_FLAG, OFF(show_help), NULL, 0, 0, NULL, "print this help and exit"},
};

#define N_OPTS (sizeof(opt_defs) / sizeof(opt_defs[0]))

static void set_err(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
}

bool config_valid_slot_name(const char *name)
{
        size_t n = strlen(name);

        if (n == 0 || n > 63)
                return false;
        for (const char *p = name; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
                        return false;
        return true;
}

/* Parse one identifier at *pp; advance past it. Returns allocated string or NULL. */
static char *parse_ident(const char **pp)
{
        const char *p = *pp;
        size_t cap = strlen(p) + 1, o = 0;
        char *out = malloc(cap);

        if (!out)
                return NULL;
        if (*p == '"') {
                p++;
                for (;;) {
                        if (*p == '\0')
                                goto fail;
                        if (*p == '"') {
                                if (p[1] == '"') {
                                        out[o++] = '"';
                                        p += 2;
                                        continue;
                                }
                                p++;
                                break;
                        }
                        out[o++] = *p++;
                }
                if (o == 0)
                        goto fail;
        } else {
                while (*p && *p != '.') {
                        unsigned char c = (unsigned char)*p;

                        if (c == '"' || isspace(c))
                                goto fail;
                        out[o++] = (char)(c < 0x80 ? tolower(c) : c);
                        p++;
                }
                if (o == 0)
                        goto fail;
        }
        out[o] = '\0';
        *pp = p;
        return out;
fail:
        free(out);
        return NULL;
}

int config_parse_table_name(const char *text, struct table_name *ret)
{
        const char *p = text;
        char *first, *second = NULL;

        first = parse_ident(&p);
        if (!first)
                return -EINVAL;
        if (*p == '.') {
                p++;
                second = parse_ident(&p);
                if (!second) {
                        free(first);
                        return -EINVAL;
                }
        }
        if (*p != '\0') {
                free(first);
                free(second);
                return -EINVAL;
        }
        if (second) {
                ret->schema = first;
                ret->table = second;
        } else {
                ret->schema = strdup("public");
                ret->table = first;
                if (!ret->schema) {
                        free(first);
                        return -ENOMEM;
                }
        }
        return 0;
}

int config_check_kafka_prop(const char *name, const char *value, char *err, size_t errlen)
{
        if (strcmp(name, "enable.idempotence") == 0 && strcasecmp(value, "true") != 0) {
                set_err(err, errlen,
                        "-X enable.idempotence=%s refused: without the idempotent producer a "
                        "retried batch can be written twice or out of order, remove it", value);
                return -EPERM;
        }
        if ((strcmp(name, "acks") == 0 || strcmp(name, "request.required.acks") == 0) &&
            strcmp(value, "all") != 0 && strcmp(value, "-1") != 0) {
                set_err(err, errlen,
                        "-X %s=%s refused: an acknowledgement before all in-sync replicas have the "
                        "message can be lost with a broker, and the slot would already be confirmed "
                        "past it; use acks=all", name, value);
                return -EPERM;
        }
        if (strcmp(name, "delivery.report.only.error") == 0 && strcasecmp(value, "false") != 0) {
                set_err(err, errlen,
                        "-X delivery.report.only.error=%s refused: the relay confirms the slot "
                        "only on successful delivery reports", value);
                return -EPERM;
        }
        return 0;
}

static int add_prop(struct relay_config *conf, const char *arg, char *err, size_t errlen)
{
        const char *eq = strchr(arg, '=');
        struct kafka_prop *np;
        int r;

        if (!eq || eq == arg) {
                set_err(err, errlen, "malformed -X \"%s\": expected NAME=VALUE, e.g. -X linger.ms=5",
                        arg);
                return -EINVAL;
        }
        np = realloc(conf->props, (conf->nprops + 1) * sizeof(*np));
        if (!np)
                return -ENOMEM;
        conf->props = np;
        np[conf->nprops].name = strndup(arg, (size_t)(eq - arg));
        np[conf->nprops].value = strdup(eq + 1);
        conf->nprops++;
        if (!np[conf->nprops - 1].name || !np[conf->nprops - 1].value)
                return -ENOMEM;
        r = config_check_kafka_prop(np[conf->nprops - 1].name, eq + 1, err, errlen);
        return r < 0 ? -EINVAL : 0;
}

static int add_table(struct relay_config *conf, const char *arg, char *err, size_t errlen)
{
        struct table_name *nt, t;

        if (config_parse_table_name(arg, &t) < 0) {
                set_err(err, errlen,
                        "malformed table name \"%s\": write it as in SQL, e.g. public.outbox or "
                        "'public.\"Foo bar\"'", arg);
                return -EINVAL;
        }
        for (size_t i = 0; i < conf->ntables; i++) {
                if (strcmp(conf->tables[i].schema, t.schema) == 0 &&
                    strcmp(conf->tables[i].table, t.table) == 0) {
                        free(t.schema);
                        free(t.table);
                        return 0;
                }
        }
        nt = realloc(conf->tables, (conf->ntables + 1) * sizeof(*nt));
        if (!nt) {
                free(t.schema);
                free(t.table);
                return -ENOMEM;
        }
        conf->tables = nt;
        nt[conf->ntables++] = t;
        return 0;
}

static int parse_int(const char *s, int64_t *ret)
{
        char *e;
        long long v;

        errno = 0;
        v = strtoll(s, &e, 10);
        if (errno || e == s || *e)
                return -EINVAL;
        *ret = v;
        return 0;
}

static int parse_seconds_ms(const char *s, int64_t *ret)
{
        char *e;
        double v;

        errno = 0;
        v = strtod(s, &e);
        if (errno || e == s || *e || v != v || v < 0 || v > 1e9)
                return -EINVAL;
        *ret = (int64_t)(v * 1000.0 + 0.5);
        return 0;
}

static int apply(struct relay_config *conf, const struct opt_def *o, const char *arg, char *err,
                 size_t errlen)
{
        char *base = (char *)conf;
        int64_t v;

        switch (o->type) {
        case OPT_STRING:
                if (arg[0] == '\0') {
                        set_err(err, errlen, "option --%s needs a non-empty value", o->name);
                        return -EINVAL;
                }
                *(const char **)(base + o->offset) = arg;
                return 0;
        case OPT_FLAG:
                *(bool *)(base + o->offset) = true;
                return 0;
        case OPT_COUNT:
                (*(int *)(base + o->offset))++;
                return 0;
        case OPT_INT:
        case OPT_SECONDS:
                if ((o->type == OPT_INT ? parse_int(arg, &v) : parse_seconds_ms(arg, &v)) < 0 ||
                    v < o->min || v > o->max) {
                        if (o->type == OPT_INT)
                                set_err(err, errlen, "invalid --%s \"%s\": expected an integer "
                                        "from %lld to %lld", o->name, arg, (long long)o->min,
                                        (long long)o->max);
                        else
                                set_err(err, errlen, "invalid --%s \"%s\": expected seconds "
                                        "from %g to %g", o->name, arg, o->min / 1000.0,
                                        o->max / 1000.0);
                        return -EINVAL;
                }
                *(int64_t *)(base + o->offset) = v;
                return 0;
        case OPT_TABLE:
                return add_table(conf, arg, err, errlen);
        case OPT_PROP:
                return add_prop(conf, arg, err, errlen);
        case OPT_LSN:
                if (lsn_parse(arg, strlen(arg), (uint64_t *)(base + o->offset)) < 0 ||
                    *(uint64_t *)(base + o->offset) == 0) {
                        set_err(err, errlen, "invalid --%s \"%s\": expected an LSN such as 0/1551468 "
                                "(the ce_pglsn of the transaction, as in the error message)",
                                o->name, arg);
                        return -EINVAL;
                }
                return 0;
        }
        return -EINVAL;
}

int config_parse(int argc, char **argv, struct relay_config *ret_conf, char *err, size_t errlen)
{
        struct option longopts[N_OPTS + 1];
        char shortopts[N_OPTS * 2 + 2];
        struct relay_config conf = {0};
        size_t ns = 0;
        int c, r, idx;

        shortopts[ns++] = ':';
        for (size_t i = 0; i < N_OPTS; i++) {
                bool has_arg = opt_defs[i].type != OPT_FLAG && opt_defs[i].type != OPT_COUNT;

                /* Long forms return 256 + index, so they never look like getopt's '?'. */
                longopts[i] = (struct option){opt_defs[i].name, has_arg ? required_argument : no_argument,
                                              NULL, 256 + (int)i};
                if (opt_defs[i].short_name && opt_defs[i].short_name != '?') {
                        shortopts[ns++] = (char)opt_defs[i].short_name;
                        if (has_arg)
                                shortopts[ns++] = ':';
                }
        }
        longopts[N_OPTS] = (struct option){0};
        shortopts[ns] = '\0';

        /* "-?" is help, as in PostgreSQL's tools; getopt would report it as unknown. */
        for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
                if (strcmp(argv[i], "-?") == 0) {
                        conf.show_help = true;
                        *ret_conf = conf;
                        return 0;
                }
        }
        /*
         * Defaults before the command line, so that a value given explicitly
         * (even 0, e.g. --shutdown-timeout=0) is never replaced by its default.
         * The table default is applied after, only if no -t was given.
         */
        for (size_t i = 0; i < N_OPTS; i++) {
                const struct opt_def *o = &opt_defs[i];
                char *field = (char *)&conf + o->offset;

                if (!o->def)
                        continue;
                if (o->type == OPT_STRING)
                        *(const char **)field = o->def;
                else if ((o->type == OPT_INT && parse_int(o->def, (int64_t *)field) < 0) ||
                         (o->type == OPT_SECONDS && parse_seconds_ms(o->def, (int64_t *)field) < 0))
                        return -EINVAL;  /* a broken table entry */
        }
        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, shortopts, longopts, &idx)) != -1) {
                const struct opt_def *o = NULL;

                if (c == '?') {
                        if (optopt && optopt < 256)
                                set_err(err, errlen, "unknown option -%c; try --help", optopt);
                        else
                                set_err(err, errlen, "unknown option \"%s\"; try --help",
                                        argv[optind - 1]);
                        r = -EINVAL;
                        goto fail;
                }
                if (c == ':') {
                        set_err(err, errlen, "option \"%s\" needs an argument; try --help",
                                argv[optind - 1]);
                        r = -EINVAL;
                        goto fail;
                }
                for (size_t i = 0; i < N_OPTS; i++)
                        if ((c < 256 && opt_defs[i].short_name == c) || c == 256 + (int)i)
                                o = &opt_defs[i];
                if (!o) {
                        set_err(err, errlen, "unknown option; try --help");
                        r = -EINVAL;
                        goto fail;
                }
                r = apply(&conf, o, optarg, err, errlen);
                if (r < 0)
                        goto fail;
        }
        if (optind < argc) {
                set_err(err, errlen, "unexpected argument \"%s\"; try --help", argv[optind]);
                r = -EINVAL;
                goto fail;
        }
        if (conf.ntables == 0 && (r = add_table(&conf, "public.outbox", err, errlen)) < 0)
                goto fail;
        if (!conf.key_column)
                conf.key_column = conf.id_column;
        if (strcmp(conf.on_error, "stop") != 0 && strcmp(conf.on_error, "dead-letter") != 0) {
                set_err(err, errlen, "invalid --on-error \"%s\": expected stop or dead-letter",
                        conf.on_error);
                r = -EINVAL;
                goto fail;
        }
        conf.dead_letter = strcmp(conf.on_error, "dead-letter") == 0;
        if (strcmp(conf.null_payload, "error") != 0 && strcmp(conf.null_payload, "tombstone") != 0) {
                set_err(err, errlen, "invalid --null-payload \"%s\": expected error or tombstone",
                        conf.null_payload);
                r = -EINVAL;
                goto fail;
        }
        conf.null_tombstone = strcmp(conf.null_payload, "tombstone") == 0;
        for (const char *p = conf.dead_letter_topic; *p; p++) {
                if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') {
                        set_err(err, errlen, "invalid --dead-letter-topic \"%s\": Kafka allows only "
                                "letters, digits, '.', '_' and '-'", conf.dead_letter_topic);
                        r = -EINVAL;
                        goto fail;
                }
        }
        if (conf.skip_transaction && conf.skip_transaction == conf.dead_letter_transaction) {
                set_err(err, errlen, "--skip-transaction and --dead-letter-transaction name the same "
                        "transaction: choose one remedy");
                r = -EINVAL;
                goto fail;
        }
        if (!config_valid_slot_name(conf.slot)) {
                set_err(err, errlen,
                        "invalid slot name \"%s\": PostgreSQL allows 1 to 63 lower-case letters, "
                        "digits and underscores", conf.slot);
                r = -EINVAL;
                goto fail;
        }
        *ret_conf = conf;
        return 0;
fail:
        config_free(&conf);
        return r == -ENOMEM ? -ENOMEM : -EINVAL;
}

void config_free(struct relay_config *conf)
{
        for (size_t i = 0; i < conf->ntables; i++) {
                free(conf->tables[i].schema);
                free(conf->tables[i].table);
        }
        free(conf->tables);
        for (size_t i = 0; i < conf->nprops; i++) {
                free(conf->props[i].name);
                free(conf->props[i].value);
        }
        free(conf->props);
        conf->tables = NULL;
        conf->props = NULL;
        conf->ntables = conf->nprops = 0;
}

void config_usage(FILE *out)
{
        fprintf(out,
                "outbox-relay carries a PostgreSQL transactional outbox to Apache Kafka.\n"
                "It streams committed inserts of the outbox table(s) from a logical replication\n"
                "slot (wal2json) and confirms each transaction's LSN only after Kafka acknowledged\n"
                "every message up to it: at-least-once, deduplicate on the ce_id header.\n\n"
                "Usage:\n  outbox-relay [OPTION]...                 run the relay\n"
                "  outbox-relay check [OPTION]...           check the database and Kafka, "
                "PASS/WARN/FAIL per item\n"
                "  outbox-relay slot create [OPTION]...     create the slot (wal2json)\n"
                "  outbox-relay slot drop --yes [OPTION]... drop the slot\n"
                "  outbox-relay slot status [OPTION]...     the slot's positions and retained WAL\n"
                "\nOptions:\n");
        for (size_t i = 0; i < N_OPTS; i++) {
                const struct opt_def *o = &opt_defs[i];
                char left[64];

                if (o->short_name)
                        snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_name, o->name,
                                 o->arg ? "=" : "", o->arg ? o->arg : "");
                else
                        snprintf(left, sizeof(left), "    --%s%s%s", o->name, o->arg ? "=" : "",
                                 o->arg ? o->arg : "");
                fprintf(out, "  %-34s %s", left, o->help);
                if (o->def)
                        fprintf(out, " (default: %s)", o->def);
                fputc('\n', out);
        }
        fprintf(out,
                "\nExit status:\n"
                "  0  stopped on SIGINT/SIGTERM after flushing\n"
                "  1  runtime failure (connection lost, delivery failed); restarting may succeed\n"
                "  2  command-line usage error\n"
                "  3  environment error: database, slot or table not usable as configured\n"
                "  4  a row or stream line that cannot be published; permanent until an operator acts\n"
                "check: 0 safe to start, 2 usage error, 3 not safe (a FAIL line)\n"
                "slot: 0 done, 1 database unreachable, 2 usage error or drop without --yes,\n"
                "      3 the slot exists (create), is missing or active (drop), is missing (status)\n");
}
