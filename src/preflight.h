/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checks over an ordinary (non-replication) connection before streaming:
 * server version, wal_level, server_encoding, wal2json allowed as an output
 * plugin, the outbox tables and the columns the relay reads, and the slot
 * (created with --create-slot, never silently). Each failure is one line
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

struct preflight_result {
        int server_version_num;      /* e.g. 150020 */
        uint64_t confirmed_flush_lsn; /* the slot's, LSN; LSN_INVALID right after creation */
        uint64_t restart_lsn;        /* the slot's, LSN */
        bool slot_created;           /* this run created the slot */
        int64_t wal_sender_timeout_ms; /* 0: the server never times the stream out */
        char dbname[256];
};

/*
 * preflight_run() - run the checks for @conf; @columns lists the extra
 * columns every outbox table must have (the topic template's). Fills
 * @ret_res. Logs warnings itself (rows that a newly created slot will not
 * publish; a missing type column).
 *
 * Returns 0; -ECONNREFUSED with libpq's message in @err when the database
 * cannot be reached (worth retrying); -ENOENT when the slot is missing and
 * --create-slot was not given; -EINVAL for any other failed check (wrong
 * setting, missing table or column, slot of another plugin or database, an
 * invalidated slot, wal2json refused), the reason and fix in @err.
 */
int preflight_run(const struct relay_config *conf, const char *const *columns, size_t ncolumns,
                  struct preflight_result *ret_res, char *err, size_t errlen);

/* Probe timeout of `outbox-relay check`: connect_timeout and statement_timeout, in ms. */
#define PREFLIGHT_PROBE_TIMEOUT_MS 10000

/*
 * preflight_connect() - an ordinary (non-replication) connection to
 * @conninfo (NULL: libpq's PG* environment) with the relay's session
 * settings (PGSTREAM_SESSION_OPTIONS). With @timeout_ms > 0 also
 * connect_timeout (rounded up to seconds, @conninfo may override it) and
 * statement_timeout = @timeout_ms; 0 sets neither (the relay's startup).
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
        bool has_output_plugin_libraries; /* Debian's hardening setting exists and is visible */
        char output_plugin_libraries[1024];
        bool has_max_slot_wal_keep_size;  /* PostgreSQL 13 or later */
        int64_t max_slot_wal_keep_size_mb; /* -1: unlimited */
        bool rolreplication;            /* the role may open replication connections */
        bool rolsuper;
};

/*
 * preflight_read_settings() - read the server's version, wal_level,
 * server_encoding, wal_sender_timeout, output_plugin_libraries (Debian's
 * patch; absent elsewhere, and hidden from roles that are neither superuser
 * nor pg_read_all_settings: then treated as absent), max_slot_wal_keep_size (PostgreSQL 13+), the
 * database name and the current role's REPLICATION and superuser attributes
 * (pg_roles). Returns 0, or -EINVAL with "cannot read server settings: ..."
 * in @err.
 */
int preflight_read_settings(PGconn *c, struct preflight_settings *ret_set, char *err, size_t errlen);

/* preflight_check_version() - 0, or -EINVAL and why in @err for a server older than 10. */
int preflight_check_version(const struct preflight_settings *set, char *err, size_t errlen);

/* preflight_check_wal_level() - 0, or -EINVAL and the fix in @err unless wal_level is logical. */
int preflight_check_wal_level(const struct preflight_settings *set, char *err, size_t errlen);

/* preflight_check_encoding() - 0, or -EINVAL and the fix in @err unless server_encoding is UTF8. */
int preflight_check_encoding(const struct preflight_settings *set, char *err, size_t errlen);

/*
 * preflight_check_plugin_libraries() - 0, or -EINVAL and the ALTER SYSTEM
 * that fixes it in @err when output_plugin_libraries exists and does not
 * list wal2json (Debian then refuses the plugin).
 */
int preflight_check_plugin_libraries(const struct preflight_settings *set, char *err, size_t errlen);

/* What preflight_check_table() found out about one outbox table. */
struct preflight_table {
        bool exists;
        char relkind;            /* pg_class.relkind: 'r' table, 'p' partitioned, ... */
        char replica_identity;   /* pg_class.relreplident: 'd', 'n', 'f' or 'i' */
        bool can_select;         /* has_table_privilege(..., 'SELECT') for the current role */
        bool has_type_column;    /* the --type-column (ce_type) exists */
};

/*
 * preflight_check_table() - look up table @t and check it has the columns
 * the relay reads for @conf (ID, key, payload) and the extra @columns of the
 * topic template. Fills @ret_tab as far as it got (exists false: the table
 * is missing). Returns 0, or -EINVAL with the reason and fix in @err (the
 * table is missing, partitioned, not a table, lacks a column, or the catalog
 * cannot be read).
 */
int preflight_check_table(PGconn *c, const struct relay_config *conf, const struct table_name *t,
                          const char *const *columns, size_t ncolumns, struct preflight_table *ret_tab,
                          char *err, size_t errlen);

/*
 * preflight_existing_rows() - how many rows table @t holds, counting at most
 * 1000001 (1000001 means "over a million"). Returns 0 and *ret_rows, or
 * -EIO with the server's message in @err.
 */
int preflight_existing_rows(PGconn *c, const struct table_name *t, int64_t *ret_rows, char *err,
                            size_t errlen);

/* A row of pg_replication_slots, as far as the relay cares. */
struct preflight_slot {
        bool exists;
        char plugin[64];
        char database[256];
        char slot_type[16];      /* "logical" or "physical" */
        char wal_status[16];     /* PostgreSQL 13+: "reserved", "extended", "unreserved", "lost" */
        int active_pid;          /* walsender holding the slot, 0 if none */
        uint64_t confirmed_flush_lsn; /* LSN; LSN_INVALID if NULL */
        uint64_t restart_lsn;    /* LSN; LSN_INVALID if NULL */
};

/*
 * preflight_read_slot() - read @slot's row of pg_replication_slots into
 * @ret_slot (exists false if there is none). Returns 0, or -EINVAL with
 * "cannot read pg_replication_slots: ..." in @err.
 */
int preflight_read_slot(PGconn *c, const char *slot, struct preflight_slot *ret_slot, char *err,
                        size_t errlen);

/*
 * preflight_check_slot() - 0 if the existing slot @s named @slot can be
 * streamed from database @dbname, or -EINVAL with the reason and fix in @err
 * (not logical, another plugin than wal2json, another database, invalidated).
 */
int preflight_check_slot(const struct preflight_slot *s, const char *slot, const char *dbname,
                         char *err, size_t errlen);

/*
 * preflight_create_slot() - pg_create_logical_replication_slot(@slot,
 * 'wal2json'). Waits, without a timeout of its own, for transactions running
 * on the server to end (the slot's consistent point). Returns 0 and the
 * consistent point LSN in *ret_lsn, or -EEXIST (SQLSTATE 42710) / -EINVAL
 * with "cannot create replication slot ...: <server's message>" in @err.
 */
int preflight_create_slot(PGconn *c, const char *slot, uint64_t *ret_lsn, char *err, size_t errlen);

#endif
