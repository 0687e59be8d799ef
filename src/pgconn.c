// SPDX-License-Identifier: Apache-2.0
/*
 * The one connection builder. See pgconn.h. Knows libpq's keywords, nothing
 * of what the connections are used for.
 */
#include "pgconn.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void trim(char *s)
{
        size_t n = strlen(s);

        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
                s[--n] = '\0';
}

/* The keywords of a connection; @ct and @opts are the caller's buffers. */
struct params {
        const char *keys[12], *vals[12];
        char ct[16], opts[sizeof(PGCONN_SESSION_OPTIONS) + 64];
};

static void build(struct params *p, const char *conninfo, enum pgconn_kind kind, int connect_timeout_ms,
                  int statement_timeout_ms)
{
        int n = 0;

        /*
         * Defaults first: the keys of @conninfo, expanded at "dbname", override
         * them; the keys after "dbname" override @conninfo.
         */
        snprintf(p->ct, sizeof(p->ct), "%d",
                 connect_timeout_ms > 0 ? (connect_timeout_ms + 999) / 1000 : 30);
        p->keys[n] = "keepalives_idle", p->vals[n++] = "10";
        p->keys[n] = "keepalives_interval", p->vals[n++] = "5";
        p->keys[n] = "keepalives_count", p->vals[n++] = "3";
        p->keys[n] = "tcp_user_timeout", p->vals[n++] = "30000";
        p->keys[n] = "connect_timeout", p->vals[n++] = p->ct;
        p->keys[n] = "fallback_application_name", p->vals[n++] = PGCONN_APPLICATION_NAME;
        if (conninfo) {
                /* Without it libpq's PGDATABASE and friends apply. */
                p->keys[n] = "dbname", p->vals[n++] = conninfo;
        }
        if (statement_timeout_ms > 0)
                snprintf(p->opts, sizeof(p->opts), "%s -c statement_timeout=%d", PGCONN_SESSION_OPTIONS,
                         statement_timeout_ms);
        else
                snprintf(p->opts, sizeof(p->opts), "%s", PGCONN_SESSION_OPTIONS);
        p->keys[n] = "options", p->vals[n++] = p->opts;
        if (kind == PGCONN_REPLICATION)
                p->keys[n] = "replication", p->vals[n++] = "database";
        p->keys[n] = NULL, p->vals[n] = NULL;
}

int pgconn_open(const char *conninfo, enum pgconn_kind kind, int connect_timeout_ms,
                int statement_timeout_ms, PGconn **ret_conn, char *err, size_t errlen)
{
        struct params p;
        PGconn *c;

        build(&p, conninfo, kind, connect_timeout_ms, statement_timeout_ms);
        c = PQconnectdbParams(p.keys, p.vals, 1);
        if (!c)
                return -ENOMEM;
        if (PQstatus(c) != CONNECTION_OK) {
                snprintf(err, errlen, "%s", PQerrorMessage(c));
                trim(err);
                PQfinish(c);
                /* PgBouncer's answer to startup parameters it does not pass on (replication, options). */
                return strstr(err, "unsupported startup parameter") ? -EPROTONOSUPPORT : -ECONNREFUSED;
        }
        *ret_conn = c;
        return 0;
}

int pgconn_start(const char *conninfo, enum pgconn_kind kind, int connect_timeout_ms,
                 int statement_timeout_ms, PGconn **ret_conn, char *err, size_t errlen)
{
        struct params p;
        PGconn *c;

        build(&p, conninfo, kind, connect_timeout_ms, statement_timeout_ms);
        c = PQconnectStartParams(p.keys, p.vals, 1);
        if (!c)
                return -ENOMEM;
        if (PQstatus(c) == CONNECTION_BAD) {
                snprintf(err, errlen, "%s", PQerrorMessage(c));
                trim(err);
                PQfinish(c);
                return -ECONNREFUSED;
        }
        *ret_conn = c;
        return 0;
}

void pgconn_error(const PGresult *res, const PGconn *conn, char *err, size_t errlen,
                  char *ret_sqlstate)
{
        const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
        const char *msg = res ? PQresultErrorMessage(res) : NULL;

        if (!msg || !*msg)
                msg = PQerrorMessage(conn);
        snprintf(err, errlen, "%s", msg ? msg : "");
        trim(err);
        if (ret_sqlstate)
                snprintf(ret_sqlstate, 6, "%s", st ? st : "");
}
