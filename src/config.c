// SPDX-License-Identifier: Apache-2.0
/*
 * Table-driven configuration for outbox-relay: command line, environment and
 * configuration file (libinih), and presets. Knows the setting names, the
 * guarantee-voiding librdkafka settings and the header names the relay
 * reserves (record.h), nothing of how they are used.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lsn.h"
#include "record.h"

extern char **environ;

enum opt_type {
        OPT_STRING,   /* const char * */
        OPT_FLAG,     /* bool, no argument on the command line, true/false elsewhere */
        OPT_DEBUG,    /* int, no argument, incremented; sets log_level to "debug" */
        OPT_INT,      /* int64_t, plain integer */
        OPT_SECONDS,  /* int64_t milliseconds, argument in seconds (decimals allowed) */
        OPT_TABLE,    /* appended to tables */
        OPT_PROP,     /* NAME=VALUE, merged into props */
        OPT_LSN,      /* uint64_t, pg_lsn text */
        OPT_CHOICE,   /* const char *, one of the '|'-separated words of arg */
        OPT_SLOT,     /* const char *, a replication slot name */
        OPT_TOPIC,    /* const char *, a Kafka topic name */
        OPT_COLHDR,   /* COLUMN[=HEADER], appended to column_headers */
        OPT_WORKID,   /* const char *, appended to work_ids (command line only) */
        OPT_PREFIX,   /* const char *, a logical message prefix (config_valid_message_prefix()) */
        OPT_NAME,     /* const char *, a publication name: a slot name's characters, used unquoted */
};

/* opt_def.flags: where a setting may be given, what SIGHUP does with it. */
#define OPT_NOFILE 0x1           /* not in the configuration file */
#define OPT_NOENV 0x2            /* no OUTBOX_RELAY_<NAME> variable */
#define OPT_RELOAD 0x4           /* SIGHUP applies a new value (config_reload()) */
#define OPT_CMDLINE (OPT_NOFILE | OPT_NOENV)

#define ENV_PREFIX "OUTBOX_RELAY_"
#define ENV_KAFKA_PREFIX "OUTBOX_RELAY_KAFKA_"
#define FILE_KAFKA_PREFIX "kafka."
#define VALUE_FILE_MAX (1024 * 1024)  /* bytes of a *_FILE value, at most */

struct opt_def {
        const char *name;
        int short_name;     /* 0: long only */
        enum opt_type type;
        size_t offset;      /* into struct relay_config */
        const char *def;    /* default, as on the command line; NULL: none */
        int64_t min, max;   /* OPT_INT / OPT_SECONDS (ms) bounds */
        const char *arg;    /* argument name in --help; the choices of OPT_CHOICE */
        const char *help;
        unsigned flags;     /* OPT_NOFILE, OPT_NOENV, OPT_RELOAD */
        const char *more;   /* outbox-relay(1) only: what --help leaves out; NULL: nothing */
};

#define OFF(f) offsetof(struct relay_config, f)

static const struct opt_def opt_defs[] = {
        {"config", 'c', OPT_STRING, OFF(config_file), NULL, 0, 0, "FILE",
         "read settings from FILE (see Configuration below)", OPT_NOFILE, NULL},
        {"dbname", 'd', OPT_STRING, OFF(conninfo), NULL, 0, 0, "CONNINFO",
         "database holding the outbox: connection string or URI (PG* variables apply)", 0,
         "The relay adds replication=database for the stream. Give the password in libpq's "
         "password file (passfile=, $PGPASSFILE, ~/.pgpass), never here."},
        {"slot", 'S', OPT_SLOT, OFF(slot), "outbox_relay", 0, 0, "NAME",
         "logical replication slot", 0,
         "Lower-case letters, digits and underscores, at most 63 bytes."},
        {"plugin", 0, OPT_CHOICE, OFF(plugin), "wal2json", 0, 0, "wal2json|pgoutput|auto",
         "the slot's output plugin; auto: wal2json where the server allows it, else pgoutput (an "
         "existing slot keeps its own)", 0,
         "pgoutput is PostgreSQL's own output plugin: it needs nothing installed and no entry in "
         "output_plugin_libraries, and gives the same Kafka records byte for byte. A slot keeps the "
         "plugin it was created with: a slot of the other plugin is a usage error (exit 2)."},
        {"publication", 0, OPT_NAME, OFF(publication), NULL, 0, 0, "NAME",
         "pgoutput: the publication of the outbox tables (default: the slot's name)", 0,
         "It must list exactly the outbox tables and publish inserts only; --create-slot and slot "
         "create create it, before the slot, when it is missing."},
        {"failover", 0, OPT_FLAG, OFF(failover), NULL, 0, 0, NULL,
         "create the slot as a failover slot, synchronized to standbys (PostgreSQL 17+)", 0,
         "For --create-slot and slot create. The standbys need sync_replication_slots = on, and "
         "the primary synchronized_standby_slots naming their physical slots: check says what is "
         "missing."},
        {"create-slot", 0, OPT_FLAG, OFF(create_slot), NULL, 0, 0, NULL,
         "create the slot if it does not exist (first start only)", 0,
         "Without it a missing slot is an error (exit 3). Rows already in the outbox when the "
         "slot is created are not published (the relay warns and counts them). A slot that was "
         "dropped after a relay published from it is made anew, but the relay then stops (exit 3): "
         "the rows committed in between were decoded by no slot (outbox-relay(7), \"A lost slot\")."},
        {"after-slot", 0, OPT_SLOT, OFF(after_slot), NULL, 0, 0, "SLOT",
         "slot create and check: the slot of the consumer this relay replaces (Debezium's); "
         "wait until it has confirmed past the new slot's consistent point", OPT_NOFILE,
         "Rows committed before the new slot's consistent point are the old consumer's to "
         "publish: until that slot's confirmed_flush_lsn has passed it, stopping the old "
         "consumer loses the rows in between. slot create waits for it (--after-slot-timeout), "
         "check FAILs until then. See outbox-relay(7), DEBEZIUM OUTBOX LAYOUT."},
        {"after-slot-timeout", 0, OPT_SECONDS, OFF(after_slot_timeout_ms), "300", 0, 86400000,
         "SECONDS", "slot create --after-slot: wait at most this long (0: do not wait, only say)", 0,
         NULL},
        {"slot-create-timeout", 0, OPT_SECONDS, OFF(slot_create_timeout_ms), "300", 0, 86400000,
         "SECONDS", "give up creating the slot after this long; the server cancels it (0: wait)", 0,
         "For --create-slot and slot create. The server cancels the creation itself, so "
         "nothing is left behind; a forgotten prepared transaction is the usual cause of the "
         "wait."},
        {"table", 't', OPT_TABLE, 0, "public.outbox", 0, 0, "SCHEMA.TABLE",
         "outbox table, SQL syntax ('public.\"Foo bar\"'); repeatable", 0,
         "Every table must have the columns the mapping options name."},
        {"brokers", 'b', OPT_STRING, OFF(brokers), "localhost:9092", 0, 0, "LIST",
         "Kafka bootstrap servers", 0, NULL},
        {"preset", 0, OPT_CHOICE, OFF(preset), NULL, 0, 0, "debezium",
         "defaults for another outbox layout (see Presets below); options given explicitly win", 0,
         "debezium publishes as Debezium's Outbox Event Router does; see PRESETS below."},
        {"topic", 0, OPT_STRING, OFF(topic_template), "outbox.${kind}", 0, 0, "TEMPLATE",
         "topic of each row; ${column} is replaced by the column's value", 0, NULL},
        {"id-column", 0, OPT_STRING, OFF(id_column), "work_id", 0, 0, "NAME",
         "column holding the work ID (ce_id header)", 0, NULL},
        {"key-column", 0, OPT_STRING, OFF(key_column), NULL, 0, 0, "NAME",
         "column used as the Kafka key (default: the ID column)", 0,
         "An entity column gives per-entity order."},
        {"payload-column", 0, OPT_STRING, OFF(payload_column), "payload", 0, 0, "NAME",
         "column used as the Kafka value", 0, NULL},
        {"type-column", 0, OPT_STRING, OFF(type_column), "kind", 0, 0, "NAME",
         "column used as the ce_type header", 0,
         "Left out of the record where the table has no such column."},
        {"headers-column", 0, OPT_STRING, OFF(headers_column), "headers", 0, 0, "NAME",
         "column of extra Kafka headers, a JSON object of strings (used where the table has it)", 0,
         "NULL publishes no extra header."},
        {"no-headers-column", 0, OPT_FLAG, OFF(no_headers_column), NULL, 0, 0, NULL,
         "publish no extra headers from any column (for a table whose headers column means "
         "something else)", 0, NULL},
        {"column-header", 0, OPT_COLHDR, 0, NULL, 0, 0, "COLUMN[=HEADER]",
         "publish the column's text as Kafka header HEADER (default: the column's name), none "
         "for NULL; repeatable", 0,
         "At most 16; the relay's own names (ce_*, outbox_relay_*, content-type) are refused. "
         "See outbox-relay(7), COLUMNS AS HEADERS."},
        {"message-prefix", 0, OPT_PREFIX, OFF(message_prefix), NULL, 0, 0, "PREFIX",
         "also publish transactional logical messages with this prefix (outbox_emit())", 0,
         "The message stands for a row and is published as one. See outbox-relay(7), AN OUTBOX"
         " WITH NO TABLE."},
        {"ignore-message-prefix", 0, OPT_PREFIX, OFF(ignore_message_prefix), NULL, 0, 0, "PREFIX",
         "pass over transactional logical messages with this prefix, which looks like an outbox's "
         "but is not this relay's", 0,
         "Without it a transactional message whose prefix contains \"outbox\" (any case) or is "
         "the one outbox_emit() of sql/outbox.sql writes, other than --message-prefix, stops the "
         "relay (exit 4) before anything past it is confirmed. See outbox-relay(7), AN OUTBOX WITH "
         "NO TABLE."},
        {"kafka-property", 'X', OPT_PROP, 0, NULL, 0, 0, "NAME=VALUE",
         "librdkafka property; repeatable", OPT_NOENV,
         "Passed to librdkafka as it is (-X security.protocol=SSL); enable.idempotence=false, "
         "acks other than all, delivery.report.only.error=true and transactional.id are "
         "refused. With librdkafka 2.5 and later the relay sets enable.metrics.push=false (client "
         "metrics pushed to the brokers, KIP-714) unless -X gives it: with it on, closing a "
         "librdkafka client could take a whole second, at every start and reconnect."},
        {"status-interval", 's', OPT_SECONDS, OFF(status_interval_ms), "10", 100, 3600000, "SECONDS",
         "standby status update interval", 0,
         "Lowered to under half the server's wal_sender_timeout; updates also go out soon "
         "after the confirmed LSN moves and whenever the server asks."},
        {"max-inflight-messages", 0, OPT_INT, OFF(max_inflight_messages), "5000", 1, 10000000, "N",
         "messages handed to Kafka and not yet acknowledged, at most", 0,
         "At the bound the relay stops reading the stream until acknowledgements come back. "
         "Throughput is at most this many messages per acknowledgement round trip: enough for "
         "a broker in the same region (measured on loopback: as fast as 20,000, at 20 MB "
         "resident instead of 35 to 45); raise it for a broker hundreds of ms away."},
        {"max-inflight-bytes", 0, OPT_INT, OFF(max_inflight_bytes), "16777216", 1024,
         INT64_C(1) << 40, "BYTES",
         "bytes of keys, values and headers not yet acknowledged, at most", 0,
         "At the bound the relay stops reading the stream until acknowledgements come back."},
        {"shutdown-timeout", 0, OPT_SECONDS, OFF(shutdown_timeout_ms), "30", 0, 3600000, "SECONDS",
         "on SIGTERM, wait this long for outstanding acknowledgements", 0, NULL},
        {"on-error", 0, OPT_CHOICE, OFF(on_error), "stop", 0, 0, "stop|dead-letter",
         "a row that cannot be published stops the relay, or goes to the dead-letter topic", 0,
         "See outbox-relay(7), ROWS THAT CANNOT BE PUBLISHED."},
        {"dead-letter-topic", 0, OPT_TOPIC, OFF(dead_letter_topic), "outbox.dead-letter", 0, 0,
         "TOPIC", "where --on-error=dead-letter sends unpublishable rows", 0, NULL},
        {"skip-transaction", 0, OPT_LSN, OFF(skip_transaction), NULL, 0, 0, "LSN",
         "operator's remedy: skip the one transaction ending at LSN (its ce_pglsn)", 0,
         "Logged loudly with the user who started the relay; remove it after use (a start past"
         " that LSN warns)."},
        {"dead-letter-transaction", 0, OPT_LSN, OFF(dead_letter_transaction), NULL, 0, 0, "LSN",
         "operator's remedy: dead-letter the unpublishable rows of the transaction ending at LSN",
         0,
         "Its other rows are published. Remove it after use (a start past that LSN warns)."},
        {"exactly-once", 0, OPT_FLAG, OFF(exactly_once), NULL, 0, 0, NULL,
         "publish in Kafka transactions with the checkpoint: read_committed consumers see each row once",
         0,
         "See outbox-relay(7), EXACTLY-ONCE INTO KAFKA."},
        {"transactional-id", 0, OPT_STRING, OFF(transactional_id), NULL, 0, 0, "ID",
         "--exactly-once: the producer's transactional.id (default: from system, database and slot)",
         0,
         "The default is outbox-relay/<system identifier>/<database>/<slot>; -X "
         "transactional.id is refused. The relay also uses ID.1 (see "
         "--kafka-transactional-producers): give no other relay that id."},
        {"kafka-transaction-messages", 0, OPT_INT, OFF(txn_max_messages), "100000", 1, 1000000, "N",
         "--exactly-once: records in one Kafka transaction, at most (a larger PostgreSQL one is split)",
         0, NULL},
        {"kafka-transaction-bytes", 0, OPT_INT, OFF(txn_max_bytes), "67108864", 1024, INT64_C(1) << 32,
         "BYTES", "--exactly-once: bytes of records in one Kafka transaction, at most", 0, NULL},
        {"kafka-commit-interval", 0, OPT_SECONDS, OFF(txn_max_ms), "0.02", 0, 60000, "SECONDS",
         "--exactly-once: commit a Kafka transaction at most this long after it began, at a commit "
         "(0.005 with two transactional producers unless given)", 0,
         "Sooner when Kafka has acknowledged every record in it and no row is waiting to be read "
         "(unless --kafka-commit-fixed-interval). While draining a backlog, as long as the backlog's "
         "lag (at most 1 s), or until no commit has been read for this long."},
        {"kafka-commit-fixed-interval", 0, OPT_FLAG, OFF(txn_fixed_time), NULL, 0, 0, NULL,
         "--exactly-once: commit only at --kafka-commit-interval, never once acknowledged", 0,
         "Fewer, larger Kafka transactions on a quiet stream, each row visible later. While draining "
         "a backlog a transaction still ends once no commit has been read for --kafka-commit-interval, "
         "as without this flag."},
        {"kafka-transactional-producers", 0, OPT_CHOICE, OFF(txn_producers), "auto", 0, 0, "auto|1|2",
         "--exactly-once: producers taking Kafka transactions in turn (2: transactional.id ID and ID.1; "
         "auto: 2 with librdkafka 2.4 or later)", 0,
         "With 2 the next Kafka transaction begins while the coordinator still finishes the last one "
         "(it refuses the same id's next AddPartitionsToTxn until then, and librdkafka retries only "
         "after 20 ms): a live stream's records arrive sooner. Before librdkafka 2.4 each producer "
         "costs CPU even when idle, so auto takes one there. Where auto takes two, ID.1 refused by the "
         "broker's ACLs leaves one producer, with a warning. Either way the relay fences ID.1 at start. See "
         "outbox-relay(7), EXACTLY-ONCE INTO KAFKA."},
        {"checkpoint-topic", 0, OPT_TOPIC, OFF(checkpoint_topic), "outbox-relay.checkpoints", 0, 0,
         "TOPIC", "compacted topic of the relay's checkpoint records (created if missing)", 0,
         "Created with one partition if missing. See outbox-relay(7), WHAT THE RELAY KEEPS "
         "TRUE WHILE IT RUNS."},
        {"accept-slot-position", 0, OPT_LSN, OFF(accept_slot_position), NULL, 0, 0, "LSN",
         "operator's remedy: accept a slot moved by someone else to LSN (after recovering its rows)",
         0,
         "Remove it after use."},
        {"accept-config-change", 0, OPT_FLAG, OFF(accept_config_change), NULL, 0, 0, NULL,
         "operator's remedy: this relay's tables or row mapping, or pgoutput's publication, changed on purpose", 0,
         "Remove it after use."},
        {"null-payload", 0, OPT_CHOICE, OFF(null_payload), "error", 0, 0, "error|tombstone",
         "a NULL payload is a row error, or is published as a Kafka tombstone", 0, NULL},
        {"record-timestamp", 0, OPT_CHOICE, OFF(record_timestamp), "produce", 0, 0, "produce|commit",
         "the Kafka record timestamp: when the relay produces it, or the commit time", 0,
         "The commit time risks Kafka's timestamp limits and retention; see outbox-relay(7), "
         "THE KAFKA RECORD."},
        {"http", 0, OPT_STRING, OFF(metrics_address), NULL, 0, 0, "HOST:PORT",
         "serve /metrics (Prometheus text), /healthz and /readyz over HTTP", 0,
         "Off by default. No authentication: bind to loopback or a private address. See "
         "outbox-relay(7), ENDPOINTS."},
        {"metrics-address", 0, OPT_STRING, OFF(metrics_address), NULL, 0, 0, "HOST:PORT",
         "the same as --http (older name)", 0, NULL},
        {"ready-timeout", 0, OPT_SECONDS, OFF(ready_timeout_ms), "60", 0, 86400000, "SECONDS",
         "/readyz fails when messages wait this long with no ack or confirm (0: never)", 0,
         "Also the readiness gauge outbox_relay_ready."},
        {"stats-interval", 0, OPT_SECONDS, OFF(stats_interval_ms), "60", 0, 86400000, "SECONDS",
         "log a one-line stats summary this often (0: never)", 0,
         "At info level."},
        {"metrics-max-topics", 0, OPT_INT, OFF(metrics_max_topics), "100", 1, 1024, "N",
         "topics counted apart in /metrics; the rest are counted as \"_other\"", 0, NULL},
        {"log-level", 0, OPT_CHOICE, OFF(log_level), "info", 0, 0, "debug|info|warning|error",
         "lowest level logged", OPT_RELOAD, NULL},
        {"log-format", 0, OPT_CHOICE, OFF(log_format), "text", 0, 0, "text|json",
         "log lines as text, or as JSON objects {\"ts\",\"level\",\"msg\"}", OPT_RELOAD, NULL},
        {"log-file", 0, OPT_STRING, OFF(log_file), NULL, 0, 0, "PATH",
         "append the log to PATH instead of stderr", OPT_RELOAD,
         "Created mode 0640; reopened on SIGHUP (after a rotation moved it)."},
        {"yes", 0, OPT_FLAG, OFF(yes), NULL, 0, 0, NULL,
         "slot drop: really drop the slot; redrive: also rows past the deduplication horizon "
         "(command line only)", OPT_CMDLINE, NULL},
        {"format", 0, OPT_STRING, OFF(format), NULL, 0, 0, "text|json",
         "slot status: output format (default: text)", OPT_CMDLINE, NULL},
        {"work-id", 0, OPT_WORKID, 0, NULL, 0, 0, "ID",
         "redrive: the record of this work ID; repeatable", OPT_CMDLINE,
         "At most 10000."},
        {"since", 0, OPT_STRING, OFF(since), NULL, 0, 0, "TIME",
         "redrive: records written at or after TIME (RFC 3339, e.g. 2026-11-30T06:00:00Z)",
         OPT_CMDLINE,
         "RFC 3339 with an offset; inclusive."},
        {"until", 0, OPT_STRING, OFF(until), NULL, 0, 0, "TIME",
         "redrive: records written before TIME", OPT_CMDLINE,
         "RFC 3339 with an offset; exclusive."},
        {"kind", 0, OPT_STRING, OFF(kind), NULL, 0, 0, "KIND",
         "redrive: only records of this type (type column, ce_type)", OPT_CMDLINE, NULL},
        {"reason", 0, OPT_STRING, OFF(reason), NULL, 0, 0, "TEXT",
         "redrive: why, published in header outbox_relay_redrive_reason (required)",
         OPT_CMDLINE, NULL},
        {"from-dead-letter", 0, OPT_FLAG, OFF(from_dead_letter), NULL, 0, 0, NULL,
         "redrive: from the dead-letter topic to each record's intended topic", OPT_CMDLINE, NULL},
        {"error-code", 0, OPT_STRING, OFF(error_code), NULL, 0, 0, "CODE",
         "redrive --from-dead-letter: only dead letters of this error code "
         "(outbox_relay_error_code, e.g. UNKNOWN_TOPIC_OR_PART)", OPT_CMDLINE,
         "A selection by itself, or narrows --work-id and --since. The codes are listed in "
         "outbox-relay(7), ROWS THAT CANNOT BE PUBLISHED."},
        {"time-column", 0, OPT_STRING, OFF(time_column), "created_at", 0, 0, "NAME",
         "redrive: the outbox column --since, --until and --dedup-horizon read", 0,
         "A table without it is redriven by --work-id alone, with --yes (its rows' age is "
         "unknown)."},
        {"dedup-horizon", 0, OPT_SECONDS, OFF(dedup_horizon_ms), "604800", 1000,
         INT64_C(315360000000), "SECONDS",
         "redrive: older records need --yes; the receivers' deduplication horizon (7 days)", 0,
         "In seconds; the default of inbox_cleanup() in the SQL kit's inbox.sql."},
        {"max-records", 0, OPT_INT, OFF(max_records), "10000", 1, 1000000, "N",
         "redrive: a selection of more records is refused before anything is published", 0,
         "At most 1000000."},
        {"verbose", 'v', OPT_DEBUG, OFF(verbose), NULL, 0, 0, NULL, "same as --log-level=debug",
         OPT_CMDLINE, NULL},
        {"version", 'V', OPT_FLAG, OFF(show_version), NULL, 0, 0, NULL, "print version and exit",
         OPT_CMDLINE, NULL},
        {"help", '?', OPT_FLAG, OFF(show_help), NULL, 0, 0, NULL, "print this help and exit",
         OPT_CMDLINE, NULL},
};

#define N_OPTS (sizeof(opt_defs) / sizeof(opt_defs[0]))

/* Where the value being applied comes from; the higher, the stronger. */
enum src_kind {
        SRC_PRESET = 0,  /* --preset's defaults, applied where no source set a value */
        SRC_FILE = 1,
        SRC_ENV = 2,
        SRC_CMDLINE = 3,
};

struct parse {
        struct relay_config *conf;
        enum src_kind kind;
        const char *file;    /* SRC_FILE: path */
        int line;            /* SRC_FILE: line being read, counted by file_reader() */
        const char *var;     /* SRC_ENV: the variable */
        enum src_kind tables_from; /* source of conf->tables; 0: none yet */
        enum src_kind colhdrs_from; /* source of conf->column_headers; 0: none yet */
        bool given[N_OPTS];  /* set by a source, not by a default or a preset */
        char *err;
        size_t errlen;
        int ret;             /* first error, negative errno; 0 */
        int err_line;        /* SRC_FILE: line of that error */
        FILE *fp;
        char *buf;           /* getline(3)'s buffer */
        size_t cap;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
}

bool config_valid_message_prefix(const char *prefix)
{
        size_t n = strlen(prefix);

        if (n == 0 || n > CONFIG_MESSAGE_PREFIX_MAX)
                return false;
        for (const char *p = prefix; *p; p++)
                if (!isalnum((unsigned char)*p) && !strchr("_.:/-", *p))
                        return false;
        return true;
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
                        "enable.idempotence=%s refused: without the idempotent producer a "
                        "retried batch can be written twice or out of order, remove it", value);
                return -EPERM;
        }
        if ((strcmp(name, "acks") == 0 || strcmp(name, "request.required.acks") == 0) &&
            strcmp(value, "all") != 0 && strcmp(value, "-1") != 0) {
                set_err(err, errlen,
                        "%s=%s refused: an acknowledgement before all in-sync replicas have the "
                        "message can be lost with a broker, and the slot would already be confirmed "
                        "past it; use acks=all", name, value);
                return -EPERM;
        }
        if (strcmp(name, "delivery.report.only.error") == 0 && strcasecmp(value, "false") != 0) {
                set_err(err, errlen,
                        "delivery.report.only.error=%s refused: the relay confirms the slot "
                        "only on successful delivery reports", value);
                return -EPERM;
        }
        if (strcmp(name, "transactional.id") == 0) {
                set_err(err, errlen,
                        "transactional.id=%s refused: a transactional producer refuses every message "
                        "outside a Kafka transaction, so the relay could publish nothing; remove it "
                        "(a Java producer's setting does not carry over)", value);
                return -EPERM;
        }
        return 0;
}

/* Keep @s (allocated) until config_free(); NULL if @s is NULL or on -ENOMEM. */
static char *keep(struct relay_config *conf, char *s)
{
        char **n;

        if (!s)
                return NULL;
        n = realloc(conf->strs, (conf->nstrs + 1) * sizeof(*n));
        if (!n) {
                free(s);
                return NULL;
        }
        conf->strs = n;
        n[conf->nstrs++] = s;
        return s;
}

static int add_note(struct relay_config *conf, char *note)
{
        char **n;

        if (!note)
                return -ENOMEM;
        n = realloc(conf->notes, (conf->nnotes + 1) * sizeof(*n));
        if (!n) {
                free(note);
                return -ENOMEM;
        }
        conf->notes = n;
        n[conf->nnotes++] = note;
        return 0;
}

/* "FILE:LINE: " for a value from the configuration file, else "". */
static const char *where(const struct parse *p, char *buf, size_t size)
{
        if (p->kind != SRC_FILE)
                return "";
        snprintf(buf, size, "%s:%d: ", p->file, p->line);
        return buf;
}

/* How the setting is called where its value comes from: --name, NAME or the variable. */
static const char *label(const struct parse *p, const struct opt_def *o, char *buf, size_t size)
{
        if (p->kind == SRC_ENV)
                return p->var;
        if (p->kind == SRC_FILE)
                return o->name;
        if (p->kind == SRC_PRESET)
                snprintf(buf, size, "--%s (of --preset=%s)", o->name, p->conf->preset);
        else
                snprintf(buf, size, "--%s", o->name);
        return buf;
}

/* Record an error about @o's value @arg, e.g. "FILE:LINE: invalid slot \"x\": ...". */
static int bad_value(struct parse *p, const struct opt_def *o, const char *arg, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static int bad_value(struct parse *p, const struct opt_def *o, const char *arg, const char *fmt, ...)
{
        char w[512], l[128], why[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        set_err(p->err, p->errlen, "%sinvalid %s \"%s\": %s", where(p, w, sizeof(w)),
                label(p, o, l, sizeof(l)), arg, why);
        return -EINVAL;
}

/* Copy of @s kept in the configuration, unless it is a command-line argument (lives as long). */
static const char *own(struct parse *p, const char *s)
{
        return p->kind == SRC_CMDLINE ? s : keep(p->conf, strdup(s));
}

static int add_prop(struct parse *p, const char *name, size_t name_len, const char *value)
{
        struct relay_config *conf = p->conf;
        struct kafka_prop *np;
        char *n, *v, w[512], why[768];

        if (name_len == 0) {
                set_err(p->err, p->errlen, "%s%s%smissing librdkafka property name before \"=%s\"",
                        where(p, w, sizeof(w)), p->kind == SRC_ENV ? p->var : "",
                        p->kind == SRC_ENV ? ": " : "", value);
                return -EINVAL;
        }
        n = strndup(name, name_len);
        v = strdup(value);
        if (!n || !v) {
                free(n);
                free(v);
                return -ENOMEM;
        }
        if (config_check_kafka_prop(n, v, why, sizeof(why)) < 0) {
                if (p->kind == SRC_CMDLINE)
                        set_err(p->err, p->errlen, "-X %s", why);
                else if (p->kind == SRC_FILE)
                        set_err(p->err, p->errlen, "%s" FILE_KAFKA_PREFIX "%s", where(p, w, sizeof(w)), why);
                else
                        set_err(p->err, p->errlen, "%s: %s", p->var, why);
                free(n);
                free(v);
                return -EINVAL;
        }
        /* The same property again, from a stronger source or later: the new value wins. */
        for (size_t i = 0; i < conf->nprops; i++) {
                if (strcmp(conf->props[i].name, n) == 0) {
                        free(n);
                        free(conf->props[i].value);
                        conf->props[i].value = v;
                        return 0;
                }
        }
        np = realloc(conf->props, (conf->nprops + 1) * sizeof(*np));
        if (!np) {
                free(n);
                free(v);
                return -ENOMEM;
        }
        conf->props = np;
        np[conf->nprops++] = (struct kafka_prop){n, v};
        return 0;
}

/* "NAME=VALUE", as -X and kafka-property take it. */
static int add_prop_pair(struct parse *p, const struct opt_def *o, const char *arg)
{
        const char *eq = strchr(arg, '=');

        if (!eq || eq == arg)
                return bad_value(p, o, arg, "expected NAME=VALUE, e.g. linger.ms=5");
        return add_prop(p, arg, (size_t)(eq - arg), eq + 1);
}

static void free_tables(struct relay_config *conf)
{
        for (size_t i = 0; i < conf->ntables; i++) {
                free(conf->tables[i].schema);
                free(conf->tables[i].table);
        }
        free(conf->tables);
        conf->tables = NULL;
        conf->ntables = 0;
}

static int add_table(struct parse *p, const struct opt_def *o, const char *arg)
{
        struct relay_config *conf = p->conf;
        struct table_name *nt, t;
        int r;

        /* A stronger source's tables replace the weaker one's list. */
        if (p->kind > p->tables_from) {
                free_tables(conf);
                p->tables_from = p->kind;
        }
        r = config_parse_table_name(arg, &t);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return bad_value(p, o, arg, "write the table as in SQL, e.g. public.outbox or "
                                 "'public.\"Foo bar\"'");
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

/*
 * Several tables in one value (a variable): a comma-separated list, commas
 * inside double-quoted identifiers excepted, blanks around names ignored.
 */
static int add_table_list(struct parse *p, const struct opt_def *o, const char *list)
{
        char *copy = strdup(list), *start, *s;
        bool quoted = false;
        int r = 0;

        if (!copy)
                return -ENOMEM;
        for (start = s = copy;; s++) {
                if (*s == '"')
                        quoted = !quoted;
                if ((*s == ',' && !quoted) || *s == '\0') {
                        char *end = s, last = *s;

                        while (start < end && isspace((unsigned char)*start))
                                start++;
                        while (end > start && isspace((unsigned char)end[-1]))
                                end--;
                        *end = '\0';
                        r = add_table(p, o, start);
                        if (r < 0 || last == '\0')
                                break;
                        start = s + 1;
                }
        }
        free(copy);
        return r;
}

static void free_column_headers(struct relay_config *conf)
{
        for (size_t i = 0; i < conf->ncolumn_headers; i++) {
                free(conf->column_headers[i].column);
                free(conf->column_headers[i].header);
        }
        free(conf->column_headers);
        conf->column_headers = NULL;
        conf->ncolumn_headers = 0;
}

/*
 * One COLUMN[=HEADER] of --column-header, inserted at @at (the end: the
 * number of entries). The header names the relay reserves for its own headers
 * and the bounds are record.c's, so that what passes here passes
 * record_spec_add_column_header() too.
 */
static int insert_column_header(struct parse *p, const struct opt_def *o, const char *arg,
                                size_t at)
{
        struct relay_config *conf = p->conf;
        const char *eq = strchr(arg, '='), *header = eq ? eq + 1 : arg;
        size_t clen = eq ? (size_t)(eq - arg) : strlen(arg), hlen = strlen(header);
        struct column_header *n, ch;

        if (clen == 0 || hlen == 0)
                return bad_value(p, o, arg, "expected COLUMN or COLUMN=HEADER, e.g. traceparent or "
                                 "tenant_id=x-tenant");
        if (hlen > RECORD_HEADER_NAME_MAX)
                return bad_value(p, o, arg, "a header name has 1 to %d bytes, not %zu",
                                 RECORD_HEADER_NAME_MAX, hlen);
        if (record_header_reserved(header))
                return bad_value(p, o, arg, "header \"%s\" is reserved for the relay's own headers "
                                 "(ce_*, outbox_relay_*, content-type, in any case); choose "
                                 "another name with COLUMN=HEADER", header);
        for (size_t i = 0; i < conf->ncolumn_headers; i++)
                if (strcmp(conf->column_headers[i].header, header) == 0)
                        return bad_value(p, o, arg, "header \"%s\" is already published from "
                                         "column \"%s\"", header, conf->column_headers[i].column);
        if (conf->ncolumn_headers == RECORD_COLUMN_HEADERS_MAX)
                return bad_value(p, o, arg, "at most %d columns can be published as headers",
                                 RECORD_COLUMN_HEADERS_MAX);
        n = realloc(conf->column_headers, (conf->ncolumn_headers + 1) * sizeof(*n));
        if (!n)
                return -ENOMEM;
        conf->column_headers = n;
        ch = (struct column_header){strndup(arg, clen), strdup(header)};
        if (!ch.column || !ch.header) {
                free(ch.column);
                free(ch.header);
                return -ENOMEM;
        }
        memmove(n + at + 1, n + at, (conf->ncolumn_headers - at) * sizeof(*n));
        n[at] = ch;
        conf->ncolumn_headers++;
        return 0;
}

/* --column-header: a stronger source's list replaces the weaker one's, as for tables. */
static int add_column_header(struct parse *p, const struct opt_def *o, const char *arg)
{
        if (p->kind > p->colhdrs_from) {
                free_column_headers(p->conf);
                p->colhdrs_from = p->kind;
        }
        return insert_column_header(p, o, arg, p->conf->ncolumn_headers);
}

/* Several in one variable: a comma-separated list, blanks around entries ignored. */
static int add_column_header_list(struct parse *p, const struct opt_def *o, const char *list)
{
        char *copy = strdup(list), *save = NULL;
        int r = 0;

        if (!copy)
                return -ENOMEM;
        for (char *e = strtok_r(copy, ",", &save); e && r == 0; e = strtok_r(NULL, ",", &save)) {
                char *end = e + strlen(e);

                while (isspace((unsigned char)*e))
                        e++;
                while (end > e && isspace((unsigned char)end[-1]))
                        *--end = '\0';
                r = add_column_header(p, o, e);
        }
        free(copy);
        return r;
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

static int parse_bool(const char *s, bool *ret)
{
        static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};

        for (size_t i = 0; i < 4; i++) {
                if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
                        *ret = strcasecmp(s, yes[i]) == 0;
                        return 0;
                }
        }
        return -EINVAL;
}

/* True if @s is one of the '|'-separated words of @choices. */
static bool is_choice(const char *choices, const char *s)
{
        size_t n = strlen(s);

        for (const char *c = choices; c; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL)
                if (strncmp(c, s, n) == 0 && (c[n] == '|' || c[n] == '\0'))
                        return true;
        return false;
}

/* "a, b or c" from "a|b|c", into @buf. */
static const char *choice_list(const char *choices, char *buf, size_t size)
{
        const char *last = strrchr(choices, '|');
        size_t o = 0;

        for (const char *c = choices; *c && o + 8 < size; c++) {
                if (*c != '|')
                        buf[o++] = *c;
                else if (c == last)
                        o += (size_t)snprintf(buf + o, size - o, " or ");
                else
                        o += (size_t)snprintf(buf + o, size - o, ", ");
        }
        buf[o] = '\0';
        return buf;
}

static bool valid_topic(const char *s)
{
        for (const char *c = s; *c; c++)
                if (!isalnum((unsigned char)*c) && *c != '.' && *c != '_' && *c != '-')
                        return false;
        return true;
}

/* --work-id: appended; command line only, so @arg lives as long as the configuration. */
static int add_work_id(struct parse *p, const struct opt_def *o, const char *arg)
{
        struct relay_config *conf = p->conf;
        const char **n;

        if (arg[0] == '\0')
                return bad_value(p, o, arg, "a work ID is never empty");
        n = realloc(conf->work_ids, (conf->nwork_ids + 1) * sizeof(*n));
        if (!n)
                return -ENOMEM;
        conf->work_ids = n;
        n[conf->nwork_ids++] = arg;
        return 0;
}

/* Set @o from @arg (NULL for a flag on the command line), from source p->kind. */
static int apply(struct parse *p, const struct opt_def *o, const char *arg)
{
        char *base = (char *)p->conf, buf[256];
        const char *s;
        int64_t v;
        bool b;

        if (p->kind != SRC_PRESET)
                p->given[o - opt_defs] = true;
        switch (o->type) {
        case OPT_STRING:
        case OPT_CHOICE:
        case OPT_SLOT:
        case OPT_TOPIC:
        case OPT_PREFIX:
        case OPT_NAME:
                if (arg[0] == '\0') {
                        char w[512], l[128];

                        set_err(p->err, p->errlen, "%s%s needs a non-empty value", where(p, w, sizeof(w)),
                                label(p, o, l, sizeof(l)));
                        return -EINVAL;
                }
                if (o->type == OPT_CHOICE && !is_choice(o->arg, arg))
                        return bad_value(p, o, arg, "expected %s", choice_list(o->arg, buf, sizeof(buf)));
                if (o->type == OPT_SLOT && !config_valid_slot_name(arg))
                        return bad_value(p, o, arg, "PostgreSQL allows 1 to 63 lower-case letters, "
                                         "digits and underscores in a slot name");
                if (o->type == OPT_NAME && !config_valid_slot_name(arg))
                        return bad_value(p, o, arg, "the relay takes 1 to 63 lower-case letters, "
                                         "digits and underscores, a name that needs no quoting");
                if (o->type == OPT_PREFIX && !config_valid_message_prefix(arg))
                        return bad_value(p, o, arg, "a message prefix has 1 to %d ASCII letters, "
                                         "digits and '_', '.', ':', '/', '-' (wal2json's "
                                         "add-msg-prefixes cannot name a prefix with a blank, a "
                                         "comma or a backslash)", CONFIG_MESSAGE_PREFIX_MAX);
                if (o->type == OPT_TOPIC && !valid_topic(arg))
                        return bad_value(p, o, arg, "Kafka allows only letters, digits, '.', '_' and "
                                         "'-' in a topic name");
                s = own(p, arg);
                if (!s)
                        return -ENOMEM;
                *(const char **)(base + o->offset) = s;
                return 0;
        case OPT_FLAG:
                if (!arg)
                        b = true;
                else if (parse_bool(arg, &b) < 0)
                        return bad_value(p, o, arg, "expected true or false");
                *(bool *)(base + o->offset) = b;
                return 0;
        case OPT_DEBUG:
                (*(int *)(base + o->offset))++;
                p->conf->log_level = "debug";
                return 0;
        case OPT_INT:
        case OPT_SECONDS:
                if ((o->type == OPT_INT ? parse_int(arg, &v) : parse_seconds_ms(arg, &v)) < 0 ||
                    v < o->min || v > o->max) {
                        if (o->type == OPT_INT)
                                return bad_value(p, o, arg, "expected an integer from %lld to %lld",
                                                 (long long)o->min, (long long)o->max);
                        return bad_value(p, o, arg, "expected seconds from %g to %g", o->min / 1000.0,
                                         o->max / 1000.0);
                }
                *(int64_t *)(base + o->offset) = v;
                return 0;
        case OPT_TABLE:
                return p->kind == SRC_ENV ? add_table_list(p, o, arg) : add_table(p, o, arg);
        case OPT_COLHDR:
                return p->kind == SRC_ENV ? add_column_header_list(p, o, arg)
                                          : add_column_header(p, o, arg);
        case OPT_PROP:
                return add_prop_pair(p, o, arg);
        case OPT_WORKID:
                return add_work_id(p, o, arg);
        case OPT_LSN:
                if (lsn_parse(arg, strlen(arg), (uint64_t *)(base + o->offset)) < 0 ||
                    *(uint64_t *)(base + o->offset) == 0)
                        return bad_value(p, o, arg, "expected an LSN such as 0/1551468 (the "
                                         "ce_pglsn of the transaction, as in the error message)");
                return 0;
        }
        return -EINVAL;
}

/*
 * Options renamed since an earlier release: the old name, on the command
 * line, in a file or as a variable, is refused with the new one (a setting
 * that was meant must not be dropped, nor taken for a librdkafka property).
 */
static const struct {
        const char *old, *now;
} renamed[] = {
        {"kafka-transaction-time", "kafka-commit-interval"},
        {"kafka-transaction-fixed-time", "kafka-commit-fixed-interval"},
};

/* The new name of option @name (@len bytes; "" for NUL-terminated), or NULL. */
static const char *renamed_to(const char *name, size_t len)
{
        if (!len)
                len = strlen(name);
        for (size_t i = 0; i < sizeof(renamed) / sizeof(renamed[0]); i++)
                if (strlen(renamed[i].old) == len && strncmp(renamed[i].old, name, len) == 0)
                        return renamed[i].now;
        return NULL;
}

static const struct opt_def *find_opt(const char *name)
{
        for (size_t i = 0; i < N_OPTS; i++)
                if (strcmp(opt_defs[i].name, name) == 0)
                        return &opt_defs[i];
        return NULL;
}

/*
 * What a preset sets where no source did, one line per setting, as on the
 * command line. "debezium": the defaults of Debezium's Outbox Event Router
 * (io.debezium.transforms.outbox.EventRouter; Debezium documentation,
 * "Outbox Event Router", configuration options); outbox-relay(7), "Debezium
 * outbox layout", says where the relay's record still differs.
 */
struct preset_default {
        const char *preset;
        const char *name;    /* a setting of opt_defs */
        const char *value;
        const char *unless;  /* NULL, or a setting whose being given also keeps this one */
};

static const struct preset_default preset_defaults[] = {
        /* route.by.field=aggregatetype, route.topic.replacement=outbox.event.${routedByValue} */
        {"debezium", "topic", "outbox.event.${aggregatetype}", NULL},
        /* table.field.event.id=id: the work ID (ce_id), and the record's "id" header */
        {"debezium", "id-column", "id", NULL},
        {"debezium", "column-header", "id", NULL},
        {"debezium", "key-column", "aggregateid", NULL},  /* table.field.event.key */
        {"debezium", "payload-column", "payload", NULL},  /* table.field.event.payload */
        /* the router puts "type" nowhere by default; the relay keeps it as ce_type */
        {"debezium", "type-column", "type", NULL},
        /* the router sends a NULL payload as a record with a null value */
        {"debezium", "null-payload", "tombstone", NULL},
        /* the router reads no headers column */
        {"debezium", "no-headers-column", "true", "headers-column"},
};

#define N_PRESET_DEFAULTS (sizeof(preset_defaults) / sizeof(preset_defaults[0]))

/*
 * Apply conf->preset's defaults to what no source set. The preset's column
 * headers go before the given ones, unless a given one has its header name.
 */
static int apply_preset(struct parse *p)
{
        struct relay_config *conf = p->conf;
        size_t at = 0;
        int r;

        if (!conf->preset)
                return 0;
        p->kind = SRC_PRESET;
        for (size_t i = 0; i < N_PRESET_DEFAULTS; i++) {
                const struct preset_default *d = &preset_defaults[i];
                const struct opt_def *o = find_opt(d->name);
                bool taken = false;

                if (strcmp(d->preset, conf->preset) != 0)
                        continue;
                if (o->type == OPT_COLHDR) {
                        const char *eq = strchr(d->value, '=');

                        for (size_t j = 0; j < conf->ncolumn_headers; j++)
                                taken |= strcmp(conf->column_headers[j].header,
                                                eq ? eq + 1 : d->value) == 0;
                        if (!taken && (r = insert_column_header(p, o, d->value, at++)) < 0)
                                return r;
                        continue;
                }
                if (p->given[o - opt_defs] ||
                    (d->unless && p->given[find_opt(d->unless) - opt_defs]))
                        continue;
                r = apply(p, o, o->type == OPT_FLAG ? NULL : d->value);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* OUTBOX_RELAY_<NAME>: upper case, '-' as '_'. */
static void env_name(const struct opt_def *o, char *buf, size_t size)
{
        size_t n = (size_t)snprintf(buf, size, ENV_PREFIX "%s", o->name);

        for (size_t i = strlen(ENV_PREFIX); i < n && i < size; i++)
                buf[i] = buf[i] == '-' ? '_' : (char)toupper((unsigned char)buf[i]);
}

/*
 * The value of a *_FILE variable: the content of the file it names, less
 * one trailing newline (as "echo secret > file" leaves it).
 */
static int read_value_file(struct parse *p, const char *var, const char *path, const char **ret)
{
        char *buf = NULL, *shrunk;
        size_t n = 0;
        ssize_t got;
        int fd, r = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                r = -errno;
                goto fail;
        }
        buf = malloc(VALUE_FILE_MAX + 1);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        while ((got = read(fd, buf + n, VALUE_FILE_MAX + 1 - n)) > 0 && n < VALUE_FILE_MAX + 1)
                n += (size_t)got;
        if (got < 0)
                r = -errno;
        close(fd);
        if (r < 0)
                goto fail;
        if (n > VALUE_FILE_MAX) {
                set_err(p->err, p->errlen, "%s: file \"%s\" is larger than %d bytes", var, path,
                        VALUE_FILE_MAX);
                free(buf);
                return -EINVAL;
        }
        if (n > 0 && buf[n - 1] == '\n')
                n--;
        if (n > 0 && buf[n - 1] == '\r')
                n--;
        buf[n] = '\0';
        if (memchr(buf, '\0', n)) {
                set_err(p->err, p->errlen, "%s: file \"%s\" holds a NUL byte", var, path);
                free(buf);
                return -EINVAL;
        }
        shrunk = realloc(buf, n + 1);  /* a password need not hold on to a megabyte */
        *ret = keep(p->conf, shrunk ? shrunk : buf);
        return *ret ? 0 : -ENOMEM;
fail:
        free(buf);
        set_err(p->err, p->errlen, "%s: cannot read \"%s\": %s", var, path, strerror(-r));
        return -EINVAL;
}

/*
 * The value of variable @var, or of @var_FILE read from its file (the name
 * of the one used in @fvar, 256 bytes, and *@ret_var); NULL: neither is set.
 */
static int env_value(struct parse *p, const char *var, char fvar[static 256], const char **ret,
                     const char **ret_var)
{
        const char *v, *f;

        snprintf(fvar, 256, "%s_FILE", var);
        v = getenv(var);
        f = getenv(fvar);
        /* Empty is unset, as compose's ${VAR:-} and Kubernetes' optional values produce. */
        if (v && !*v)
                v = NULL;
        if (f && !*f)
                f = NULL;
        if (v && f) {
                set_err(p->err, p->errlen, "both %s and %s are set: keep one", var, fvar);
                return -EINVAL;
        }
        *ret = NULL;
        if (v) {
                *ret_var = var;
                *ret = v;
                return 0;
        }
        if (!f)
                return 0;
        *ret_var = fvar;
        return read_value_file(p, fvar, f, ret);
}

/* True if the environment entry @e ("NAME=value") is named @name. */
static bool env_is(const char *e, const char *name)
{
        size_t n = strlen(name);

        return strncmp(e, name, n) == 0 && e[n] == '=';
}

/* The new variable of a renamed option whose old variable is @var (into @buf, @size bytes), or NULL. */
static const char *renamed_variable(const char *var, char *buf, size_t size)
{
        for (size_t i = 0; i < sizeof(renamed) / sizeof(renamed[0]); i++) {
                char old[128];
                struct opt_def o = {.name = renamed[i].old};

                env_name(&o, old, sizeof(old));
                if (strcmp(var, old) == 0) {
                        o.name = renamed[i].now;
                        env_name(&o, buf, size);
                        return buf;
                }
        }
        return NULL;
}

/* Is @var (without _FILE) the variable of one of the relay's own options? */
static bool option_variable(const char *var)
{
        for (size_t i = 0; i < N_OPTS; i++) {
                char name[128];

                if (opt_defs[i].flags & OPT_NOENV)
                        continue;
                env_name(&opt_defs[i], name, sizeof(name));
                if (strcmp(var, name) == 0)
                        return true;
        }
        return false;
}

/*
 * librdkafka properties from OUTBOX_RELAY_KAFKA_<PROPERTY>[_FILE]: the
 * property in lower case, '.' written as '_' and '_' as "__" (so
 * OUTBOX_RELAY_KAFKA_SASL_PASSWORD is sasl.password), as Confluent's Kafka
 * images map KAFKA_* variables. The variables of the relay's own
 * --kafka-* options (OUTBOX_RELAY_KAFKA_COMMIT_INTERVAL) are theirs, not
 * librdkafka's.
 */
static int env_kafka(struct parse *p)
{
        for (char **e = environ; *e; e++) {
                const char *name = *e + strlen(ENV_KAFKA_PREFIX), *eq, *value;
                char var[256], fvar[256], prop[256];
                size_t n = 0, len;
                int r;

                if (strncmp(*e, ENV_KAFKA_PREFIX, strlen(ENV_KAFKA_PREFIX)) != 0)
                        continue;
                eq = strchr(*e, '=');
                if (!eq || (size_t)(eq - *e) >= sizeof(var))
                        continue;
                memcpy(var, *e, (size_t)(eq - *e));
                var[eq - *e] = '\0';
                len = (size_t)(eq - name);
                if (len > 5 && strcmp(var + strlen(var) - 5, "_FILE") == 0) {
                        var[strlen(var) - 5] = '\0';
                        if (getenv(var))
                                continue;  /* env_value() refuses both below */
                        len -= 5;
                }
                if (option_variable(var))
                        continue;
                if (renamed_variable(var, prop, sizeof(prop))) {
                        set_err(p->err, p->errlen, "%s is now called %s: rename it", var, prop);
                        return -EINVAL;
                }
                if (strcmp(var, ENV_KAFKA_PREFIX "PROPERTY") == 0) {
                        set_err(p->err, p->errlen, "%s is not used: set each librdkafka property in "
                                "its own variable, e.g. " ENV_KAFKA_PREFIX "LINGER_MS=5 for linger.ms",
                                var);
                        return -EINVAL;
                }
                for (size_t i = 0; i < len && n + 1 < sizeof(prop); i++) {
                        if (name[i] == '_' && i + 1 < len && name[i + 1] == '_') {
                                prop[n++] = '_';
                                i++;
                        } else {
                                prop[n++] = name[i] == '_' ? '.' : (char)tolower((unsigned char)name[i]);
                        }
                }
                prop[n] = '\0';
                r = env_value(p, var, fvar, &value, &p->var);
                if (r < 0)
                        return r;
                r = add_prop(p, prop, n, value);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int read_env(struct parse *p)
{
        char unknown[1024] = "";
        size_t nu = 0;
        int r;

        p->kind = SRC_ENV;
        for (size_t i = 0; i < N_OPTS; i++) {
                const struct opt_def *o = &opt_defs[i];
                const char *value;
                char var[128], fvar[256];

                /* $OUTBOX_RELAY_CONFIG was read before the file. */
                if ((o->flags & OPT_NOENV) || o->offset == OFF(config_file))
                        continue;
                env_name(o, var, sizeof(var));
                r = env_value(p, var, fvar, &value, &p->var);
                if (r < 0)
                        return r;
                if (value && (r = apply(p, o, value)) < 0)
                        return r;
        }
        r = env_kafka(p);
        if (r < 0)
                return r;
        /* Other OUTBOX_RELAY_* variables: likely typos, but also Kubernetes service links. */
        for (char **e = environ; *e; e++) {
                bool known = strncmp(*e, ENV_KAFKA_PREFIX, strlen(ENV_KAFKA_PREFIX)) == 0;
                const char *eq = strchr(*e, '=');

                if (strncmp(*e, ENV_PREFIX, strlen(ENV_PREFIX)) != 0 || !eq)
                        continue;
                for (size_t i = 0; i < N_OPTS && !known; i++) {
                        char var[128];

                        if (opt_defs[i].flags & OPT_NOENV)
                                continue;
                        env_name(&opt_defs[i], var, sizeof(var));
                        /* $OUTBOX_RELAY_CONFIG has no _FILE form (read before the file). */
                        known = env_is(*e, var) || (opt_defs[i].offset != OFF(config_file) &&
                                                    strncmp(*e, var, strlen(var)) == 0 &&
                                                    env_is(*e + strlen(var), "_FILE"));
                }
                if (!known && nu + (size_t)(eq - *e) + 3 < sizeof(unknown))
                        nu += (size_t)snprintf(unknown + nu, sizeof(unknown) - nu, "%s%.*s",
                                               nu ? ", " : "", (int)(eq - *e), *e);
        }
        if (nu) {
                char *note;

                if (asprintf(&note, "ignoring environment variables that are not settings: %s", unknown) < 0)
                        return -ENOMEM;
                return add_note(p->conf, note);
        }
        return 0;
}

/*
 * libinih's line reader (fgets(3)'s contract, @num bytes with the NUL).
 * Counts lines, since Debian's libinih is built without
 * INI_HANDLER_LINENO; refuses lines longer than @num - 2 bytes, which
 * libinih 55 would split; strips leading blanks, so that an indented
 * line is never taken as a continuation of the previous value.
 */
static char *file_reader(char *str, int num, void *stream)
{
        struct parse *p = stream;
        ssize_t n = getline(&p->buf, &p->cap, p->fp);
        const char *s;
        char w[512];

        if (n < 0)
                return NULL;
        p->line++;
        if (p->ret == 0 && (n > num - 1 || memchr(p->buf, '\0', (size_t)n))) {
                if (n > num - 1)
                        set_err(p->err, p->errlen, "%sline longer than %d bytes", where(p, w, sizeof(w)),
                                num - 2);
                else
                        set_err(p->err, p->errlen, "%smalformed line: it holds a NUL byte",
                                where(p, w, sizeof(w)));
                p->ret = -EINVAL;
                p->err_line = p->line;
        }
        if (n > num - 1 || memchr(p->buf, '\0', (size_t)n)) {
                strcpy(str, "\n");
                return str;
        }
        for (s = p->buf; *s == ' ' || *s == '\t'; s++)
                ;
        memcpy(str, s, (size_t)n - (size_t)(s - p->buf) + 1);
        return str;
}

/* libinih's handler: one "name = value" line. Returns 0 on error (libinih's contract). */
static int file_setting(void *user, const char *section, const char *name, const char *value)
{
        struct parse *p = user;
        const struct opt_def *o;
        char w[512];
        int r;

        if (p->ret < 0)
                return 0;
        if (section[0]) {
                set_err(p->err, p->errlen, "%sunexpected section [%s]: settings are written "
                        "without sections", where(p, w, sizeof(w)), section);
                r = -EINVAL;
        } else if (strncmp(name, FILE_KAFKA_PREFIX, strlen(FILE_KAFKA_PREFIX)) == 0) {
                r = add_prop(p, name + strlen(FILE_KAFKA_PREFIX), strlen(name + strlen(FILE_KAFKA_PREFIX)),
                             value);
        } else if (!(o = find_opt(name)) || (o->flags & OPT_NOFILE)) {
                if (o)
                        set_err(p->err, p->errlen, "%ssetting \"%s\" cannot be given in a "
                                "configuration file", where(p, w, sizeof(w)), name);
                else if (renamed_to(name, 0))
                        set_err(p->err, p->errlen, "%ssetting \"%s\" is now called \"%s\": rename it",
                                where(p, w, sizeof(w)), name, renamed_to(name, 0));
                else
                        set_err(p->err, p->errlen, "%sunknown setting \"%s\"", where(p, w, sizeof(w)),
                                name);
                r = -EINVAL;
        } else {
                r = apply(p, o, o->type == OPT_DEBUG ? NULL : value);
        }
        if (r < 0) {
                p->ret = r;
                p->err_line = p->line;
                return 0;
        }
        return 1;
}

/* Warn when a file others may read holds what looks like a password. */
static int check_file_secrets(struct parse *p)
{
        struct stat st;
        bool secret = p->conf->conninfo && strstr(p->conf->conninfo, "password");
        char *note;

        for (size_t i = 0; i < p->conf->nprops && !secret; i++)
                secret = strstr(p->conf->props[i].name, "password") ||
                         strstr(p->conf->props[i].name, "secret");
        if (!secret || fstat(fileno(p->fp), &st) < 0 || !(st.st_mode & S_IROTH))
                return 0;
        if (asprintf(&note, "configuration file \"%s\" holds a password and everyone may read it: "
                     "chmod o-r, or give the secret in a *_FILE variable", p->file) < 0)
                return -ENOMEM;
        return add_note(p->conf, note);
}

static int read_file(struct parse *p, const char *path)
{
        int r;

        p->kind = SRC_FILE;
        p->file = path;
        p->line = 0;
        p->fp = fopen(path, "re");
        if (!p->fp) {
                set_err(p->err, p->errlen, "cannot read configuration file \"%s\": %s", path,
                        strerror(errno));
                return -EINVAL;
        }
        r = ini_parse_stream(file_reader, p, file_setting, p);
        if (r == -2)
                p->ret = -ENOMEM;
        else if (ferror(p->fp) && p->ret == 0) {
                set_err(p->err, p->errlen, "cannot read configuration file \"%s\": %s", path,
                        strerror(errno));
                p->ret = -EINVAL;
        } else if (r > 0 && (p->ret == 0 || r < p->err_line)) {
                /* libinih's own finding, before any of ours: a line without '=' or ']'. */
                set_err(p->err, p->errlen, "%s:%d: malformed line: expected NAME = VALUE", path, r);
                p->ret = -EINVAL;
        }
        if (p->ret == 0)
                p->ret = check_file_secrets(p);
        fclose(p->fp);
        p->fp = NULL;
        free(p->buf);
        p->buf = NULL;
        p->cap = 0;
        return p->ret;
}

struct cl_arg {
        const struct opt_def *o;
        const char *arg;
};

/* Read the command line into @args (at most @argc entries), applying nothing yet. */
static int read_cmdline(int argc, char **argv, struct cl_arg *args, size_t *ret_n, char *err,
                        size_t errlen)
{
        struct option longopts[N_OPTS + 1];
        char shortopts[N_OPTS * 2 + 2];
        size_t ns = 0, n = 0;
        int c, idx;

        shortopts[ns++] = ':';
        for (size_t i = 0; i < N_OPTS; i++) {
                bool has_arg = opt_defs[i].type != OPT_FLAG && opt_defs[i].type != OPT_DEBUG;

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
        optind = 1;
        opterr = 0;
        while ((c = getopt_long(argc, argv, shortopts, longopts, &idx)) != -1) {
                const struct opt_def *o = NULL;

                if (c == '?') {
                        const char *a = argv[optind - 1];

                        if (optopt && optopt < 256)
                                set_err(err, errlen, "unknown option -%c; try --help", optopt);
                        else if (strncmp(a, "--", 2) == 0 && renamed_to(a + 2, strcspn(a + 2, "=")))
                                set_err(err, errlen, "option \"--%.*s\" is now called \"--%s\": rename it",
                                        (int)strcspn(a + 2, "="), a + 2, renamed_to(a + 2, strcspn(a + 2, "=")));
                        else
                                set_err(err, errlen, "unknown option \"%s\"; try --help", a);
                        return -EINVAL;
                }
                if (c == ':') {
                        set_err(err, errlen, "option \"%s\" needs an argument; try --help",
                                argv[optind - 1]);
                        return -EINVAL;
                }
                for (size_t i = 0; i < N_OPTS; i++)
                        if ((c < 256 && opt_defs[i].short_name == c) || c == 256 + (int)i)
                                o = &opt_defs[i];
                if (!o) {
                        set_err(err, errlen, "unknown option; try --help");
                        return -EINVAL;
                }
                args[n++] = (struct cl_arg){o, optarg};
        }
        if (optind < argc) {
                set_err(err, errlen, "unexpected argument \"%s\"; try --help", argv[optind]);
                return -EINVAL;
        }
        *ret_n = n;
        return 0;
}

static bool is_string(const struct opt_def *o)
{
        return o->type == OPT_STRING || o->type == OPT_CHOICE || o->type == OPT_SLOT ||
               o->type == OPT_TOPIC || o->type == OPT_PREFIX || o->type == OPT_NAME;
}

int config_parse(int argc, char **argv, struct relay_config *ret_conf, char *err, size_t errlen)
{
        struct relay_config conf = {0};
        struct parse p = {.conf = &conf, .err = err, .errlen = errlen};
        struct cl_arg *args;
        const char *path;
        size_t nargs = 0;
        int r;

        /* "-?" is help, as in PostgreSQL's tools; getopt would report it as unknown. */
        for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
                if (strcmp(argv[i], "-?") == 0) {
                        conf.show_help = true;
                        *ret_conf = conf;
                        return 0;
                }
        }
        args = calloc((size_t)argc + 1, sizeof(*args));
        if (!args)
                return -ENOMEM;
        r = read_cmdline(argc, argv, args, &nargs, err, errlen);
        if (r < 0)
                goto fail;
        /*
         * Defaults first, so that a value given explicitly (even 0, e.g.
         * --shutdown-timeout=0) is never replaced by its default. The table
         * default is applied last, only if no source named a table.
         */
        for (size_t i = 0; i < N_OPTS; i++) {
                const struct opt_def *o = &opt_defs[i];
                char *field = (char *)&conf + o->offset;

                if (!o->def || o->type == OPT_TABLE)
                        continue;
                if (is_string(o))
                        *(const char **)field = o->def;
                else if ((o->type == OPT_INT && parse_int(o->def, (int64_t *)field) < 0) ||
                         (o->type == OPT_SECONDS && parse_seconds_ms(o->def, (int64_t *)field) < 0))
                        r = -EINVAL;  /* a broken table entry */
                if (r < 0) {
                        set_err(err, errlen, "bad default of --%s", o->name);
                        goto fail;
                }
        }
        /* With --help or --version, a broken file or variable must not stand in the way. */
        path = getenv(ENV_PREFIX "CONFIG");
        for (size_t i = 0; i < nargs; i++) {
                if (args[i].o->offset == OFF(show_help) || args[i].o->offset == OFF(show_version)) {
                        conf.show_help |= args[i].o->offset == OFF(show_help);
                        conf.show_version |= args[i].o->offset == OFF(show_version);
                        free(args);
                        *ret_conf = conf;
                        return 0;
                }
                if (args[i].o->offset == OFF(config_file))
                        path = args[i].arg;
        }
        conf.config_file = path;
        if (path && (r = read_file(&p, path)) < 0)
                goto fail;
        if ((r = read_env(&p)) < 0)
                goto fail;
        p.kind = SRC_CMDLINE;
        for (size_t i = 0; i < nargs; i++)
                if ((r = apply(&p, args[i].o, args[i].arg)) < 0)
                        goto fail;
        if ((r = apply_preset(&p)) < 0)
                goto fail;
        if (conf.ntables == 0 && (r = add_table(&p, find_opt("table"), "public.outbox")) < 0)
                goto fail;
        if (!conf.key_column)
                conf.key_column = conf.id_column;
        conf.txn_max_given = p.given[find_opt("kafka-commit-interval") - opt_defs];
        conf.dead_letter = strcmp(conf.on_error, "dead-letter") == 0;
        conf.null_tombstone = strcmp(conf.null_payload, "tombstone") == 0;
        conf.commit_timestamp = strcmp(conf.record_timestamp, "commit") == 0;
        if (conf.skip_transaction && conf.skip_transaction == conf.dead_letter_transaction) {
                set_err(err, errlen, "--skip-transaction and --dead-letter-transaction name the same "
                        "transaction: choose one remedy");
                r = -EINVAL;
                goto fail;
        }
        if (conf.message_prefix && conf.ignore_message_prefix &&
            strcmp(conf.message_prefix, conf.ignore_message_prefix) == 0) {
                set_err(err, errlen, "--message-prefix and --ignore-message-prefix name the same prefix "
                        "\"%s\": a prefix is published or passed over, choose one", conf.message_prefix);
                r = -EINVAL;
                goto fail;
        }
        free(args);
        *ret_conf = conf;
        return 0;
fail:
        free(args);
        config_free(&conf);
        return r == -ENOMEM ? -ENOMEM : -EINVAL;
}

static bool same_string(const char *a, const char *b)
{
        return a == b || (a && b && strcmp(a, b) == 0);
}

/* True if @o has the same value in @a and @b. */
static bool same_value(const struct opt_def *o, const struct relay_config *a, const struct relay_config *b)
{
        const char *fa = (const char *)a + o->offset, *fb = (const char *)b + o->offset;

        switch (o->type) {
        case OPT_STRING:
        case OPT_CHOICE:
        case OPT_SLOT:
        case OPT_TOPIC:
        case OPT_PREFIX:
        case OPT_NAME:
                return same_string(*(const char *const *)fa, *(const char *const *)fb);
        case OPT_FLAG:
                return *(const bool *)fa == *(const bool *)fb;
        case OPT_DEBUG:
                return *(const int *)fa == *(const int *)fb;
        case OPT_INT:
        case OPT_SECONDS:
                return *(const int64_t *)fa == *(const int64_t *)fb;
        case OPT_LSN:
                return *(const uint64_t *)fa == *(const uint64_t *)fb;
        case OPT_TABLE:
                if (a->ntables != b->ntables)
                        return false;
                for (size_t i = 0; i < a->ntables; i++)
                        if (strcmp(a->tables[i].schema, b->tables[i].schema) != 0 ||
                            strcmp(a->tables[i].table, b->tables[i].table) != 0)
                                return false;
                return true;
        case OPT_COLHDR:
                if (a->ncolumn_headers != b->ncolumn_headers)
                        return false;
                for (size_t i = 0; i < a->ncolumn_headers; i++)
                        if (strcmp(a->column_headers[i].column, b->column_headers[i].column) != 0 ||
                            strcmp(a->column_headers[i].header, b->column_headers[i].header) != 0)
                                return false;
                return true;
        case OPT_WORKID:
                if (a->nwork_ids != b->nwork_ids)
                        return false;
                for (size_t i = 0; i < a->nwork_ids; i++)
                        if (strcmp(a->work_ids[i], b->work_ids[i]) != 0)
                                return false;
                return true;
        case OPT_PROP:
                if (a->nprops != b->nprops)
                        return false;
                for (size_t i = 0; i < a->nprops; i++) {
                        bool found = false;

                        for (size_t j = 0; j < b->nprops && !found; j++)
                                found = strcmp(a->props[i].name, b->props[j].name) == 0 &&
                                        strcmp(a->props[i].value, b->props[j].value) == 0;
                        if (!found)
                                return false;
                }
                return true;
        }
        return false;
}

/* Free the strings of conf->strs no string setting points to any more. */
static void drop_unused(struct relay_config *conf)
{
        size_t kept = 0;

        for (size_t i = 0; i < conf->nstrs; i++) {
                bool used = false;

                for (size_t j = 0; j < N_OPTS && !used; j++)
                        used = is_string(&opt_defs[j]) &&
                               *(const char **)((char *)conf + opt_defs[j].offset) == conf->strs[i];
                if (used)
                        conf->strs[kept++] = conf->strs[i];
                else
                        free(conf->strs[i]);
        }
        conf->nstrs = kept;
}

int config_reload(struct relay_config *conf, struct relay_config *next, config_reload_fn fn,
                  void *ctx)
{
        char **n;

        /* The reloaded strings may live in @next's pool: first make room to keep all of it. */
        n = realloc(conf->strs, (conf->nstrs + next->nstrs + 1) * sizeof(*n));
        if (!n) {
                config_free(next);
                return -ENOMEM;
        }
        if (next->nstrs)  /* next->strs is NULL when nothing was allocated: memcpy() from NULL is UB */
                memcpy(n + conf->nstrs, next->strs, next->nstrs * sizeof(*n));
        conf->strs = n;
        conf->nstrs += next->nstrs;
        free(next->strs);
        next->strs = NULL;
        next->nstrs = 0;
        for (size_t i = 0; i < N_OPTS; i++) {
                const struct opt_def *o = &opt_defs[i];
                const char **cur, *nv;

                if (same_value(o, conf, next))
                        continue;
                if (!(o->flags & OPT_RELOAD) || !is_string(o)) {
                        fn(ctx, o->name, NULL, NULL, false);
                        continue;
                }
                cur = (const char **)((char *)conf + o->offset);
                nv = *(const char **)((char *)next + o->offset);
                fn(ctx, o->name, *cur ? *cur : "none", nv ? nv : "none", true);
                *cur = nv;
        }
        /* Bounded however often SIGHUP comes: only strings still in use stay. */
        drop_unused(conf);
        config_free(next);
        return 0;
}

void config_free(struct relay_config *conf)
{
        free_tables(conf);
        free_column_headers(conf);
        for (size_t i = 0; i < conf->nprops; i++) {
                free(conf->props[i].name);
                free(conf->props[i].value);
        }
        free(conf->props);
        free(conf->work_ids);
        conf->work_ids = NULL;
        conf->nwork_ids = 0;
        for (size_t i = 0; i < conf->nnotes; i++)
                free(conf->notes[i]);
        free(conf->notes);
        for (size_t i = 0; i < conf->nstrs; i++)
                free(conf->strs[i]);
        free(conf->strs);
        conf->props = NULL;
        conf->notes = conf->strs = NULL;
        conf->nprops = conf->nnotes = conf->nstrs = 0;
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
                "  outbox-relay redrive (--work-id=ID... | --since=TIME [--until=TIME] [--kind=KIND])\n"
                "               [--from-dead-letter [--error-code=CODE]] [--yes] --reason=TEXT [OPTION]...\n"
                "                                           publish outbox rows (or dead letters) again\n"
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
                if (o->flags & OPT_RELOAD)
                        fprintf(out, "; reloaded on SIGHUP");
                fputc('\n', out);
        }
        fprintf(out,
                "\nPresets (--preset=NAME): defaults for another outbox layout. An option given\n"
                "on the command line, in the environment or in the file wins over them;\n"
                "--column-header adds to the preset's headers, one of the same name replaces it.\n");
        for (size_t i = 0, col = 0; i < N_PRESET_DEFAULTS; i++) {
                const struct preset_default *d = &preset_defaults[i];
                bool flag = find_opt(d->name)->type == OPT_FLAG;
                char item[160];
                int n;

                if (i == 0 || strcmp(d->preset, preset_defaults[i - 1].preset) != 0)
                        col = (size_t)fprintf(out, "%s  %s:", i ? "\n" : "", d->preset);
                n = snprintf(item, sizeof(item), " --%s%s%s%s%s%s", d->name, flag ? "" : "=",
                             flag ? "" : d->value, d->unless ? " (unless --" : "",
                             d->unless ? d->unless : "", d->unless ? ")" : "");
                if (col + (size_t)n > 80)
                        col = (size_t)fprintf(out, "\n   ");
                col += (size_t)fprintf(out, "%s", item);
        }
        fprintf(out, "\n  debezium reads Debezium's outbox table (id, aggregatetype, aggregateid,\n"
                "  type, payload) and publishes as its Outbox Event Router does by default.\n");
        fprintf(out,
                "\nConfiguration:\n"
                "  Each setting comes from the command line, else the environment, else the file.\n"
                "  File (-c FILE, or $OUTBOX_RELAY_CONFIG): lines \"name = value\" with the long\n"
                "  option names (flags take true or false), \"kafka.NAME = VALUE\" for librdkafka\n"
                "  properties, '#' comment lines, no sections. Environment: OUTBOX_RELAY_<NAME>,\n"
                "  e.g. OUTBOX_RELAY_ON_ERROR=dead-letter, OUTBOX_RELAY_TABLE=a.outbox,b.outbox;\n"
                "  OUTBOX_RELAY_KAFKA_<PROPERTY> with '.' as '_' and '_' as '__', e.g.\n"
                "  OUTBOX_RELAY_KAFKA_SASL_PASSWORD; append _FILE to read a value from a file.\n"
                "  SIGHUP reopens the log file and reloads the settings marked above.\n");
        fprintf(out,
                "\nExit status:\n"
                "  0  stopped on SIGINT/SIGTERM after flushing\n"
                "  1  runtime failure (database or Kafka unreachable at start); restarting may succeed\n"
                "  2  usage error: command line, configuration file or environment\n"
                "  3  environment error: database, slot or table not usable as configured\n"
                "  4  a row or stream line that cannot be published; permanent until an operator acts\n"
                "check: 0 safe to start, 2 usage error, 3 not safe (a FAIL line)\n"
                "slot: 0 done, 1 database unreachable, 2 usage error or drop without --yes,\n"
                "      3 the slot exists (create), is missing or active (drop), is missing (status)\n"
                "redrive: 0 Kafka acknowledged every record, 1 database or Kafka failed (retry),\n"
                "      2 usage error, over --max-records, or past --dedup-horizon without --yes,\n"
                "      3 a requested work ID is gone or not found; a table, column or topic is\n"
                "        missing or this login may not read it (nothing published),\n"
                "      4 Kafka refused a record, or a row cannot be made a record\n");
}

/* @text for scdoc(5): its markup characters and the backslash escaped. */
static void scd_puts(FILE *out, const char *text)
{
        for (const char *c = text; *c; c++) {
                if (*c == '\\' || *c == '*' || *c == '_')
                        fputc('\\', out);
                fputc(*c, out);
        }
}

void config_man_options(FILE *out)
{
        for (size_t i = 0; i < N_OPTS; i++) {
                const struct opt_def *o = &opt_defs[i];
                char var[128];

                if (o->short_name)
                        fprintf(out, "*-%c*, ", o->short_name);
                fprintf(out, "*--");
                scd_puts(out, o->name);
                fputc('*', out);
                if (o->arg) {
                        fputs("=_", out);
                        scd_puts(out, o->arg);
                        fputc('_', out);
                }
                /* A line starting with "-" would be a list item. */
                fputs(o->help[0] == '-' ? "\n\t\\" : "\n\t", out);
                scd_puts(out, o->help);
                fputc('.', out);
                if (o->more) {
                        fputc(' ', out);
                        scd_puts(out, o->more);
                }
                if (o->def) {
                        fputs(" Default: *", out);
                        scd_puts(out, o->def);
                        fputs("*.", out);
                }
                if ((o->flags & OPT_CMDLINE) == OPT_CMDLINE) {
                        fputs(" Command line only.", out);
                } else {
                        if (!(o->flags & OPT_NOENV)) {
                                env_name(o, var, sizeof(var));
                                fputs(" Environment: *", out);
                                scd_puts(out, var);
                                fputs("*.", out);
                        }
                        if (o->flags & OPT_NOFILE)
                                fputs(" Not in the configuration file.", out);
                        else if (o->type == OPT_PROP)
                                fputs(" File: *kafka.NAME = VALUE*.", out);
                        else {
                                fputs(" File: *", out);
                                scd_puts(out, o->name);
                                fputs(" = ...*.", out);
                        }
                }
                if (o->flags & OPT_RELOAD)
                        fputs(" Reloaded on SIGHUP.", out);
                fputs("\n\n", out);
        }
}

void config_man_presets(FILE *out)
{
        for (size_t i = 0; i < N_PRESET_DEFAULTS; i++) {
                const struct preset_default *d = &preset_defaults[i];
                bool flag = find_opt(d->name)->type == OPT_FLAG;
                bool first = i == 0 || strcmp(d->preset, preset_defaults[i - 1].preset) != 0;
                bool last = i + 1 == N_PRESET_DEFAULTS || strcmp(preset_defaults[i + 1].preset, d->preset) != 0;

                if (first) {
                        fprintf(out, "%s*", i ? "\n" : "");
                        scd_puts(out, d->preset);
                        fputs("*\n", out);
                }
                fputs(first ? "\t*--" : "*--", out);
                scd_puts(out, d->name);
                if (!flag) {
                        fputc('=', out);
                        scd_puts(out, d->value);
                }
                fputc('*', out);
                if (d->unless) {
                        fputs(" (unless *--", out);
                        scd_puts(out, d->unless);
                        fputs("* is given)", out);
                }
                fputs(last ? "\n" : "++\n", out);  /* scdoc's line break, within one preset */
        }
        fputc('\n', out);
}

void config_mapping(const struct relay_config *conf, char *buf, size_t size)
{
        size_t o = 0;
        int n;

#define ADD(...) \
        do { \
                n = snprintf(buf + o, size - o, __VA_ARGS__); \
                if (n > 0) \
                        o = o + (size_t)n < size ? o + (size_t)n : size - 1; \
        } while (0)
        buf[0] = '\0';
        ADD("tables=");
        for (size_t i = 0; i < conf->ntables; i++)
                ADD("%s%s.%s", i ? "," : "", conf->tables[i].schema, conf->tables[i].table);
        ADD("; id=%s; key=%s; payload=%s; type=%s; topic=%s; headers=%s; null-payload=%s",
            conf->id_column, conf->key_column, conf->payload_column, conf->type_column,
            conf->topic_template, conf->headers_column && !conf->no_headers_column ?
            conf->headers_column : "-", conf->null_payload);
        if (conf->ncolumn_headers) {
                ADD("; column-headers=");
                for (size_t i = 0; i < conf->ncolumn_headers; i++)
                        ADD("%s%s=%s", i ? "," : "", conf->column_headers[i].column,
                            conf->column_headers[i].header);
        }
        /* Only when set, so that the digest of a relay without messages stays what it was. */
        if (conf->message_prefix)
                ADD("; message-prefix=%s", conf->message_prefix);
#undef ADD
}
