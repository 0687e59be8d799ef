// SPDX-License-Identifier: Apache-2.0
/*
 * The SQL matrix's probe program: connects to one PostgreSQL server and calls
 * every function of src/preflight.h that sends SQL (and the replication
 * commands the relay sends over pgstream), with test_decoding standing in for
 * wal2json where a slot is needed, asserting what each returns. Run by
 * tests/integration/test_sql_matrix.py against each supported major.
 *
 *   sql_matrix -d CONNINFO --major N [--wal2json]
 *   sql_matrix -d CONNINFO --major N --synced-slot NAME
 *
 * CONNINFO names a database holding sql/outbox.sql's table with at least one
 * row, on a server with wal_level logical, max_prepared_transactions > 0 and
 * a free max_replication_slots for four slots; the role must be a superuser
 * (the probe opens a prepared transaction). --major is the major version the
 * server must be; --wal2json says wal2json is installed there (and creating
 * a wal2json slot must work), otherwise its creation must fail as "not
 * installed". With --synced-slot, it only reads NAME, a failover slot's
 * synchronized copy on a standby of PostgreSQL 17+ (or on one since
 * promoted), and judges it. Prints one line per probe ("ok   NAME: what it
 * found", or "FAIL NAME: why") and a summary; exits 0 only if every probe
 * passed, 1 otherwise, 2 on a usage error.
 *
 * pgoutput: the publication functions of src/publication.h, a pgoutput slot
 * (a failover one on 17+), the relay's startup with --plugin=pgoutput and
 * --plugin=auto.
 *
 * A function added to preflight.h or publication.h that sends SQL gets a probe in probes[]
 * below (test_sql_matrix.py fails until it has one); each probe is named
 * after the function it calls. Probes run in table order and share @ctx:
 * later ones use the slots earlier ones created.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "config.h"
#include "lsn.h"
#include "pgstream.h"
#include "preflight.h"
#include "publication.h"

/* How long a probe waits for the server (streamed data), ms. */
#define PROBE_WAIT_MS 10000

struct ctx {
        const char *conninfo;
        int major;                  /* --major */
        bool wal2json;              /* --wal2json: installed on the server */
        PGconn *c;                  /* preflight_connect()'s, for the probes that share it */
        struct preflight_settings set;
        struct relay_config conf;       /* -S slot: the persistent test_decoding slot */
        struct relay_config conf_create; /* -S create_slot --create-slot: preflight_run() makes it */
        struct relay_config conf_headers; /* --column-header for a column there and one not */
        struct relay_config conf_pgo;   /* --plugin=pgoutput --create-slot: its publication, then its slot */
        struct relay_config conf_auto;  /* --plugin=auto --create-slot */
        char slot[64];              /* persistent test_decoding slot */
        char tmp_slot[64];          /* temporary test_decoding slot, gone with @c */
        char w2j_slot[64];          /* wal2json probe slot */
        char create_slot[64];       /* what preflight_run() creates with --create-slot */
        char missing[64];           /* never created */
        char pgo_slot[64];          /* conf_pgo's slot, and the name of its publication */
        char auto_slot[64];         /* conf_auto's slot */
        char fo_slot[64];           /* a pgoutput failover slot (17+) */
        const char *synced_slot;    /* --synced-slot: a failover slot's copy on a standby (17+) */
        struct preflight_slot persistent, temporary, absent; /* what preflight_read_slot() read */
        char detail[2048];          /* what a passing probe found */
        char why[4096];             /* why a probe failed */
};

/* Fail the current probe with a reason unless @cond holds. */
#define EXPECT(ctx, cond, ...)                                                    \
        do {                                                                      \
                if (!(cond)) {                                                    \
                        int n_ = snprintf((ctx)->why, sizeof((ctx)->why), "%s: ", #cond); \
                        snprintf((ctx)->why + n_, sizeof((ctx)->why) - (size_t)n_, __VA_ARGS__); \
                        return -1;                                                \
                }                                                                 \
        } while (0)

static void detail(struct ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void detail(struct ctx *x, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(x->detail, sizeof(x->detail), fmt, ap);
        va_end(ap);
}

/* Run @sql on @c; 0 if it succeeded, else -1 with the server's message in x->why. */
static int exec_sql(struct ctx *x, PGconn *c, const char *sql)
{
        PGresult *r = PQexec(c, sql);
        ExecStatusType st = PQresultStatus(r);

        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
                snprintf(x->why, sizeof(x->why), "%s: %s", sql, PQresultErrorMessage(r));
                PQclear(r);
                return -1;
        }
        PQclear(r);
        return 0;
}

static int drop_slot(struct ctx *x, const char *slot)
{
        char sql[160];

        snprintf(sql, sizeof(sql), "SELECT pg_drop_replication_slot(slot_name) FROM "
                 "pg_replication_slots WHERE slot_name = '%s'", slot);
        return exec_sql(x, x->c, sql);
}

/* ---- the probes, in the order they run ------------------------------------ */

static int p_connect(struct ctx *x)
{
        char err[1024];
        int r = preflight_connect(x->conninfo, PREFLIGHT_PROBE_TIMEOUT_MS, &x->c, err, sizeof(err));

        EXPECT(x, r == 0, "%d: %s", r, err);
        detail(x, "database \"%s\", server_version_num %d", PQdb(x->c), PQserverVersion(x->c));
        return 0;
}

/* The first minor of each major that has output_plugin_libraries (2026-08-13). */
static int restricting_minor(int major)
{
        switch (major) {
        case 14: return 24;
        case 15: return 19;
        case 16: return 15;
        case 17: return 11;
        case 18: return 6;
        default: return major < 14 ? 1000 : 0;
        }
}

static int p_read_settings(struct ctx *x)
{
        struct preflight_settings *s = &x->set;
        char err[2048];
        int r = preflight_read_settings(x->c, s, err, sizeof(err));
        bool restricted;

        EXPECT(x, r == 0, "%d: %s", r, err);
        EXPECT(x, s->server_version_num / 10000 == x->major, "server_version_num %d, not major %d",
               s->server_version_num, x->major);
        restricted = s->server_version_num % 10000 >= restricting_minor(x->major);
        EXPECT(x, s->has_output_plugin_libraries == restricted, "%s output_plugin_libraries on %s",
               s->has_output_plugin_libraries ? "with" : "without", s->server_version);
        EXPECT(x, !restricted || preflight_plugin_listed(s->output_plugin_libraries, "test_decoding"),
               "output_plugin_libraries '%s' lacks test_decoding", s->output_plugin_libraries);
        EXPECT(x, strcmp(s->wal_level, "logical") == 0, "wal_level %s", s->wal_level);
        EXPECT(x, strcmp(s->server_encoding, "UTF8") == 0, "server_encoding %s", s->server_encoding);
        EXPECT(x, strcmp(s->dbname, PQdb(x->c)) == 0, "dbname %s", s->dbname);
        EXPECT(x, s->user[0] && s->rolsuper && s->rolreplication,
               "user \"%s\" super %d replication %d", s->user, s->rolsuper, s->rolreplication);
        EXPECT(x, s->wal_sender_timeout_ms == 60000, "wal_sender_timeout %lld ms",
               (long long)s->wal_sender_timeout_ms);
        EXPECT(x, s->has_max_slot_wal_keep_size && s->max_slot_wal_keep_size_mb == -1,
               "max_slot_wal_keep_size %d %lld", s->has_max_slot_wal_keep_size,
               (long long)s->max_slot_wal_keep_size_mb);
        /* the gates that judge what was read: none refuses a supported major */
        EXPECT(x, preflight_check_version(s, err, sizeof(err)) == 0, "%s", err);
        EXPECT(x, preflight_check_wal_level(s, err, sizeof(err)) == 0, "%s", err);
        EXPECT(x, preflight_check_encoding(s, err, sizeof(err)) == 0, "%s", err);
        detail(x, "%s, output_plugin_libraries %s%s%s", s->server_version,
               s->has_output_plugin_libraries ? "'" : "(none)",
               s->has_output_plugin_libraries ? s->output_plugin_libraries : "",
               s->has_output_plugin_libraries ? "'" : "");
        return 0;
}

static int p_check_table(struct ctx *x)
{
        static const char *const cols[] = {"kind", "entity_id"};
        struct preflight_table t;
        char err[1024];
        int r = preflight_check_table(x->c, &x->conf, &x->conf.tables[0], cols, 2, &t, err,
                                      sizeof(err));

        EXPECT(x, r == 0, "%d: %s", r, err);
        EXPECT(x, t.exists && t.relkind == 'r' && t.replica_identity == 'd' && t.can_select &&
                  t.has_type_column, "exists %d relkind %c identity %c select %d type %d", t.exists,
               t.relkind, t.replica_identity, t.can_select, t.has_type_column);
        /* a column the table lacks is named, which needs the column query to have run */
        r = preflight_check_table(x->c, &x->conf, &x->conf.tables[0],
                                  (const char *const[]){"no_such_column"}, 1, &t, err, sizeof(err));
        EXPECT(x, r == -EINVAL && strstr(err, "has no column \"no_such_column\""), "%d: %s", r, err);
        detail(x, "\"%s\".\"%s\": relkind r, replica identity d, SELECT allowed",
               x->conf.tables[0].schema, x->conf.tables[0].table);
        return 0;
}

static int p_check_header_columns(struct ctx *x)
{
        struct table_name missing_table = {"public", "no_such_table"};
        char err[1024];
        int r = preflight_check_header_columns(x->c, &x->conf, &x->conf.tables[0], err, sizeof(err));

        EXPECT(x, r == 0, "without --column-header: %d: %s", r, err);
        r = preflight_check_header_columns(x->c, &x->conf_headers, &x->conf.tables[0], err,
                                           sizeof(err));
        EXPECT(x, r == -EINVAL && strstr(err, "has no column \"no_such_column\" (header ") &&
                  !strstr(err, "entity_id"), "%d: %s", r, err);
        r = preflight_check_header_columns(x->c, &x->conf_headers, &missing_table, err, sizeof(err));
        EXPECT(x, r == -ENOENT, "missing table: %d: %s", r, err);
        detail(x, "\"entity_id\" found, \"no_such_column\" named, a missing table -ENOENT");
        return 0;
}

static int p_existing_rows(struct ctx *x)
{
        int64_t n = -1;
        char err[1024];
        int r = preflight_existing_rows(x->c, &x->conf.tables[0], &n, err, sizeof(err));

        EXPECT(x, r == 0, "%d: %s", r, err);
        EXPECT(x, n >= 1 && n <= 1000001, "%lld rows", (long long)n);
        detail(x, "%lld rows", (long long)n);
        return 0;
}

static int p_kit_prefix(struct ctx *x)
{
        char prefix[CONFIG_MESSAGE_PREFIX_MAX + 1], err[1024];
        int r = preflight_kit_prefix(x->c, prefix, sizeof(prefix), err, sizeof(err));

        /* the database holds sql/outbox.sql, loaded with its default prefix */
        EXPECT(x, r == 1 && strcmp(prefix, "outbox") == 0, "%d \"%s\": %s", r, prefix, err);
        detail(x, "outbox_message_prefix() is \"%s\"", prefix);
        return 0;
}

static int create(struct ctx *x, const char *slot, const char *plugin, bool temporary, int *ret_rc,
                  char *state, char *err, size_t errlen)
{
        uint64_t lsn = LSN_INVALID;

        *ret_rc = preflight_create_slot(x->c, slot, plugin, temporary, false, PREFLIGHT_PROBE_TIMEOUT_MS,
                                        &lsn, err, errlen, state);
        if (*ret_rc == 0)
                EXPECT(x, lsn != LSN_INVALID, "no consistent point");
        return 0;
}

/* statement_timeout on @c is back at what it was (preflight_create_slot() sets and restores it). */
static int timeout_restored(struct ctx *x)
{
        PGresult *r = PQexec(x->c, "SHOW statement_timeout");
        bool ok = PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "10s") == 0;

        if (!ok)
                snprintf(x->why, sizeof(x->why), "statement_timeout is \"%s\" after the creation, "
                         "not 10s", PQresultStatus(r) == PGRES_TUPLES_OK ? PQgetvalue(r, 0, 0)
                                                                         : PQresultErrorMessage(r));
        PQclear(r);
        return ok ? 0 : -1;
}

/* Another logical slot is named; --after-slot's is not. */
static int p_other_consumers(struct ctx *x)
{
        struct relay_config after = x->conf;
        char other[64], buf[1536], err[1024], state[6] = "";
        int rc;

        snprintf(other, sizeof(other), "%.50s_other", x->conf.slot);
        create(x, other, "test_decoding", false, &rc, state, err, sizeof(err));
        EXPECT(x, rc == 0, "creating \"%s\": %d: %s", other, rc, err);
        preflight_other_consumers(x->c, &x->conf, 0, 0x1000, buf, sizeof(buf));
        after.after_slot = other;
        preflight_other_consumers(x->c, &after, 0, 0x1000, err, sizeof(err));
        if (drop_slot(x, other) < 0)
                return -1;
        EXPECT(x, strstr(buf, "has other logical slots (") && strstr(buf, other) &&
                  strstr(buf, "before 0/1000"), "%s", buf);
        EXPECT(x, !strstr(err, other), "--after-slot's slot named: %s", err);
        detail(x, "\"%s\" named, not when it is --after-slot's", other);
        return 0;
}

static int p_create_temporary(struct ctx *x)
{
        char err[1024], state[6];
        int rc;

        if (create(x, x->tmp_slot, "test_decoding", true, &rc, state, err, sizeof(err)) < 0)
                return -1;
        EXPECT(x, rc == 0, "%d (SQLSTATE %s): %s", rc, state, err);
        if (timeout_restored(x) < 0)
                return -1;
        detail(x, "temporary slot \"%s\"", x->tmp_slot);
        return 0;
}

static int p_create_persistent(struct ctx *x)
{
        char err[1024], state[6];
        int rc;

        if (create(x, x->slot, "test_decoding", false, &rc, state, err, sizeof(err)) < 0)
                return -1;
        EXPECT(x, rc == 0, "%d (SQLSTATE %s): %s", rc, state, err);
        detail(x, "slot \"%s\"", x->slot);
        return 0;
}

static int p_create_existing(struct ctx *x)
{
        char err[1024], state[6];
        int rc;

        if (create(x, x->slot, "test_decoding", false, &rc, state, err, sizeof(err)) < 0)
                return -1;
        EXPECT(x, rc == -EEXIST && strcmp(state, "42710") == 0, "%d (SQLSTATE %s): %s", rc, state,
               err);
        if (timeout_restored(x) < 0)
                return -1;
        detail(x, "-EEXIST, SQLSTATE 42710");
        return 0;
}

static int p_create_wal2json(struct ctx *x)
{
        char err[1024], state[6];
        int rc;

        if (create(x, x->w2j_slot, "wal2json", false, &rc, state, err, sizeof(err)) < 0)
                return -1;
        if (x->wal2json) {
                EXPECT(x, rc == 0, "%d (SQLSTATE %s): %s", rc, state, err);
                if (drop_slot(x, x->w2j_slot) < 0)
                        return -1;
                detail(x, "created and dropped");
        } else {
                /* what `check` words as "wal2json is not installed" */
                EXPECT(x, rc == -ENOENT && strcmp(state, "58P01") == 0, "%d (SQLSTATE %s): %s", rc,
                       state, err);
                detail(x, "-ENOENT, SQLSTATE 58P01 (not installed here, as expected)");
        }
        return 0;
}

static int p_read_slot(struct ctx *x)
{
        struct preflight_slot *s = &x->persistent;
        char err[1024];
        int r = preflight_read_slot(x->c, x->slot, s, err, sizeof(err));

        EXPECT(x, r == 0, "%d: %s", r, err);
        EXPECT(x, s->exists && strcmp(s->plugin, "test_decoding") == 0 &&
                  strcmp(s->slot_type, "logical") == 0 && strcmp(s->database, PQdb(x->c)) == 0 &&
                  !s->temporary && s->active_pid == 0 && !s->in_recovery,
               "exists %d plugin %s type %s database %s temporary %d active_pid %d in_recovery %d",
               s->exists, s->plugin, s->slot_type, s->database, s->temporary, s->active_pid,
               s->in_recovery);
        EXPECT(x, s->restart_lsn != LSN_INVALID && s->confirmed_flush_lsn != LSN_INVALID &&
                  s->current_wal_lsn >= s->confirmed_flush_lsn, "LSNs %llX %llX %llX",
               (unsigned long long)s->restart_lsn, (unsigned long long)s->confirmed_flush_lsn,
               (unsigned long long)s->current_wal_lsn);
        /* wal_status and safe_wal_size from 13 on; failover and synced from 17 (false here) */
        EXPECT(x, s->has_wal_status && strcmp(s->wal_status, "reserved") == 0 && s->safe_wal_size_null,
               "has_wal_status %d wal_status \"%s\" safe_wal_size_null %d", s->has_wal_status,
               s->wal_status, s->safe_wal_size_null);
        EXPECT(x, !s->failover && !s->synced, "failover %d synced %d", s->failover, s->synced);
        detail(x, "plugin test_decoding, wal_status %s, safe_wal_size NULL", s->wal_status);
        return 0;
}

static int p_read_slot_temporary(struct ctx *x)
{
        struct preflight_slot *s = &x->temporary;
        char err[1024];
        int r = preflight_read_slot(x->c, x->tmp_slot, s, err, sizeof(err));

        EXPECT(x, r == 0, "%d: %s", r, err);
        /* this session holds its temporary slot */
        EXPECT(x, s->exists && s->temporary && s->active_pid == PQbackendPID(x->c) && s->holder[0],
               "exists %d temporary %d active_pid %d (backend %d) holder \"%s\"", s->exists,
               s->temporary, s->active_pid, PQbackendPID(x->c), s->holder);
        detail(x, "temporary, held by %s", s->holder);
        return 0;
}

static int p_read_slot_missing(struct ctx *x)
{
        char err[1024];
        int r = preflight_read_slot(x->c, x->missing, &x->absent, err, sizeof(err));

        EXPECT(x, r == 0, "%d: %s", r, err);
        EXPECT(x, !x->absent.exists, "a slot \"%s\" exists", x->missing);
        detail(x, "\"%s\" does not exist", x->missing);
        return 0;
}

/* preflight_slot_verdict() and preflight_slot_explain() on the rows the server gave. */
static int p_slot_verdict(struct ctx *x)
{
        const char *db = x->set.dbname;
        char buf[1024], err[1024];

        EXPECT(x, preflight_slot_verdict(&x->persistent, db, "wal2json") == PREFLIGHT_SLOT_OTHER_PLUGIN, "%d",
               (int)preflight_slot_verdict(&x->persistent, db, "wal2json"));
        preflight_slot_explain(PREFLIGHT_SLOT_OTHER_PLUGIN, &x->persistent, x->slot, db, "wal2json",
                               PREFLIGHT_AT_START, LSN_INVALID, buf, sizeof(buf));
        EXPECT(x, strstr(buf, "uses output plugin \"test_decoding\", not wal2json"), "%s", buf);
        EXPECT(x, preflight_check_slot(&x->persistent, x->slot, db, "wal2json", err, sizeof(err)) == -EINVAL,
               "check_slot passed a test_decoding slot");
        EXPECT(x, preflight_slot_verdict(&x->temporary, db, "wal2json") == PREFLIGHT_SLOT_OTHER_PLUGIN, "%d",
               (int)preflight_slot_verdict(&x->temporary, db, "wal2json"));
        EXPECT(x, preflight_slot_verdict(&x->absent, db, "wal2json") == PREFLIGHT_SLOT_MISSING, "%d",
               (int)preflight_slot_verdict(&x->absent, db, "wal2json"));
        EXPECT(x, preflight_slot_verdict(&x->persistent, "other_db", "wal2json") == PREFLIGHT_SLOT_OTHER_PLUGIN,
               "plugin is judged before the database");
        /* the same row, had its plugin been wal2json: OK, summed up from the server's figures */
        {
                struct preflight_slot w = x->persistent;

                snprintf(w.plugin, sizeof(w.plugin), "wal2json");
                EXPECT(x, preflight_slot_verdict(&w, db, "wal2json") == PREFLIGHT_SLOT_OK, "%d",
                       (int)preflight_slot_verdict(&w, db, "wal2json"));
                EXPECT(x, preflight_slot_verdict(&w, "other_db", "wal2json") == PREFLIGHT_SLOT_OTHER_DATABASE,
                       "other database");
                preflight_slot_explain(PREFLIGHT_SLOT_OK, &w, x->slot, db, "wal2json", PREFLIGHT_AT_START,
                                       LSN_INVALID, buf, sizeof(buf));
                EXPECT(x, strstr(buf, ", wal_status reserved"), "%s", buf);
        }
        detail(x, "test_decoding slot: other plugin; missing: missing");
        return 0;
}

/* preflight_slot_blockers(): nothing, then an open transaction and a prepared one by name. */
static int p_slot_blockers(struct ctx *x)
{
        char buf[2048], pid[32], err[1024];
        PGconn *other = NULL;
        int rc = -1;

        preflight_slot_blockers(x->c, buf, sizeof(buf));
        EXPECT(x, buf[0] == '\0', "with nothing running: \"%s\"", buf);
        if (preflight_connect(x->conninfo, PREFLIGHT_PROBE_TIMEOUT_MS, &other, err, sizeof(err)) < 0) {
                snprintf(x->why, sizeof(x->why), "second connection: %s", err);
                return -1;
        }
        if (exec_sql(x, other, "BEGIN") < 0 || exec_sql(x, other, "SELECT txid_current()") < 0 ||
            exec_sql(x, other, "PREPARE TRANSACTION 'sqlmatrix_gid'") < 0 ||
            exec_sql(x, other, "BEGIN") < 0 || exec_sql(x, other, "SELECT txid_current()") < 0)
                goto out;
        preflight_slot_blockers(x->c, buf, sizeof(buf));
        snprintf(pid, sizeof(pid), "PID %d (user \"", PQbackendPID(other));
        if (!strstr(buf, pid) || !strstr(buf, "prepared transaction 'sqlmatrix_gid' (owner \"") ||
            !strstr(buf, "COMMIT PREPARED or ROLLBACK PREPARED")) {
                snprintf(x->why, sizeof(x->why), "does not name %s...) and 'sqlmatrix_gid': \"%s\"",
                         pid, buf);
                goto out;
        }
        detail(x, "%s", buf);
        rc = 0;
out:
        /* the prepared transaction would hold up every later slot creation */
        if (exec_sql(x, other, "ROLLBACK") < 0 ||
            exec_sql(x, x->c, "ROLLBACK PREPARED 'sqlmatrix_gid'") < 0)
                rc = -1;
        PQfinish(other);
        return rc;
}

/* The relay reads its slot over the replication connection while reconnecting (relay.c). */
static int p_read_slot_replication(struct ctx *x)
{
        struct pgstream *st = NULL;
        struct pgstream_system sys;
        struct preflight_slot s;
        char err[1024];
        int r = pgstream_connect(x->conninfo, &st, &sys, err, sizeof(err));

        EXPECT(x, r == 0, "pgstream_connect %d: %s", r, err);
        EXPECT(x, strcmp(sys.dbname, x->set.dbname) == 0 && sys.timeline >= 1 && sys.xlogpos,
               "IDENTIFY_SYSTEM: db %s timeline %u", sys.dbname, sys.timeline);
        r = preflight_read_slot(pgstream_conn(st), x->slot, &s, err, sizeof(err));
        pgstream_free(st);
        EXPECT(x, r == 0, "%d: %s", r, err);
        EXPECT(x, s.exists && strcmp(s.plugin, "test_decoding") == 0 && s.has_wal_status &&
                  strcmp(s.wal_status, "reserved") == 0,
               "exists %d plugin %s wal_status %s", s.exists, s.plugin, s.wal_status);
        detail(x, "IDENTIFY_SYSTEM timeline %u, slot read over replication=database", sys.timeline);
        return 0;
}

static int64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * START_REPLICATION on the test_decoding slot with quoted options, as the
 * relay starts wal2json: an insert arrives as XLogData, then CopyDone.
 */
static int p_start_replication(struct ctx *x)
{
        static const char *const opts[] = {"include-xids", "0", "skip-empty-xacts", "1"};
        struct pgstream_start start = {x->slot, opts, 2};
        struct pgstream *st = NULL;
        struct pgstream_system sys;
        char err[1024], state[6] = "";
        bool seen = false;
        int64_t deadline;
        int r = pgstream_connect(x->conninfo, &st, &sys, err, sizeof(err));

        EXPECT(x, r == 0, "pgstream_connect %d: %s", r, err);
        r = pgstream_start(st, &start, err, sizeof(err), state);
        if (r < 0)
                pgstream_free(st);
        EXPECT(x, r == 0, "%d (SQLSTATE %s): %s", r, state, err);
        if (exec_sql(x, x->c, "INSERT INTO outbox (work_id, kind, payload) VALUES "
                     "('sqlmatrix-stream', 'probe', '{}')") < 0) {
                pgstream_free(st);
                return -1;
        }
        deadline = now_ms() + PROBE_WAIT_MS;
        while (!seen && now_ms() < deadline) {
                struct pollfd pfd = {pgstream_socket(st), POLLIN, 0};
                const char *buf;
                size_t len;

                r = pgstream_read(st, &buf, &len, err, sizeof(err), state);
                if (r < 0)
                        break;
                if (r == 1) {
                        /* XLogData: 'w', start, end, time (25 bytes), then the plugin's text */
                        seen = len > 25 && buf[0] == 'w' &&
                               memmem(buf + 25, len - 25, "table public.outbox: INSERT:", 28);
                        continue;
                }
                if (poll(&pfd, 1, (int)(deadline - now_ms())) > 0 &&
                    pgstream_consume(st, err, sizeof(err)) < 0) {
                        r = -EIO;
                        break;
                }
        }
        if (!seen) {
                snprintf(x->why, sizeof(x->why), "no XLogData with the insert within %d ms (%d: %s)",
                         PROBE_WAIT_MS, r, r < 0 ? err : "");
                pgstream_free(st);
                return -1;
        }
        r = pgstream_finish(st, PROBE_WAIT_MS, err, sizeof(err));
        pgstream_free(st);
        EXPECT(x, r == 0, "pgstream_finish %d: %s", r, err);
        detail(x, "the insert arrived as XLogData; CopyDone answered");
        return 0;
}

/* The relay's startup on the test_decoding slot: every check passes until the slot's plugin. */
static int p_run(struct ctx *x)
{
        static const char *const cols[] = {"kind"};
        struct preflight_result res = {0};
        char err[2048];
        int r = preflight_run(&x->conf, cols, 1, &res, err, sizeof(err));

        preflight_result_release(&res);
        EXPECT(x, r == -EINVAL && strstr(err, "uses output plugin \"test_decoding\", not wal2json"),
               "%d: %s", r, err);
        detail(x, "-EINVAL at the slot's plugin, after settings and tables passed");
        return 0;
}

/* The relay's startup with --create-slot: creates a wal2json slot, or says it is not installed. */
static int p_run_create(struct ctx *x)
{
        static const char *const cols[] = {"kind"};
        struct preflight_result res = {0};
        char err[2048];
        int r = preflight_run(&x->conf_create, cols, 1, &res, err, sizeof(err));

        preflight_result_release(&res);
        if (x->wal2json) {
                EXPECT(x, r == 0 && res.slot_created && res.restart_lsn != LSN_INVALID &&
                          res.server_version_num / 10000 == x->major,
                       "%d created %d: %s", r, res.slot_created, err);
                detail(x, "created wal2json slot \"%s\"", x->create_slot);
        } else {
                EXPECT(x, r == -EINVAL && strstr(err, "cannot create replication slot") &&
                          strstr(err, "could not access file"), "%d: %s", r, err);
                detail(x, "-EINVAL: wal2json not installed, as expected");
        }
        return 0;
}

static int p_drop(struct ctx *x)
{
        struct preflight_slot s;
        char err[1024];

        if (drop_slot(x, x->slot) < 0 || drop_slot(x, x->create_slot) < 0)
                return -1;
        EXPECT(x, preflight_read_slot(x->c, x->slot, &s, err, sizeof(err)) == 0 && !s.exists,
               "slot still there: %s", err);
        detail(x, "dropped \"%s\"", x->slot);
        return 0;
}

/*
 * A failover slot's synchronized copy on a standby (PostgreSQL 17+): what the
 * relay reads there, and the verdict it would give a wal2json slot so read:
 * "synchronized copy" while the server is in recovery, usable once promoted.
 */
static int p_read_synced(struct ctx *x)
{
        struct preflight_slot s, w;
        enum preflight_slot_verdict v;
        char err[1024], buf[1024];
        PGresult *r;
        bool recovery;
        int rc = preflight_read_slot(x->c, x->synced_slot, &s, err, sizeof(err));

        EXPECT(x, rc == 0, "%d: %s", rc, err);
        r = PQexec(x->c, "SELECT pg_is_in_recovery()");
        recovery = PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
        PQclear(r);
        EXPECT(x, s.exists && s.failover && s.synced && s.in_recovery == recovery,
               "exists %d failover %d synced %d in_recovery %d (server says %d)", s.exists,
               s.failover, s.synced, s.in_recovery, recovery);
        EXPECT(x, s.restart_lsn != LSN_INVALID && s.current_wal_lsn >= s.restart_lsn,
               "restart_lsn %llX current %llX", (unsigned long long)s.restart_lsn,
               (unsigned long long)s.current_wal_lsn);
        w = s;
        snprintf(w.plugin, sizeof(w.plugin), "wal2json");
        v = preflight_slot_verdict(&w, x->set.dbname, "wal2json");
        preflight_slot_explain(v, &w, x->synced_slot, x->set.dbname, "wal2json", PREFLIGHT_AT_START,
                               LSN_INVALID,
                               buf, sizeof(buf));
        if (recovery)
                EXPECT(x, v == PREFLIGHT_SLOT_SYNCED && strstr(buf, "synchronized copy of the "
                          "primary's failover slot"), "verdict %d: %s", (int)v, buf);
        else
                EXPECT(x, v == PREFLIGHT_SLOT_OK || v == PREFLIGHT_SLOT_ACTIVE, "verdict %d: %s",
                       (int)v, buf);
        detail(x, "failover and synced, in_recovery %d, temporary %d; as a wal2json slot: %s",
               recovery, s.temporary, buf);
        return 0;
}

/*
 * The running relay's round on its side connection: the outbox table and a
 * missing one resolve (oid, relkind, relpersistence), and the slot's columns
 * come along on every row.
 */
static int p_watch(struct ctx *x)
{
        struct table_name t[2] = {{"public", "outbox"}, {"public", "no_such_outbox"}};
        char *schemas = preflight_watch_array(t, 2, true), *tables = preflight_watch_array(t, 2, false);
        PGresult *r;

        EXPECT(x, schemas && tables, "out of memory");
        r = preflight_watch(x->c, schemas, tables, x->slot, NULL);
        free(schemas);
        free(tables);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 2) {
                snprintf(x->why, sizeof(x->why), "%s", PQresultErrorMessage(r));
                PQclear(r);
                return -1;
        }
        EXPECT(x, PQnfields(r) == 22 && !PQgetisnull(r, 0, 12) && !PQgetisnull(r, 0, 13) &&
                  PQgetisnull(r, 0, 14) && PQgetisnull(r, 1, 12),
               "%d columns, or the catalog rows' xmax where a row is missing or not", PQnfields(r));
        EXPECT(x, !PQgetisnull(r, 0, 1) && strcmp(PQgetvalue(r, 0, 2), "r") == 0 &&
                  strcmp(PQgetvalue(r, 0, 3), "p") == 0 && PQgetisnull(r, 1, 1) &&
                  !PQgetisnull(r, 0, 5) && !PQgetisnull(r, 1, 5),
               "outbox oid %s relkind %s persistence %s; missing oid null %d; slot lsn %s",
               PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3), PQgetisnull(r, 1, 1),
               PQgetvalue(r, 0, 5));
        detail(x, "outbox is OID %s, a permanent table; slot confirmed at %s", PQgetvalue(r, 0, 1),
               PQgetvalue(r, 0, 5));
        PQclear(r);
        return 0;
}


/*
 * pgoutput's publication: read while missing (-ENOENT with the CREATE SQL),
 * created, read and judged the relay's; with a row filter (15+) or another
 * table it is not; the side connection's round sees its OID, xmin, pubinsert
 * and the table's pg_publication_rel row. Left in place for preflight_run
 * (--plugin=pgoutput), which must find it the relay's.
 */
static int p_publication(struct ctx *x)
{
        const struct relay_config *conf = &x->conf_pgo;
        struct publication pub;
        char err[2048];
        int rc = publication_read(x->c, x->pgo_slot, conf->tables, conf->ntables, &pub, err, sizeof(err));

        EXPECT(x, rc == 0 && !pub.exists, "%d exists %d: %s", rc, pub.exists, err);
        rc = publication_judge(&pub, conf, err, sizeof(err), NULL, 0);
        publication_release(&pub);
        EXPECT(x, rc == -ENOENT && strstr(err, "does not exist") && strstr(err, "CREATE PUBLICATION"),
               "%d: %s", rc, err);
        detail(x, "missing: -ENOENT with the CREATE PUBLICATION");
        return 0;
}

static int p_publication_create(struct ctx *x)
{
        const struct relay_config *conf = &x->conf_pgo;
        struct table_name t[1] = {{"public", "outbox"}};
        struct publication pub;
        char err[2048], sql[512], *schemas, *tables;
        PGresult *r;
        int rc = publication_create(x->c, conf, err, sizeof(err));

        EXPECT(x, rc == 0, "create %d: %s", rc, err);
        rc = publication_create(x->c, conf, err, sizeof(err));
        EXPECT(x, rc == -EEXIST, "create again %d: %s", rc, err);
        rc = publication_read(x->c, x->pgo_slot, conf->tables, conf->ntables, &pub, err, sizeof(err));
        EXPECT(x, rc == 0 && pub.exists && pub.insert && !pub.update && !pub.del && !pub.truncate &&
                  !pub.all_tables && !pub.in_schema && pub.rel_oids[0] && !pub.filtered[0] &&
                  pub.nextra == 0, "%d: %s", rc, err);
        rc = publication_judge(&pub, conf, err, sizeof(err), NULL, 0);
        publication_release(&pub);
        EXPECT(x, rc == 0, "judged not the relay's: %s", err);
        if (x->major >= 15) {
                snprintf(sql, sizeof(sql), "ALTER PUBLICATION %s SET TABLE public.outbox WHERE "
                         "(kind <> 'x')", x->pgo_slot);
                if (exec_sql(x, x->c, sql) < 0)
                        return -1;
                rc = publication_read(x->c, x->pgo_slot, conf->tables, conf->ntables, &pub, err,
                                      sizeof(err));
                EXPECT(x, rc == 0 && pub.filtered[0], "%d filtered %d: %s", rc, pub.filtered[0], err);
                rc = publication_judge(&pub, conf, err, sizeof(err), NULL, 0);
                publication_release(&pub);
                EXPECT(x, rc == -EINVAL && strstr(err, "row filter") && strstr(err, "SET TABLE"),
                       "%d: %s", rc, err);
                snprintf(sql, sizeof(sql), "ALTER PUBLICATION %s SET TABLE public.outbox", x->pgo_slot);
                if (exec_sql(x, x->c, sql) < 0)
                        return -1;
        }
        snprintf(sql, sizeof(sql), "ALTER PUBLICATION %s SET (publish_via_partition_root = true)", x->pgo_slot);
        if (exec_sql(x, x->c, sql) < 0)
                return -1;
        rc = publication_read(x->c, x->pgo_slot, conf->tables, conf->ntables, &pub, err, sizeof(err));
        EXPECT(x, rc == 0 && pub.via_root, "%d via_root %d: %s", rc, pub.via_root, err);
        rc = publication_judge(&pub, conf, err, sizeof(err), NULL, 0);
        publication_release(&pub);
        EXPECT(x, rc == -EINVAL && strstr(err, "publish_via_partition_root = false"), "%d: %s", rc, err);
        snprintf(sql, sizeof(sql), "ALTER PUBLICATION %s SET (publish_via_partition_root = false)", x->pgo_slot);
        if (exec_sql(x, x->c, sql) < 0)
                return -1;
        schemas = preflight_watch_array(t, 1, true);
        tables = preflight_watch_array(t, 1, false);
        EXPECT(x, schemas && tables, "out of memory");
        r = preflight_watch(x->c, schemas, tables, x->slot, x->pgo_slot);
        free(schemas);
        free(tables);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
                snprintf(x->why, sizeof(x->why), "preflight_watch: %s", PQresultErrorMessage(r));
                PQclear(r);
                return -1;
        }
        rc = !PQgetisnull(r, 0, 7) && !PQgetisnull(r, 0, 8) && strcmp(PQgetvalue(r, 0, 9), "t") == 0 &&
             !PQgetisnull(r, 0, 10);
        PQclear(r);
        EXPECT(x, rc, "the round's publication columns are NULL or pubinsert false");
        detail(x, "created (inserts only), the relay's; %s; seen by the round",
               x->major >= 15 ? "a row filter refused" : "no row filters before 15");
        return 0;
}

/* A pgoutput slot, and with failover: refused before 17, a failover slot from 17. */
static int p_create_pgoutput(struct ctx *x)
{
        struct preflight_slot s;
        char err[1024], state[6];
        uint64_t lsn;
        int rc = preflight_create_slot(x->c, x->fo_slot, "pgoutput", false, true, PREFLIGHT_PROBE_TIMEOUT_MS,
                                       &lsn, err, sizeof(err), state);

        if (x->major < 17) {
                EXPECT(x, rc == -EINVAL && strstr(err, "failover slots came with 17"), "%d: %s", rc, err);
                rc = preflight_create_slot(x->c, x->fo_slot, "pgoutput", false, false,
                                           PREFLIGHT_PROBE_TIMEOUT_MS, &lsn, err, sizeof(err), state);
        }
        EXPECT(x, rc == 0, "%d (SQLSTATE %s): %s", rc, state, err);
        rc = preflight_read_slot(x->c, x->fo_slot, &s, err, sizeof(err));
        EXPECT(x, rc == 0 && s.exists && strcmp(s.plugin, "pgoutput") == 0 &&
                  s.failover == (x->major >= 17), "%d plugin %s failover %d: %s", rc, s.plugin,
               s.failover, err);
        EXPECT(x, preflight_slot_verdict(&s, x->set.dbname, "pgoutput") == PREFLIGHT_SLOT_OK &&
                  preflight_slot_verdict(&s, x->set.dbname, "wal2json") == PREFLIGHT_SLOT_OTHER_DECODER &&
                  preflight_slot_verdict(&s, x->set.dbname, NULL) == PREFLIGHT_SLOT_OK, "verdicts");
        if (drop_slot(x, x->fo_slot) < 0)
                return -1;
        detail(x, "pgoutput slot%s", x->major >= 17 ? " with failover" : "; --failover refused before 17");
        return 0;
}

/* The relay's startup with --plugin=pgoutput --create-slot: the publication it finds, its slot. */
static int p_run_pgoutput(struct ctx *x)
{
        static const char *const cols[] = {"kind"};
        struct preflight_result res = {0};
        char err[2048];
        int r = preflight_run(&x->conf_pgo, cols, 1, &res, err, sizeof(err));

        EXPECT(x, r == 0 && res.slot_created && strcmp(res.plugin, "pgoutput") == 0 &&
                  res.publication_oid && res.pubrel_oids && res.pubrel_oids[0],
               "%d created %d plugin %s: %s", r, res.slot_created, res.plugin, err);
        preflight_result_release(&res);
        detail(x, "created pgoutput slot \"%s\" after its publication", x->pgo_slot);
        return 0;
}

/* --plugin=auto --create-slot: wal2json where installed, else pgoutput (its publication made first). */
static int p_run_auto(struct ctx *x)
{
        static const char *const cols[] = {"kind"};
        struct preflight_result res = {0};
        char err[2048];
        int r = preflight_run(&x->conf_auto, cols, 1, &res, err, sizeof(err));

        EXPECT(x, r == 0 && res.slot_created &&
                  strcmp(res.plugin, x->wal2json ? "wal2json" : "pgoutput") == 0,
               "%d created %d plugin %s: %s", r, res.slot_created, res.plugin, err);
        preflight_result_release(&res);
        detail(x, "chose %s", x->wal2json ? "wal2json (installed)" : "pgoutput (wal2json not installed)");
        return 0;
}

static int p_drop_pgoutput(struct ctx *x)
{
        char sql[256];

        if (drop_slot(x, x->pgo_slot) < 0 || drop_slot(x, x->auto_slot) < 0)
                return -1;
        snprintf(sql, sizeof(sql), "DROP PUBLICATION IF EXISTS %s, %s", x->pgo_slot, x->auto_slot);
        if (exec_sql(x, x->c, sql) < 0)
                return -1;
        detail(x, "dropped the pgoutput slots and publications");
        return 0;
}

struct probe {
        const char *name;     /* the function of preflight.h (or pgstream.h) it calls */
        int (*run)(struct ctx *x);
};

static const struct probe probes[] = {
        {"preflight_connect", p_connect},
        {"preflight_read_settings", p_read_settings},
        {"preflight_check_table", p_check_table},
        {"preflight_check_header_columns", p_check_header_columns},
        {"preflight_existing_rows", p_existing_rows},
        {"preflight_kit_prefix", p_kit_prefix},
        {"preflight_create_slot (test_decoding, temporary)", p_create_temporary},
        /* before any probe that makes the server raise an error: that drops the session's
         * temporary slots */
        {"preflight_read_slot (temporary)", p_read_slot_temporary},
        {"preflight_create_slot (test_decoding)", p_create_persistent},
        {"preflight_create_slot (exists)", p_create_existing},
        {"preflight_create_slot (wal2json)", p_create_wal2json},
        {"preflight_read_slot", p_read_slot},
        {"preflight_read_slot (missing)", p_read_slot_missing},
        {"preflight_other_consumers", p_other_consumers},
        {"preflight_slot_verdict and preflight_slot_explain", p_slot_verdict},
        {"preflight_slot_blockers", p_slot_blockers},
        {"preflight_watch", p_watch},
        {"preflight_read_slot (replication connection)", p_read_slot_replication},
        {"pgstream_start (START_REPLICATION)", p_start_replication},
        {"preflight_run", p_run},
        {"preflight_run (--create-slot)", p_run_create},
        {"publication_read (missing) and publication_judge", p_publication},
        {"publication_create, publication_read and preflight_watch (publication)", p_publication_create},
        {"preflight_create_slot (pgoutput, failover)", p_create_pgoutput},
        {"preflight_run (--plugin=pgoutput --create-slot)", p_run_pgoutput},
        {"preflight_run (--plugin=auto --create-slot)", p_run_auto},
        {"pg_drop_replication_slot (pgoutput)", p_drop_pgoutput},
        {"pg_drop_replication_slot", p_drop},
};

/* With --synced-slot: on a standby or a promoted one, nothing created or dropped. */
static const struct probe synced_probes[] = {
        {"preflight_connect", p_connect},
        {"preflight_read_settings", p_read_settings},
        {"preflight_read_slot (synced)", p_read_synced},
};

static int usage(void)
{
        fprintf(stderr, "usage: sql_matrix -d CONNINFO --major N [--wal2json | --synced-slot "
                "NAME]\n");
        return 2;
}

int main(int argc, char **argv)
{
        struct ctx x = {0};
        char err[1024];
        int passed = 0, failed = 0;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "-d") == 0 && i + 1 < argc)
                        x.conninfo = argv[++i];
                else if (strcmp(argv[i], "--major") == 0 && i + 1 < argc)
                        x.major = atoi(argv[++i]);
                else if (strcmp(argv[i], "--wal2json") == 0)
                        x.wal2json = true;
                else if (strcmp(argv[i], "--synced-slot") == 0 && i + 1 < argc)
                        x.synced_slot = argv[++i];
                else
                        return usage();
        }
        if (!x.conninfo || x.major <= 0)
                return usage();
        snprintf(x.slot, sizeof(x.slot), "sqlmatrix_%d", (int)getpid());
        snprintf(x.tmp_slot, sizeof(x.tmp_slot), "sqlmatrix_%d_tmp", (int)getpid());
        snprintf(x.w2j_slot, sizeof(x.w2j_slot), "sqlmatrix_%d_w2j", (int)getpid());
        snprintf(x.create_slot, sizeof(x.create_slot), "sqlmatrix_%d_run", (int)getpid());
        snprintf(x.missing, sizeof(x.missing), "sqlmatrix_%d_missing", (int)getpid());
        snprintf(x.pgo_slot, sizeof(x.pgo_slot), "sqlmatrix_%d_pgo", (int)getpid());
        snprintf(x.auto_slot, sizeof(x.auto_slot), "sqlmatrix_%d_auto", (int)getpid());
        snprintf(x.fo_slot, sizeof(x.fo_slot), "sqlmatrix_%d_fo", (int)getpid());
        {
                char *a[] = {"outbox-relay", "-d", (char *)x.conninfo, "-S", x.slot, "-t",
                             "public.outbox", NULL};
                char *b[] = {"outbox-relay", "-d", (char *)x.conninfo, "-S", x.create_slot, "-t",
                             "public.outbox", "--create-slot", "--slot-create-timeout", "10", NULL};
                char *h[] = {"outbox-relay", "-d", (char *)x.conninfo, "-S", x.slot, "-t",
                             "public.outbox", "--column-header", "entity_id=x-entity",
                             "--column-header", "no_such_column", NULL};

                char *g[] = {"outbox-relay", "-d", (char *)x.conninfo, "-S", x.pgo_slot, "-t",
                             "public.outbox", "--create-slot", "--plugin", "pgoutput", NULL};
                char *u[] = {"outbox-relay", "-d", (char *)x.conninfo, "-S", x.auto_slot, "-t",
                             "public.outbox", "--create-slot", "--plugin", "auto", NULL};

                if (config_parse(7, a, &x.conf, err, sizeof(err)) < 0 ||
                    config_parse(10, b, &x.conf_create, err, sizeof(err)) < 0 ||
                    config_parse(11, h, &x.conf_headers, err, sizeof(err)) < 0 ||
                    config_parse(10, g, &x.conf_pgo, err, sizeof(err)) < 0 ||
                    config_parse(10, u, &x.conf_auto, err, sizeof(err)) < 0) {
                        fprintf(stderr, "sql_matrix: %s\n", err);
                        return 2;
                }
        }
        const struct probe *table = x.synced_slot ? synced_probes : probes;
        size_t n = x.synced_slot ? sizeof(synced_probes) / sizeof(synced_probes[0])
                                 : sizeof(probes) / sizeof(probes[0]);

        for (size_t i = 0; i < n; i++) {
                x.detail[0] = x.why[0] = '\0';
                if (!x.c && i > 0) {
                        snprintf(x.why, sizeof(x.why), "no connection");
                } else if (table[i].run(&x) == 0) {
                        printf("ok   %s: %s\n", table[i].name, x.detail);
                        passed++;
                        continue;
                }
                for (char *p = x.why; *p; p++)
                        if (*p == '\n')
                                *p = ' ';
                printf("FAIL %s: %s\n", table[i].name, x.why);
                failed++;
        }
        printf("sql_matrix: %d probes ok, %d failed on %s\n", passed, failed,
               x.set.server_version[0] ? x.set.server_version : "an unknown server");
        PQfinish(x.c);
        config_free(&x.conf);
        config_free(&x.conf_create);
        config_free(&x.conf_headers);
        config_free(&x.conf_pgo);
        config_free(&x.conf_auto);
        return failed || !passed ? 1 : 0;
}
