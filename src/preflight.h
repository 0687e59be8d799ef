/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checks over an ordinary (non-replication) connection before streaming:
 * server version, wal_level, server_encoding, the output plugin (wal2json or
 * pgoutput) allowed and chosen, pgoutput's publication (publication.h), the
 * outbox tables and the columns the relay reads, and the slot (created with
 * --create-slot, never silently). Each failure is one line
 * saying what is wrong and how to fix it. Knows libpq and the catalogs
 * (pg_settings, pg_roles, pg_class, pg_attribute, pg_replication_slots), not
 * Kafka.
 *
 * preflight_run() is the relay's startup; the item-level functions below it
 * are what it is made of, also used one by one by `outbox-relay check` and
 * the `slot` commands, so each check's SQL and message exist once.
 */
#ifndef RELAY_PREFLIGHT_H
#define RELAY_PREFLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "config.h"

struct preflight_slot;

struct preflight_result {
        int server_version_num;      /* e.g. 150020 */
        uint64_t confirmed_flush_lsn; /* the slot's, LSN; LSN_INVALID right after creation */
        uint64_t restart_lsn;        /* the slot's, LSN */
        bool slot_created;           /* this run created the slot */
        int64_t wal_sender_timeout_ms; /* 0: the server never times the stream out */
        char dbname[256];
        char system_id[32];          /* IDENTIFY_SYSTEM's, decimal text */
        uint32_t *table_oids;        /* pg_class.oid of each conf->tables[i]; the caller frees it */
        char plugin[16];             /* the slot's output plugin: "wal2json" or "pgoutput" */
        /* pgoutput: the publication as the relay started with it (publication.h) */
        uint32_t publication_oid;
        char publication_xmin[16];
        uint32_t *pubrel_oids;       /* pg_publication_rel.oid per conf->tables[i]; freed with the rest */
        uint32_t *json_domains;      /* type OIDs of the domains over json and jsonb; the caller frees it */
        size_t njson_domains;
        char kit_prefix[CONFIG_MESSAGE_PREFIX_MAX + 1]; /* outbox_message_prefix(), "" when the
                                                         * database has none */
};

/* Domains over json or jsonb that preflight_run() reads, at most (the rest are checked as text). */
#define PREFLIGHT_MAX_JSON_DOMAINS_TEXT "1024"

/*
 * preflight_run() - run the checks for @conf; @columns lists the extra
 * columns every outbox table must have (the topic template's). Fills
 * @ret_res (its table_oids and json_domains allocated: release them with
 * preflight_result_release()). Logs warnings itself (rows that a newly created slot will not
 * publish; a missing type column).
 *
 * Returns 0; -ECONNREFUSED with libpq's message in @err when the database
 * cannot be reached, -ECONNRESET when the connection failed during the
 * checks (the server restarting: both worth retrying); -EPROTONOSUPPORT
 * when a connection pooler is in between (the replication connection, tried
 * before any slot is created, does not reach a walsender); -ENOENT when the slot
 * is missing and --create-slot was not given; -EDOM when the slot's plugin
 * is the relay's other one, not --plugin's (a usage error); -EINVAL for any
 * other failed check (wrong setting, missing table or column, slot of
 * another plugin or database, an invalidated slot, the plugin refused by
 * output_plugin_libraries, pgoutput's publication missing or not the
 * relay's (publication.h), the slot's creation cancelled after
 * --slot-create-timeout), the reason and fix in @err. The plugin streamed
 * with goes to @ret_res->plugin (--plugin=auto: chosen and logged here);
 * with --create-slot a missing slot (and for pgoutput, first, a missing
 * publication) is created.
 */
int preflight_run(const struct relay_config *conf, const char *const *columns, size_t ncolumns,
                  struct preflight_result *ret_res, char *err, size_t errlen);

/*
 * preflight_result_release() - free what preflight_run() allocated in @res
 * (table_oids, json_domains) and clear those fields; @res itself is the
 * caller's. Safe on a zeroed result and when called twice. Never fails.
 */
void preflight_result_release(struct preflight_result *res);

/*
 * preflight_other_consumers() - after creating @conf's slot at
 * @consistent_lsn (LSN) over @c: when the database has other logical slots
 * (but --after-slot's), a warning naming them in @buf (@size bytes): one of
 * them may be a consumer being replaced (Debezium) whose unconfirmed rows
 * committed before @consistent_lsn nobody will publish, which the count of
 * rows already in the outbox (@existing_rows) cannot show when that
 * consumer's rows are deleted as they are written (said when the tables are
 * empty but pg_stat_user_tables.n_tup_ins is not). Leaves "" when there are
 * none or they cannot be read (best effort). Never fails.
 */
void preflight_other_consumers(PGconn *c, const struct relay_config *conf, int64_t existing_rows,
                               uint64_t consistent_lsn, char *buf, size_t size);

/*
 * preflight_kit_prefix() - the prefix outbox_emit() of sql/outbox.sql writes
 * in this database: outbox_message_prefix() (found through the search path,
 * as the application calls it). Copies it into @ret_prefix (@size bytes,
 * truncated to fit) and returns 1; returns 0 and "" when the function is not
 * there; -EINVAL with the server's message in @err when either query fails.
 */
int preflight_kit_prefix(PGconn *c, char *ret_prefix, size_t size, char *err, size_t errlen);

/* Probe timeout of `outbox-relay check`: connect_timeout and statement_timeout, in ms. */
#define PREFLIGHT_PROBE_TIMEOUT_MS 10000

/*
 * preflight_connect() - an ordinary (non-replication) connection to
 * @conninfo (NULL: libpq's PG* environment), built by pgconn_open(). With
 * @timeout_ms > 0 also connect_timeout (rounded up to seconds, @conninfo may
 * override it) and statement_timeout = @timeout_ms; 0 sets neither (the
 * relay's startup).
 * Returns 0 and *ret_conn (owned by the caller, PQfinish()), or
 * -ECONNREFUSED with "cannot connect to the database: <libpq's message>" in
 * @err.
 */
int preflight_connect(const char *conninfo, int timeout_ms, PGconn **ret_conn, char *err,
                      size_t errlen);

/* What preflight_read_settings() reads: pg_settings and the current role. */
struct preflight_settings {
        int server_version_num;         /* e.g. 150020 */
        char server_version[64];        /* server_version, e.g. "15.20 (Debian 15.20-0+deb12u1)" */
        char wal_level[32];
        char server_encoding[64];
        char dbname[256];               /* current_database() */
        char user[256];                 /* current_user */
        int64_t wal_sender_timeout_ms;  /* 0: the server never times the stream out */
        bool has_output_plugin_libraries; /* the setting exists (PostgreSQL 15.19 and the
                                           * like) and this role may read it */
        char output_plugin_libraries[1024];
        bool has_max_slot_wal_keep_size;  /* PostgreSQL 13 or later */
        int64_t max_slot_wal_keep_size_mb; /* -1: unlimited */
        bool rolreplication;            /* the role may open replication connections */
        bool rolsuper;
        char synchronous_standby_names[1024]; /* "" when none (or this role may not read it) */
        char application_name[256];     /* this connection's, which the relay's connections share */
};

/*
 * preflight_read_settings() - read the server's version, wal_level,
 * server_encoding, wal_sender_timeout, output_plugin_libraries (PostgreSQL
 * 14.24, 15.19, 16.15, 17.11, 18.6 and later minors; absent before, and
 * hidden from roles that are neither superuser nor pg_read_all_settings:
 * then treated as absent), max_slot_wal_keep_size (PostgreSQL 13+), the
 * database name, the current role's REPLICATION and superuser attributes
 * (pg_roles), synchronous_standby_names and this connection's
 * application_name. Returns 0, or -EINVAL with "cannot read server settings: ..."
 * in @err.
 */
int preflight_read_settings(PGconn *c, struct preflight_settings *ret_set, char *err, size_t errlen);

/*
 * The oldest server the relay accepts, as server_version_num: PostgreSQL 14,
 * the oldest major the PostgreSQL project still supports (14 to 18 are
 * tested). preflight_check_version() is the only place that gates it.
 */
#define PREFLIGHT_MIN_SERVER_VERSION 140000
/* The newest major tested (README.md, "Supported PostgreSQL versions"); newer ones are not refused. */
#define PREFLIGHT_NEWEST_TESTED_MAJOR 18

/*
 * preflight_check_version() - 0, or -EINVAL and why in @err (naming the
 * supported range and what to do) for a server older than
 * PREFLIGHT_MIN_SERVER_VERSION.
 */
int preflight_check_version(const struct preflight_settings *set, char *err, size_t errlen);

/* preflight_check_wal_level() - 0, or -EINVAL and the fix in @err unless wal_level is logical. */
int preflight_check_wal_level(const struct preflight_settings *set, char *err, size_t errlen);

/* preflight_check_encoding() - 0, or -EINVAL and the fix in @err unless server_encoding is UTF8. */
int preflight_check_encoding(const struct preflight_settings *set, char *err, size_t errlen);

/*
 * preflight_check_plugin_libraries() - 0, or -EINVAL and the ALTER SYSTEM
 * that fixes it in @err when output_plugin_libraries exists, this role can
 * read it, and it does not list @plugin ("wal2json" or "pgoutput"): the
 * server then refuses that plugin to every role, superusers too (the
 * setting came with the minor releases of 2026-08-13: PostgreSQL 14.24,
 * 15.19, 16.15, 17.11, 18.6). Older servers have no such setting and allow
 * every installed plugin. For wal2json the fix also names --plugin=pgoutput.
 */
int preflight_check_plugin_libraries(const struct preflight_settings *set, const char *plugin, char *err,
                                     size_t errlen);

/*
 * preflight_sync_standby_named() - true if synchronous_standby_names text
 * @names (PostgreSQL's syntax, src/backend/replication/syncrep_gram.y and
 * syncrep_scanner.l: "name [, ...]", "[FIRST] N (name [, ...])" or "ANY N
 * (name [, ...])", names unquoted identifiers or double-quoted) names
 * @application_name, compared case-insensitively as the server does
 * (SyncRepGetStandbyPriority()), or '*'. A walsender so named becomes a
 * synchronous standby, or a potential one, at the next reload: a logical one
 * too. Pure: no SQL.
 */
bool preflight_sync_standby_named(const char *names, const char *application_name);

/*
 * preflight_check_sync_standby() - 0, or -EINVAL and why with the fix in
 * @err when @set's synchronous_standby_names names the relay's
 * application_name (preflight_sync_standby_named()): every commit in the
 * cluster would then wait for the relay's flush position, that is for
 * Kafka's acknowledgements.
 */
int preflight_check_sync_standby(const struct preflight_settings *set, char *err, size_t errlen);

/* preflight_plugin_allowed() - false only when @set's output_plugin_libraries exists and lacks @plugin. */
bool preflight_plugin_allowed(const struct preflight_settings *set, const char *plugin);

/*
 * preflight_plugin_listed() - true if the list setting text @list (as SHOW
 * prints output_plugin_libraries: names separated by commas, optionally
 * double-quoted) names @plugin exactly.
 */
bool preflight_plugin_listed(const char *list, const char *plugin);

/*
 * preflight_plugin_fix() - the fix that allows @plugin, into @buf (@size
 * bytes, truncated): "as a superuser ...: ALTER SYSTEM SET
 * output_plugin_libraries = 'pgoutput', 'test_decoding', 'wal2json'; SELECT
 * pg_reload_conf();", keeping every name @set lists (PostgreSQL's default
 * list when this role cannot read the setting).
 */
void preflight_plugin_fix(const struct preflight_settings *set, const char *plugin, char *buf, size_t size);

/* preflight_relay_plugin() - true for the output plugins the relay decodes: wal2json, pgoutput. */
bool preflight_relay_plugin(const char *plugin);

/*
 * preflight_choose_plugin() - the output plugin to stream with for --plugin
 * @wanted ("wal2json", "pgoutput" or "auto"): with auto, the plugin of the
 * existing slot @slot (may be NULL) when it is one the relay decodes, else
 * wal2json when @set's output_plugin_libraries allows it (or does not
 * exist), else pgoutput; otherwise @wanted (a slot of the other plugin is
 * preflight_slot_verdict()'s business). Why, in words, into @why (@size
 * bytes). Returns a static string. Pure: no SQL.
 */
const char *preflight_choose_plugin(const struct preflight_settings *set, const struct preflight_slot *slot,
                                    const char *wanted, char *why, size_t size);

/* What preflight_check_table() found out about one outbox table. */
struct preflight_table {
        bool exists;
        char relkind;            /* pg_class.relkind: 'r' table, 'p' partitioned, ... */
        char replica_identity;   /* pg_class.relreplident: 'd', 'n', 'f' or 'i' */
        bool can_select;         /* has_table_privilege(..., 'SELECT') for the current role */
        bool has_type_column;    /* the --type-column (ce_type) exists */
        uint32_t oid;            /* pg_class.oid: the relation the name stands for now */
        char persistence;        /* pg_class.relpersistence: 'p' permanent, 'u' unlogged, 't' temp */
};

/*
 * preflight_check_table() - look up table @t and check it has the columns
 * the relay reads for @conf (ID, key, payload) and the extra @columns of the
 * topic template. Fills @ret_tab as far as it got (exists false: the table
 * is missing). Returns 0, or -EINVAL with the reason and fix in @err (the
 * table is missing, partitioned, not a table, not permanent (UNLOGGED or
 * TEMPORARY: its rows never reach the WAL), lacks a column, has a payload
 * column whose type the relay cannot publish (anything but json, jsonb and
 * the string types, through domains: bytea, uuid, ...), or the catalog
 * cannot be read).
 */
int preflight_check_table(PGconn *c, const struct relay_config *conf, const struct table_name *t,
                          const char *const *columns, size_t ncolumns, struct preflight_table *ret_tab,
                          char *err, size_t errlen);

/*
 * preflight_check_header_columns() - check that table @t has the column of
 * every --column-header of @conf (a row without it could not be published:
 * record_extract() refuses it). Returns 0 (also without column headers);
 * -ENOENT when the table does not exist (preflight_check_table() says so);
 * -EINVAL with the missing columns and the fix in @err, or with "cannot read
 * the columns of ..." when the catalog cannot be read.
 */
int preflight_check_header_columns(PGconn *c, const struct relay_config *conf,
                                   const struct table_name *t, char *err, size_t errlen);

/*
 * preflight_existing_rows() - how many rows table @t holds, counting at most
 * 1000001 (1000001 means "over a million"). Returns 0 and *ret_rows, or
 * -EIO with the server's message in @err.
 */
int preflight_existing_rows(PGconn *c, const struct table_name *t, int64_t *ret_rows, char *err,
                            size_t errlen);

/*
 * A slot's row of pg_replication_slots with the WAL position read in the same
 * query, and the process holding it as pg_stat_activity shows it. Columns
 * that older servers lack are gated by server version in
 * preflight_read_slot() only.
 */
struct preflight_slot {
        bool exists;
        char plugin[64];
        char database[256];
        char slot_type[16];           /* "logical" or "physical" */
        bool temporary;
        bool has_wal_status;          /* PostgreSQL 13+: wal_status and safe_wal_size */
        char wal_status[16];          /* "reserved", "extended", "unreserved", "lost"; "" before 13 */
        bool safe_wal_size_null;      /* NULL: max_slot_wal_keep_size is -1 (or the slot is lost) */
        int64_t safe_wal_size;        /* bytes that can still be written before the slot is lost */
        bool failover;                /* PostgreSQL 17+: synchronized to standbys */
        bool synced;                  /* PostgreSQL 17+: a standby's copy, not usable until promotion */
        char invalidation_reason[32]; /* PostgreSQL 17+: why the slot was invalidated ("wal_removed",
                                       * "rows_removed", "wal_level_insufficient", 18's
                                       * "idle_timeout"); "" when valid or before 17 */
        int active_pid;               /* walsender holding the slot, 0 if none */
        char holder[512];             /* that process: application name, client address, since; or "" */
        uint64_t confirmed_flush_lsn; /* LSN; LSN_INVALID if NULL */
        uint64_t restart_lsn;         /* LSN; LSN_INVALID if NULL (invalidated) */
        uint64_t current_wal_lsn;     /* pg_current_wal_lsn(), or the replay LSN on a standby */
        bool in_recovery;             /* the server is a standby */
};

/*
 * preflight_read_slot() - read @slot's row into @ret_slot (exists false if
 * there is none) over @c, an ordinary or a replication=database connection
 * (pgstream_conn()). The one query of pg_replication_slots, version-gated
 * here and nowhere else (wal_status and safe_wal_size from 13, failover and
 * synced from 17). Returns 0, or -EIO with "cannot read
 * pg_replication_slots: <server's message>" in @err.
 */
int preflight_read_slot(PGconn *c, const char *slot, struct preflight_slot *ret_slot, char *err,
                        size_t errlen);

/* The one verdict on a slot that the relay, preflight, `check` and `slot` all word from. */
enum preflight_slot_verdict {
        PREFLIGHT_SLOT_OK,             /* a slot of the plugin and database, free to stream from */
        PREFLIGHT_SLOT_MISSING,
        PREFLIGHT_SLOT_NOT_LOGICAL,    /* a physical slot of that name */
        PREFLIGHT_SLOT_OTHER_PLUGIN,   /* a plugin the relay does not decode */
        PREFLIGHT_SLOT_OTHER_DECODER,  /* the relay's other plugin: --plugin names the wrong one */
        PREFLIGHT_SLOT_OTHER_DATABASE,
        PREFLIGHT_SLOT_LOST,           /* invalidated: wal_status lost or no restart_lsn */
        PREFLIGHT_SLOT_SYNCED,         /* a standby's synchronized copy (17+) */
        PREFLIGHT_SLOT_ACTIVE,         /* fine, but held by another process now */
};

/*
 * preflight_slot_verdict() - the verdict on @s for streaming from database
 * @dbname with output plugin @plugin ("wal2json" or "pgoutput"; NULL:
 * either).
 */
enum preflight_slot_verdict preflight_slot_verdict(const struct preflight_slot *s, const char *dbname,
                                                   const char *plugin);

/* When a verdict is worded: the wording says what is known then and what to do. */
enum preflight_when {
        PREFLIGHT_AT_START,      /* the relay's startup, or `check` */
        PREFLIGHT_RECONNECTING,  /* the relay streamed before; @since_lsn is what it published up to */
};

/*
 * preflight_slot_explain() - what verdict @v on slot @slot (row @s, database
 * @dbname, wanted plugin @plugin or NULL for either) means and the fix, as
 * one sentence without a trailing period, into @buf (@size bytes,
 * truncated). @since_lsn (PREFLIGHT_RECONNECTING) is the LSN up to which the
 * relay published; rows committed after it are at risk. PREFLIGHT_SLOT_OK
 * gives a summary of the slot.
 */
void preflight_slot_explain(enum preflight_slot_verdict v, const struct preflight_slot *s,
                            const char *slot, const char *dbname, const char *plugin,
                            enum preflight_when when, uint64_t since_lsn, char *buf, size_t size);

/*
 * preflight_check_slot() - 0 if the existing slot @s named @slot can be
 * streamed from database @dbname with @plugin (NULL: either of the relay's)
 * (PREFLIGHT_SLOT_OK or _ACTIVE); -EDOM for a slot of the relay's other
 * plugin (the caller's --plugin is wrong: a usage error); -EINVAL otherwise;
 * both with preflight_slot_explain()'s sentence in @err.
 */
int preflight_check_slot(const struct preflight_slot *s, const char *slot, const char *dbname,
                         const char *plugin, char *err, size_t errlen);

/*
 * preflight_create_slot() - pg_create_logical_replication_slot(@slot,
 * @plugin, @temporary), with @failover also its fifth argument, failover
 * (PostgreSQL 17+: the slot is synchronized to standbys that ask for it),
 * over the ordinary connection @c (a temporary slot goes away with @c). Creating a slot waits for the
 * transactions running on the server to end (its consistent point): with
 * @timeout_ms > 0 the server itself cancels the creation after that long
 * (statement_timeout, set for this statement only), so a client that gives
 * up or dies leaves no half-made slot behind; 0 waits without a limit.
 * @slot must be a valid slot name, @plugin a plain name. Returns 0 and the
 * consistent point LSN in *ret_lsn; -EEXIST (42710, the slot exists),
 * -ETIMEDOUT (cancelled after @timeout_ms), -EACCES (42501: the role lacks
 * REPLICATION, or the server's output_plugin_libraries does not list
 * @plugin), -ENOENT (58P01: the plugin's library is not installed), -EINVAL
 * (@failover on a server before 17, or any other refusal), -EIO (the
 * connection failed): each with
 * "cannot create replication slot ...: <server's message>" in @err and the
 * SQLSTATE in @ret_sqlstate (6 bytes, "" if none).
 */
int preflight_create_slot(PGconn *c, const char *slot, const char *plugin, bool temporary, bool failover,
                          int timeout_ms, uint64_t *ret_lsn, char *err, size_t errlen,
                          char *ret_sqlstate);

/*
 * preflight_slot_blockers() - what a slot's creation waits for, as text into
 * @buf (@size bytes, "" if nothing): up to five transactions holding an XID
 * (pg_stat_activity: PID, user, application, state, age) and up to five
 * prepared transactions (pg_prepared_xacts: gid, owner, database, age),
 * which hold it up until someone commits or rolls them back.
 */
void preflight_slot_blockers(PGconn *c, char *buf, size_t size);

/*
 * The side connection's round (relay_watch.c), one statement: per
 * configured table in order (i), its pg_class oid, relkind and
 * relpersistence (NULL when the name resolves to nothing), then on every row
 * the slot's active_pid and confirmed_flush_lsn and that walsender's
 * sync_state in pg_stat_replication, then pgoutput's publication: its oid,
 * xmin and pubinsert, and per table its pg_publication_rel.oid (NULL when
 * the table is not listed; all four NULL without a publication), the
 * statement's own snapshot (pg_current_snapshot(), pgsnapshot.h: which
 * commits its catalog reads saw), and the xmax of the catalog rows it read,
 * in the order pg_class, pg_namespace, pg_publication, pg_publication_rel:
 * the transaction that updated or deleted (or locked) the row version the
 * snapshot sees, which that snapshot may not see ended yet although its
 * commit was sent (heapam's visibility rules: the version stays visible
 * until its xmax is). An xmax is a transaction ID or, where several
 * sessions locked the row or one locked it and another updated it, a
 * MultiXactId; which, only the row's infomask says, and SQL cannot read
 * it. So each xmax comes both ways: columns 12 to 15 as a transaction ID
 * where it can be one (NULL, or 0 for none), columns 16 to 19 as the
 * updating members of the MultiXactId it can be ({xid,...}, NULL where it
 * cannot be a live one). Then the walsender's application_name (column 20)
 * and synchronous_standby_names (21), which tell whether it is named a
 * synchronous standby where sync_state is hidden (PostgreSQL shows it only
 * to superusers and pg_read_all_stats). Parameters: $1 and $2 the tables' schemas and names as text[] literals
 * (preflight_watch_array()), $3 the slot, $4 the publication (NULL with
 * wal2json). Columns of every supported major (tests/sqlmatrix).
 */
extern const char PREFLIGHT_WATCH_SQL[];

/*
 * preflight_watch_array() - the @schemas (else the table names) of the @n
 * @tables as a text[] literal ({"public","outbox"}, '"' and '\\' escaped),
 * allocated (free()), or NULL when out of memory.
 */
char *preflight_watch_array(const struct table_name *tables, size_t n, bool schemas);

/*
 * preflight_watch() - PREFLIGHT_WATCH_SQL run on @c and waited for; the
 * result is the caller's (PQclear()). The relay sends the same statement
 * without waiting, on its side connection.
 */
PGresult *preflight_watch(PGconn *c, const char *schemas, const char *tables, const char *slot,
                          const char *publication);

#endif
