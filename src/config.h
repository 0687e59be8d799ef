/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Configuration: one table of settings (name, short letter, argument,
 * storage, default, help, where it may be set, whether SIGHUP reloads it)
 * drives getopt_long(3), the configuration file (INI lines "name = value",
 * read with libinih), the OUTBOX_RELAY_* environment variables, --help and
 * the checks. The command line wins over the environment, which wins over
 * the file, which wins over a preset (--preset), which wins over the
 * defaults. Also the parsing of SQL-style table names ('public."Foo bar"') and
 * of librdkafka "name=value" properties, refusing settings that would void
 * the at-least-once guarantee. Reads the configuration file and files named
 * by *_FILE variables; no other I/O besides --help's output stream.
 */
#ifndef RELAY_CONFIG_H
#define RELAY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes of outbox-relay, documented in outbox-relay(1) and --help. */
enum relay_exit {
        RELAY_EXIT_OK = 0,          /* stopped on request after flushing */
        RELAY_EXIT_RETRY = 1,       /* runtime failure; a restart may succeed */
        RELAY_EXIT_USAGE = 2,       /* bad command line, configuration file or environment */
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

/* One --column-header: the text of @column published as Kafka header @header. */
struct column_header {
        char *column;  /* as wal2json names it (unquoted, case as stored) */
        char *header;  /* 1 to RECORD_HEADER_NAME_MAX bytes, not reserved (record.h) */
};

struct relay_config {
        const char *conninfo;          /* -d; NULL: libpq's PG* environment */
        const char *slot;              /* -S */
        const char *plugin;            /* --plugin: "wal2json", "pgoutput" or "auto" */
        const char *publication;       /* --publication; NULL: the slot's name (config_publication()) */
        bool failover;                 /* --failover: create the slot as a failover slot (17+) */
        bool create_slot;              /* --create-slot */
        int64_t slot_create_timeout_ms; /* --slot-create-timeout, given in seconds; 0: no limit */
        const char *after_slot;        /* --after-slot: the slot of the consumer being replaced, or NULL */
        int64_t after_slot_timeout_ms; /* --after-slot-timeout, given in seconds */
        struct table_name *tables;     /* -t, at least one after config_parse() */
        size_t ntables;
        const char *brokers;           /* -b */
        const char *topic_template;    /* --topic */
        const char *id_column;         /* --id-column */
        const char *key_column;        /* --key-column; defaults to id_column */
        const char *payload_column;    /* --payload-column */
        const char *type_column;       /* --type-column */
        const char *headers_column;    /* --headers-column: extra Kafka headers, if the table has it */
        bool no_headers_column;        /* --no-headers-column */
        struct column_header *column_headers; /* --column-header, in the order given; a preset's
                                               * first */
        size_t ncolumn_headers;        /* at most RECORD_COLUMN_HEADERS_MAX (record.h) */
        const char *preset;            /* --preset: "debezium", or NULL for none */
        const char *message_prefix;    /* --message-prefix: logical messages published, or NULL */
        const char *ignore_message_prefix; /* --ignore-message-prefix: an outbox-like prefix passed
                                            * over without stopping, or NULL */
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
        bool exactly_once;             /* --exactly-once */
        const char *transactional_id;  /* --transactional-id; NULL: derived */
        int64_t txn_max_messages;      /* --kafka-transaction-messages */
        int64_t txn_max_bytes;         /* --kafka-transaction-bytes */
        int64_t txn_max_ms;            /* --kafka-commit-interval, given in seconds */
        bool txn_max_given;            /* --kafka-commit-interval set by a source, not by its default */
        bool txn_fixed_time;           /* --kafka-commit-fixed-interval */
        const char *txn_producers;     /* --kafka-transactional-producers: "auto", "1" or "2" */
        const char *checkpoint_topic;  /* --checkpoint-topic */
        uint64_t accept_slot_position; /* --accept-slot-position: LSN, or LSN_INVALID */
        bool accept_config_change;     /* --accept-config-change */
        const char *record_timestamp;  /* --record-timestamp: "produce" or "commit" */
        bool commit_timestamp;         /* record_timestamp is "commit" */
        const char *metrics_address;   /* --http (alias --metrics-address) HOST:PORT, NULL: none */
        int64_t ready_timeout_ms;      /* --ready-timeout, given in seconds; 0: no progress check */
        int64_t stats_interval_ms;     /* --stats-interval, given in seconds; 0: no stats lines */
        int64_t metrics_max_topics;    /* --metrics-max-topics: topic labels kept apart */
        const char *config_file;       /* -c; NULL: none */
        const char *log_level;         /* --log-level: debug, info, warning or error */
        const char *log_format;        /* --log-format: text or json */
        const char *log_file;          /* --log-file; NULL: stderr */
        bool yes;                      /* --yes: `slot drop` really drops */
        const char *format;            /* --format: `slot status` output, "text" or "json"; NULL: text */
        /* `redrive` (redrive.h checks what goes together) */
        const char **work_ids;         /* --work-id, repeatable, in the order given (point into argv) */
        size_t nwork_ids;
        const char *since;             /* --since: TIME text (redrive_parse_time()); NULL: none */
        const char *until;             /* --until: TIME text; NULL: none */
        const char *kind;              /* --kind: the type column's (ce_type's) value; NULL: any */
        const char *error_code;        /* --error-code: a dead letter's outbox_relay_error_code; NULL: any */
        const char *reason;            /* --reason: why, published as a header */
        const char *time_column;       /* --time-column: what --since/--until and the horizon read */
        int64_t dedup_horizon_ms;      /* --dedup-horizon, given in seconds */
        int64_t max_records;           /* --max-records: the most one redrive publishes */
        bool from_dead_letter;         /* --from-dead-letter */
        int verbose;                   /* -v, repeatable; sets log_level to debug */
        bool show_help;
        bool show_version;
        char **notes;                  /* warnings for the caller to log, e.g. unknown variables */
        size_t nnotes;
        char **strs;                   /* strings config_parse() allocated, freed by config_free() */
        size_t nstrs;
};

/*
 * config_parse() - fill @ret_conf from defaults, the configuration file
 * (-c/--config, else $OUTBOX_RELAY_CONFIG), the environment and
 * @argc/@argv, each setting taken from the highest of these sources that
 * sets it. A repeatable setting (table, column-header) given by a higher
 * source replaces the lower source's list; librdkafka properties merge per
 * property name. Then the preset (--preset, from any source) sets what no
 * source set (config_usage() lists each preset's defaults); its column
 * headers come before the given ones, unless one of these has the same
 * header name.
 *
 * File format (outbox-relay(1), CONFIGURATION): INI lines "name = value" as
 * libinih reads them, name being a long option or "kafka.<librdkafka
 * property>"; '#' or ';' starts a comment line, " ;" an inline comment; no
 * sections; at most INI_MAX_LINE - 3 bytes a line. Environment:
 * OUTBOX_RELAY_<NAME> (upper case, '-' as '_'), OUTBOX_RELAY_KAFKA_<PROPERTY>
 * ('.' as '_', '_' as "__"), and any of these with "_FILE" appended names a
 * file holding the value (one trailing newline removed). Flags take
 * true/false (yes/no, on/off, 1/0) outside the command line. With --help or
 * --version on the command line, the file and the environment are not read.
 * Strings in @ret_conf point into @argv, static storage or conf->strs; all
 * is freed by config_free(). Unknown OUTBOX_RELAY_* variables and a
 * world-readable file holding a password are reported in conf->notes.
 *
 * Returns 0; -ENOMEM; or -EINVAL with a one-line reason in @err (@errlen
 * bytes) naming the source (option, "FILE:LINE: " or variable) for an
 * unknown option or setting, a malformed line, an unreadable file, a missing
 * or malformed value, an invalid slot name, a malformed table name or
 * property, a property that would void the guarantee or never work
 * (enable.idempotence=false, acks other than all/-1,
 * delivery.report.only.error=true, transactional.id), an
 * unknown choice (--on-error, --null-payload, --log-level, --log-format), a
 * malformed LSN, both a variable and its _FILE form set, or a --column-header
 * that is malformed (COLUMN[=HEADER], neither empty), names a reserved header
 * (the "ce_" and "outbox_relay_" prefixes, "content-type"; any case), a
 * header longer than RECORD_HEADER_NAME_MAX bytes, a header already named,
 * or is one too many (RECORD_COLUMN_HEADERS_MAX).
 */
int config_parse(int argc, char **argv, struct relay_config *ret_conf, char *err, size_t errlen);

/*
 * config_reload_fn - told about one setting whose value differs on reload.
 * @old_value and @new_value are given (as text) only for a reloaded
 * setting; other values are not shown, they may hold secrets.
 */
typedef void (*config_reload_fn)(void *ctx, const char *name, const char *old_value,
                                 const char *new_value, bool reloaded);

/*
 * config_reload() - take from @next (a fresh config_parse() result) the
 * settings marked reloadable (the log settings) into @conf, calling @fn for
 * every setting whose value differs, reloaded or not. Takes ownership of
 * @next's allocations and frees @next. Returns 0, or -ENOMEM with @conf
 * unchanged.
 */
int config_reload(struct relay_config *conf, struct relay_config *next, config_reload_fn fn,
                   void *ctx);

/* config_free() - free what config_parse() allocated; @conf may be zeroed. */
void config_free(struct relay_config *conf);

/* config_usage() - print --help text to @out. */
void config_usage(FILE *out);

/*
 * config_man_options() - print the OPTIONS section of outbox-relay(1), in
 * scdoc(5) syntax, from the same option table as config_usage(): each
 * option's --help text, then what --help leaves out, its default, its
 * environment variable and file name, and whether SIGHUP reloads it. Built
 * into the page by src/man/manopts.c, so the page and --help cannot drift.
 */
void config_man_options(FILE *out);

/* config_man_presets() - each preset's defaults, as config_usage() lists them, in scdoc(5) syntax. */
void config_man_presets(FILE *out);

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
 * @value, or -EPERM with the reason in @err ("NAME=VALUE refused: ...", the
 * caller says where it was set) when it would void the at-least-once
 * guarantee.
 */
int config_check_kafka_prop(const char *name, const char *value, char *err, size_t errlen);

/*
 * config_mapping() - what two relays sharing a slot must agree on, as one
 * line into @buf (@size bytes, truncated): the table set and how a row
 * becomes a record (columns, topic template, headers, NULL payloads). The
 * checkpoint record carries it (and its digest).
 */
void config_mapping(const struct relay_config *conf, char *buf, size_t size);

/* config_valid_slot_name() - true for 1..63 bytes of [a-z0-9_] (PostgreSQL's rule, slot.c). */
bool config_valid_slot_name(const char *name);

/* config_publication() - the publication pgoutput streams: --publication, else the slot's name. */
static inline const char *config_publication(const struct relay_config *conf)
{
        return conf->publication ? conf->publication : conf->slot;
}

/* Bytes of a --message-prefix, at most. */
#define CONFIG_MESSAGE_PREFIX_MAX 128

/*
 * config_valid_message_prefix() - true for 1..CONFIG_MESSAGE_PREFIX_MAX
 * bytes of [A-Za-z0-9_.:/-]. wal2json's add-msg-prefixes (wal2json.c,
 * split_string_to_list()) splits its value at commas and blanks and keeps a
 * backslash as part of the name, so it cannot name a prefix holding any of
 * them; the rest is kept to what needs no quoting anywhere.
 */
bool config_valid_message_prefix(const char *prefix);

#endif
