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

/* The keywords of one connection, for PQconnectdbParams() with expand_dbname = 1. */
struct pgconn_params {
        const char *keys[12], *vals[12];  /* NULL-terminated; borrowed from the caller and below */
        char ct[16];                      /* connect_timeout's value */
        char *opts;                       /* options' value (owned) */
};

/*
 * pgconn_params_build() - the keywords pgconn_open() and pgconn_start() pass
 * to libpq (see pgconn_open() for what they add) into @p, which borrows
 * @conninfo until pgconn_params_free(). Nothing the user gives is dropped:
 * every keyword of @conninfo (including every ssl* one, passfile, service),
 * and every PG* variable of a keyword it does not name, reaches libpq as
 * given; "options" (from @conninfo, else PGOPTIONS) is kept ahead of the
 * pinned settings, so only those it repeats are overridden; "replication"
 * is replaced for PGCONN_REPLICATION. Returns 0 or -ENOMEM.
 */
int pgconn_params_build(struct pgconn_params *p, const char *conninfo, enum pgconn_kind kind,
                        int connect_timeout_ms, int statement_timeout_ms);

/* pgconn_params_free() - what pgconn_params_build() allocated; @p may be built again. */
void pgconn_params_free(struct pgconn_params *p);

/*
 * pgconn_fix() - what to change for a failed connection whose libpq message
 * is @message (a TLS failure: wrong CA, host name not in the certificate, no
 * client certificate; authentication: no or a wrong password; pg_hba.conf
 * refusing an unencrypted connection), as a static string; NULL when none
 * is known. pgconn_open() and pgconn_start() append it to their message as
 * "; fix: ...".
 */
const char *pgconn_fix(const char *message);

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
 * default (PGCONNECT_TIMEOUT, like the conninfo, replaces both). The user's
 * "options" are kept ahead of the pinned ones (pgconn_params_build()).
 * Returns 0 and *ret_conn (owned by the caller: PQfinish()), or
 * -ECONNREFUSED with libpq's message (no trailing newline) and the fix when
 * pgconn_fix() knows one in @err,
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
