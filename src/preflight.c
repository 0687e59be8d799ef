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

int preflight_connect(const char *conninfo, int timeout_ms, PGconn **ret_conn, char *err,
                      size_t errlen)
{
        /* connect_timeout before dbname, so that @conninfo (expanded there) overrides it. */
        const char *keys[] = {"connect_timeout", "dbname", "options", "fallback_application_name", NULL};
        const char *vals[] = {NULL, conninfo, PGSTREAM_SESSION_OPTIONS, "outbox-relay", NULL};
        char ct[16], opts[sizeof(PGSTREAM_SESSION_OPTIONS) + 64];
        size_t first = 0;
        PGconn *c;

        if (timeout_ms > 0) {
                snprintf(ct, sizeof(ct), "%d", (timeout_ms + 999) / 1000);
                snprintf(opts, sizeof(opts), "%s -c statement_timeout=%d", PGSTREAM_SESSION_OPTIONS,
                         timeout_ms);
                vals[0] = ct;
                vals[2] = opts;
        } else {
                first = 1;
        }
        if (!conninfo) {
                /* Let PGDATABASE and friends apply: drop the dbname key. */
                keys[1] = keys[0];
                vals[1] = vals[0];
                first++;
        }
        c = PQconnectdbParams(keys + first, vals + first, 1);
        if (!c || PQstatus(c) != CONNECTION_OK) {
                seterr(err, errlen, "cannot connect to the database: %s",
                       c ? PQerrorMessage(c) : "out of memory");
                PQfinish(c);
                return -ECONNREFUSED;
        }
        *ret_conn = c;
        return 0;
}

int preflight_read_settings(PGconn *c, struct preflight_settings *ret_set, char *err, size_t errlen)
{
        PGresult *r = query(c,
                "SELECT current_setting('server_version_num')::int, current_setting('wal_level'), "
                "current_setting('server_encoding'), current_database(), "
                "(SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'), "
                "(SELECT setting FROM pg_settings WHERE name = 'output_plugin_libraries'), "
                "(SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'), "
                "current_user, (SELECT rolreplication FROM pg_roles WHERE rolname = current_user), "
                "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user), "
                "current_setting('server_version')", 0, NULL);
        struct preflight_settings set = {0};

        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                seterr(err, errlen, "cannot read server settings: %s", PQresultErrorMessage(r));
                PQclear(r);
                return -EINVAL;
        }
        set.server_version_num = atoi(PQgetvalue(r, 0, 0));
        snprintf(set.wal_level, sizeof(set.wal_level), "%s", PQgetvalue(r, 0, 1));
        snprintf(set.server_encoding, sizeof(set.server_encoding), "%s", PQgetvalue(r, 0, 2));
        snprintf(set.dbname, sizeof(set.dbname), "%s", PQgetvalue(r, 0, 3));
        set.wal_sender_timeout_ms = strtoll(PQgetvalue(r, 0, 4), NULL, 10);
        set.has_output_plugin_libraries = !PQgetisnull(r, 0, 5);
        snprintf(set.output_plugin_libraries, sizeof(set.output_plugin_libraries), "%s",
                 PQgetvalue(r, 0, 5));
        set.has_max_slot_wal_keep_size = !PQgetisnull(r, 0, 6);
        set.max_slot_wal_keep_size_mb = strtoll(PQgetvalue(r, 0, 6), NULL, 10);
        snprintf(set.user, sizeof(set.user), "%s", PQgetvalue(r, 0, 7));
        set.rolreplication = strcmp(PQgetvalue(r, 0, 8), "t") == 0;
        set.rolsuper = strcmp(PQgetvalue(r, 0, 9), "t") == 0;
        snprintf(set.server_version, sizeof(set.server_version), "%s", PQgetvalue(r, 0, 10));
        PQclear(r);
        *ret_set = set;
        return 0;
}

int preflight_check_version(const struct preflight_settings *set, char *err, size_t errlen)
{
        if (set->server_version_num >= 100000)
                return 0;
        seterr(err, errlen, "server version %d is too old: outbox-relay needs PostgreSQL 10 "
               "or later", set->server_version_num);
        return -EINVAL;
}

int preflight_check_wal_level(const struct preflight_settings *set, char *err, size_t errlen)
{
        if (strcmp(set->wal_level, "logical") == 0)
                return 0;
        seterr(err, errlen, "wal_level is \"%s\" but logical decoding needs \"logical\": run "
               "ALTER SYSTEM SET wal_level = logical and restart the server", set->wal_level);
        return -EINVAL;
}

int preflight_check_encoding(const struct preflight_settings *set, char *err, size_t errlen)
{
        if (strcmp(set->server_encoding, "UTF8") == 0)
                return 0;
        seterr(err, errlen, "database \"%s\" has server_encoding \"%s\": outbox-relay needs "
               "UTF8 so that keys, headers and payloads reach Kafka as UTF-8; create the "
               "outbox in a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')",
               set->dbname, set->server_encoding);
        return -EINVAL;
}

int preflight_check_plugin_libraries(const struct preflight_settings *set, char *err, size_t errlen)
{
        const char *opl = set->output_plugin_libraries, *p = opl;
        char list[sizeof(set->output_plugin_libraries) * 2 + 32];
        size_t o = 0;

        if (!set->has_output_plugin_libraries || strstr(opl, "wal2json"))
                return 0;
        /*
         * A list setting: ALTER SYSTEM needs one quoted literal per name
         * ('pgoutput', 'wal2json'); one literal holding a comma would become a
         * single name "pgoutput, wal2json" and refuse both.
         */
        list[0] = '\0';
        while (*p) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);

                while (len > 0 && (*p == ' ' || *p == '"')) {
                        p++;
                        len--;
                }
                while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '"'))
                        len--;
                if (len > 0 && memchr(p, '\'', len) == NULL && o + len + 5 < sizeof(list) - 16)
                        o += (size_t)snprintf(list + o, sizeof(list) - o, "'%.*s', ", (int)len, p);
                if (!end)
                        break;
                p = end + 1;
        }
        snprintf(list + o, sizeof(list) - o, "'wal2json'");
        seterr(err, errlen, "this server refuses wal2json as an output plugin: "
               "output_plugin_libraries is '%s'; add it, one quoted name each: ALTER SYSTEM SET "
               "output_plugin_libraries = %s; SELECT pg_reload_conf();", opl, list);
        return -EINVAL;
}

static int check_settings(PGconn *c, struct preflight_result *res, char *err, size_t errlen)
{
        struct preflight_settings set;
        int rc;

        rc = preflight_read_settings(c, &set, err, errlen);
        if (rc < 0)
                return rc;
        res->server_version_num = set.server_version_num;
        snprintf(res->dbname, sizeof(res->dbname), "%s", set.dbname);
        res->wal_sender_timeout_ms = set.wal_sender_timeout_ms;
        rc = preflight_check_version(&set, err, errlen);
        if (rc == 0)
                rc = preflight_check_wal_level(&set, err, errlen);
        if (rc == 0)
                rc = preflight_check_encoding(&set, err, errlen);
        if (rc == 0)
                rc = preflight_check_plugin_libraries(&set, err, errlen);
        return rc;
}

int preflight_check_table(PGconn *c, const struct relay_config *conf, const struct table_name *t,
                          const char *const *columns, size_t ncolumns, struct preflight_table *ret_tab,
                          char *err, size_t errlen)
{
        const char *params[2] = {t->schema, t->table};
        const char *need[4] = {conf->id_column, conf->key_column, conf->payload_column, NULL};
        struct preflight_table tab = {0};
        PGresult *r;
        int rc = 0;

        *ret_tab = tab;
        r = query(c, "SELECT c.relkind, c.relreplident, has_table_privilege(c.oid, 'SELECT') "
                  "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
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
        tab.exists = true;
        tab.relkind = PQgetvalue(r, 0, 0)[0];
        tab.replica_identity = PQgetvalue(r, 0, 1)[0];
        tab.can_select = strcmp(PQgetvalue(r, 0, 2), "t") == 0;
        PQclear(r);
        *ret_tab = tab;
        if (tab.relkind == 'p') {
                seterr(err, errlen, "table \"%s\".\"%s\" is partitioned: wal2json reports rows "
                       "under each partition's name, so list the partitions with --table instead",
                       t->schema, t->table);
                return -EINVAL;
        }
        if (tab.relkind != 'r') {
                seterr(err, errlen, "\"%s\".\"%s\" is not a table: logical decoding sees only "
                       "table rows", t->schema, t->table);
                return -EINVAL;
        }
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
        ret_tab->has_type_column = has_column(r, conf->type_column);
        PQclear(r);
        return rc;
}

int preflight_existing_rows(PGconn *c, const struct table_name *t, int64_t *ret_rows, char *err,
                            size_t errlen)
{
        char *s = PQescapeIdentifier(c, t->schema, strlen(t->schema));
        char *n = PQescapeIdentifier(c, t->table, strlen(t->table));
        char sql[1024];
        PGresult *r;
        int rc = 0;

        snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT 1 FROM %s.%s LIMIT 1000001) x",
                 s ? s : "", n ? n : "");
        PQfreemem(s);
        PQfreemem(n);
        r = query(c, sql, 0, NULL);
        if (PQresultStatus(r) == PGRES_TUPLES_OK) {
                *ret_rows = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        } else {
                seterr(err, errlen, "%s", PQresultErrorMessage(r));
                rc = -EIO;
        }
        PQclear(r);
        return rc;
}

static void warn_existing_rows(PGconn *c, const struct relay_config *conf)
{
        char err[256];

        for (size_t i = 0; i < conf->ntables; i++) {
                int64_t n;

                if (preflight_existing_rows(c, &conf->tables[i], &n, err, sizeof(err)) == 0 && n > 0)
                        log_warning("table \"%s\".\"%s\" already holds %s%lld rows: they were committed "
                                    "before the slot existed and will not be published; publish "
                                    "them by other means if they are still pending",
                                    conf->tables[i].schema, conf->tables[i].table,
                                    n > 1000000 ? "over " : "", n > 1000000 ? 1000000LL : (long long)n);
        }
}

int preflight_read_slot(PGconn *c, const char *slot, struct preflight_slot *ret_slot, char *err,
                        size_t errlen)
{
        const char *params[1] = {slot};
        struct preflight_slot s = {0};
        PGresult *r;

        /* wal_status is PostgreSQL 13's. */
        r = query(c, PQserverVersion(c) >= 130000 ?
                  "SELECT plugin, database, slot_type, confirmed_flush_lsn, restart_lsn, "
                  "wal_status, active_pid FROM pg_replication_slots WHERE slot_name = $1" :
                  "SELECT plugin, database, slot_type, confirmed_flush_lsn, restart_lsn, "
                  "NULL, active_pid FROM pg_replication_slots WHERE slot_name = $1", 1, params);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                seterr(err, errlen, "cannot read pg_replication_slots: %s", PQresultErrorMessage(r));
                PQclear(r);
                return -EINVAL;
        }
        if (PQntuples(r) == 1) {
                s.exists = true;
                snprintf(s.plugin, sizeof(s.plugin), "%s", PQgetvalue(r, 0, 0));
                snprintf(s.database, sizeof(s.database), "%s", PQgetvalue(r, 0, 1));
                snprintf(s.slot_type, sizeof(s.slot_type), "%s", PQgetvalue(r, 0, 2));
                if (!PQgetisnull(r, 0, 3))
                        lsn_parse(PQgetvalue(r, 0, 3), strlen(PQgetvalue(r, 0, 3)),
                                  &s.confirmed_flush_lsn);
                if (!PQgetisnull(r, 0, 4))
                        lsn_parse(PQgetvalue(r, 0, 4), strlen(PQgetvalue(r, 0, 4)), &s.restart_lsn);
                snprintf(s.wal_status, sizeof(s.wal_status), "%s", PQgetvalue(r, 0, 5));
                s.active_pid = PQgetisnull(r, 0, 6) ? 0 : atoi(PQgetvalue(r, 0, 6));
        }
        PQclear(r);
        *ret_slot = s;
        return 0;
}

int preflight_check_slot(const struct preflight_slot *s, const char *slot, const char *dbname,
                         char *err, size_t errlen)
{
        if (strcmp(s->slot_type, "logical") != 0) {
                seterr(err, errlen, "replication slot \"%s\" is a %s slot, not a logical one: choose "
                       "another name with --slot", slot, s->slot_type);
                return -EINVAL;
        }
        if (strcmp(s->plugin, "wal2json") != 0) {
                seterr(err, errlen, "replication slot \"%s\" uses output plugin \"%s\", not wal2json: "
                       "choose another name with --slot", slot, s->plugin);
                return -EINVAL;
        }
        if (strcmp(s->database, dbname) != 0) {
                seterr(err, errlen, "replication slot \"%s\" belongs to database \"%s\", not \"%s\": "
                       "connect to that database or choose another name with --slot", slot,
                       s->database, dbname);
                return -EINVAL;
        }
        if (strcmp(s->wal_status, "lost") == 0) {
                seterr(err, errlen, "replication slot \"%s\" was invalidated (wal_status lost, "
                       "probably max_slot_wal_keep_size): the WAL of rows not yet published is "
                       "gone; recover them by other means, then drop and recreate the slot", slot);
                return -EINVAL;
        }
        return 0;
}

int preflight_create_slot(PGconn *c, const char *slot, uint64_t *ret_lsn, char *err, size_t errlen)
{
        const char *params[1] = {slot};
        const char *state;
        PGresult *r;
        int rc = 0;

        r = query(c, "SELECT lsn FROM pg_create_logical_replication_slot($1, 'wal2json')", 1, params);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
                seterr(err, errlen, "cannot create replication slot \"%s\": %s", slot,
                       PQresultErrorMessage(r));
                rc = state && strcmp(state, "42710") == 0 ? -EEXIST : -EINVAL;
        } else if (lsn_parse(PQgetvalue(r, 0, 0), strlen(PQgetvalue(r, 0, 0)), ret_lsn) < 0) {
                seterr(err, errlen, "cannot create replication slot \"%s\": malformed LSN \"%s\"",
                       slot, PQgetvalue(r, 0, 0));
                rc = -EINVAL;
        }
        PQclear(r);
        return rc;
}

static int check_slot(PGconn *c, const struct relay_config *conf, struct preflight_result *res,
                      char *err, size_t errlen)
{
        struct preflight_slot s;
        uint64_t lsn;
        int rc;

        rc = preflight_read_slot(c, conf->slot, &s, err, errlen);
        if (rc < 0)
                return rc;
        if (!s.exists) {
                if (!conf->create_slot) {
                        seterr(err, errlen, "replication slot \"%s\" does not exist in this cluster. "
                               "If this is the first start, run once with --create-slot. If the slot "
                               "existed before, it was dropped, invalidated or not carried to a "
                               "promoted standby: a new slot starts at the current WAL and skips every "
                               "row committed since, so decide how to recover those rows before "
                               "creating it", conf->slot);
                        return -ENOENT;
                }
                rc = preflight_create_slot(c, conf->slot, &lsn, err, errlen);
                if (rc < 0)
                        return -EINVAL;
                res->slot_created = true;
                log_info("created replication slot \"%s\" with plugin wal2json", conf->slot);
                warn_existing_rows(c, conf);
                return check_slot(c, &(struct relay_config){.slot = conf->slot}, res, err, errlen);
        }
        rc = preflight_check_slot(&s, conf->slot, res->dbname, err, errlen);
        if (rc == 0) {
                res->confirmed_flush_lsn = s.confirmed_flush_lsn;
                res->restart_lsn = s.restart_lsn;
        }
        return rc;
}

int preflight_run(const struct relay_config *conf, const char *const *columns, size_t ncolumns,
                  struct preflight_result *ret_res, char *err, size_t errlen)
{
        struct preflight_result res = {0};
        struct preflight_table tab;
        PGconn *c;
        int r;

        r = preflight_connect(conf->conninfo, 0, &c, err, errlen);
        if (r < 0)
                return r;
        r = check_settings(c, &res, err, errlen);
        for (size_t i = 0; r == 0 && i < conf->ntables; i++) {
                const struct table_name *t = &conf->tables[i];

                r = preflight_check_table(c, conf, t, columns, ncolumns, &tab, err, errlen);
                if (r == 0 && !tab.has_type_column)
                        log_warning("table \"%s\".\"%s\" has no column \"%s\": records will carry no "
                                    "ce_type header (set --type-column)", t->schema, t->table,
                                    conf->type_column);
        }
        if (r == 0)
                r = check_slot(c, conf, &res, err, errlen);
        PQfinish(c);
        if (r == 0)
                *ret_res = res;
        return r;
}
