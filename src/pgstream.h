/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The replication connection: connect with replication=database and pinned
 * session settings, IDENTIFY_SYSTEM, START_REPLICATION SLOT ... LOGICAL with
 * wal2json options, non-blocking reads of CopyData, standby status updates,
 * and the CopyDone/drain on stop (PostgreSQL documentation "Streaming
 * Replication Protocol"; pg_recvlogical.c). Knows libpq, not wal2json's
 * content, Kafka or the ledger.
 */
#ifndef RELAY_PGSTREAM_H
#define RELAY_PGSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pgstream;

/* Settings pinned on every connection so values do not depend on server defaults. */
#define PGSTREAM_SESSION_OPTIONS \
        "-c datestyle=ISO -c timezone=UTC -c bytea_output=hex -c extra_float_digits=3 " \
        "-c intervalstyle=postgres"

struct pgstream_system {
        char system_id[32];   /* IDENTIFY_SYSTEM systemid, decimal text */
        uint32_t timeline;
        uint64_t xlogpos;     /* LSN of the server's current WAL flush position */
        char dbname[256];
};

struct pgstream_start {
        const char *slot;           /* slot name (validated [a-z0-9_]) */
        const char *const *options; /* name, value pairs for the output plugin */
        size_t noptions;            /* number of pairs */
};

/*
 * pgstream_connect() - open a replication connection for @conninfo (NULL:
 * PG* environment) and run IDENTIFY_SYSTEM into @ret_sys. TCP keepalives
 * and tcp_user_timeout default to detecting a dead peer within about 30 s
 * (a network cut, not only a closed socket); @conninfo may override them. Returns 0 and
 * *ret_stream (owned by the caller, pgstream_free()), or -ECONNREFUSED with
 * libpq's message in @err when the connection fails, -EPROTO if
 * IDENTIFY_SYSTEM fails, -ENOMEM.
 */
int pgstream_connect(const char *conninfo, struct pgstream **ret_stream, struct pgstream_system *ret_sys,
                     char *err, size_t errlen);

/*
 * pgstream_start() - START_REPLICATION SLOT <slot> LOGICAL 0/0 (<options>),
 * so the server starts at the slot's confirmed_flush_lsn. Puts the
 * connection in non-blocking mode. Returns 0, or -EPROTO with the server's
 * message in @err and its SQLSTATE in @sqlstate (6 bytes, "" if none).
 */
int pgstream_start(struct pgstream *s, const struct pgstream_start *start, char *err, size_t errlen,
                   char sqlstate[6]);

struct pgstream_slot {
        bool exists;
        char plugin[64];
        char database[256];
        char wal_status[16];     /* "reserved", "extended", "unreserved", "lost", or "" */
        int active_pid;          /* PID of the walsender holding it, 0 if none */
        uint64_t confirmed_flush_lsn;
};

/*
 * pgstream_slot_info() - read @slot's row of pg_replication_slots over the
 * replication connection (SQL is allowed in replication=database mode, PG 10+).
 * @slot must be a valid slot name ([a-z0-9_]). Returns 0 (also when the slot
 * does not exist: ret->exists is false), or -EPROTO with the server's message.
 */
int pgstream_slot_info(struct pgstream *s, const char *slot, struct pgstream_slot *ret_slot, char *err,
                       size_t errlen);

/*
 * pgstream_create_slot() - CREATE_REPLICATION_SLOT "@slot" [TEMPORARY]
 * LOGICAL @plugin (PostgreSQL documentation "Streaming Replication
 * Protocol"; the pre-15 syntax, which 15 still accepts). A temporary slot
 * is dropped by the server when this connection closes. Creating a slot
 * waits for the transactions running on the server to end; after
 * @timeout_ms (0: no limit) the command is cancelled. @slot must be a valid
 * slot name ([a-z0-9_]); @plugin a plain name. Returns 0 and the slot's
 * consistent point LSN in *ret_lsn, -ETIMEDOUT, -EPROTO with the server's
 * message in @err and its SQLSTATE in @sqlstate (6 bytes, "" if none), or -EIO
 * if the connection failed.
 */
int pgstream_create_slot(struct pgstream *s, const char *slot, const char *plugin, bool temporary,
                         int timeout_ms, uint64_t *ret_lsn, char *err, size_t errlen, char sqlstate[6]);

/* pgstream_socket() - the socket to poll() for POLLIN (and POLLOUT when pgstream_want_write()). */
int pgstream_socket(const struct pgstream *s);

/* pgstream_want_write() - 1 if output is queued and the socket should be polled for POLLOUT. */
int pgstream_want_write(struct pgstream *s);

/*
 * pgstream_read() - the next CopyData message, without blocking. On 1, *ret_buf
 * and *ret_len hold it, borrowed until the next pgstream_read() call.
 * Returns 1 (message), 0 (none buffered: poll the socket), -ENODATA (the
 * server ended the copy: shutdown or error; see @err), -EIO (connection
 * lost; libpq's message in @err). @sqlstate as in pgstream_start().
 */
int pgstream_read(struct pgstream *s, const char **ret_buf, size_t *ret_len, char *err, size_t errlen,
                  char sqlstate[6]);

/* pgstream_consume() - read what the socket has (after POLLIN). Returns 0 or -EIO. */
int pgstream_consume(struct pgstream *s, char *err, size_t errlen);

/*
 * pgstream_send_status() - queue and flush a standby status update with
 * @write_lsn, @flush_lsn (both also as apply) and @now_us (µs since the Unix
 * epoch). Returns 0 or -EIO with libpq's message in @err.
 */
int pgstream_send_status(struct pgstream *s, uint64_t write_lsn, uint64_t flush_lsn, int64_t now_us,
                         char *err, size_t errlen);

/* pgstream_flush() - push queued output (after POLLOUT). Returns 0 or -EIO. */
int pgstream_flush(struct pgstream *s);

/*
 * pgstream_finish() - send CopyDone and drain the server's remaining output
 * and results for at most @timeout_ms, so a last ErrorResponse is seen (and
 * returned as -EPROTO with its message in @err). Returns 0 or a negative errno.
 */
int pgstream_finish(struct pgstream *s, int timeout_ms, char *err, size_t errlen);

/* pgstream_free() - close the connection; NULL-safe; returns NULL. */
struct pgstream *pgstream_free(struct pgstream *s);

#endif
