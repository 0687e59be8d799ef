// SPDX-License-Identifier: Apache-2.0
/*
 * Preflight checks over an ordinary connection: settings, tables, columns,
 * the slot. See preflight.h. Knows libpq and the catalogs, not Kafka.
 */
#include "preflight.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lsn.h"
#include "pgstream.h"

static void seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;
        size_t n;

        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        n = strlen(err);
        while (n > 0 && err[n - 1] == '\n')
                err[--n] = '\0';
}

static PGresult *query(PGconn *c, const char *sql, int nparams, const char *const *params)
{
        return PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0);
}

static bool has_column(PGresult *cols, const char *name)
{
        for (int i = 0; i < PQntuples(cols); i++)
                if (strcmp(PQgetvalue(cols, i, 0), name) == 0)
                        return true;
        return false;
}

static int check_settings(PGconn *c, const struct relay_config *conf, struct preflight_result *res,
                          char *err, size_t errlen)
{
        PGresult *r = query(c,
                "SELECT current_setting('server_version_num')::int, current_setting('wal_level'), "
                "current_setting('server_encoding'), current_database(), "
                "(SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'), "
                "(SELECT setting FROM pg_settings WHERE name = 'output_plugin_libraries')", 0, NULL);
        const char *opl;
        int rc = 0;

        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                seterr(err, errlen, "cannot read server settings: %s", PQresultErrorMessage(r));
                PQclear(r);
                return -EINVAL;
        }
        res->server_version_num = atoi(PQgetvalue(r, 0, 0));
        snprintf(res->dbname, sizeof(res->dbname), "%s", PQgetvalue(r, 0, 3));
        res->wal_sender_timeout_ms = strtoll(PQgetvalue(r, 0, 4), NULL, 10);
        /*
         * Debian's output_plugin_libraries is superuser-only: pg_settings hides
         * it from a least-privilege role (sql/role.sql), where current_setting()
         * would fail. Then the check is left to the server, which refuses the
         * slot or the stream with its own message.
         */
        opl = PQgetisnull(r, 0, 5) ? NULL : PQgetvalue(r, 0, 5);
        if (res->server_version_num < 100000) {
                seterr(err, errlen, "server version %d is too old: outbox-relay needs PostgreSQL 10 "
                       "or later", res->server_version_num);
                rc = -EINVAL;
        } else if (strcmp(PQgetvalue(r, 0, 1), "logical") != 0) {
                seterr(err, errlen, "wal_level is \"%s\" but logical decoding needs \"logical\": run "
                       "ALTER SYSTEM SET wal_level = logical and restart the server",
                       PQgetvalue(r, 0, 1));
                rc = -EINVAL;
        } else if (strcmp(PQgetvalue(r, 0, 2), "UTF8") != 0) {
                seterr(err, errlen, "database \"%s\" has server_encoding \"%s\": outbox-relay needs "
                       "UTF8 so that keys, headers and payloads reach Kafka as UTF-8; create the "
                       "outbox in a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')",
                       res->dbname, PQgetvalue(r, 0, 2));
                rc = -EINVAL;
        } else if (opl && !strstr(opl, "wal2json")) {
                seterr(err, errlen, "this server refuses wal2json as an output plugin: "
                       "output_plugin_libraries is '%s'; add it (ALTER SYSTEM SET "
                       "output_plugin_libraries = '%s%swal2json'; SELECT pg_reload_conf();)",
                       opl, opl, *opl ? ", " : "");
                rc = -EINVAL;
        }
        PQclear(r);
        (void)conf;
        return rc;
}

static int check_table(PGconn *c, const struct relay_config *conf, const struct table_name *t,
                       const char *const *columns, size_t ncolumns, char *err, size_t errlen)
{
        const char *params[2] = {t->schema, t->table};
        const char *need[4] = {conf->id_column, conf->key_column, conf->payload_column, NULL};
        PGresult *r;
        int rc = 0;

        r = query(c, "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                  "WHERE n.nspname = $1 AND c.relname = $2", 2, params);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                seterr(err, errlen, "cannot look up table \"%s\".\"%s\": %s", t->schema, t->table,
                       PQresultErrorMessage(r));
                PQclear(r);
                return -EINVAL;
        }
        if (PQntuples(r) == 0) {
                seterr(err, errlen, "table \"%s\".\"%s\" does not exist in database \"%s\": create "
                       "it (see sql/outbox.sql) or name your outbox with --table", t->schema,
                       t->table, PQdb(c));
                PQclear(r);
                return -EINVAL;
        }
        if (PQgetvalue(r, 0, 0)[0] == 'p') {
                seterr(err, errlen, "table \"%s\".\"%s\" is partitioned: wal2json reports rows "
                       "under each partition's name, so list the partitions with --table instead",
                       t->schema, t->table);
                PQclear(r);
                return -EINVAL;
        }
        if (PQgetvalue(r, 0, 0)[0] != 'r') {
                seterr(err, errlen, "\"%s\".\"%s\" is not a table: logical decoding sees only "
                       "table rows", t->schema, t->table);
                PQclear(r);
                return -EINVAL;
        }
        PQclear(r);
        r = query(c, "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                  "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND "
                  "c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped", 2, params);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                seterr(err, errlen, "cannot read the columns of \"%s\".\"%s\": %s", t->schema,
                       t->table, PQresultErrorMessage(r));
                PQclear(r);
                return -EINVAL;
        }
        for (size_t i = 0; i < 3 + ncolumns && rc == 0; i++) {
                const char *col = i < 3 ? need[i] : columns[i - 3];
                const char *opt = i == 0 ? "--id-column" : i == 1 ? "--key-column" :
                                  i == 2 ? "--payload-column" : "--topic";

                if (!has_column(r, col)) {
                        seterr(err, errlen, "table \"%s\".\"%s\" has no column \"%s\" (needed by "
                               "%s): add the column or change %s", t->schema, t->table, col, opt,
                               opt);
                        rc = -EINVAL;
                }
        }
        if (rc == 0 && !has_column(r, conf->type_column))
                log_warning("table \"%s\".\"%s\" has no column \"%s\": records will carry no "
                            "ce_type header (set --type-column)", t->schema, t->table,
                            conf->type_column);
        PQclear(r);
        return rc;
}

static void warn_existing_rows(PGconn *c, const struct relay_config *conf)
{
        for (size_t i = 0; i < conf->ntables; i++) {
                char *s = PQescapeIdentifier(c, conf->tables[i].schema, strlen(conf->tables[i].schema));
                char *t = PQescapeIdentifier(c, conf->tables[i].table, strlen(conf->tables[i].table));
                char sql[1024];
                PGresult *r;

                snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT 1 FROM %s.%s LIMIT 1000001) x",
                         s ? s : "", t ? t : "");
                PQfreemem(s);
                PQfreemem(t);
                r = query(c, sql, 0, NULL);
                if (PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "0") != 0)
                        log_warning("table \"%s\".\"%s\" already holds %s%s rows: they were committed "
                                    "before the slot existed and will not be published; publish "
                                    "them by other means if they are still pending",
                                    conf->tables[i].schema, conf->tables[i].table,
                                    strcmp(PQgetvalue(r, 0, 0), "1000001") == 0 ? "over " : "",
                                    strcmp(PQgetvalue(r, 0, 0), "1000001") == 0 ? "1000000"
                                                                                : PQgetvalue(r, 0, 0));
                PQclear(r);
        }
}

static int check_slot(PGconn *c, const struct relay_config *conf, struct preflight_result *res,
                      char *err, size_t errlen)
{
        const char *params[1] = {conf->slot};
        PGresult *r;
        const char *plugin, *db, *type, *status;
        int rc = 0;

        r = query(c, "SELECT plugin, database, slot_type, confirmed_flush_lsn, restart_lsn, "
                  "wal_status FROM pg_replication_slots WHERE slot_name = $1", 1, params);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                seterr(err, errlen, "cannot read pg_replication_slots: %s", PQresultErrorMessage(r));
                PQclear(r);
                return -EINVAL;
        }
        if (PQntuples(r) == 0) {
                PQclear(r);
                if (!conf->create_slot) {
                        seterr(err, errlen, "replication slot \"%s\" does not exist in this cluster. "
                               "If this is the first start, run once with --create-slot. If the slot "
                               "existed before, it was dropped, invalidated or not carried to a "
                               "promoted standby: a new slot starts at the current WAL and skips every "
                               "row committed since, so decide how to recover those rows before "
                               "creating it", conf->slot);
                        return -ENOENT;
                }
                r = query(c, "SELECT lsn FROM pg_create_logical_replication_slot($1, 'wal2json')", 1,
                          params);
                if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                        seterr(err, errlen, "cannot create replication slot \"%s\": %s", conf->slot,
                               PQresultErrorMessage(r));
                        PQclear(r);
                        return -EINVAL;
                }
                PQclear(r);
                res->slot_created = true;
                log_info("created replication slot \"%s\" with plugin wal2json", conf->slot);
                warn_existing_rows(c, conf);
                return check_slot(c, &(struct relay_config){.slot = conf->slot}, res, err, errlen);
        }
        plugin = PQgetvalue(r, 0, 0);
        db = PQgetvalue(r, 0, 1);
        type = PQgetvalue(r, 0, 2);
        status = PQgetisnull(r, 0, 5) ? "" : PQgetvalue(r, 0, 5);
        if (strcmp(type, "logical") != 0) {
                seterr(err, errlen, "replication slot \"%s\" is a %s slot, not a logical one: choose "
                       "another name with --slot", conf->slot, type);
                rc = -EINVAL;
        } else if (strcmp(plugin, "wal2json") != 0) {
                seterr(err, errlen, "replication slot \"%s\" uses output plugin \"%s\", not wal2json: "
                       "choose another name with --slot", conf->slot, plugin);
                rc = -EINVAL;
        } else if (strcmp(db, res->dbname) != 0) {
                seterr(err, errlen, "replication slot \"%s\" belongs to database \"%s\", not \"%s\": "
                       "connect to that database or choose another name with --slot", conf->slot,
                       db, res->dbname);
                rc = -EINVAL;
        } else if (strcmp(status, "lost") == 0) {
                seterr(err, errlen, "replication slot \"%s\" was invalidated (wal_status lost, "
                       "probably max_slot_wal_keep_size): the WAL of rows not yet published is "
                       "gone; recover them by other means, then drop and recreate the slot",
                       conf->slot);
                rc = -EINVAL;
        } else {
                if (!PQgetisnull(r, 0, 3))
                        lsn_parse(PQgetvalue(r, 0, 3), strlen(PQgetvalue(r, 0, 3)),
                                  &res->confirmed_flush_lsn);
                if (!PQgetisnull(r, 0, 4))
                        lsn_parse(PQgetvalue(r, 0, 4), strlen(PQgetvalue(r, 0, 4)), &res->restart_lsn);
        }
        PQclear(r);
        return rc;
}

int preflight_run(const struct relay_config *conf, const char *const *columns, size_t ncolumns,
                  struct preflight_result *ret_res, char *err, size_t errlen)
{
        const char *keys[] = {"dbname", "options", "fallback_application_name", NULL};
        const char *vals[] = {conf->conninfo, PGSTREAM_SESSION_OPTIONS, "outbox-relay", NULL};
        struct preflight_result res = {0};
        PGconn *c;
        int r;

        c = PQconnectdbParams(conf->conninfo ? keys : keys + 1, conf->conninfo ? vals : vals + 1, 1);
        if (!c || PQstatus(c) != CONNECTION_OK) {
                seterr(err, errlen, "cannot connect to the database: %s",
                       c ? PQerrorMessage(c) : "out of memory");
                PQfinish(c);
                return -ECONNREFUSED;
        }
        r = check_settings(c, conf, &res, err, errlen);
        for (size_t i = 0; r == 0 && i < conf->ntables; i++)
                r = check_table(c, conf, &conf->tables[i], columns, ncolumns, err, errlen);
        if (r == 0)
                r = check_slot(c, conf, &res, err, errlen);
        PQfinish(c);
        if (r == 0)
                *ret_res = res;
        return r;
}
