/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Command-line configuration: one table of options (name, short letter,
 * argument, storage, default, help) drives getopt_long(3), --help and the
 * checks. Also the parsing of SQL-style table names ('public."Foo bar"') and
 * of librdkafka "-X name=value" pairs, refusing settings that would void the
 * at-least-once guarantee. No I/O besides --help's output stream.
 */
#ifndef RELAY_CONFIG_H
#define RELAY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes of outbox-relay, documented in README.md and --help. */
enum relay_exit {
        RELAY_EXIT_OK = 0,          /* stopped on request after flushing */
        RELAY_EXIT_RETRY = 1,       /* runtime failure; a restart may succeed */
        RELAY_EXIT_USAGE = 2,       /* bad command line */
        RELAY_EXIT_ENVIRONMENT = 3, /* database, slot or table not usable as configured */
        RELAY_EXIT_DATA = 4,        /* a row or line that cannot be published: permanent until fixed */
};

struct table_name {
        char *schema;  /* unquoted, case as stored in the catalog */
        char *table;
};

struct kafka_prop {
        char *name;
        char *value;
};

struct relay_config {
        const char *conninfo;          /* -d; NULL: libpq's PG* environment */
        const char *slot;              /* -S */
        bool create_slot;              /* --create-slot */
        struct table_name *tables;     /* -t, at least one after config_parse() */
        size_t ntables;
        const char *brokers;           /* -b */
        const char *topic_template;    /* --topic */
        const char *id_column;         /* --id-column */
        const char *key_column;        /* --key-column; defaults to id_column */
        const char *payload_column;    /* --payload-column */
        const char *type_column;       /* --type-column */
        struct kafka_prop *props;      /* -X, in command-line order */
        size_t nprops;
        int64_t status_interval_ms;    /* -s, given in seconds */
        int64_t max_inflight_messages; /* --max-inflight-messages */
        int64_t max_inflight_bytes;    /* --max-inflight-bytes */
        int64_t shutdown_timeout_ms;   /* --shutdown-timeout, given in seconds */
        const char *on_error;          /* --on-error: "stop" or "dead-letter" */
        bool dead_letter;              /* on_error is "dead-letter" */
        const char *dead_letter_topic; /* --dead-letter-topic */
        uint64_t skip_transaction;     /* --skip-transaction: end LSN, LSN_INVALID if none */
        uint64_t dead_letter_transaction; /* --dead-letter-transaction: end LSN, or LSN_INVALID */
        const char *null_payload;      /* --null-payload: "error" or "tombstone" */
        bool null_tombstone;           /* null_payload is "tombstone" */
        const char *metrics_address;   /* --metrics-address HOST:PORT, NULL: no endpoint */
        bool yes;                      /* --yes: `slot drop` really drops */
        const char *format;            /* --format: `slot status` output, "text" or "json"; NULL: text */
        int verbose;                   /* -v, repeatable */
        bool show_help;
        bool show_version;
};

/*
 * config_parse() - fill @ret_conf from @argc/@argv and defaults. Strings in
 * @ret_conf point into @argv or static storage, except tables and props,
 * which are allocated and freed by config_free().
 *
 * Returns 0, or -EINVAL with a one-line reason in @err (@errlen bytes) for an
 * unknown option, a missing or malformed argument, an invalid slot name, a
 * malformed table name or -X pair, or a -X setting that would void the
 * guarantee (enable.idempotence=false, acks other than all/-1,
 * delivery.report.only.error=true), an unknown --on-error or --null-payload
 * value, a malformed LSN, or --dead-letter-transaction without a
 * --dead-letter-topic to send to.
 */
int config_parse(int argc, char **argv, struct relay_config *ret_conf, char *err, size_t errlen);

/* config_free() - free what config_parse() allocated; @conf may be zeroed. */
void config_free(struct relay_config *conf);

/* config_usage() - print --help text to @out. */
void config_usage(FILE *out);

/*
 * config_parse_table_name() - parse @text as an SQL qualified name: one or two
 * identifiers separated by '.', each either unquoted (folded to lower case, as
 * PostgreSQL does) or double-quoted with "" for a quote. Without a schema,
 * "public" is used. On success returns 0 and sets @ret (strings allocated,
 * owned by the caller); -EINVAL for malformed text, -ENOMEM.
 */
int config_parse_table_name(const char *text, struct table_name *ret);

/*
 * config_check_kafka_prop() - 0 if librdkafka property @name may be set to
 * @value, or -EPERM with the reason in @err when it would void the
 * at-least-once guarantee.
 */
int config_check_kafka_prop(const char *name, const char *value, char *err, size_t errlen);

/* config_valid_slot_name() - true for 1..63 bytes of [a-z0-9_] (PostgreSQL's rule, slot.c). */
bool config_valid_slot_name(const char *name);

#endif
