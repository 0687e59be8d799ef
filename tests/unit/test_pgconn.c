// SPDX-License-Identifier: Apache-2.0
/*
 * The one connection builder drops nothing the user gives: every keyword
 * libpq knows (PQconndefaults(): sslmode, sslrootcert, sslcert, sslkey,
 * passfile, ... and whatever a newer libpq adds) reaches libpq as given,
 * in the conninfo, in a URI, through its PG* variable and from a service
 * file, for the ordinary and the replication connection alike. libpq itself
 * is the judge: the built keywords go to PQconnectStartParams() and
 * PQconninfo() says what the connection would use. Every connection aims at
 * a Unix socket directory that does not exist (or a value libpq refuses), so
 * nothing is sent anywhere.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "pgconn.h"
#include "unit_check.h"

#define NOWHERE "/nonexistent/outbox-relay-test"

/* The value a connection of @kind to @conninfo uses for @keyword, as libpq reports it (malloc'd). */
static char *effective(const char *conninfo, enum pgconn_kind kind, const char *keyword)
{
        struct pgconn_params p;
        PQconninfoOption *opts;
        PGconn *c;
        char *v = NULL;

        if (pgconn_params_build(&p, conninfo, kind, 10000, 10000) < 0)
                return NULL;
        c = PQconnectStartParams(p.keys, p.vals, 1);
        pgconn_params_free(&p);
        if (!c)
                return NULL;
        opts = PQconninfo(c);
        for (PQconninfoOption *o = opts; o && o->keyword; o++)
                if (strcmp(o->keyword, keyword) == 0 && o->val)
                        v = strdup(o->val);
        PQconninfoFree(opts);
        PQfinish(c);
        return v;
}

static int check_value(const char *conninfo, enum pgconn_kind kind, const char *keyword, const char *want)
{
        char *got = effective(conninfo, kind, keyword);
        int ok = got && strcmp(got, want) == 0;

        if (!ok)
                fprintf(stderr, "  %s: keyword %s is \"%s\", want \"%s\" (conninfo \"%s\")\n",
                        kind == PGCONN_REPLICATION ? "replication" : "ordinary", keyword,
                        got ? got : "(none)", want, conninfo ? conninfo : "(null)");
        free(got);
        return ok;
}

/* What the builder sets itself, and so may differ from the user's value. */
static int ours(const char *keyword, enum pgconn_kind kind)
{
        return strcmp(keyword, "options") == 0 || (kind == PGCONN_REPLICATION && strcmp(keyword, "replication") == 0);
}

/* A test value for @keyword; the host is the socket directory that does not exist. */
static void value_for(const char *keyword, char *buf, size_t size)
{
        if (strcmp(keyword, "host") == 0)
                snprintf(buf, size, NOWHERE "-host");
        else
                snprintf(buf, size, "v-%s", keyword);
}

static void test_every_keyword_survives(void)
{
        PQconninfoOption *defs = PQconndefaults();
        int nkeys = 0, nssl = 0;

        setenv("PGHOST", NOWHERE, 1);
        for (PQconninfoOption *o = defs; o && o->keyword; o++) {
                char val[128], conninfo[512], uri[512];

                /* service: looked up in a service file (test_service_file) */
                if (strcmp(o->keyword, "service") == 0)
                        continue;
                nkeys++;
                nssl += strncmp(o->keyword, "ssl", 3) == 0;
                value_for(o->keyword, val, sizeof(val));
                snprintf(conninfo, sizeof(conninfo), "%s%s='%s'",
                         strcmp(o->keyword, "host") == 0 ? "" : "host=" NOWHERE " ", o->keyword, val);
                snprintf(uri, sizeof(uri), "postgresql:///?%s%s=%s",
                         strcmp(o->keyword, "host") == 0 ? "" : "host=" NOWHERE "&", o->keyword, val);
                for (int k = 0; k < 2; k++) {
                        enum pgconn_kind kind = k ? PGCONN_REPLICATION : PGCONN_ORDINARY;

                        if (ours(o->keyword, kind))
                                continue;
                        CHECK(check_value(conninfo, kind, o->keyword, val));
                        CHECK(check_value(uri, kind, o->keyword, val));
                }
        }
        /* PostgreSQL 15's libpq has 40-odd keywords, 9 of them ssl*. */
        CHECK(nkeys > 30);
        CHECK(nssl >= 8);
        PQconninfoFree(defs);
        unsetenv("PGHOST");
}

static void test_every_variable_survives(void)
{
        PQconninfoOption *defs = PQconndefaults();
        int nvars = 0;

        for (PQconninfoOption *o = defs; o && o->keyword; o++) {
                char val[128];

                if (!o->envvar || strcmp(o->keyword, "service") == 0 || strcmp(o->keyword, "options") == 0)
                        continue;
                nvars++;
                value_for(o->keyword, val, sizeof(val));
                if (strcmp(o->keyword, "host") != 0)
                        setenv("PGHOST", NOWHERE, 1);
                setenv(o->envvar, val, 1);
                for (int k = 0; k < 2; k++) {
                        enum pgconn_kind kind = k ? PGCONN_REPLICATION : PGCONN_ORDINARY;

                        if (ours(o->keyword, kind))
                                continue;
                        /* a conninfo that does not name the keyword (keepalives has no variable), and none */
                        if (strcmp(o->keyword, "dbname") != 0)
                                CHECK(check_value("keepalives=1", kind, o->keyword, val));
                        CHECK(check_value(NULL, kind, o->keyword, val));
                }
                unsetenv(o->envvar);
                unsetenv("PGHOST");
        }
        CHECK(nvars > 20);
        PQconninfoFree(defs);
}

static void test_service_file(void)
{
        char dir[] = "/tmp/test_pgconn.XXXXXX", path[64];
        FILE *f;

        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof(path), "%s/pg_service.conf", dir);
        f = fopen(path, "w");
        CHECK(f != NULL);
        if (!f)
                return;
        fprintf(f, "[relay]\nhost=%s\nsslmode=verify-full\nsslrootcert=/etc/ssl/db-ca.crt\n"
                "sslcert=/etc/ssl/relay.crt\nsslkey=/etc/ssl/relay.key\n", NOWHERE);
        fclose(f);
        setenv("PGSERVICEFILE", path, 1);
        for (int k = 0; k < 2; k++) {
                enum pgconn_kind kind = k ? PGCONN_REPLICATION : PGCONN_ORDINARY;

                CHECK(check_value("service=relay dbname=shop", kind, "sslmode", "verify-full"));
                CHECK(check_value("service=relay dbname=shop", kind, "sslrootcert", "/etc/ssl/db-ca.crt"));
                CHECK(check_value("service=relay", kind, "sslcert", "/etc/ssl/relay.crt"));
                CHECK(check_value("postgresql:///shop?service=relay", kind, "sslkey", "/etc/ssl/relay.key"));
                setenv("PGSERVICE", "relay", 1);
                CHECK(check_value(NULL, kind, "sslmode", "verify-full"));
                unsetenv("PGSERVICE");
        }
        unsetenv("PGSERVICEFILE");
        unlink(path);
        rmdir(dir);
}

static void test_options_merged(void)
{
        static const char pinned[] = PGCONN_SESSION_OPTIONS " -c statement_timeout=10000";
        const char *ci = "host=" NOWHERE " options='-c search_path=shop -c timezone=Europe/Paris'";
        char want[512];

        /* the user's first, so that the pinned settings (timezone) win and the others stay */
        snprintf(want, sizeof(want), "-c search_path=shop -c timezone=Europe/Paris %s", pinned);
        CHECK(check_value(ci, PGCONN_ORDINARY, "options", want));
        CHECK(check_value(ci, PGCONN_REPLICATION, "options", want));
        snprintf(want, sizeof(want), "-c work_mem=8MB %s", pinned);
        CHECK(check_value("postgresql:///shop?host=" NOWHERE "&options=-c%20work_mem%3D8MB", PGCONN_REPLICATION,
                          "options", want));
        setenv("PGOPTIONS", "-c work_mem=8MB", 1);
        CHECK(check_value("host=" NOWHERE, PGCONN_ORDINARY, "options", want));
        /* the conninfo's options replace PGOPTIONS, as in libpq */
        snprintf(want, sizeof(want), "-c search_path=shop -c timezone=Europe/Paris %s", pinned);
        CHECK(check_value(ci, PGCONN_ORDINARY, "options", want));
        unsetenv("PGOPTIONS");
        CHECK(check_value("host=" NOWHERE, PGCONN_ORDINARY, "options", pinned));
}

static void test_defaults(void)
{
        const char *ci = "host=" NOWHERE " dbname=shop";

        CHECK(check_value(ci, PGCONN_REPLICATION, "replication", "database"));
        CHECK(check_value("host=" NOWHERE " replication=true", PGCONN_REPLICATION, "replication", "database"));
        CHECK(check_value(ci, PGCONN_ORDINARY, "keepalives_idle", "10"));
        CHECK(check_value(ci, PGCONN_ORDINARY, "tcp_user_timeout", "30000"));
        CHECK(check_value(ci, PGCONN_ORDINARY, "connect_timeout", "10"));
        CHECK(check_value(ci, PGCONN_ORDINARY, "fallback_application_name", PGCONN_APPLICATION_NAME));
        CHECK(check_value("host=" NOWHERE " connect_timeout=3", PGCONN_ORDINARY, "connect_timeout", "3"));
        setenv("PGCONNECT_TIMEOUT", "7", 1);
        CHECK(check_value(ci, PGCONN_ORDINARY, "connect_timeout", "7"));
        unsetenv("PGCONNECT_TIMEOUT");
}

static void test_fix(void)
{
        /* libpq 15's words, as the integration tests saw them from a TLS-only server */
        CHECK(strstr(pgconn_fix("connection to server at \"127.0.0.1\", port 5432 failed: SSL error: "
                                "certificate verify failed"), "sslrootcert") != NULL);
        CHECK(strstr(pgconn_fix("connection to server at \"127.0.0.1\", port 5432 failed: server "
                                "certificate for \"localhost\" (and 1 other name) does not match host "
                                "name \"db.invalid\""), "host=") != NULL);
        CHECK(strstr(pgconn_fix("failed: FATAL:  no pg_hba.conf entry for host \"127.0.0.1\", user \"r\", "
                                "database \"d\", no encryption"), "sslmode=verify-full") != NULL);
        CHECK(strstr(pgconn_fix("failed: FATAL:  connection requires a valid client certificate"),
                     "sslcert=") != NULL);
        CHECK(strstr(pgconn_fix("failed: FATAL:  password authentication failed for user \"r\""),
                     "passfile=") != NULL);
        CHECK(strstr(pgconn_fix("failed: fe_sendauth: no password supplied"), "passfile=") != NULL);
        CHECK(pgconn_fix("connection to server at \"127.0.0.1\", port 5432 failed: Connection refused") == NULL);
        CHECK(pgconn_fix(NULL) == NULL);
}

int main(void)
{
        /* The machine's own settings must not decide the test. */
        static const char *const keep_out[] = {"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER",
                                               "PGSERVICE", "PGSERVICEFILE", "PGOPTIONS",
                                               "PGCONNECT_TIMEOUT", "PGSSLMODE", "PGAPPNAME"};

        for (size_t i = 0; i < sizeof(keep_out) / sizeof(keep_out[0]); i++)
                unsetenv(keep_out[i]);
        test_every_keyword_survives();
        test_every_variable_survives();
        test_service_file();
        test_options_merged();
        test_defaults();
        test_fix();
        return check_summary();
}
