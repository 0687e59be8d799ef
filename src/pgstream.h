/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The replication connection: connect with replication=database and pinned
 * session settings, IDENTIFY_SYSTEM, START_REPLICATION SLOT ... LOGICAL with
 * the output plugin's options, non-blocking reads of CopyData, standby status updates,
 * and the CopyDone/drain on stop (PostgreSQL documentation "Streaming
 * Replication Protocol"; pg_recvlogical.c). Knows libpq, not the plugin's
 * content, Kafka or the ledger.
 */
#ifndef RELAY_PGSTREAM_H
#define RELAY_PGSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

struct pgstream;

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
 * PG* environment; pgconn_open()'s keywords, so a dead peer is noticed within
 * about 30 s) and run IDENTIFY_SYSTEM into @ret_sys. Returns 0 and
 * *ret_stream (owned by the caller, pgstream_free()), or -ECONNREFUSED with
 * libpq's message in @err when the connection fails, -EPROTONOSUPPORT when
 * whatever answered does not speak the replication protocol (a connection
 * pooler such as PgBouncer: it refuses the replication startup parameter,
 * or passes the connection on without it so that IDENTIFY_SYSTEM is a
 * syntax error), -EPROTO if IDENTIFY_SYSTEM fails otherwise, -ENOMEM.
 */
int pgstream_connect(const char *conninfo, struct pgstream **ret_stream, struct pgstream_system *ret_sys,
                     char *err, size_t errlen);

/*
 * pgstream_timeline_history() - TIMELINE_HISTORY @tli (PostgreSQL's
 * streaming replication protocol): the content of the timeline's history
 * file, as checkpoint_timeline_end() reads it, into *ret_content (@*ret_len
 * bytes, NUL-terminated, owned by the caller: free()). Before
 * pgstream_start() only. Returns 0, -ENOMEM, or -EPROTO with the server's
 * message in @err.
 */
int pgstream_timeline_history(struct pgstream *s, uint32_t tli, char **ret_content, size_t *ret_len,
                              char *err, size_t errlen);

/*
 * pgstream_start() - START_REPLICATION SLOT <slot> LOGICAL 0/0 (<options>),
 * so the server starts at the slot's confirmed_flush_lsn. Puts the
 * connection in non-blocking mode. Returns 0, or -EPROTO with the server's
 * message in @err and its SQLSTATE in @sqlstate (6 bytes, "" if none).
 */
int pgstream_start(struct pgstream *s, const struct pgstream_start *start, char *err, size_t errlen,
                   char sqlstate[6]);

/*
 * pgstream_conn() - the connection itself, borrowed, for SQL between
 * walsender commands (allowed in replication=database mode, PostgreSQL 10+;
 * not while streaming): the relay reads its slot over it with
 * preflight_read_slot().
 */
PGconn *pgstream_conn(struct pgstream *s);

/* pgstream_backend_pid() - the PID of the walsender serving this connection (PQbackendPID). */
int pgstream_backend_pid(const struct pgstream *s);

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

/*
 * pgstream_set_read_batch() - how many bytes the kernel gathers before
 * poll() reports the socket readable (SO_RCVLOWAT, socket(7)); 1 is the
 * kernel's default: every arrival wakes. An end of the connection or an
 * error still wakes at once. With more than 1, the caller reads on a timer
 * too (pgstream_consume() without POLLIN): a tail below @bytes never wakes.
 * TCP only. Returns 0, -EOPNOTSUPP (not a TCP socket: a Unix-domain
 * socket's poll() ignores it), or -errno from getsockname() or setsockopt()
 * (the socket is left as it was).
 */
int pgstream_set_read_batch(struct pgstream *s, int bytes);

/*
 * pgstream_consume() - read what the socket has (after POLLIN, or on a
 * timer); nothing there is not an error. Returns 0 or -EIO.
 */
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
 * returned as -EPROTO with its message in @err). Reads are unbatched
 * first (pgstream_set_read_batch() to 1): its own poll() has no read timer.
 * Returns 0 or a negative errno.
 */
int pgstream_finish(struct pgstream *s, int timeout_ms, char *err, size_t errlen);

/* pgstream_free() - close the connection; NULL-safe; returns NULL. */
struct pgstream *pgstream_free(struct pgstream *s);

#endif
