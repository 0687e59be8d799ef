/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checks over an ordinary (non-replication) connection before streaming:
 * server version, wal_level, server_encoding, wal2json allowed as an output
 * plugin, the outbox tables and the columns the relay reads, and the slot
 * (created with --create-slot, never silently). Each failure is one line
 * saying what is wrong and how to fix it. Knows libpq and the catalogs
 * (pg_settings, pg_class, pg_attribute, pg_replication_slots), not Kafka.
 */
#ifndef RELAY_PREFLIGHT_H
#define RELAY_PREFLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

#endif
