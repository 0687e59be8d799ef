// SPDX-License-Identifier: Apache-2.0
/*
 * The side connection: asynchronous libpq, one query at a time. See
 * pgside.h. Knows libpq, not what is asked.
 */
#include "pgside.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "monoclock.h"
#include "pgconn.h"

#define PGSIDE_CONNECT_TIMEOUT_MS 10000
#define PGSIDE_MAX_PARAMS 8

enum phase {
        IDLE,        /* no connection */
        CONNECTING,  /* PQconnectPoll() in progress */
        READY,       /* connected, no query */
        QUERYING,    /* a query sent, its result not complete */
        DONE,        /* the result is complete, not yet taken */
};

struct pgside {
        char *conninfo;
        PGconn *conn;
        enum phase phase;
        PostgresPollingStatusType polling; /* while CONNECTING: what PQconnectPoll() wants */
        int64_t deadline_ms;       /* while CONNECTING */
        PGresult *result;          /* the query's first result (later ones are discarded) */
        char *sql;                 /* the query waiting for the connection */
        char *params[PGSIDE_MAX_PARAMS];
        int nparams;
};

struct pgside *pgside_new(const char *conninfo)
{
        struct pgside *s = calloc(1, sizeof(*s));

        if (!s)
                return NULL;
        if (conninfo && !(s->conninfo = strdup(conninfo))) {
                free(s);
                return NULL;
        }
        return s;
}

static void forget_query(struct pgside *s)
{
        free(s->sql);
        s->sql = NULL;
        for (int i = 0; i < s->nparams; i++) {
                free(s->params[i]);
                s->params[i] = NULL;
        }
        s->nparams = 0;
}

static void disconnect(struct pgside *s)
{
        PQclear(s->result);
        s->result = NULL;
        PQfinish(s->conn);
        s->conn = NULL;
        s->phase = IDLE;
        forget_query(s);
}

struct pgside *pgside_free(struct pgside *s)
{
        if (!s)
                return NULL;
        disconnect(s);
        free(s->conninfo);
        free(s);
        return NULL;
}

bool pgside_abandon(struct pgside *s)
{
        if (!s || s->phase == IDLE || s->phase == READY)
                return false;
        disconnect(s);
        return true;
}

/* Send the kept query. Returns 0 or -EIO (the connection is unusable). */
static int send_query(struct pgside *s)
{
        if (!PQsendQueryParams(s->conn, s->sql, s->nparams, NULL, (const char *const *)s->params, NULL,
                               NULL, 0))
                return -EIO;
        s->phase = QUERYING;
        return 0;
}

int pgside_query(struct pgside *s, const char *sql, int nparams, const char *const *params)
{
        char err[256];

        if (s->phase == CONNECTING || s->phase == QUERYING || s->phase == DONE || s->sql)
                return -EBUSY;
        if (nparams > PGSIDE_MAX_PARAMS)
                return -EINVAL;
        if (!(s->sql = strdup(sql)))
                return -ENOMEM;
        for (int i = 0; i < nparams; i++) {
                if (params[i] && !(s->params[i] = strdup(params[i]))) {
                        s->nparams = i;
                        forget_query(s);
                        return -ENOMEM;
                }
        }
        s->nparams = nparams;
        if (s->phase == IDLE) {
                /* Connect first; pgside_serve() sends the query once connected. */
                if (pgconn_start(s->conninfo, PGCONN_ORDINARY, 0, 0, &s->conn, err, sizeof(err)) < 0) {
                        s->phase = IDLE;
                        s->polling = PGRES_POLLING_FAILED;
                } else {
                        s->phase = CONNECTING;
                        s->polling = PGRES_POLLING_WRITING;
                }
                s->deadline_ms = monoclock_ms() + PGSIDE_CONNECT_TIMEOUT_MS;
                return 0;
        }
        /* READY: send now; a failure shows as PGSIDE_LOST at the next pgside_serve(). */
        if (send_query(s) < 0) {
                PQfinish(s->conn);
                s->conn = NULL;
                s->phase = IDLE;
        }
        return 0;
}

bool pgside_busy(const struct pgside *s)
{
        return s->phase == CONNECTING || s->phase == QUERYING || s->sql != NULL;
}

bool pgside_connected(const struct pgside *s)
{
        return s->phase == READY || s->phase == QUERYING || s->phase == DONE;
}

int pgside_fd(const struct pgside *s)
{
        return s->conn && (s->phase == CONNECTING || s->phase == QUERYING) ? PQsocket(s->conn) : -1;
}

short pgside_events(const struct pgside *s)
{
        if (s->phase == CONNECTING)
                return s->polling == PGRES_POLLING_READING ? POLLIN : POLLOUT;
        if (s->phase == QUERYING)
                return (short)(POLLIN | (PQflush(s->conn) == 1 ? POLLOUT : 0));
        return 0;
}

static enum pgside_event lost(struct pgside *s, char *err, size_t errlen, const char *why)
{
        snprintf(err, errlen, "%s", why ? why : s->conn ? PQerrorMessage(s->conn) : "out of memory");
        for (size_t n = strlen(err); n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' '); n--)
                err[n - 1] = '\0';
        disconnect(s);
        return PGSIDE_LOST;
}

enum pgside_event pgside_serve(struct pgside *s, char *err, size_t errlen)
{
        if (s->phase == IDLE && s->sql)
                return lost(s, err, errlen, "cannot start the side connection");
        if (s->phase == CONNECTING) {
                if (monoclock_ms() > s->deadline_ms)
                        return lost(s, err, errlen, "the side connection timed out connecting");
                s->polling = PQconnectPoll(s->conn);
                if (s->polling == PGRES_POLLING_FAILED)
                        return lost(s, err, errlen, NULL);
                if (s->polling != PGRES_POLLING_OK)
                        return PGSIDE_NONE;
                if (PQsetnonblocking(s->conn, 1) != 0)
                        return lost(s, err, errlen, NULL);
                s->phase = READY;
                if (s->sql && send_query(s) < 0)
                        return lost(s, err, errlen, NULL);
                if (!s->sql)
                        return PGSIDE_NONE;
        }
        if (s->phase != QUERYING)
                return PGSIDE_NONE;
        if (PQflush(s->conn) < 0 || !PQconsumeInput(s->conn))
                return lost(s, err, errlen, NULL);
        while (!PQisBusy(s->conn)) {
                PGresult *r = PQgetResult(s->conn);

                if (!r) {
                        forget_query(s);
                        if (!s->result)
                                return lost(s, err, errlen, "the side connection returned no result");
                        s->phase = DONE;
                        return PGSIDE_RESULT;
                }
                if (!s->result)
                        s->result = r;
                else
                        PQclear(r);
        }
        return PGSIDE_NONE;
}

PGresult *pgside_result(struct pgside *s)
{
        PGresult *r = s->result;

        s->result = NULL;
        if (s->phase == DONE)
                s->phase = PQstatus(s->conn) == CONNECTION_OK ? READY : IDLE;
        if (s->phase == IDLE)
                disconnect(s);
        return r;
}
