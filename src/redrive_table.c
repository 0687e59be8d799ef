// SPDX-License-Identifier: Apache-2.0
/*
 * Redrive from the outbox table(s): select rows with SQL in one REPEATABLE
 * READ snapshot (a count first, for --max-records and the deduplication
 * horizon, then a cursor), rewrite each row into the form wal2json gives its
 * INSERT and make the relay's record of it with record_extract(). See
 * redrive.h. Knows libpq and the catalogs; Kafka only through redrive.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>

#include "cloudevents.h"
#include "log.h"
#include "pgstream.h"
#include "preflight.h"
#include "record.h"
#include "redrive_private.h"

/* pg_type OIDs (PostgreSQL src/include/catalog/pg_type.dat). */
#define OID_JSON 114
#define OID_JSONB 3802
#define OID_DATE 1082
#define OID_TIMESTAMP 1114
#define OID_TIMESTAMPTZ 1184

#define CURSOR_NAME "outbox_relay_redrive"
#define STR_(x) #x
#define STR(x) STR_(x)

/* The columns of one table as the catalog has them: wal2json reports atttypid. */
struct table_cols {
        char **names;
        uint32_t *oids;
        size_t n;
        bool untimed;   /* no --time-column: selected by work ID only, the rows' age unknown */
};

/* A table's time column where it has none: every row's age unknown (counted as old). */
#define UNTIMED "NULL::pg_catalog.timestamptz"

/* What the SQL of every table shares: the WHERE clause and its parameters. */
struct selection {
        char *where;             /* " WHERE ... " over unqualified column names */
        const char *params[6];
        int nparams;
        char *ids_literal;       /* text[] literal of the requested work IDs */
        char since[40], until[40];
        char horizon[32], limit[32];
        char *tc, *id;           /* quoted time and ID columns */
};

static void free_cols(struct table_cols *tc)
{
        for (size_t i = 0; i < tc->n; i++)
                free(tc->names[i]);
        free(tc->names);
        free(tc->oids);
        *tc = (struct table_cols){0};
}

static uint32_t col_oid(const struct table_cols *tc, const char *name)
{
        for (size_t i = 0; i < tc->n; i++)
                if (strcmp(tc->names[i], name) == 0)
                        return tc->oids[i];
        return 0;
}

static void set_sql_err(char *err, size_t errlen, const char *what, const PGresult *r, const PGconn *c)
{
        char msg[REDRIVE_ERRLEN];
        size_t n;

        snprintf(msg, sizeof(msg), "%s", r ? PQresultErrorMessage(r) : PQerrorMessage(c));
        n = strlen(msg);
        while (n > 0 && msg[n - 1] == '\n')
                msg[--n] = '\0';
        snprintf(err, errlen, "%s: %s", what, msg);
}

static bool exec_ok(PGconn *c, const char *sql, char *err, size_t errlen)
{
        PGresult *r = PQexec(c, sql);
        bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;

        if (!ok)
                set_sql_err(err, errlen, sql, r, c);
        PQclear(r);
        return ok;
}

/* {"a","b\"c"}: a text[] literal of @n strings, allocated. */
static char *array_literal(const char *const *v, size_t n)
{
        size_t size = 3;
        char *out, *o;

        for (size_t i = 0; i < n; i++)
                size += 2 * strlen(v[i]) + 3;
        out = o = malloc(size);
        if (!out)
                return NULL;
        *o++ = '{';
        for (size_t i = 0; i < n; i++) {
                if (i)
                        *o++ = ',';
                *o++ = '"';
                for (const char *p = v[i]; *p; p++) {
                        if (*p == '"' || *p == '\\')
                                *o++ = '\\';
                        *o++ = *p;
                }
                *o++ = '"';
        }
        *o++ = '}';
        *o = '\0';
        return out;
}

static char *quote_ident(PGconn *c, const char *name)
{
        char *q = PQescapeIdentifier(c, name, strlen(name)), *copy;

        if (!q)
                return NULL;
        copy = strdup(q);
        PQfreemem(q);
        return copy;
}

static void free_selection(struct selection *s)
{
        free(s->where);
        free(s->ids_literal);
        free(s->tc);
        free(s->id);
}

/* The WHERE clause over the ID, time and type columns, the same for every table. */
static int build_selection(PGconn *c, const struct redrive *rd, struct selection *s)
{
        const struct relay_config *conf = rd->conf;
        char *type = quote_ident(c, conf->type_column);
        size_t size = 64, o;

        s->tc = quote_ident(c, conf->time_column);
        s->id = quote_ident(c, conf->id_column);
        if (!s->tc || !s->id || !type) {
                free(type);
                return -ENOMEM;
        }
        size += 3 * (strlen(s->tc) + strlen(s->id) + strlen(type)) + 200;
        s->where = malloc(size);
        if (!s->where) {
                free(type);
                return -ENOMEM;
        }
        o = (size_t)snprintf(s->where, size, " WHERE true");
        if (rd->nids) {
                s->ids_literal = array_literal(rd->ids, rd->nids);
                if (!s->ids_literal) {
                        free(type);
                        return -ENOMEM;
                }
                s->params[s->nparams++] = s->ids_literal;
                o += (size_t)snprintf(s->where + o, size - o, " AND %s::text = ANY($%d::text[])",
                                      s->id, s->nparams);
        }
        if (rd->has_since) {
                s->params[s->nparams++] = ce_format_time(rd->since_us, s->since, sizeof(s->since));
                o += (size_t)snprintf(s->where + o, size - o, " AND %s >= $%d::timestamptz", s->tc,
                                      s->nparams);
        }
        if (rd->has_until) {
                s->params[s->nparams++] = ce_format_time(rd->until_us, s->until, sizeof(s->until));
                o += (size_t)snprintf(s->where + o, size - o, " AND %s < $%d::timestamptz", s->tc,
                                      s->nparams);
        }
        if (conf->kind) {
                s->params[s->nparams++] = conf->kind;
                snprintf(s->where + o, size - o, " AND %s::text = $%d", type, s->nparams);
        }
        free(type);
        snprintf(s->horizon, sizeof(s->horizon), "%" PRId64, conf->dedup_horizon_ms);
        snprintf(s->limit, sizeof(s->limit), "%" PRId64, conf->max_records + 1);
        return 0;
}

static int kind_column(const struct relay_config *conf, const struct table_cols *cols,
                       const struct table_name *t, char *err, size_t errlen)
{
        if (conf->kind && !col_oid(cols, conf->type_column)) {
                snprintf(err, errlen, "table \"%s\".\"%s\" has no column \"%s\" (--type-column), which "
                         "--kind selects on", t->schema, t->table, conf->type_column);
                return -ENOENT;
        }
        return 0;
}

/*
 * The table exists with what the relay reads (preflight's own checks), its
 * catalog columns, the time column is a time, the type column is there for
 * --kind. A table without the time column (Debezium's documented one has
 * none) is redriven by work ID only: its rows' age is unknown, so they need
 * --yes like rows older than the horizon.
 */
static int check_table(PGconn *c, struct redrive *rd, const struct record_spec *spec,
                       const struct table_name *t, struct table_cols *ret_cols, char *err,
                       size_t errlen)
{
        const struct relay_config *conf = rd->conf;
        const char *const *tcols;
        struct preflight_table tab;
        char oid[16];
        const char *params[1] = {oid};
        uint32_t toid;
        size_t ntcols;
        PGresult *r;

        record_spec_template_columns(spec, &tcols, &ntcols);
        if (preflight_check_table(c, conf, t, tcols, ntcols, &tab, err, errlen) < 0 ||
            preflight_check_header_columns(c, conf, t, err, errlen) < 0)
                return -ENOENT;
        if (!tab.can_select) {
                snprintf(err, errlen, "this role may not read table \"%s\".\"%s\": GRANT SELECT on it "
                         "(sql/role.sql)", t->schema, t->table);
                return -ENOENT;
        }
        snprintf(oid, sizeof(oid), "%u", (unsigned)tab.oid);
        r = PQexecParams(c, "SELECT attname, atttypid FROM pg_catalog.pg_attribute WHERE attrelid = "
                         "$1::oid AND attnum > 0 AND NOT attisdropped ORDER BY attnum", 1, NULL,
                         params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                set_sql_err(err, errlen, "cannot read the columns of the outbox table", r, c);
                PQclear(r);
                return -EIO;
        }
        ret_cols->n = (size_t)PQntuples(r);
        ret_cols->names = calloc(ret_cols->n + 1, sizeof(*ret_cols->names));
        ret_cols->oids = calloc(ret_cols->n + 1, sizeof(*ret_cols->oids));
        if (!ret_cols->names || !ret_cols->oids) {
                PQclear(r);
                return -ENOMEM;
        }
        for (size_t i = 0; i < ret_cols->n; i++) {
                ret_cols->names[i] = strdup(PQgetvalue(r, (int)i, 0));
                ret_cols->oids[i] = (uint32_t)strtoul(PQgetvalue(r, (int)i, 1), NULL, 10);
                if (!ret_cols->names[i]) {
                        PQclear(r);
                        return -ENOMEM;
                }
        }
        PQclear(r);
        toid = col_oid(ret_cols, conf->time_column);
        if (!toid && (rd->has_since || rd->has_until)) {
                char *qs = quote_ident(c, t->schema), *qt = quote_ident(c, t->table);

                snprintf(err, errlen, "table \"%s\".\"%s\" has no column \"%s\" (--time-column), "
                         "which --since and --until select on: name the column that holds when a row "
                         "was written with --time-column, or select the rows with --work-id (which "
                         "needs no time column), or add one for rows written from now on: ALTER TABLE "
                         "%s.%s ADD COLUMN created_at timestamptz, ALTER COLUMN created_at SET DEFAULT "
                         "clock_timestamp() (the rows already there keep NULL: their age stays "
                         "unknown)", t->schema, t->table, conf->time_column, qs ? qs : t->schema,
                         qt ? qt : t->table);
                free(qs);
                free(qt);
                return -ENOENT;
        }
        ret_cols->untimed = !toid;
        if (!toid)
                return kind_column(conf, ret_cols, t, err, errlen);
        if (toid != OID_TIMESTAMPTZ && toid != OID_TIMESTAMP && toid != OID_DATE) {
                snprintf(err, errlen, "column \"%s\" of table \"%s\".\"%s\" (--time-column) is not "
                         "a timestamptz, timestamp or date column (type OID %u)", conf->time_column,
                         t->schema, t->table, (unsigned)toid);
                return -ENOENT;
        }
        return kind_column(conf, ret_cols, t, err, errlen);
}

static char *table_sql_name(PGconn *c, const struct table_name *t)
{
        char *s = quote_ident(c, t->schema), *n = quote_ident(c, t->table), *out = NULL;

        if (s && n && asprintf(&out, "%s.%s", s, n) < 0)
                out = NULL;
        free(s);
        free(n);
        return out;
}

/* How many rows of @t the selection has (up to --max-records + 1), and how many are past the horizon. */
static int count_rows(PGconn *c, const struct selection *s, const char *qtable, bool untimed,
                      int64_t *ret_n, int64_t *ret_old, char *oldest, size_t oldest_size, char *err,
                      size_t errlen)
{
        const char *params[8];
        char *sql;
        PGresult *r;
        int n = s->nparams;

        memcpy(params, s->params, (size_t)n * sizeof(*params));
        params[n] = s->horizon;
        params[n + 1] = s->limit;
        if (asprintf(&sql, "SELECT count(*), count(*) FILTER (WHERE old), "
                     "min(tc) FILTER (WHERE old)::text FROM (SELECT %s AS tc, (%s IS NULL OR %s < "
                     "clock_timestamp() - $%d::bigint * interval '1 millisecond') AS old FROM %s%s "
                     "LIMIT $%d::bigint) s", untimed ? UNTIMED : s->tc, untimed ? UNTIMED : s->tc,
                     untimed ? UNTIMED : s->tc, n + 1, qtable, s->where, n + 2) < 0)
                return -ENOMEM;
        r = PQexecParams(c, sql, n + 2, NULL, params, NULL, NULL, 0);
        free(sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                set_sql_err(err, errlen, "cannot select the rows to redrive", r, c);
                PQclear(r);
                return -EIO;
        }
        *ret_n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        *ret_old = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
        if (*ret_old && !oldest[0])
                snprintf(oldest, oldest_size, "%s", PQgetisnull(r, 0, 2) ? "NULL" :
                         PQgetvalue(r, 0, 2));
        PQclear(r);
        return 0;
}

/* Domains over json or jsonb among the result's columns: PQftype gives the base type. */
static int set_json_domains(struct record_spec *spec, const PGresult *r, const struct table_cols *tc)
{
        uint32_t oids[64];
        size_t n = 0;

        for (int j = 1; j < PQnfields(r) && n < 64; j++) {
                uint32_t own = col_oid(tc, PQfname(r, j)), base = (uint32_t)PQftype(r, j);

                if ((base == OID_JSON || base == OID_JSONB) && own && own != base)
                        oids[n++] = own;
        }
        return record_spec_set_json_types(spec, oids, n);
}

/* One fetched row: its record, sent. Returns 0, or -EIO when Kafka failed (stop). */
static int redrive_row(struct redrive *rd, struct record_spec *spec, const PGresult *r, int i,
                       struct w2j_column *cols, const struct table_cols *tc,
                       const struct table_name *t, const char *sysid, const char *dbname)
{
        struct producer_header h[REDRIVE_MAX_HEADERS];
        struct w2j_record rec = {.action = W2J_INSERT, .action_code = 'I', .schema = t->schema,
                                 .table = t->table};
        struct outbox_row row = {0};
        struct producer_msg m;
        char err[REDRIVE_ERRLEN], source[1024], from[600], time_text[40], id[600];
        const char *ct = NULL;
        int64_t us;
        size_t nh;
        int ret;

        for (int j = 1; j < PQnfields(r); j++) {
                struct w2j_column *col = &cols[j - 1];

                col->name = PQfname(r, j);
                col->type = NULL;
                col->typeoid = col_oid(tc, col->name);
                if (!col->typeoid)
                        col->typeoid = (uint32_t)PQftype(r, j);
                w2j_value_from_text(col->typeoid, PQgetvalue(r, i, j),
                                       (size_t)PQgetlength(r, i, j), PQgetisnull(r, i, j), &col->value);
        }
        rec.columns = cols;
        rec.ncolumns = (size_t)PQnfields(r) - 1;
        snprintf(from, sizeof(from), "table \"%s\".\"%s\"", t->schema, t->table);
        ret = record_extract(spec, &rec, &row, err, sizeof(err));
        if (row.id && !row.id->is_null)
                redrive_mark_found(rd, row.id->ptr, row.id->len);
        if (ret < 0) {
                rd->res.refused++;
                log_error("the row with work ID %s of %s cannot be made a record: %s; the relay "
                          "refuses it too (outbox-relay(7), ROWS THAT CANNOT BE PUBLISHED): fix the row, "
                          "or write the corrected intention under a new work ID",
                          row.id && !row.id->is_null ?
                          redrive_quote(row.id->ptr, row.id->len, id, sizeof(id)) : "(none)",
                          from, err);
                return 0;
        }
        if (!PQgetisnull(r, i, 0) && redrive_parse_time(PQgetvalue(r, i, 0), &us) == 0)
                ct = ce_format_time(us, time_text, sizeof(time_text));
        ce_format_source(sysid, dbname, t->schema, t->table, source, sizeof(source));
        nh = redrive_row_headers(&row, source, ct, rd->rh, 4, h, REDRIVE_MAX_HEADERS);
        m = (struct producer_msg){
                .topic = row.topic,
                .key = row.key->ptr,
                .key_len = row.key->len,
                .value = row.payload->is_null ? NULL : row.payload->ptr,
                .value_len = row.payload->is_null ? 0 : row.payload->len,
                .timestamp_ms = 0,  /* produce time, as the relay's default */
                .headers = h,
                .nheaders = nh,
        };
        return redrive_send(rd, &m, row.id->ptr, row.id->len, from);
}

/* Send every selected row of table @t. Returns 0, or -EIO when Kafka or the database failed. */
static int redrive_rows(PGconn *c, struct redrive *rd, struct record_spec *spec,
                        const struct selection *s, const struct table_name *t, const char *qtable,
                        const struct table_cols *tc, bool track, const char *sysid,
                        const char *dbname)
{
        struct w2j_column *cols = NULL;
        char err[REDRIVE_ERRLEN], *sql;
        bool first = true;
        PGresult *r;
        int ret = 0;

        if (asprintf(&sql, "DECLARE " CURSOR_NAME " NO SCROLL CURSOR FOR SELECT %s, t.* FROM %s AS "
                     "t%s ORDER BY %s, %s", track ? "pg_catalog.pg_xact_commit_timestamp(t.xmin)::text"
                     : "NULL::text", qtable, s->where, tc->untimed ? UNTIMED : s->tc, s->id) < 0)
                return -EIO;
        r = PQexecParams(c, sql, s->nparams, NULL, s->params, NULL, NULL, 0);
        free(sql);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
                set_sql_err(err, sizeof(err), "cannot read the rows", r, c);
                log_error("redrive of table \"%s\".\"%s\" stopped: %s", t->schema, t->table, err);
                PQclear(r);
                return -EIO;
        }
        PQclear(r);
        for (;;) {
                r = PQexec(c, "FETCH " STR(REDRIVE_BATCH_ROWS) " FROM " CURSOR_NAME);
                if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                        set_sql_err(err, sizeof(err), "cannot read the rows", r, c);
                        log_error("redrive of table \"%s\".\"%s\" stopped: %s", t->schema, t->table,
                                  err);
                        ret = -EIO;
                        break;
                }
                if (PQntuples(r) == 0)
                        break;
                if (first) {
                        first = false;
                        cols = calloc((size_t)PQnfields(r), sizeof(*cols));
                        if (!cols || set_json_domains(spec, r, tc) < 0) {
                                log_error("out of memory");
                                ret = -EIO;
                                break;
                        }
                }
                for (int i = 0; i < PQntuples(r) && ret == 0; i++)
                        ret = redrive_row(rd, spec, r, i, cols, tc, t, sysid, dbname);
                PQclear(r);
                r = NULL;
                if (ret < 0)
                        break;
        }
        PQclear(r);
        free(cols);
        if (ret == 0 && !exec_ok(c, "CLOSE " CURSOR_NAME, err, sizeof(err))) {
                log_error("redrive of table \"%s\".\"%s\": %s", t->schema, t->table, err);
                ret = -EIO;
        }
        return ret;
}

static int make_spec(const struct relay_config *conf, struct record_spec **ret_spec, char *err,
                     size_t errlen)
{
        struct record_spec *spec;
        int r;

        r = record_spec_new(conf->id_column, conf->key_column, conf->payload_column,
                            conf->type_column, conf->topic_template, &spec, err, errlen);
        if (r < 0)
                return r;
        record_spec_allow_null_payload(spec, conf->null_tombstone);
        if (conf->headers_column && !conf->no_headers_column &&
            record_spec_set_headers_column(spec, conf->headers_column) < 0) {
                record_spec_free(spec);
                return -ENOMEM;
        }
        for (size_t i = 0; i < conf->ncolumn_headers; i++) {
                r = record_spec_add_column_header(spec, conf->column_headers[i].column,
                                                  conf->column_headers[i].header, err, errlen);
                if (r < 0) {
                        record_spec_free(spec);
                        return r;
                }
        }
        *ret_spec = spec;
        return 0;
}

/*
 * The system identifier of ce_source: pg_control_system() over @c (granted
 * to PUBLIC by default), else IDENTIFY_SYSTEM on a replication connection as
 * the relay reads it (the relay's login may use it). The same number.
 */
static int system_identifier(PGconn *c, const struct relay_config *conf, char sysid[32], char *err,
                             size_t errlen)
{
        struct pgstream_system sys;
        struct pgstream *s = NULL;
        char msg[REDRIVE_ERRLEN];
        PGresult *res;
        int r;

        res = PQexec(c, "SELECT system_identifier::text FROM pg_catalog.pg_control_system()");
        r = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
        if (r)
                snprintf(sysid, 32, "%s", PQgetvalue(res, 0, 0));
        PQclear(res);
        if (r)
                return 0;
        r = pgstream_connect(conf->conninfo, &s, &sys, msg, sizeof(msg));
        pgstream_free(s);
        if (r < 0) {
                snprintf(err, errlen, "cannot read the system identifier (for ce_source): this "
                         "role may not call pg_control_system(), nor open a replication connection "
                         "as the relay does: %s", msg);
                /* The ordinary connection works: what keeps this one out is a permission. */
                return r == -ENOMEM ? r : r == -EPROTONOSUPPORT ? r : -EACCES;
        }
        snprintf(sysid, 32, "%s", sys.system_id);
        return 0;
}

int redrive_table_run(struct redrive *rd, char *err, size_t errlen)
{
        const struct relay_config *conf = rd->conf;
        struct table_cols *cols = NULL;
        struct selection sel = {0};
        struct record_spec *spec = NULL;
        char sysid[32], dbname[256] = "", oldest[64] = "", hz[32], **qtables = NULL;
        int64_t total = 0, old = 0, unknown = 0;
        char untimed_table[600] = "";
        bool track = false;
        PGconn *c = NULL;
        PGresult *res;
        int r;

        r = make_spec(conf, &spec, err, errlen);
        if (r < 0)
                return r == -ENOMEM ? r : -EINVAL;
        r = preflight_connect(conf->conninfo, PREFLIGHT_PROBE_TIMEOUT_MS, &c, err, errlen);
        if (r < 0)
                goto out;
        r = system_identifier(c, conf, sysid, err, errlen);
        if (r < 0)
                goto out;
        res = PQexec(c, "SET statement_timeout = " STR(REDRIVE_STATEMENT_TIMEOUT_MS));
        PQclear(res);
        res = PQexec(c, "SELECT current_setting('track_commit_timestamp') = 'on', current_database()");
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
                set_sql_err(err, errlen, "cannot read server settings", res, c);
                PQclear(res);
                r = -EIO;
                goto out;
        }
        track = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        snprintf(dbname, sizeof(dbname), "%s", PQgetvalue(res, 0, 1));
        PQclear(res);
        /* One snapshot: the count and the cursor see the same rows. */
        if (!exec_ok(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", err, errlen)) {
                r = -EIO;
                goto out;
        }
        cols = calloc(conf->ntables, sizeof(*cols));
        qtables = calloc(conf->ntables, sizeof(*qtables));
        if (!cols || !qtables || build_selection(c, rd, &sel) < 0) {
                r = -ENOMEM;
                goto out;
        }
        for (size_t i = 0; i < conf->ntables; i++) {
                int64_t n, o;

                r = check_table(c, rd, spec, &conf->tables[i], &cols[i], err, errlen);
                if (r < 0)
                        goto out;
                qtables[i] = table_sql_name(c, &conf->tables[i]);
                if (!qtables[i]) {
                        r = -ENOMEM;
                        goto out;
                }
                r = count_rows(c, &sel, qtables[i], cols[i].untimed, &n, &o, oldest, sizeof(oldest),
                               err, errlen);
                if (r < 0)
                        goto out;
                total += n;
                if (cols[i].untimed) {
                        unknown += n;
                        if (n && !untimed_table[0])
                                snprintf(untimed_table, sizeof(untimed_table), "\"%s\".\"%s\"",
                                         conf->tables[i].schema, conf->tables[i].table);
                } else {
                        old += o;
                }
        }
        if (total > conf->max_records) {
                snprintf(err, errlen, "the selection has more than %" PRId64 " rows (--max-records): "
                         "narrow it (--until, --kind, fewer --work-id) or raise --max-records; "
                         "nothing was published", conf->max_records);
                r = -E2BIG;
                goto out;
        }
        redrive_horizon_text(conf->dedup_horizon_ms, hz, sizeof(hz));
        if (unknown && !conf->yes) {
                snprintf(err, errlen, "%" PRId64 " of the %" PRId64 " selected rows are in table %s, "
                         "which has no column \"%s\" (--time-column): when they were written is "
                         "unknown, so they may be older than the deduplication horizon (%s, "
                         "--dedup-horizon), and a receiver that has forgotten their work IDs applies "
                         "them again. Find out first whether their effects happened (outbox-relay(7), "
                         "REDRIVE), then repeat with --yes; nothing was published", unknown, total,
                         untimed_table, conf->time_column, hz);
                r = -EPERM;
                goto out;
        }
        if (old && !conf->yes) {
                snprintf(err, errlen, "%" PRId64 " of the %" PRId64 " selected rows were written more "
                         "than the deduplication horizon (%s, --dedup-horizon) ago, the oldest at %s: "
                         "a receiver that has forgotten their work IDs applies them again. Find out "
                         "first whether their effects happened (outbox-relay(7), REDRIVE), then repeat "
                         "with --yes; nothing was published", old, total, hz, oldest);
                r = -EPERM;
                goto out;
        }
        rd->res.selected = (uint64_t)total;
        if (unknown)
                log_warning("%" PRId64 " of the %" PRId64 " selected rows are in table %s, which has "
                            "no column \"%s\": their age is unknown; redriving them anyway (--yes)",
                            unknown, total, untimed_table, conf->time_column);
        if (old)
                log_warning("%" PRId64 " of the %" PRId64 " selected rows are older than the "
                            "deduplication horizon (%s), the oldest at %s: redriving them anyway "
                            "(--yes)", old, total, hz, oldest);
        if (total > 0 && !track)
                log_warning("the server does not track commit timestamps (track_commit_timestamp is "
                            "off): the redriven records carry no ce_time");
        if (total > 0) {
                r = redrive_kafka_start(rd, err, errlen);
                if (r < 0)
                        goto out;
        }
        for (size_t i = 0; i < conf->ntables && total > 0; i++)
                if (redrive_rows(c, rd, spec, &sel, &conf->tables[i], qtables[i], &cols[i], track,
                                 sysid, dbname) < 0)
                        break;
        r = 0;
        (void)exec_ok(c, "COMMIT", err, errlen);
out:
        for (size_t i = 0; i < conf->ntables; i++) {
                if (cols)
                        free_cols(&cols[i]);
                if (qtables)
                        free(qtables[i]);
        }
        free(cols);
        free(qtables);
        free_selection(&sel);
        record_spec_free(spec);
        if (c)
                PQfinish(c);
        return r;
}
