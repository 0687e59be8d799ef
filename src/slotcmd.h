/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `outbox-relay slot create | drop | status`: the operator's handling of the
 * relay's logical replication slot over an ordinary connection (SQL
 * functions pg_create_logical_replication_slot, pg_drop_replication_slot
 * and the view pg_replication_slots; PostgreSQL documentation "System
 * Views" and "Replication Management Functions"). Reuses preflight's slot
 * and table items. Writes only in slotcmd_print_status().
 */
#ifndef RELAY_SLOTCMD_H
#define RELAY_SLOTCMD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <libpq-fe.h>

#include "config.h"
#include "preflight.h"

/* A slot's row of pg_replication_slots, with the WAL it holds. */
struct slotcmd_status {
        char slot[64];
        char plugin[64];
        char slot_type[16];
        char database[256];
        bool active;
        int active_pid;                 /* 0 when not active */
        char holder[512];               /* "PID n, application ..., client ..." when active */
        uint64_t confirmed_flush_lsn;   /* LSN; LSN_INVALID if NULL (physical slot) */
        uint64_t restart_lsn;           /* LSN; LSN_INVALID if NULL */
        uint64_t current_wal_lsn;       /* pg_current_wal_lsn() (replay LSN on a standby), same query */
        int64_t retained_bytes;         /* current_wal_lsn - restart_lsn, bytes; -1 if no restart_lsn */
        int64_t lag_bytes;              /* current_wal_lsn - confirmed_flush_lsn, bytes; -1 if none */
        bool has_wal_status;            /* PostgreSQL 13+: wal_status and safe_wal_size exist */
        char wal_status[16];            /* "reserved", "extended", "unreserved", "lost" */
        bool safe_wal_size_null;        /* NULL: max_slot_wal_keep_size is -1 (or the slot is lost) */
        int64_t safe_wal_size;          /* bytes that can still be written before the slot is lost */
        bool has_failover;              /* PostgreSQL 17+: failover, synced, invalidation_reason exist */
        bool failover;                  /* synchronized to standbys that ask for it */
        bool synced;                    /* a standby's synchronized copy of a failover slot */
        char invalidation_reason[32];   /* "" while valid; else why (README: the remedy for each) */
};

/*
 * slotcmd_status() - read the slot of @conf (connect_timeout and
 * statement_timeout PREFLIGHT_PROBE_TIMEOUT_MS). Returns 0 and @ret_st,
 * -ECONNREFUSED (cannot connect), -ENOENT (no such slot), -EIO (query
 * failed); the message in @err.
 */
int slotcmd_status(const struct relay_config *conf, struct slotcmd_status *ret_st, char *err,
                   size_t errlen);

/*
 * slotcmd_print_status() - @st to @out as "name: value" lines, or with
 * @json as one JSON object (LSNs as pg_lsn text, sizes as integers in bytes,
 * safe_wal_size null when unlimited; fields PostgreSQL before 13 lacks are
 * left out; failover, synced and invalidation_reason from 17 on, the
 * last null while the slot is valid).
 */
void slotcmd_print_status(const struct slotcmd_status *st, bool json, FILE *out);

/* What slotcmd_create() did. */
struct slotcmd_created {
        uint64_t consistent_lsn;   /* the slot's consistent point: decoding starts at commits after it */
        char database[256];
        int64_t existing_rows;     /* rows already in the outbox tables (counted up to 1000001 each) */
        char plugin[16];           /* "wal2json" or "pgoutput" */
        char why[1200];            /* why that plugin (preflight_choose_plugin()) */
        bool publication_created;  /* pgoutput: the publication was created first */
        char other_consumers[1536]; /* preflight_other_consumers()'s warning, "" if none */
};

/*
 * slotcmd_create() - create the slot of @conf with the plugin --plugin
 * names (auto: preflight_choose_plugin(), and pgoutput when wal2json is not
 * installed), as a failover slot with --failover (17+). For pgoutput the
 * publication comes first: created when missing (publication.h), then it
 * must be the relay's. Waits for the transactions running on the server to
 * end, at most conf->slot_create_timeout_ms (the server cancels the creation
 * then, so no half-made slot is left; the message names what it waited
 * for). Returns 0 and @ret_created, -ECONNREFUSED, -EEXIST (the slot exists:
 * nothing done), -ETIMEDOUT, -EACCES / -ENOENT / -EINVAL / -EIO (see
 * preflight_create_slot(), publication_create(); also the plugin refused by
 * output_plugin_libraries, or a publication that is not the relay's:
 * -EINVAL); the message in @err.
 */
int slotcmd_create(const struct relay_config *conf, struct slotcmd_created *ret_created, char *err,
                   size_t errlen);

/* What slotcmd_wait_after() saw of the old slot (--after-slot). */
struct slotcmd_after {
        uint64_t confirmed_flush_lsn;   /* its last one read, LSN */
        char plugin[64];
        int active_pid;                 /* 0: no consumer holds it */
        int64_t waited_ms;
};

/*
 * slotcmd_check_after() - whether --after-slot (@conf->after_slot) can be
 * the slot this relay takes over from, over @c: another logical slot of the
 * same database, not lost. Returns 0 and the slot's row in @ret_slot, or
 * -ENOENT / -EINVAL / -EIO with the reason and fix in @err.
 */
int slotcmd_check_after(PGconn *c, const struct relay_config *conf, struct preflight_slot *ret_slot,
                        char *err, size_t errlen);

/*
 * slotcmd_wait_after() - wait until @conf->after_slot, the slot of the
 * consumer being replaced (Debezium's), has confirmed_flush_lsn >=
 * @consistent_lsn, the new slot's consistent point: from then on every row
 * committed before the new slot's start was acknowledged by that consumer,
 * and it may stop. Reads pg_replication_slots every 200 ms for at most
 * @conf->after_slot_timeout_ms (0: once). Returns 0 and @ret_after; or
 * -ETIMEDOUT (still behind: @err says by how much, what holds the slot and
 * what to do), -ECONNREFUSED, -ENOENT (the slot went away), -EIO; the
 * message in @err. Creates and drops nothing.
 */
int slotcmd_wait_after(const struct relay_config *conf, uint64_t consistent_lsn,
                       struct slotcmd_after *ret_after, char *err, size_t errlen);

/*
 * slotcmd_drop() - drop the slot of @conf if @conf->yes. Returns 0,
 * -ECONNREFUSED, -ENOENT (no such slot), -EPERM (no --yes: nothing done; @err
 * says what would be dropped), -EBUSY (the slot is active: @err names the
 * PID), -EIO (the server refused); the message in @err.
 */
int slotcmd_drop(const struct relay_config *conf, char *err, size_t errlen);

#endif
