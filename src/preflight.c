// SPDX-License-Identifier: Apache-2.0
/*
 * Preflight checks over an ordinary connection: settings, tables, columns,
 * the slot. See preflight.h. Knows libpq and the catalogs, not Kafka.
 */
#include "preflight.h"

#include <ctype.h>
#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "lsn.h"
#include "pgconn.h"
#include "pgstream.h"
#include "publication.h"
#include "strbuf.h"

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
        char msg[1024];
        int r = pgconn_open(conninfo, PGCONN_ORDINARY, timeout_ms, timeout_ms, ret_conn, msg, sizeof(msg));

        if (r == -EPROTONOSUPPORT) {
                strbuf_err(err, errlen, "cannot connect to the database: %s: a connection pooler (PgBouncer, "
                       "pgpool) is in between; the relay needs PostgreSQL itself (logical replication "
                       "and pinned session settings do not pass a pooler): connect it directly", msg);
                return -EPROTONOSUPPORT;
        }
        if (r == -ECONNREFUSED)
                strbuf_err(err, errlen, "cannot connect to the database: %s", msg);
        else if (r < 0)
                strbuf_err(err, errlen, "cannot connect to the database: out of memory");
        return r < 0 ? -ECONNREFUSED : 0;
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
                "current_setting('server_version'), "
                "coalesce((SELECT setting FROM pg_settings WHERE name = 'synchronous_standby_names'), ''), "
                "current_setting('application_name')", 0, NULL);
        struct preflight_settings set = {0};

        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                strbuf_err(err, errlen, "cannot read server settings: %s", PQresultErrorMessage(r));
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
        snprintf(set.synchronous_standby_names, sizeof(set.synchronous_standby_names), "%s",
                 PQgetvalue(r, 0, 11));
        snprintf(set.application_name, sizeof(set.application_name), "%s", PQgetvalue(r, 0, 12));
        PQclear(r);
        *ret_set = set;
        return 0;
}

int preflight_check_version(const struct preflight_settings *set, char *err, size_t errlen)
{
        if (set->server_version_num >= PREFLIGHT_MIN_SERVER_VERSION)
                return 0;
        strbuf_err(err, errlen, "server version %s (server_version_num %d) is too old: outbox-relay "
               "supports PostgreSQL %d to %d, the major versions the PostgreSQL project supports; "
               "upgrade the server to %d or later (pg_upgrade, or dump and restore)",
               set->server_version[0] ? set->server_version : "unknown", set->server_version_num,
               PREFLIGHT_MIN_SERVER_VERSION / 10000, PREFLIGHT_NEWEST_TESTED_MAJOR,
               PREFLIGHT_MIN_SERVER_VERSION / 10000);
        return -EINVAL;
}

/* syncrep_scanner.l's identifier characters. */
static bool ident_char(unsigned char c, bool first)
{
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c >= 0x80 ||
               (!first && ((c >= '0' && c <= '9') || c == '$'));
}

bool preflight_sync_standby_named(const char *names, const char *application_name)
{
        const char *p = names;
        bool parens = strchr(names, '(') != NULL, inside = false;
        char name[1024];

        while (*p) {
                size_t n = 0;
                bool is_name = false;

                if (isspace((unsigned char)*p) || *p == ',') {
                        p++;
                        continue;
                }
                if (*p == '(' || *p == ')') {
                        inside = *p++ == '(';
                        continue;
                }
                if (*p == '"') {
                        for (p++; *p; p++) {
                                if (*p == '"' && p[1] != '"')
                                        break;
                                if (*p == '"')
                                        p++;
                                if (n < sizeof(name) - 1)
                                        name[n++] = *p;
                        }
                        if (*p)
                                p++;
                        is_name = true;
                } else if (ident_char((unsigned char)*p, true)) {
                        while (*p && ident_char((unsigned char)*p, false) && n < sizeof(name) - 1)
                                name[n++] = *p++;
                        while (*p && ident_char((unsigned char)*p, false))
                                p++;
                        name[n] = '\0';
                        /* the keywords, in any case, are never names (syncrep_scanner.l) */
                        is_name = strcasecmp(name, "ANY") != 0 && strcasecmp(name, "FIRST") != 0;
                } else if (isdigit((unsigned char)*p)) {
                        while (isdigit((unsigned char)*p) && n < sizeof(name) - 1)
                                name[n++] = *p++;
                        /* a number is the count before '(', a name inside it or in a plain list */
                        is_name = !parens || inside;
                } else if (*p == '*') {
                        name[n++] = *p++;
                        is_name = true;
                } else {
                        p++; /* the server refuses such a setting: nothing to match */
                        continue;
                }
                name[n] = '\0';
                if (is_name && (!parens || inside) &&
                    (strcmp(name, "*") == 0 || strcasecmp(name, application_name) == 0))
                        return true;
        }
        return false;
}

int preflight_check_sync_standby(const struct preflight_settings *set, char *err, size_t errlen)
{
        if (!preflight_sync_standby_named(set->synchronous_standby_names, set->application_name))
                return 0;
        strbuf_err(err, errlen, "synchronous_standby_names = '%s' names this relay (application_name "
               "\"%s\"%s): its walsender becomes a synchronous standby, and every commit in the "
               "cluster then waits until Kafka has acknowledged the rows up to it. A logical stream is "
               "not a replica: a commit that waits for it is not on any standby. Fix: name the "
               "physical standbys explicitly, e.g. ALTER SYSTEM SET synchronous_standby_names = "
               "'FIRST 1 (standby1, standby2)'; SELECT pg_reload_conf()",
               set->synchronous_standby_names, set->application_name,
               strstr(set->synchronous_standby_names, "*") ? ", and '*' names every standby" : "");
        return -EINVAL;
}

int preflight_check_wal_level(const struct preflight_settings *set, char *err, size_t errlen)
{
        if (strcmp(set->wal_level, "logical") == 0)
                return 0;
        strbuf_err(err, errlen, "wal_level is \"%s\" but logical decoding needs \"logical\": run "
               "ALTER SYSTEM SET wal_level = logical and restart the server", set->wal_level);
        return -EINVAL;
}

int preflight_check_encoding(const struct preflight_settings *set, char *err, size_t errlen)
{
        if (strcmp(set->server_encoding, "UTF8") == 0)
                return 0;
        strbuf_err(err, errlen, "database \"%s\" has server_encoding \"%s\": outbox-relay needs "
               "UTF8 so that keys, headers and payloads reach Kafka as UTF-8; create the "
               "outbox in a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')",
               set->dbname, set->server_encoding);
        return -EINVAL;
}

/*
 * The next entry of a list setting's text at *@pp ("pgoutput, test_decoding",
 * as SHOW prints it; a name may be double-quoted): sets *@ret_name and
 * *@ret_len (0 for an empty entry) and advances. Returns false at the end.
 */
static bool next_list_entry(const char **pp, const char **ret_name, size_t *ret_len)
{
        const char *p = *pp, *end;
        size_t len;

        if (!*p)
                return false;
        end = strchr(p, ',');
        len = end ? (size_t)(end - p) : strlen(p);
        *pp = end ? end + 1 : p + len;
        while (len > 0 && (*p == ' ' || *p == '"')) {
                p++;
                len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '"'))
                len--;
        *ret_name = p;
        *ret_len = len;
        return true;
}

bool preflight_plugin_listed(const char *list, const char *plugin)
{
        const char *p = list, *name;
        size_t len;

        while (next_list_entry(&p, &name, &len))
                if (len == strlen(plugin) && memcmp(name, plugin, len) == 0)
                        return true;
        return false;
}

void preflight_plugin_fix(const struct preflight_settings *set, const char *plugin, char *buf, size_t size)
{
        const char *p = set->has_output_plugin_libraries ? set->output_plugin_libraries :
                        "pgoutput, test_decoding", *name;
        size_t len, o = 0;

        /*
         * A list setting: ALTER SYSTEM needs one quoted literal per name
         * ('pgoutput', 'wal2json'); one literal holding a comma would become a
         * single name "pgoutput, wal2json" and refuse both. Names holding a
         * quote are left out (none of PostgreSQL's own plugins has one).
         */
        o += (size_t)snprintf(buf, size, "as a superuser (the setting is cluster-wide): ALTER SYSTEM "
                              "SET output_plugin_libraries = ");
        while (o < size && next_list_entry(&p, &name, &len))
                if (len > 0 && !memchr(name, '\'', len) && o + len + 5 < size &&
                    !(len == strlen(plugin) && memcmp(name, plugin, len) == 0))
                        o += (size_t)snprintf(buf + o, size - o, "'%.*s', ", (int)len, name);
        if (o < size)
                snprintf(buf + o, size - o, "'%s'; SELECT pg_reload_conf();%s", plugin,
                         set->has_output_plugin_libraries ? "" :
                         " (keep every name SHOW output_plugin_libraries lists besides the defaults "
                         "shown; this role cannot read the setting)");
}

bool preflight_plugin_allowed(const struct preflight_settings *set, const char *plugin)
{
        return !set->has_output_plugin_libraries ||
               preflight_plugin_listed(set->output_plugin_libraries, plugin);
}

int preflight_check_plugin_libraries(const struct preflight_settings *set, const char *plugin, char *err,
                                     size_t errlen)
{
        char fix[sizeof(set->output_plugin_libraries) * 2 + 256];

        if (preflight_plugin_allowed(set, plugin))
                return 0;
        preflight_plugin_fix(set, plugin, fix, sizeof(fix));
        strbuf_err(err, errlen, "%s is not allowed as an output plugin on this server: its "
               "output_plugin_libraries (PostgreSQL 14.24, 15.19, 16.15, 17.11, 18.6 and later "
               "minor releases) is '%s'; fix: %s%s", plugin, set->output_plugin_libraries, fix,
               strcmp(plugin, "wal2json") == 0 ? ", or start with --plugin=pgoutput, which needs no "
               "plugin besides PostgreSQL's own" : "");
        return -EINVAL;
}

bool preflight_relay_plugin(const char *plugin)
{
        return strcmp(plugin, "wal2json") == 0 || strcmp(plugin, "pgoutput") == 0;
}

const char *preflight_choose_plugin(const struct preflight_settings *set, const struct preflight_slot *slot,
                                    const char *wanted, char *why, size_t size)
{
        if (slot && slot->exists && strcmp(slot->slot_type, "logical") == 0 &&
            preflight_relay_plugin(slot->plugin) && strcmp(wanted, "auto") == 0) {
                snprintf(why, size, "the slot's own plugin");
                return strcmp(slot->plugin, "wal2json") == 0 ? "wal2json" : "pgoutput";
        }
        if (strcmp(wanted, "auto") != 0) {
                snprintf(why, size, "--plugin=%s", wanted);
                return strcmp(wanted, "wal2json") == 0 ? "wal2json" : "pgoutput";
        }
        if (!set->has_output_plugin_libraries) {
                snprintf(why, size, "--plugin=auto: the server has no output_plugin_libraries (or this "
                         "role cannot read it), so wal2json is allowed");
                return "wal2json";
        }
        if (preflight_plugin_listed(set->output_plugin_libraries, "wal2json")) {
                snprintf(why, size, "--plugin=auto: output_plugin_libraries '%s' lists wal2json",
                         set->output_plugin_libraries);
                return "wal2json";
        }
        snprintf(why, size, "--plugin=auto: output_plugin_libraries '%s' does not list wal2json",
                 set->output_plugin_libraries);
        return "pgoutput";
}

static int check_settings(PGconn *c, struct preflight_result *res, struct preflight_settings *ret_set,
                          char *err, size_t errlen)
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
        /* Not the relay's correctness but every committer's latency: said loudly, not refused
         * (the running relay's side connection says it again when the walsender becomes one). */
        if (rc == 0 && preflight_check_sync_standby(&set, err, errlen) < 0) {
                log_error("%s", err);
                err[0] = '\0';
        }
        *ret_set = set;
        return rc;
}

/*
 * The names of table @t's live columns (one row each, column attname), or
 * NULL with the reason in @err; the caller PQclear()s the result.
 */
static PGresult *read_columns(PGconn *c, const struct table_name *t, char *err, size_t errlen)
{
        const char *params[2] = {t->schema, t->table};
        PGresult *r;

        r = query(c, "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                  "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND "
                  "c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped", 2, params);
        if (PQresultStatus(r) == PGRES_TUPLES_OK)
                return r;
        strbuf_err(err, errlen, "cannot read the columns of \"%s\".\"%s\": %s", t->schema, t->table,
               PQresultErrorMessage(r));
        PQclear(r);
        return NULL;
}

/*
 * The payload column's type, followed through domains to its base type: the
 * relay publishes the column's text as application/json, so json, jsonb and
 * the string types (pg_type.typcategory 'S': text, varchar, char, citext, which
 * the relay checks row by row) can be published; anything else never, and
 * would stop the relay at its first row (exit 4). bytea gets the advice for
 * Avro and Protobuf bytes. Returns 0 or -EINVAL with the fix in @err.
 */
static int check_payload_type(PGconn *c, const struct table_name *t, const char *column, char *err,
                              size_t errlen)
{
        const char *params[3] = {t->schema, t->table, column};
        const char *declared, *base;
        char *qs, *qt, *qc;
        PGresult *r;
        int n, rc = 0;

        r = query(c, "WITH RECURSIVE d(oid, depth) AS ("
                  "SELECT a.atttypid, 0 FROM pg_catalog.pg_attribute a "
                  "JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
                  "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                  "WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3 AND a.attnum > 0 "
                  "AND NOT a.attisdropped "
                  "UNION ALL SELECT t.typbasetype, d.depth + 1 FROM d "
                  "JOIN pg_catalog.pg_type t ON t.oid = d.oid WHERE t.typtype = 'd' AND d.depth < 64) "
                  "SELECT pg_catalog.format_type(t.oid, NULL), t.typcategory, "
                  "t.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AND "
                  "t.typname IN ('json', 'jsonb') "
                  "FROM d JOIN pg_catalog.pg_type t ON t.oid = d.oid ORDER BY d.depth", 3, params);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) == 0) {
                strbuf_err(err, errlen, "cannot read the type of column \"%s\" of \"%s\".\"%s\": %s", column,
                       t->schema, t->table, PQresultErrorMessage(r));
                PQclear(r);
                return -EINVAL;
        }
        n = PQntuples(r);
        declared = PQgetvalue(r, 0, 0);
        base = PQgetvalue(r, n - 1, 0);
        if (strcmp(PQgetvalue(r, n - 1, 2), "t") == 0 || strcmp(PQgetvalue(r, n - 1, 1), "S") == 0) {
                PQclear(r);
                return 0;
        }
        qs = PQescapeIdentifier(c, t->schema, strlen(t->schema));
        qt = PQescapeIdentifier(c, t->table, strlen(t->table));
        qc = PQescapeIdentifier(c, column, strlen(column));
        if (strcmp(base, "bytea") == 0)
                strbuf_err(err, errlen, "the payload column \"%s\" of \"%s\".\"%s\" is of type %s: the relay "
                       "publishes JSON (content-type application/json) and wal2json sends bytea as "
                       "\\x hex text, so the first row would stop the relay (exit 4); fix: ALTER TABLE "
                       "%s.%s ALTER COLUMN %s TYPE jsonb USING convert_from(%s, 'UTF8')::jsonb when "
                       "the bytes are JSON; Avro or Protobuf bytes cannot be published as they are: "
                       "write JSON, or base64 inside JSON (see outbox-relay(7), DEBEZIUM OUTBOX "
                       "LAYOUT)", column, t->schema, t->table, declared, qs ? qs : t->schema,
                       qt ? qt : t->table, qc ? qc : column, qc ? qc : column);
        else
                strbuf_err(err, errlen, "the payload column \"%s\" of \"%s\".\"%s\" is of type %s, whose "
                       "text is not a JSON document: the relay publishes json, jsonb or text-like "
                       "columns holding JSON (content-type application/json), so the first row would "
                       "stop the relay (exit 4); fix: ALTER TABLE %s.%s ALTER COLUMN %s TYPE jsonb "
                       "USING to_jsonb(%s), or name another column with --payload-column", column,
                       t->schema, t->table, declared, qs ? qs : t->schema, qt ? qt : t->table,
                       qc ? qc : column, qc ? qc : column);
        rc = -EINVAL;
        PQfreemem(qs);
        PQfreemem(qt);
        PQfreemem(qc);
        PQclear(r);
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
        r = query(c, "SELECT c.relkind, c.relreplident, has_table_privilege(c.oid, 'SELECT'), c.oid, "
                  "c.relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                  "WHERE n.nspname = $1 AND c.relname = $2", 2, params);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                strbuf_err(err, errlen, "cannot look up table \"%s\".\"%s\": %s", t->schema, t->table,
                       PQresultErrorMessage(r));
                PQclear(r);
                return -EINVAL;
        }
        if (PQntuples(r) == 0) {
                strbuf_err(err, errlen, "table \"%s\".\"%s\" does not exist in database \"%s\": create "
                       "it (see sql/outbox.sql) or name your outbox with --table", t->schema,
                       t->table, PQdb(c));
                PQclear(r);
                return -EINVAL;
        }
        tab.exists = true;
        tab.relkind = PQgetvalue(r, 0, 0)[0];
        tab.replica_identity = PQgetvalue(r, 0, 1)[0];
        tab.can_select = strcmp(PQgetvalue(r, 0, 2), "t") == 0;
        tab.oid = (uint32_t)strtoul(PQgetvalue(r, 0, 3), NULL, 10);
        tab.persistence = PQgetvalue(r, 0, 4)[0];
        PQclear(r);
        *ret_tab = tab;
        if (tab.relkind == 'p') {
                strbuf_err(err, errlen, "table \"%s\".\"%s\" is partitioned: logical decoding reports rows "
                       "under each partition's name, so list the partitions with --table instead",
                       t->schema, t->table);
                return -EINVAL;
        }
        if (tab.relkind != 'r') {
                strbuf_err(err, errlen, "\"%s\".\"%s\" is not a table: logical decoding sees only "
                       "table rows", t->schema, t->table);
                return -EINVAL;
        }
        if (tab.persistence != 'p') {
                strbuf_err(err, errlen, "table \"%s\".\"%s\" is %s: its rows are not written to the WAL, "
                       "so logical decoding never sees them and the relay would publish nothing; "
                       "fix: ALTER TABLE \"%s\".\"%s\" SET LOGGED (rows inserted while it was "
                       "unlogged are not published even then: publish them by other means)",
                       t->schema, t->table, tab.persistence == 'u' ? "UNLOGGED" : "TEMPORARY",
                       t->schema, t->table);
                return -EINVAL;
        }
        r = read_columns(c, t, err, errlen);
        if (!r)
                return -EINVAL;
        for (size_t i = 0; i < 3 + ncolumns && rc == 0; i++) {
                const char *col = i < 3 ? need[i] : columns[i - 3];
                const char *opt = i == 0 ? "--id-column" : i == 1 ? "--key-column" :
                                  i == 2 ? "--payload-column" : "--topic";

                if (!has_column(r, col)) {
                        strbuf_err(err, errlen, "table \"%s\".\"%s\" has no column \"%s\" (needed by "
                               "%s): add the column or change %s", t->schema, t->table, col, opt,
                               opt);
                        rc = -EINVAL;
                }
        }
        ret_tab->has_type_column = has_column(r, conf->type_column);
        PQclear(r);
        if (rc == 0)
                rc = check_payload_type(c, t, conf->payload_column, err, errlen);
        return rc;
}

int preflight_check_header_columns(PGconn *c, const struct relay_config *conf,
                                   const struct table_name *t, char *err, size_t errlen)
{
        char missing[512] = "", fix[768] = "", *qs, *qt;
        size_t nm = 0, o = 0, of = 0;
        PGresult *r;

        if (conf->ncolumn_headers == 0)
                return 0;
        r = read_columns(c, t, err, errlen);
        if (!r)
                return -EINVAL;
        if (PQntuples(r) == 0) {
                strbuf_err(err, errlen, "table \"%s\".\"%s\" does not exist", t->schema, t->table);
                PQclear(r);
                return -ENOENT;
        }
        for (size_t i = 0; i < conf->ncolumn_headers; i++) {
                const struct column_header *h = &conf->column_headers[i];
                char *qc;

                if (has_column(r, h->column))
                        continue;
                qc = PQescapeIdentifier(c, h->column, strlen(h->column));
                if (o < sizeof(missing))
                        o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s\"%s\" (header "
                                              "\"%s\")", nm ? ", " : "", h->column, h->header);
                if (of < sizeof(fix))
                        of += (size_t)snprintf(fix + of, sizeof(fix) - of, "%sADD COLUMN %s text",
                                               nm ? ", " : "", qc ? qc : h->column);
                PQfreemem(qc);
                nm++;
        }
        PQclear(r);
        if (nm == 0)
                return 0;
        qs = PQescapeIdentifier(c, t->schema, strlen(t->schema));
        qt = PQescapeIdentifier(c, t->table, strlen(t->table));
        strbuf_err(err, errlen, "table \"%s\".\"%s\" has no column%s %s, needed by --column-header: "
               "a row without it cannot be published (a NULL publishes no header); fix: add %s "
               "(ALTER TABLE %s.%s %s, or another type) or change --column-header", t->schema,
               t->table, nm == 1 ? "" : "s", missing, nm == 1 ? "it" : "them", qs ? qs : t->schema,
               qt ? qt : t->table, fix);
        PQfreemem(qs);
        PQfreemem(qt);
        return -EINVAL;
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
                strbuf_err(err, errlen, "%s", PQresultErrorMessage(r));
                rc = -EIO;
        }
        PQclear(r);
        return rc;
}

void preflight_other_consumers(PGconn *c, const struct relay_config *conf, int64_t existing_rows,
                               uint64_t consistent_lsn, char *buf, size_t size)
{
        const char *params[1] = {conf->slot};
        char slots[512] = "", a[LSN_STRLEN];
        int64_t inserted = 0;
        size_t o = 0;
        PGresult *r;

        if (size)
                buf[0] = '\0';
        r = query(c, "SELECT slot_name FROM pg_catalog.pg_replication_slots WHERE slot_type = 'logical' "
                  "AND database = pg_catalog.current_database() AND slot_name <> $1 AND NOT temporary "
                  "ORDER BY slot_name", 1, params);
        for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++) {
                if (conf->after_slot && strcmp(PQgetvalue(r, i, 0), conf->after_slot) == 0)
                        continue;
                if (o < sizeof(slots))
                        o += (size_t)snprintf(slots + o, sizeof(slots) - o, "%s\"%s\"", o ? ", " : "",
                                              PQgetvalue(r, i, 0));
        }
        PQclear(r);
        if (!slots[0])
                return;
        for (size_t i = 0; i < conf->ntables; i++) {
                const char *p[2] = {conf->tables[i].schema, conf->tables[i].table};

                r = query(c, "SELECT n_tup_ins FROM pg_catalog.pg_stat_user_tables WHERE schemaname = $1 "
                          "AND relname = $2", 2, p);
                if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
                        inserted += strtoll(PQgetvalue(r, 0, 0), NULL, 10);
                PQclear(r);
        }
        snprintf(buf, size, "database \"%s\" has other logical slots (%s): if one of them publishes this "
                 "outbox (Debezium), rows committed before %s that it has not confirmed when it stops "
                 "are published by neither, whatever the outbox holds%s; create the slot with "
                 "--after-slot=SLOT instead (drop this one first), or run `outbox-relay check "
                 "--after-slot=SLOT` before stopping it (outbox-relay(7), DEBEZIUM OUTBOX LAYOUT)",
                 PQdb(c), slots, lsn_format(consistent_lsn, a),
                 existing_rows == 0 && inserted > 0 ? " (it is empty, yet rows were inserted into it: "
                 "its writers or its consumer delete them, so its row count says nothing about what "
                 "is pending)" : "");
}

static void warn_existing_rows(PGconn *c, const struct relay_config *conf, uint64_t consistent_lsn)
{
        char err[256], others[1536];
        int64_t total = 0;

        for (size_t i = 0; i < conf->ntables; i++) {
                int64_t n;

                if (preflight_existing_rows(c, &conf->tables[i], &n, err, sizeof(err)) < 0 || n == 0)
                        continue;
                total += n;
                log_warning("table \"%s\".\"%s\" already holds %s%lld rows: they were committed "
                            "before the slot existed and will not be published; publish "
                            "them by other means if they are still pending",
                            conf->tables[i].schema, conf->tables[i].table,
                            n > 1000000 ? "over " : "", n > 1000000 ? 1000000LL : (long long)n);
        }
        preflight_other_consumers(c, conf, total, consistent_lsn, others, sizeof(others));
        if (others[0])
                log_warning("%s", others);
}

static uint64_t get_lsn(const PGresult *r, int col)
{
        uint64_t lsn = LSN_INVALID;

        if (!PQgetisnull(r, 0, col))
                lsn_parse(PQgetvalue(r, 0, col), strlen(PQgetvalue(r, 0, col)), &lsn);
        return lsn;
}

int preflight_read_slot(PGconn *c, const char *slot, struct preflight_slot *ret_slot, char *err,
                        size_t errlen)
{
        int v = PQserverVersion(c);
        char sql[2048], *lit;
        struct preflight_slot s = {0};
        PGresult *r;

        lit = PQescapeLiteral(c, slot, strlen(slot));
        if (!lit) {
                strbuf_err(err, errlen, "cannot read pg_replication_slots: %s", PQerrorMessage(c));
                return -EIO;
        }
        /*
         * One query, so that the current WAL position and the slot's are read
         * together. The only place that knows which server has which column.
         */
        snprintf(sql, sizeof(sql),
                 "SELECT s.plugin, s.slot_type, s.database, s.temporary, s.active_pid, "
                 "s.confirmed_flush_lsn, s.restart_lsn, "
                 "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
                 "ELSE pg_current_wal_lsn() END, pg_is_in_recovery(), %s, %s, %s, "
                 "concat_ws(', ', 'application \"' || a.application_name || '\"', "
                 "'client ' || host(a.client_addr), "
                 "'connected since ' || to_char(a.backend_start AT TIME ZONE 'UTC', "
                 "'YYYY-MM-DD HH24:MI:SS') || ' UTC') "
                 "FROM pg_catalog.pg_replication_slots s "
                 "LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = s.active_pid "
                 "WHERE s.slot_name = %.200s",
                 v >= 130000 ? "s.wal_status, s.safe_wal_size" : "NULL, NULL",
                 v >= 170000 ? "s.failover, s.synced" : "false, false",
                 v >= 170000 ? "coalesce(s.invalidation_reason, '')" : "''", lit);
        PQfreemem(lit);
        /* A literal, not a parameter: replication connections take the simple protocol only. */
        r = PQexec(c, sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                strbuf_err(err, errlen, "cannot read pg_replication_slots: %s", PQresultErrorMessage(r));
                PQclear(r);
                return -EIO;
        }
        if (PQntuples(r) == 1) {
                s.exists = true;
                snprintf(s.plugin, sizeof(s.plugin), "%s", PQgetvalue(r, 0, 0));
                snprintf(s.slot_type, sizeof(s.slot_type), "%s", PQgetvalue(r, 0, 1));
                snprintf(s.database, sizeof(s.database), "%s", PQgetvalue(r, 0, 2));
                s.temporary = strcmp(PQgetvalue(r, 0, 3), "t") == 0;
                s.active_pid = PQgetisnull(r, 0, 4) ? 0 : atoi(PQgetvalue(r, 0, 4));
                s.confirmed_flush_lsn = get_lsn(r, 5);
                s.restart_lsn = get_lsn(r, 6);
                s.current_wal_lsn = get_lsn(r, 7);
                s.in_recovery = strcmp(PQgetvalue(r, 0, 8), "t") == 0;
                s.has_wal_status = v >= 130000;
                snprintf(s.wal_status, sizeof(s.wal_status), "%s", PQgetvalue(r, 0, 9));
                s.safe_wal_size_null = PQgetisnull(r, 0, 10);
                s.safe_wal_size = strtoll(PQgetvalue(r, 0, 10), NULL, 10);
                s.failover = strcmp(PQgetvalue(r, 0, 11), "t") == 0;
                s.synced = strcmp(PQgetvalue(r, 0, 12), "t") == 0;
                snprintf(s.invalidation_reason, sizeof(s.invalidation_reason), "%s", PQgetvalue(r, 0, 13));
                if (s.active_pid)
                        snprintf(s.holder, sizeof(s.holder), "PID %d%s%.480s", s.active_pid,
                                 PQgetvalue(r, 0, 14)[0] ? ", " : "", PQgetvalue(r, 0, 14));
        }
        PQclear(r);
        *ret_slot = s;
        return 0;
}

enum preflight_slot_verdict preflight_slot_verdict(const struct preflight_slot *s, const char *dbname,
                                                   const char *plugin)
{
        if (!s->exists)
                return PREFLIGHT_SLOT_MISSING;
        if (strcmp(s->slot_type, "logical") != 0)
                return PREFLIGHT_SLOT_NOT_LOGICAL;
        if (!preflight_relay_plugin(s->plugin))
                return PREFLIGHT_SLOT_OTHER_PLUGIN;
        if (plugin && strcmp(s->plugin, plugin) != 0)
                return PREFLIGHT_SLOT_OTHER_DECODER;
        if (strcmp(s->database, dbname) != 0)
                return PREFLIGHT_SLOT_OTHER_DATABASE;
        if (strcmp(s->wal_status, "lost") == 0 || s->restart_lsn == LSN_INVALID || s->invalidation_reason[0])
                return PREFLIGHT_SLOT_LOST;
        if (s->synced && s->in_recovery)
                return PREFLIGHT_SLOT_SYNCED;
        if (s->active_pid)
                return PREFLIGHT_SLOT_ACTIVE;
        return PREFLIGHT_SLOT_OK;
}

/*
 * Why a slot was invalidated, as pg_replication_slots says (invalidation_reason,
 * 17+; before, wal_status lost is all there is), into @buf.
 */
static void lost_cause(const struct preflight_slot *s, char *buf, size_t size)
{
        const char *r = s->invalidation_reason;

        if (strcmp(r, "idle_timeout") == 0)
                snprintf(buf, size, "invalidation_reason idle_timeout: nothing streamed from it for longer "
                         "than idle_replication_slot_timeout");
        else if (strcmp(r, "rows_removed") == 0)
                snprintf(buf, size, "invalidation_reason rows_removed: catalog rows it needed were removed, "
                         "on a standby for want of hot_standby_feedback and a physical slot");
        else if (strcmp(r, "wal_level_insufficient") == 0)
                snprintf(buf, size, "invalidation_reason wal_level_insufficient: wal_level was lowered "
                         "below logical");
        else if (r[0])
                snprintf(buf, size, "invalidation_reason %s, wal_status %s; see max_slot_wal_keep_size", r,
                         s->wal_status[0] ? s->wal_status : "unknown");
        else
                snprintf(buf, size, "wal_status lost, see max_slot_wal_keep_size");
}

/* The setting to change so that it does not happen again, for an invalidation_reason. */
static const char *lost_fix(const struct preflight_slot *s)
{
        if (strcmp(s->invalidation_reason, "idle_timeout") == 0)
                return "; so that a relay that is down does not lose its slot again, set "
                       "idle_replication_slot_timeout to 0 or longer than the longest relay outage";
        if (strcmp(s->invalidation_reason, "rows_removed") == 0)
                return "; on a standby set hot_standby_feedback = on and primary_slot_name first";
        return "";
}

void preflight_slot_explain(enum preflight_slot_verdict v, const struct preflight_slot *s,
                            const char *slot, const char *dbname, const char *plugin,
                            enum preflight_when when, uint64_t since_lsn, char *buf, size_t size)
{
        bool again = when == PREFLIGHT_RECONNECTING;
        char a[LSN_STRLEN], cause[256];

        lsn_format(since_lsn, a);
        switch (v) {
        case PREFLIGHT_SLOT_OK:
                snprintf(buf, size, "replication slot \"%s\": plugin %s, database \"%s\", "
                         "confirmed_flush_lsn %s%s%s", slot, s->plugin, s->database,
                         lsn_format(s->confirmed_flush_lsn, a), s->wal_status[0] ? ", wal_status " : "",
                         s->wal_status);
                return;
        case PREFLIGHT_SLOT_MISSING:
                if (again)
                        snprintf(buf, size, "replication slot \"%s\" is gone (dropped, or this server is "
                                 "a promoted standby that never had it). outbox-relay does not recreate "
                                 "it: a new slot starts at the current WAL and would skip every row "
                                 "committed since LSN %s. Decide how to recover those rows, then start "
                                 "once with --create-slot", slot, a);
                else
                        snprintf(buf, size, "replication slot \"%s\" does not exist in this cluster. If "
                                 "this is the first start, run once with --create-slot. If the slot "
                                 "existed before, it was dropped, invalidated or not carried to a "
                                 "promoted standby: a new slot starts at the current WAL and skips every "
                                 "row committed since, so decide how to recover those rows before "
                                 "creating it", slot);
                return;
        case PREFLIGHT_SLOT_NOT_LOGICAL:
                snprintf(buf, size, "replication slot \"%s\" is a %s slot, not a logical one%s: choose "
                         "another name with --slot", slot, s->slot_type,
                         again ? " (it was replaced while the relay was away)" : "");
                return;
        case PREFLIGHT_SLOT_OTHER_PLUGIN:
                snprintf(buf, size, "replication slot \"%s\" uses output plugin \"%s\", not %s%s: "
                         "choose another name with --slot", slot, s->plugin,
                         plugin ? plugin : "wal2json or pgoutput",
                         again ? " (it was replaced while the relay was away)" : "");
                return;
        case PREFLIGHT_SLOT_OTHER_DECODER:
                if (again)
                        snprintf(buf, size, "replication slot \"%s\" uses output plugin \"%s\", not %s "
                                 "(it was replaced while the relay was away): choose another name with "
                                 "--slot", slot, s->plugin, plugin ? plugin : "?");
                else
                        snprintf(buf, size, "replication slot \"%s\" uses output plugin \"%s\", but the "
                                 "relay was started with --plugin=%s: a slot keeps the plugin it was "
                                 "created with. Start with --plugin=%s (or --plugin=auto, which takes the "
                                 "slot's), or give this plugin a slot of its own with --slot", slot,
                                 s->plugin, plugin ? plugin : "?", s->plugin);
                return;
        case PREFLIGHT_SLOT_OTHER_DATABASE:
                snprintf(buf, size, "replication slot \"%s\" belongs to database \"%s\", not \"%s\"%s: "
                         "connect to that database or choose another name with --slot", slot,
                         s->database, dbname, again ? " (it was replaced while the relay was away)" : "");
                return;
        case PREFLIGHT_SLOT_LOST:
                lost_cause(s, cause, sizeof(cause));
                if (again)
                        snprintf(buf, size, "replication slot \"%s\" was invalidated (%s): the WAL of rows "
                                 "not yet published after LSN %s is gone. Recover them by other means, then "
                                 "drop the slot and start once with --create-slot%s", slot, cause, a,
                                 lost_fix(s));
                else
                        snprintf(buf, size, "replication slot \"%s\" was invalidated (%s): the WAL of rows "
                                 "not yet published is gone; recover them by other means, then drop and "
                                 "recreate the slot%s", slot, cause, lost_fix(s));
                return;
        case PREFLIGHT_SLOT_SYNCED:
                snprintf(buf, size, "replication slot \"%s\" on this standby is a synchronized copy of "
                         "the primary's failover slot (PostgreSQL 17+): it cannot be streamed from until "
                         "this server is promoted; point the relay at the primary", slot);
                return;
        case PREFLIGHT_SLOT_ACTIVE:
                snprintf(buf, size, "replication slot \"%s\" is in use by %s", slot,
                         s->holder[0] ? s->holder : "another process");
                return;
        }
        snprintf(buf, size, "replication slot \"%s\": unknown verdict %d", slot, (int)v);
}

int preflight_check_slot(const struct preflight_slot *s, const char *slot, const char *dbname,
                         const char *plugin, char *err, size_t errlen)
{
        enum preflight_slot_verdict v = preflight_slot_verdict(s, dbname, plugin);

        if (v == PREFLIGHT_SLOT_OK || v == PREFLIGHT_SLOT_ACTIVE)
                return 0;
        preflight_slot_explain(v, s, slot, dbname, plugin, PREFLIGHT_AT_START, LSN_INVALID, err, errlen);
        return v == PREFLIGHT_SLOT_OTHER_DECODER ? -EDOM : -EINVAL;
}

/* Run @sql, discarding a successful result. Returns 0 or -EIO. */
static int exec_ok(PGconn *c, const char *sql)
{
        PGresult *r = PQexec(c, sql);
        int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;

        PQclear(r);
        return ok ? 0 : -EIO;
}

int preflight_create_slot(PGconn *c, const char *slot, const char *plugin, bool temporary, bool failover,
                          int timeout_ms, uint64_t *ret_lsn, char *err, size_t errlen,
                          char *ret_sqlstate)
{
        const char *params[3] = {slot, plugin, temporary ? "true" : "false"};
        char set[96], saved[64] = "0", state[6] = "", msg[1024];
        PGresult *r;
        int rc = 0;

        if (ret_sqlstate)
                ret_sqlstate[0] = '\0';
        if (failover && PQserverVersion(c) < 170000) {
                strbuf_err(err, errlen, "cannot create replication slot \"%s\" as a failover slot: "
                       "PostgreSQL %d has none (failover slots came with 17); leave out --failover",
                       slot, PQserverVersion(c) / 10000);
                return -EINVAL;
        }

        r = PQexec(c, "SHOW statement_timeout");
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
            strspn(PQgetvalue(r, 0, 0), "0123456789msinh ") == strlen(PQgetvalue(r, 0, 0)))
                snprintf(saved, sizeof(saved), "'%s'", PQgetvalue(r, 0, 0));
        PQclear(r);
        /* The server cancels the creation itself, whatever happens to this client. */
        snprintf(set, sizeof(set), "SET statement_timeout = %d", timeout_ms > 0 ? timeout_ms : 0);
        if (exec_ok(c, set) < 0) {
                pgconn_error(NULL, c, msg, sizeof(msg), ret_sqlstate);
                strbuf_err(err, errlen, "cannot create replication slot \"%s\": %s", slot, msg);
                return -EIO;
        }
        /* failover, the fifth argument (two_phase is the fourth), from PostgreSQL 17 */
        r = PQexecParams(c, failover ?
                         "SELECT lsn FROM pg_catalog.pg_create_logical_replication_slot($1, $2, $3, false, "
                         "true)" : "SELECT lsn FROM pg_catalog.pg_create_logical_replication_slot($1, $2, $3)",
                         3, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                pgconn_error(r, c, msg, sizeof(msg), state);
                if (strcmp(state, "57014") == 0)
                        strbuf_err(err, errlen, "cannot create replication slot \"%s\": no consistent point "
                               "within %d s (the server cancelled the creation; no slot was left "
                               "behind)", slot, (timeout_ms + 999) / 1000);
                else
                        strbuf_err(err, errlen, "cannot create replication slot \"%s\": %s", slot, msg);
                rc = !state[0] && PQstatus(c) != CONNECTION_OK ? -EIO :
                     strcmp(state, "42710") == 0 ? -EEXIST : strcmp(state, "57014") == 0 ? -ETIMEDOUT :
                     strcmp(state, "42501") == 0 ? -EACCES : strcmp(state, "58P01") == 0 ? -ENOENT :
                     -EINVAL;
        } else if (lsn_parse(PQgetvalue(r, 0, 0), strlen(PQgetvalue(r, 0, 0)), ret_lsn) < 0) {
                strbuf_err(err, errlen, "cannot create replication slot \"%s\": malformed LSN \"%s\"",
                       slot, PQgetvalue(r, 0, 0));
                rc = -EINVAL;
        }
        PQclear(r);
        if (ret_sqlstate)
                snprintf(ret_sqlstate, 6, "%s", state);
        snprintf(set, sizeof(set), "SET statement_timeout = %s", saved);
        if (rc != -EIO)
                exec_ok(c, set);
        return rc;
}

void preflight_slot_blockers(PGconn *c, char *buf, size_t size)
{
        PGresult *r = PQexec(c,
                "SELECT 'PID ' || pid || ' (user \"' || coalesce(usename, '?') || '\", application \"' "
                "|| coalesce(application_name, '') || '\", ' || coalesce(state, '?') || ' for ' || "
                "extract(epoch FROM now() - xact_start)::bigint || ' s)' "
                "FROM pg_catalog.pg_stat_activity "
                "WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() "
                "ORDER BY xact_start LIMIT 5");
        PGresult *p = PQexec(c,
                "SELECT 'prepared transaction ''' || gid || ''' (owner \"' || owner || '\", database \"' "
                "|| database || '\", prepared ' || extract(epoch FROM now() - prepared)::bigint || "
                "' s ago)' FROM pg_catalog.pg_prepared_xacts ORDER BY prepared LIMIT 5");
        bool prepared = PQresultStatus(p) == PGRES_TUPLES_OK && PQntuples(p) > 0;
        size_t o = 0;
        int n = 0;

        buf[0] = '\0';
        for (int k = 0; k < 2; k++) {
                PGresult *q = k ? p : r;

                if (PQresultStatus(q) != PGRES_TUPLES_OK)
                        continue;
                for (int i = 0; i < PQntuples(q) && o + 1 < size; i++, n++)
                        o += (size_t)snprintf(buf + o, size - o, "%s%s", n ? ", " : "",
                                              PQgetvalue(q, i, 0));
        }
        if (prepared && o + 1 < size)
                snprintf(buf + o, size - o, "; a prepared transaction holds it up until someone runs "
                         "COMMIT PREPARED or ROLLBACK PREPARED with its name");
        PQclear(r);
        PQclear(p);
}

/*
 * pgoutput's publication (publication.h): created first when the slot is
 * about to be (@create), then judged; what the relay starts with is kept in
 * @res for the side connection's rounds.
 */
static int check_publication(PGconn *c, const struct relay_config *conf, bool create,
                             struct preflight_result *res, char *err, size_t errlen)
{
        struct publication pub;
        char warn[512];
        int rc;

        rc = publication_read(c, config_publication(conf), conf->tables, conf->ntables, &pub, err, errlen);
        if (rc < 0)
                return rc == -ENOMEM ? -ENOMEM : -EINVAL;
        if (!pub.exists && create) {
                rc = publication_create(c, conf, err, errlen);
                if (rc < 0) {
                        publication_release(&pub);
                        return rc == -EIO ? -ECONNRESET : -EINVAL;
                }
                log_info("created publication \"%s\" of the outbox tables, inserts only (--create-slot)",
                         config_publication(conf));
                publication_release(&pub);
                rc = publication_read(c, config_publication(conf), conf->tables, conf->ntables, &pub, err,
                                      errlen);
                if (rc < 0)
                        return rc == -ENOMEM ? -ENOMEM : -EINVAL;
        }
        rc = publication_judge(&pub, conf, err, errlen, warn, sizeof(warn));
        if (rc == 0) {
                if (warn[0])
                        log_warning("%s", warn);
                res->publication_oid = pub.oid;
                snprintf(res->publication_xmin, sizeof(res->publication_xmin), "%s", pub.xmin);
                free(res->pubrel_oids);
                res->pubrel_oids = pub.rel_oids;
                pub.rel_oids = NULL;
        }
        publication_release(&pub);
        return rc < 0 ? -EINVAL : 0;
}

/* Create the slot with @plugin. Returns 0, or as preflight_create_slot() with the blockers in @err. */
static int create_slot(PGconn *c, const struct relay_config *conf, const char *plugin, uint64_t *ret_lsn,
                       char *err, size_t errlen)
{
        char blockers[1536];
        int rc;

        rc = preflight_create_slot(c, conf->slot, plugin, false, conf->failover,
                                   (int)conf->slot_create_timeout_ms, ret_lsn, err, errlen, NULL);
        if (rc == -ETIMEDOUT) {
                preflight_slot_blockers(c, blockers, sizeof(blockers));
                if (blockers[0])
                        snprintf(err + strlen(err), errlen - strlen(err), "; it waited for %s", blockers);
        }
        return rc;
}

/*
 * The slot and its plugin: the plugin chosen (--plugin, auto: the slot's,
 * else what the server allows), allowed by the server, pgoutput's
 * publication, the slot created with --create-slot when missing (with auto,
 * pgoutput when wal2json turns out not to be installed), then judged.
 */
static int check_slot(PGconn *c, const struct relay_config *conf, const struct preflight_settings *set,
                      struct preflight_result *res, char *err, size_t errlen)
{
        struct preflight_slot s;
        const char *plugin;
        char why[1200];
        uint64_t lsn;
        int rc;

        rc = preflight_read_slot(c, conf->slot, &s, err, errlen);
        if (rc < 0)
                return rc;
        plugin = preflight_choose_plugin(set, &s, conf->plugin, why, sizeof(why));
        if (s.exists) {
                rc = preflight_check_slot(&s, conf->slot, res->dbname, plugin, err, errlen);
                if (rc < 0)
                        return rc;
        } else if (!conf->create_slot) {
                preflight_slot_explain(PREFLIGHT_SLOT_MISSING, &s, conf->slot, res->dbname, plugin,
                                       PREFLIGHT_AT_START, LSN_INVALID, err, errlen);
                return -ENOENT;
        }
        rc = preflight_check_plugin_libraries(set, plugin, err, errlen);
        if (rc == 0 && strcmp(plugin, "pgoutput") == 0)
                rc = check_publication(c, conf, !s.exists, res, err, errlen);
        if (rc < 0)
                return rc;
        if (!s.exists) {
                rc = create_slot(c, conf, plugin, &lsn, err, errlen);
                if (rc == -ENOENT && strcmp(conf->plugin, "auto") == 0 && strcmp(plugin, "wal2json") == 0) {
                        log_info("--plugin=auto: wal2json is allowed but not installed (%s): using pgoutput",
                                 err);
                        plugin = "pgoutput";
                        snprintf(why, sizeof(why), "--plugin=auto: wal2json is not installed");
                        rc = preflight_check_plugin_libraries(set, plugin, err, errlen);
                        if (rc == 0)
                                rc = check_publication(c, conf, true, res, err, errlen);
                        if (rc < 0)
                                return rc;
                        rc = create_slot(c, conf, plugin, &lsn, err, errlen);
                }
                if (rc == -EIO)
                        return -ECONNRESET;
                if (rc < 0)
                        return -EINVAL;
                res->slot_created = true;
                log_info("created replication slot \"%s\" with plugin %s%s at consistent point %s", conf->slot,
                         plugin, conf->failover ? " as a failover slot" : "",
                         lsn_format(lsn, (char[LSN_STRLEN]){0}));
                warn_existing_rows(c, conf, lsn);
                rc = preflight_read_slot(c, conf->slot, &s, err, errlen);
                if (rc < 0)
                        return rc;
                rc = preflight_check_slot(&s, conf->slot, res->dbname, plugin, err, errlen);
                if (rc < 0)
                        return rc;
        }
        if (strcmp(conf->plugin, "auto") == 0)
                log_info("output plugin %s (%s)", plugin, why);
        snprintf(res->plugin, sizeof(res->plugin), "%s", plugin);
        res->confirmed_flush_lsn = s.confirmed_flush_lsn;
        res->restart_lsn = s.restart_lsn;
        return 0;
}

/*
 * The domains over json and jsonb (also domains over those), whose text
 * PostgreSQL checked on input, at most PREFLIGHT_MAX_JSON_DOMAINS.
 */
static int read_json_domains(PGconn *c, struct preflight_result *res, char *err, size_t errlen)
{
        PGresult *r = PQexec(c,
                "WITH RECURSIVE d(oid) AS ("
                " SELECT t.oid FROM pg_catalog.pg_type t WHERE t.typtype = 'd' AND "
                "  t.typbasetype IN ('pg_catalog.json'::regtype, 'pg_catalog.jsonb'::regtype)"
                " UNION SELECT t.oid FROM pg_catalog.pg_type t JOIN d ON t.typbasetype = d.oid"
                "  WHERE t.typtype = 'd') "
                "SELECT oid FROM d LIMIT " PREFLIGHT_MAX_JSON_DOMAINS_TEXT);

        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                strbuf_err(err, errlen, "cannot read the domains over json and jsonb: %s",
                       PQresultErrorMessage(r));
                PQclear(r);
                return -EINVAL;
        }
        res->json_domains = calloc((size_t)PQntuples(r) + 1, sizeof(*res->json_domains));
        if (!res->json_domains) {
                PQclear(r);
                strbuf_err(err, errlen, "out of memory");
                return -ENOMEM;
        }
        for (int i = 0; i < PQntuples(r); i++)
                res->json_domains[i] = (uint32_t)strtoul(PQgetvalue(r, i, 0), NULL, 10);
        res->njson_domains = (size_t)PQntuples(r);
        PQclear(r);
        return 0;
}

/*
 * The replication connection works before any slot is made: a pooler in -d
 * lets ordinary connections through, and --create-slot would otherwise make
 * a slot that nothing can stream from.
 */
static int check_replication(const struct relay_config *conf, struct preflight_result *res, char *err,
                             size_t errlen)
{
        struct pgstream_system sys;
        struct pgstream *s = NULL;
        char msg[1024];
        int r = pgstream_connect(conf->conninfo, &s, &sys, msg, sizeof(msg));

        if (r == 0)
                snprintf(res->system_id, sizeof(res->system_id), "%s", sys.system_id);
        pgstream_free(s);
        if (r == -EPROTONOSUPPORT) {
                strbuf_err(err, errlen, "the replication connection (replication=database) did not reach "
                       "PostgreSQL's replication protocol: %s. A connection pooler (PgBouncer, pgpool) "
                       "cannot carry logical replication: connect the relay to PostgreSQL directly, not "
                       "through a pooler", msg);
                return -EPROTONOSUPPORT;
        }
        if (r == -ECONNREFUSED) {
                strbuf_err(err, errlen, "cannot open the replication connection: %s", msg);
                return -ECONNREFUSED;
        }
        if (r < 0) {
                strbuf_err(err, errlen, "the replication connection failed: %s", msg);
                return -EINVAL;
        }
        return 0;
}

int preflight_run(const struct relay_config *conf, const char *const *columns, size_t ncolumns,
                  struct preflight_result *ret_res, char *err, size_t errlen)
{
        struct preflight_result res = {0};
        struct preflight_settings set;
        struct preflight_table tab;
        PGconn *c;
        int r;

        r = preflight_connect(conf->conninfo, 0, &c, err, errlen);
        if (r < 0)
                return r;
        r = check_settings(c, &res, &set, err, errlen);
        res.table_oids = calloc(conf->ntables ? conf->ntables : 1, sizeof(*res.table_oids));
        if (!res.table_oids) {
                strbuf_err(err, errlen, "out of memory");
                r = -ENOMEM;
        }
        for (size_t i = 0; r == 0 && i < conf->ntables; i++) {
                const struct table_name *t = &conf->tables[i];

                r = preflight_check_table(c, conf, t, columns, ncolumns, &tab, err, errlen);
                res.table_oids[i] = tab.oid;
                if (r == 0)
                        r = preflight_check_header_columns(c, conf, t, err, errlen);
                if (r == 0 && !tab.has_type_column)
                        log_warning("table \"%s\".\"%s\" has no column \"%s\": records will carry no "
                                    "ce_type header (set --type-column)", t->schema, t->table,
                                    conf->type_column);
        }
        if (r == 0)
                r = read_json_domains(c, &res, err, errlen);
        if (r == 0)
                r = check_replication(conf, &res, err, errlen);
        if (r == 0)
                r = check_slot(c, conf, &set, &res, err, errlen);
        /* Only to recognise the kit's messages of another prefix (relay_row.c): not fatal. */
        if (r == 0 && preflight_kit_prefix(c, res.kit_prefix, sizeof(res.kit_prefix), err, errlen) < 0)
                log_warning("cannot read the prefix outbox_emit() writes (%s); only prefixes "
                            "containing \"outbox\" are told from other applications' messages", err);
        /*
         * A query that failed because the server went away (restarting, the
         * connection cut) is worth retrying like a failed connect, whatever
         * the query was.
         */
        if (r < 0 && PQstatus(c) != CONNECTION_OK)
                r = -ECONNRESET;
        PQfinish(c);
        if (r == 0)
                *ret_res = res;
        else
                preflight_result_release(&res);
        return r;
}

int preflight_kit_prefix(PGconn *c, char *ret_prefix, size_t size, char *err, size_t errlen)
{
        PGresult *res = PQexec(c, "SELECT CASE WHEN pg_catalog.to_regprocedure('outbox_message_prefix()') "
                               "IS NOT NULL THEN 1 END");
        int r = 0;

        if (size)
                ret_prefix[0] = '\0';
        if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
                strbuf_err(err, errlen, "cannot tell whether outbox_message_prefix() exists: %s",
                       PQerrorMessage(c));
                r = -EINVAL;
        } else if (!PQgetisnull(res, 0, 0)) {
                PQclear(res);
                res = PQexec(c, "SELECT outbox_message_prefix()");
                if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
                    PQgetisnull(res, 0, 0)) {
                        strbuf_err(err, errlen, "cannot read outbox_message_prefix(): %s", PQerrorMessage(c));
                        r = -EINVAL;
                } else {
                        snprintf(ret_prefix, size, "%s", PQgetvalue(res, 0, 0));
                        r = 1;
                }
        }
        PQclear(res);
        return r;
}

void preflight_result_release(struct preflight_result *res)
{
        free(res->pubrel_oids);
        res->pubrel_oids = NULL;
        free(res->table_oids);
        free(res->json_domains);
        res->table_oids = NULL;
        res->json_domains = NULL;
        res->njson_domains = 0;
}

/*
 * A catalog row's xmax as a transaction ID, if it can be one: before the
 * next one to be assigned (age() > 0), else NULL (a MultiXactId of its own
 * counter, ahead of it).
 */
#define WATCH_XMAX_XID(x) "CASE WHEN pg_catalog.age(" x ") > 0 THEN " x " END"
/*
 * The updaters among the members of a catalog row's xmax as a MultiXactId
 * (lockers change nothing), if it can be a live one: not past the next, and
 * not before this database's datminmxid, which every MultiXactId in its
 * tables follows (vacuum's guarantee) and which the server's oldest one, the
 * least over its valid databases, never passes. An older number is no live
 * MultiXactId of these rows, and pg_get_multixact_members() would raise an
 * error for it where the server truncated it (the least over all
 * databases would count an invalid one, which 15.4 and later leave out:
 * a breaker helper stalled every round that way). As text, {xid,...}.
 */
#define WATCH_XMAX_UPDATERS(x) \
        "CASE WHEN pg_catalog.mxid_age(" x ") > 0 AND pg_catalog.mxid_age(" x ") <= (SELECT " \
        "pg_catalog.mxid_age(d.datminmxid) FROM pg_catalog.pg_database d WHERE d.datname = " \
        "pg_catalog.current_database()) THEN (SELECT " \
        "pg_catalog.array_agg(m.xid)::text FROM pg_catalog.pg_get_multixact_members(" x ") m " \
        "WHERE m.mode IN ('nokeyupd', 'upd')) END"

const char PREFLIGHT_WATCH_SQL[] =
        "SELECT t.i, c.oid, c.relkind, c.relpersistence, s.active_pid, s.confirmed_flush_lsn, "
        "r.sync_state, p.oid, p.xmin, p.pubinsert, pr.oid, pg_catalog.pg_current_snapshot()::text, "
        WATCH_XMAX_XID("c.xmax") ", " WATCH_XMAX_XID("n.xmax") ", " WATCH_XMAX_XID("p.xmax") ", "
        WATCH_XMAX_XID("pr.xmax") ", " WATCH_XMAX_UPDATERS("c.xmax") ", " WATCH_XMAX_UPDATERS("n.xmax") ", "
        WATCH_XMAX_UPDATERS("p.xmax") ", " WATCH_XMAX_UPDATERS("pr.xmax") ", r.application_name, "
        "pg_catalog.current_setting('synchronous_standby_names') "
        "FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(sch, rel, i) "
        "LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = t.sch "
        "LEFT JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.rel "
        "LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = $3 "
        "LEFT JOIN pg_catalog.pg_stat_replication r ON r.pid = s.active_pid "
        "LEFT JOIN pg_catalog.pg_publication p ON p.pubname = $4 "
        "LEFT JOIN pg_catalog.pg_publication_rel pr ON pr.prpubid = p.oid AND pr.prrelid = c.oid "
        "ORDER BY t.i";

char *preflight_watch_array(const struct table_name *tables, size_t n, bool schemas)
{
        size_t size = 3;
        char *buf, *p;

        for (size_t i = 0; i < n; i++)
                size += 2 * strlen(schemas ? tables[i].schema : tables[i].table) + 3;
        buf = malloc(size);
        if (!buf)
                return NULL;
        p = buf;
        *p++ = '{';
        for (size_t i = 0; i < n; i++) {
                if (i)
                        *p++ = ',';
                *p++ = '"';
                for (const char *c = schemas ? tables[i].schema : tables[i].table; *c; c++) {
                        if (*c == '"' || *c == '\\')
                                *p++ = '\\';
                        *p++ = *c;
                }
                *p++ = '"';
        }
        *p++ = '}';
        *p = '\0';
        return buf;
}

PGresult *preflight_watch(PGconn *c, const char *schemas, const char *tables, const char *slot,
                          const char *publication)
{
        const char *params[4] = {schemas, tables, slot, publication};

        return PQexecParams(c, PREFLIGHT_WATCH_SQL, 4, NULL, params, NULL, NULL, 0);
}
