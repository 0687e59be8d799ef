// SPDX-License-Identifier: Apache-2.0
/*
 * The one connection builder. See pgconn.h. Knows libpq's keywords, nothing
 * of what the connections are used for.
 */
#include "pgconn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void trim(char *s)
{
        size_t n = strlen(s);

        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
                s[--n] = '\0';
}

/*
 * The "options" the user chose: the conninfo's own (a string or a URI), else
 * PGOPTIONS; NULL for none. A service file's options are not seen (libpq
 * reads service files only while connecting). Returns -ENOMEM, else 0.
 */
static int user_options(const char *conninfo, char **ret_opts)
{
        PQconninfoOption *parsed = conninfo ? PQconninfoParse(conninfo, NULL) : NULL;
        const char *v = NULL;
        bool given = false;

        for (PQconninfoOption *o = parsed; o && o->keyword; o++)
                if (strcmp(o->keyword, "options") == 0 && o->val) {
                        v = o->val;
                        given = true;
                }
        if (!given)
                v = getenv("PGOPTIONS");
        *ret_opts = NULL;
        if (v && *v && !(*ret_opts = strdup(v))) {
                PQconninfoFree(parsed);
                return -ENOMEM;
        }
        PQconninfoFree(parsed);
        return 0;
}

int pgconn_params_build(struct pgconn_params *p, const char *conninfo, enum pgconn_kind kind,
                        int connect_timeout_ms, int statement_timeout_ms)
{
        const char *env_ct = getenv("PGCONNECT_TIMEOUT");
        char *mine = NULL, st[48] = "";
        int n = 0;

        memset(p, 0, sizeof(*p));
        if (user_options(conninfo, &mine) < 0)
                return -ENOMEM;
        if (statement_timeout_ms > 0)
                snprintf(st, sizeof(st), " -c statement_timeout=%d", statement_timeout_ms);
        /* Theirs first: a later -c wins, so the pinned settings hold and every other one stays. */
        if (asprintf(&p->opts, "%s%s%s%s", mine ? mine : "", mine ? " " : "", PGCONN_SESSION_OPTIONS,
                     st) < 0) {
                p->opts = NULL;
                free(mine);
                return -ENOMEM;
        }
        free(mine);
        /*
         * Defaults first: the keys of @conninfo, expanded at "dbname", override
         * them; the keys after "dbname" override @conninfo. A default that a
         * PG* variable sets is left to it (libpq prefers a given keyword to
         * its variable).
         */
        snprintf(p->ct, sizeof(p->ct), "%d",
                 connect_timeout_ms > 0 ? (connect_timeout_ms + 999) / 1000 : 30);
        p->keys[n] = "keepalives_idle", p->vals[n++] = "10";
        p->keys[n] = "keepalives_interval", p->vals[n++] = "5";
        p->keys[n] = "keepalives_count", p->vals[n++] = "3";
        p->keys[n] = "tcp_user_timeout", p->vals[n++] = "30000";
        if (!env_ct || !*env_ct)
                p->keys[n] = "connect_timeout", p->vals[n++] = p->ct;
        p->keys[n] = "fallback_application_name", p->vals[n++] = PGCONN_APPLICATION_NAME;
        if (conninfo) {
                /* Without it libpq's PGDATABASE and friends apply. */
                p->keys[n] = "dbname", p->vals[n++] = conninfo;
        }
        p->keys[n] = "options", p->vals[n++] = p->opts;
        if (kind == PGCONN_REPLICATION)
                p->keys[n] = "replication", p->vals[n++] = "database";
        p->keys[n] = NULL, p->vals[n] = NULL;
        return 0;
}

void pgconn_params_free(struct pgconn_params *p)
{
        free(p->opts);
        p->opts = NULL;
}

/*
 * libpq reports a failed connection as text only (no SQLSTATE reaches the
 * client for TLS and most authentication failures), so the fix is chosen by
 * the message: libpq's own wording (fe-connect.c, fe-secure-openssl.c,
 * fe-auth.c of PostgreSQL 14 to 18) and the server's (auth.c). The relay
 * does not call setlocale(), so libpq's messages are the untranslated ones.
 */
static const struct {
        const char *needle, *fix;
} fixes[] = {
        {"certificate verify failed",
         "sslrootcert must name the certificate of the CA that signed the server's certificate (the "
         "provider publishes it: RDS, Cloud SQL, Azure), and that certificate must not have expired; "
         "do not lower sslmode to get past it, that would let another server pose as the database"},
        {"does not match host name",
         "give host= a name the server's certificate lists (with hostaddr= for the address if that "
         "name does not resolve), or have the certificate issued for the name you connect to; do not "
         "lower sslmode to verify-ca or require, that would let another server pose as the database"},
        {"root certificate file",
         "sslrootcert=PATH to the certificate of the CA that signed the server's certificate "
         "(default ~/.postgresql/root.crt), readable by the relay's user"},
        {"tlsv1 alert unknown ca",
         "the server does not trust the client certificate: sslcert must be signed by a CA in the "
         "server's ssl_ca_file"},
        {"connection requires a valid client certificate",
         "this pg_hba.conf line wants a client certificate: give sslcert= and sslkey= (a certificate "
         "signed by a CA in the server's ssl_ca_file, its CN the user name)"},
        {"certificate authentication failed",
         "the client certificate's CN must be the user name (or be mapped to it in pg_ident.conf)"},
        {"server does not support SSL",
         "the server (or a proxy in between) offers no TLS: set ssl = on with a certificate on the "
         "server, or connect to one that does"},
        {"no encryption",
         "the server accepts only encrypted connections here (hostssl lines): sslmode=verify-full "
         "with sslrootcert=PATH to the CA's certificate"},
        {"no pg_hba.conf entry",
         "allow this user, database and address in the server's pg_hba.conf, then reload it"},
        {"password authentication failed",
         "put the user's password in the password file (passfile= in the conninfo, PGPASSFILE or "
         "~/.pgpass: host:port:database:user:password, mode 0600; libpq matches host= as written) or "
         "in PGPASSWORD"},
        {"no password supplied",
         "the server wants a password and none was found: give it in a password file (passfile= in "
         "the conninfo, PGPASSFILE or ~/.pgpass, mode 0600) or PGPASSWORD, never on the command line"},
};

const char *pgconn_fix(const char *message)
{
        for (size_t i = 0; message && i < sizeof(fixes) / sizeof(fixes[0]); i++)
                if (strstr(message, fixes[i].needle))
                        return fixes[i].fix;
        return NULL;
}

/* libpq's message of a failed connection in @err, with the fix when one is known. */
static void failed(PGconn *c, char *err, size_t errlen)
{
        const char *fix;

        snprintf(err, errlen, "%s", PQerrorMessage(c));
        trim(err);
        fix = pgconn_fix(err);
        if (fix) {
                size_t n = strlen(err);

                snprintf(err + n, errlen - n, "; fix: %s", fix);
        }
}

int pgconn_open(const char *conninfo, enum pgconn_kind kind, int connect_timeout_ms,
                int statement_timeout_ms, PGconn **ret_conn, char *err, size_t errlen)
{
        struct pgconn_params p;
        PGconn *c;

        if (pgconn_params_build(&p, conninfo, kind, connect_timeout_ms, statement_timeout_ms) < 0)
                return -ENOMEM;
        c = PQconnectdbParams(p.keys, p.vals, 1);
        pgconn_params_free(&p);
        if (!c)
                return -ENOMEM;
        if (PQstatus(c) != CONNECTION_OK) {
                failed(c, err, errlen);
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
        struct pgconn_params p;
        PGconn *c;

        if (pgconn_params_build(&p, conninfo, kind, connect_timeout_ms, statement_timeout_ms) < 0)
                return -ENOMEM;
        c = PQconnectStartParams(p.keys, p.vals, 1);
        pgconn_params_free(&p);
        if (!c)
                return -ENOMEM;
        if (PQstatus(c) == CONNECTION_BAD) {
                failed(c, err, errlen);
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
