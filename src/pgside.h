/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The side connection: one ordinary connection to the outbox's database that
 * runs SQL while the replication connection is in COPY mode, without ever
 * blocking its caller. It connects (PQconnectStartParams/PQconnectPoll),
 * sends one query at a time (PQsendQueryParams) and collects the result
 * (PQconsumeInput/PQisBusy/PQgetResult), each step driven by the caller's
 * poll() on pgside_fd() for pgside_events() (PostgreSQL documentation
 * "Asynchronous Command Processing"). A lost connection is reported once;
 * the next pgside_query() connects again. Knows libpq, not what is asked.
 */
#ifndef RELAY_PGSIDE_H
#define RELAY_PGSIDE_H

#include <stdbool.h>
#include <stddef.h>

#include <libpq-fe.h>

struct pgside;

/*
 * pgside_new() - a side connection to @conninfo (copied; NULL: libpq's PG*
 * environment), not yet connected. Returns NULL when out of memory; free
 * with pgside_free().
 */
struct pgside *pgside_new(const char *conninfo);

/* pgside_free() - close and free; NULL-safe; returns NULL. */
struct pgside *pgside_free(struct pgside *s);

/*
 * pgside_query() - send @sql with @nparams text parameters (copied before
 * return), connecting first if needed. At most one query at a time.
 * Returns 0, -EBUSY while a query or a connection attempt is in progress,
 * -ENOMEM.
 */
int pgside_query(struct pgside *s, const char *sql, int nparams, const char *const *params);

/*
 * pgside_abandon() - close a connection attempt or a query in progress, for a
 * caller that stops driving it (until its next pgside_query()); an idle
 * connection is kept. Left half-done, a connection attempt would keep a
 * backend waiting for its startup packet for authentication_timeout (60 s by
 * default), and a shutting-down server waits for that backend. Returns true
 * if something was closed. NULL-safe.
 */
bool pgside_abandon(struct pgside *s);

/* pgside_busy() - true while connecting or while a query waits for its result. */
bool pgside_busy(const struct pgside *s);

/* pgside_fd() - the socket to poll(), or -1 when there is nothing to wait for. */
int pgside_fd(const struct pgside *s);

/* pgside_events() - POLLIN and/or POLLOUT for pgside_fd(). */
short pgside_events(const struct pgside *s);

enum pgside_event {
        PGSIDE_NONE,      /* nothing new */
        PGSIDE_RESULT,    /* the query's result is ready: pgside_result() */
        PGSIDE_LOST,      /* connecting failed or the connection broke; the query is gone */
};

/*
 * pgside_serve() - advance after poll() (whatever its revents: it reads
 * only what is there). On PGSIDE_LOST, libpq's message is in @err (@errlen
 * bytes, one line). Never blocks.
 */
enum pgside_event pgside_serve(struct pgside *s, char *err, size_t errlen);

/*
 * pgside_result() - the result of the last query after PGSIDE_RESULT; owned
 * by the caller (PQclear()). An SQL error is a result too
 * (PQresultStatus() says which).
 */
PGresult *pgside_result(struct pgside *s);

/* pgside_connected() - true when connected (idle or busy with a query). */
bool pgside_connected(const struct pgside *s);

#endif
