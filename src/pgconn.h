/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one connection builder: every connection the relay and its commands
 * open to PostgreSQL (the replication stream, preflight, the side
 * connection, `check`, `slot`) gets its keywords here, so they cannot drift:
 * the user's conninfo, the pinned session settings, TCP keepalives that
 * notice a dead peer, a fallback application_name, and optionally timeouts.
 * Like streamutil.c's GetConnection() serves PostgreSQL's client tools.
 * Knows libpq's keywords (PostgreSQL documentation "Parameter Key Words"),
 * nothing of what the connections are used for.
 */
#ifndef RELAY_PGCONN_H
#define RELAY_PGCONN_H

#include <stdbool.h>
#include <stddef.h>

#include <libpq-fe.h>

/* Settings pinned on every connection so values do not depend on server defaults. */
#define PGCONN_SESSION_OPTIONS \
        "-c datestyle=ISO -c timezone=UTC -c bytea_output=hex -c extra_float_digits=3 " \
        "-c intervalstyle=postgres"

/* application_name when the conninfo and PGAPPNAME give none. */
#define PGCONN_APPLICATION_NAME "outbox-relay"

enum pgconn_kind {
        PGCONN_ORDINARY,     /* SQL only */
        PGCONN_REPLICATION,  /* replication=database: walsender commands and SQL (PostgreSQL 10+) */
};

/*
 * pgconn_open() - connect to @conninfo (a connection string or URI; NULL:
 * libpq's PG* environment) as @kind, blocking until connected or failed.
 * Defaults the caller's @conninfo may override: keepalives_idle=10,
 * keepalives_interval=5, keepalives_count=3, tcp_user_timeout=30000 (ms),
 * connect_timeout=30 (s), fallback_application_name=PGCONN_APPLICATION_NAME.
 * Always set: options=PGCONN_SESSION_OPTIONS, plus
 * "-c statement_timeout=@statement_timeout_ms" when that is > 0 (ms; 0
 * leaves the server's), and replication=database for PGCONN_REPLICATION.
 * @connect_timeout_ms > 0 (ms, rounded up to seconds) replaces the 30 s
 * default. Returns 0 and *ret_conn (owned by the caller: PQfinish()), or
 * -ECONNREFUSED with libpq's message (no trailing newline) in @err,
 * -EPROTONOSUPPORT when a connection pooler in between refuses a startup
 * parameter (PgBouncer: "unsupported startup parameter"), -ENOMEM.
 */
int pgconn_open(const char *conninfo, enum pgconn_kind kind, int connect_timeout_ms,
                int statement_timeout_ms, PGconn **ret_conn, char *err, size_t errlen);

/*
 * pgconn_start() - the same connection as pgconn_open(), begun without
 * blocking (PQconnectStartParams): the caller drives it with PQconnectPoll()
 * on PQsocket() ("Connecting without blocking" in libpq's documentation;
 * libpq then applies no connect_timeout itself). Returns 0 and *ret_conn
 * (owned by the caller: PQfinish()), -ECONNREFUSED with libpq's message in
 * @err for keywords it refuses at once, -ENOMEM.
 */
int pgconn_start(const char *conninfo, enum pgconn_kind kind, int connect_timeout_ms,
                 int statement_timeout_ms, PGconn **ret_conn, char *err, size_t errlen);

/*
 * pgconn_error() - the error of @res (or of @conn when @res has none) as one
 * line without the trailing newline, into @err; its SQLSTATE into
 * @ret_sqlstate (6 bytes, "" if none) when @ret_sqlstate is not NULL.
 */
void pgconn_error(const PGresult *res, const PGconn *conn, char *err, size_t errlen,
                  char *ret_sqlstate);

#endif
