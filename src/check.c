// SPDX-License-Identifier: Apache-2.0
/*
 * `outbox-relay check`: the relay's preflight items one by one, with a
 * verdict and a fix each. See check.h. The SQL of each item lives in
 * preflight.c; this file decides PASS/WARN/FAIL/SKIP and words the fix.
 */
#include "check.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "lsn.h"
#include "pgstream.h"
#include "preflight.h"
#include "slotcmd.h"
#include "strbuf.h"
#include "producer.h"
#include "publication.h"
#include "record.h"

/* Distinct template values read from each outbox table, at most. */
#define CHECK_MAX_TEMPLATE_VALUES 100
/* Topic names listed in one item's text, at most. */
#define CHECK_MAX_LISTED 10

struct check {
        const struct relay_config *conf;
        struct check_report *rep;
        PGconn *c;
        struct preflight_settings set;
        bool have_settings;
        struct record_spec *spec;
        const char *const *tcols;
        size_t ntcols;
        bool tables_ok;        /* every table exists with its columns and may be read */
        bool slot_exists;      /* the configured slot exists (rows after its catalog_xmin are pending) */
        char bad_example[600]; /* why the first template value gives no valid topic */
        char **topics;         /* topics to look for in the cluster */
        size_t ntopics;
        char system_id[32];    /* IDENTIFY_SYSTEM's, when the replication connection worked */
        bool have_slot;        /* the slot exists and is the relay's kind */
        struct preflight_slot slot; /* the slot's row, read before the plugin items */
        bool slot_read;
        const char *plugin;    /* the plugin the relay would stream with: "wal2json" or "pgoutput" */
        char plugin_why[1200]; /* why that one (preflight_choose_plugin()) */
        uint64_t slot_lsn;     /* its confirmed_flush_lsn */
        int nomem;
};

static void add(struct check *ck, enum check_status st, const char *name, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static void add(struct check *ck, enum check_status st, const char *name, const char *fmt, ...)
{
        struct check_report *rep = ck->rep;
        struct check_item *it;
        va_list ap;

        if (rep->nitems == rep->cap) {
                size_t cap = rep->cap ? rep->cap * 2 : 32;
                struct check_item *n = realloc(rep->items, cap * sizeof(*n));

                if (!n) {
                        ck->nomem = 1;
                        return;
                }
                rep->items = n;
                rep->cap = cap;
        }
        it = &rep->items[rep->nitems++];
        it->status = st;
        snprintf(it->name, sizeof(it->name), "%s", name);
        va_start(ap, fmt);
        vsnprintf(it->text, sizeof(it->text), fmt, ap);
        va_end(ap);
        /* One line per item: the server's messages carry "\nHINT:  ..." and trailing newlines. */
        for (char *p = it->text; *p; p++)
                if (*p == '\n' || *p == '\t')
                        *p = ' ';
        rep->counts[st]++;
}

static void skip(struct check *ck, const char *name, const char *why)
{
        add(ck, CHECK_SKIP, name, "%s", why);
}

static void table_name(const struct table_name *t, char *buf, size_t size)
{
        snprintf(buf, size, "\"%s\".\"%s\"", t->schema, t->table);
}

static void check_settings(struct check *ck)
{
        char err[1024];

        if (preflight_read_settings(ck->c, &ck->set, err, sizeof(err)) < 0) {
                add(ck, CHECK_FAIL, "server settings", "%s", err);
                return;
        }
        ck->have_settings = true;
        if (preflight_check_version(&ck->set, err, sizeof(err)) < 0)
                add(ck, CHECK_FAIL, "server version", "%s", err);
        else
                add(ck, CHECK_PASS, "server version", "%s", ck->set.server_version);
        if (preflight_check_wal_level(&ck->set, err, sizeof(err)) < 0)
                add(ck, CHECK_FAIL, "wal_level", "%s", err);
        else
                add(ck, CHECK_PASS, "wal_level", "%s", ck->set.wal_level);
        if (preflight_check_encoding(&ck->set, err, sizeof(err)) < 0)
                add(ck, CHECK_FAIL, "server_encoding", "%s", err);
        else
                add(ck, CHECK_PASS, "server_encoding", "%s", ck->set.server_encoding);
        if (ck->set.rolsuper)
                add(ck, CHECK_PASS, "replication privilege", "role \"%s\" is a superuser",
                    ck->set.user);
        else if (ck->set.rolreplication)
                add(ck, CHECK_PASS, "replication privilege", "role \"%s\" has REPLICATION",
                    ck->set.user);
        else
                add(ck, CHECK_FAIL, "replication privilege", "role \"%s\" has neither REPLICATION "
                    "nor superuser, so it cannot open the replication connection; fix: ALTER ROLE "
                    "\"%s\" REPLICATION", ck->set.user, ck->set.user);
}

static const char *identity_name(char c)
{
        switch (c) {
        case 'd': return "DEFAULT (primary key)";
        case 'n': return "NOTHING";
        case 'f': return "FULL";
        case 'i': return "USING INDEX";
        default: return "unknown";
        }
}

static void check_tables(struct check *ck)
{
        const struct relay_config *conf = ck->conf;
        char err[1024], tn[600], name[sizeof(((struct check_item *)0)->name)];

        ck->tables_ok = true;
        for (size_t i = 0; i < conf->ntables; i++) {
                const struct table_name *t = &conf->tables[i];
                struct preflight_table tab;
                int r;

                table_name(t, tn, sizeof(tn));
                snprintf(name, sizeof(name), "table %.300s", tn);
                r = preflight_check_table(ck->c, conf, t, ck->tcols, ck->ntcols, &tab, err, sizeof(err));
                if (r < 0) {
                        ck->tables_ok = false;
                        add(ck, CHECK_FAIL, name, "%s", err);
                } else if (!tab.has_type_column) {
                        add(ck, CHECK_WARN, name, "has no column \"%s\": records will carry no "
                            "ce_type header; fix: set --type-column, or ignore if intended",
                            conf->type_column);
                } else {
                        add(ck, CHECK_PASS, name, "columns \"%s\" (ID), \"%s\" (key), \"%s\" "
                            "(payload), \"%s\" (type)%s present", conf->id_column, conf->key_column,
                            conf->payload_column, conf->type_column,
                            ck->ntcols ? " and the topic template's" : "");
                }
                snprintf(name, sizeof(name), "SELECT on %.300s", tn);
                if (!tab.exists) {
                        skip(ck, name, "the table is missing");
                } else if (tab.can_select) {
                        add(ck, CHECK_PASS, name, "role \"%s\" may read the table", ck->set.user);
                } else {
                        ck->tables_ok = false;
                        add(ck, CHECK_FAIL, name, "role \"%s\" may not SELECT from %s; fix: GRANT "
                            "SELECT ON %s TO \"%s\"", ck->set.user, tn, tn, ck->set.user);
                }
                snprintf(name, sizeof(name), "replica identity of %.290s", tn);
                if (!tab.exists)
                        skip(ck, name, "the table is missing");
                else if (tab.replica_identity == 'f')
                        add(ck, CHECK_WARN, name, "FULL: every UPDATE and DELETE of the outbox "
                            "(cleaning up published rows) writes the whole old row to WAL and "
                            "wal2json decodes it, although the relay ignores updates and deletes; "
                            "fix: ALTER TABLE %s REPLICA IDENTITY DEFAULT", tn);
                else
                        add(ck, CHECK_PASS, name, "%s; it only shapes UPDATE and DELETE in the "
                            "WAL, which the relay ignores (it publishes inserts)",
                            identity_name(tab.replica_identity));
        }
}

/* --column-header: each outbox table has every column published as a header. */
static void check_header_columns(struct check *ck)
{
        const struct relay_config *conf = ck->conf;
        char err[1024], tn[600], cols[1024], name[sizeof(((struct check_item *)0)->name)];
        size_t o = 0;

        if (conf->ncolumn_headers == 0)
                return;
        cols[0] = '\0';
        for (size_t i = 0; i < conf->ncolumn_headers; i++)
                strbuf_append(cols, sizeof(cols), &o, "%s\"%s\" (header \"%s\")", i ? ", " : "",
                       conf->column_headers[i].column, conf->column_headers[i].header);
        for (size_t i = 0; i < conf->ntables; i++) {
                const struct table_name *t = &conf->tables[i];
                int r;

                table_name(t, tn, sizeof(tn));
                snprintf(name, sizeof(name), "header columns of %.290s", tn);
                r = preflight_check_header_columns(ck->c, conf, t, err, sizeof(err));
                if (r == -ENOENT)
                        skip(ck, name, "the table is missing");
                else if (r < 0)
                        add(ck, CHECK_FAIL, name, "%s", err);
                else
                        add(ck, CHECK_PASS, name, "%s present", cols);
        }
}

/*
 * Whether wal2json is installed, when the server refuses it as not listed
 * (which it says before looking for the file): a superuser can LOAD the
 * library on the ordinary connection. Writes "; it is installed" or the like
 * into @buf, or "" when this role cannot tell.
 */
static void installed_hint(struct check *ck, char *buf, size_t size)
{
        PGresult *r;
        const char *state;

        buf[0] = '\0';
        if (!ck->set.rolsuper)
                return;
        r = PQexec(ck->c, "LOAD 'wal2json'");
        state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (PQresultStatus(r) == PGRES_COMMAND_OK)
                snprintf(buf, size, "; the library is installed (LOAD 'wal2json' works)");
        else if (state && strcmp(state, "58P01") == 0)
                snprintf(buf, size, "; it is not installed either: install it where PostgreSQL runs "
                         "(Debian and Ubuntu: apt-get install postgresql-%d-wal2json)",
                         ck->set.server_version_num / 10000);
        PQclear(r);
}

/* Which output plugins the server allows, and which one the relay would stream with. */
static void check_output_plugins(struct check *ck)
{
        const struct preflight_settings *set = &ck->set;
        char err[1024], allowed[1600];
        bool w2j = preflight_plugin_allowed(set, "wal2json"), pgo = preflight_plugin_allowed(set, "pgoutput");

        if (preflight_read_slot(ck->c, ck->conf->slot, &ck->slot, err, sizeof(err)) == 0)
                ck->slot_read = true;
        ck->plugin = preflight_choose_plugin(set, ck->slot_read ? &ck->slot : NULL, ck->conf->plugin,
                                             ck->plugin_why, sizeof(ck->plugin_why));
        if (set->has_output_plugin_libraries)
                snprintf(allowed, sizeof(allowed), "output_plugin_libraries is '%s': %s", 
                         set->output_plugin_libraries, w2j && pgo ? "wal2json and pgoutput allowed" :
                         pgo ? "pgoutput allowed, wal2json not" : w2j ? "wal2json allowed, pgoutput not" :
                         "neither wal2json nor pgoutput allowed");
        else
                snprintf(allowed, sizeof(allowed), "no output_plugin_libraries (a minor release before "
                         "PostgreSQL 14.24, 15.19, 16.15, 17.11, 18.6, or a role that may not read it): "
                         "every installed plugin is allowed");
        if (preflight_plugin_allowed(set, ck->plugin))
                add(ck, CHECK_PASS, "output plugins", "%s; the relay streams with %s (%s)", allowed,
                    ck->plugin, ck->plugin_why);
        else if (strcmp(ck->plugin, "wal2json") == 0 && pgo)
                add(ck, CHECK_FAIL, "output plugins", "%s; the relay would stream with wal2json (%s); fix: "
                    "start with --plugin=pgoutput (or --plugin=auto): PostgreSQL's own output plugin, "
                    "which this server allows and every server has (outbox-relay(7), OUTPUT PLUGINS), or let "
                    "the server allow wal2json (see the wal2json item)", allowed, ck->plugin_why);
        else
                add(ck, CHECK_FAIL, "output plugins", "%s; the relay would stream with %s (%s); fix: see "
                    "the %s item", allowed, ck->plugin, ck->plugin_why, ck->plugin);
}

/*
 * Whether the server loads the plugin the relay would stream with: a
 * temporary slot of it, created and dropped. For wal2json, not installed or
 * not allowed, the fix also names pgoutput.
 */
static void check_plugin_loads(struct check *ck)
{
        const char *plugin = ck->plugin;
        bool w2j = strcmp(plugin, "wal2json") == 0;
        char err[1024], hint[1600], fix[2400], state[6] = "", slot[64], lsn[LSN_STRLEN], sql[128];
        char alt[256] = "";
        uint64_t at;
        int r;

        if (strcmp(ck->set.wal_level, "logical") != 0 || !(ck->set.rolreplication || ck->set.rolsuper)) {
                skip(ck, plugin, "needs wal_level logical and a role with REPLICATION");
                return;
        }
        if (w2j && preflight_plugin_allowed(&ck->set, "pgoutput"))
                snprintf(alt, sizeof(alt), "; or stream with pgoutput, PostgreSQL's own output plugin, "
                         "which needs nothing installed: --plugin=pgoutput (or --plugin=auto)");
        snprintf(slot, sizeof(slot), "outbox_relay_check_%ld", (long)getpid());
        r = preflight_create_slot(ck->c, slot, plugin, true, false, PREFLIGHT_PROBE_TIMEOUT_MS, &at, err,
                                  sizeof(err), state);
        if (r == 0) {
                /* A temporary slot would go with the connection; drop it now all the same. */
                snprintf(sql, sizeof(sql), "SELECT pg_drop_replication_slot('%s')", slot);
                PQclear(PQexec(ck->c, sql));
                add(ck, CHECK_PASS, plugin, "loads: temporary slot \"%s\" created at %s and "
                    "dropped%s%s%s", slot, lsn_format(at, lsn),
                    ck->set.has_output_plugin_libraries ? "; output_plugin_libraries is '" : "",
                    ck->set.has_output_plugin_libraries ? ck->set.output_plugin_libraries : "",
                    ck->set.has_output_plugin_libraries ? "'" : "");
        } else if (r == -ETIMEDOUT) {
                preflight_slot_blockers(ck->c, hint, sizeof(hint));
                add(ck, CHECK_FAIL, plugin, "could not tell: creating a temporary slot did not "
                    "finish within %d s, because a slot's creation waits for the transactions "
                    "running on the server to end%s%s; fix: run the check again when they have ended",
                    PREFLIGHT_PROBE_TIMEOUT_MS / 1000, hint[0] ? "; it waited for " : "", hint);
        } else if (w2j && (r == -ENOENT || strstr(err, "could not access file"))) {
                add(ck, CHECK_FAIL, plugin, "wal2json is not installed on the server: %s; fix: "
                    "install it where PostgreSQL runs (Debian and Ubuntu: apt-get install "
                    "postgresql-%d-wal2json; PGDG RPMs: wal2json_%d); no restart is needed%s",
                    err, ck->set.server_version_num / 10000, ck->set.server_version_num / 10000, alt);
        } else if (r == -EACCES && strstr(err, "output_plugin_libraries")) {
                preflight_plugin_fix(&ck->set, plugin, fix, sizeof(fix));
                if (w2j)
                        installed_hint(ck, hint, sizeof(hint));
                else
                        hint[0] = '\0';
                add(ck, CHECK_FAIL, plugin, "%s is not allowed: %s (SQLSTATE %s); this "
                    "server refuses output plugins that output_plugin_libraries does not list, to "
                    "every role (PostgreSQL 14.24, 15.19, 16.15, 17.11, 18.6 and later minor "
                    "releases)%s; fix: %s%s", plugin, err, state, hint, fix, alt);
        } else {
                add(ck, CHECK_FAIL, plugin, "%s%s%s%s; fix: see the server's message", err,
                    state[0] ? " (SQLSTATE " : "", state, state[0] ? ")" : "");
        }
}

/*
 * pgoutput's publication (publication.h): exactly the outbox tables, inserts
 * only; the SQL that creates or fixes it otherwise.
 */
static void check_publication(struct check *ck)
{
        const struct relay_config *conf = ck->conf;
        struct publication pub;
        char err[CHECK_TEXT_MAX], warn[512], name[320];

        if (strcmp(ck->plugin, "pgoutput") != 0)
                return;
        snprintf(name, sizeof(name), "publication \"%s\"", config_publication(conf));
        if (publication_read(ck->c, config_publication(conf), conf->tables, conf->ntables, &pub, err,
                             sizeof(err)) < 0) {
                add(ck, CHECK_FAIL, name, "%s", err);
                return;
        }
        if (publication_judge(&pub, conf, err, sizeof(err), warn, sizeof(warn)) < 0) {
                if (!pub.exists && !(ck->slot_read && ck->slot.exists))
                        add(ck, CHECK_WARN, name, "%s; `outbox-relay slot create` and --create-slot create "
                            "it when the role may", err);
                else
                        add(ck, CHECK_FAIL, name, "%s", err);
        } else if (warn[0]) {
                add(ck, CHECK_WARN, name, "%s", warn);
        } else {
                add(ck, CHECK_PASS, name, "lists exactly the %zu outbox table%s and publishes inserts only",
                    conf->ntables, conf->ntables == 1 ? "" : "s");
        }
        publication_release(&pub);
}

/*
 * The replication connection the relay streams over: pg_hba.conf must let
 * the role in with replication=database, and the server (not a pooler in
 * between) must answer IDENTIFY_SYSTEM.
 */
static void check_replication_connection(struct check *ck)
{
        struct pgstream_system sys;
        struct pgstream *s = NULL;
        char err[1024];
        int r;

        if (!(ck->set.rolreplication || ck->set.rolsuper)) {
                skip(ck, "replication connection", "the role has no REPLICATION");
                return;
        }
        r = pgstream_connect(ck->conf->conninfo, &s, &sys, err, sizeof(err));
        if (r == -ECONNREFUSED)
                add(ck, CHECK_FAIL, "replication connection", "cannot open a replication connection "
                    "(replication=database): %s; fix: let role \"%s\" connect to database \"%s\" in "
                    "pg_hba.conf (an ordinary \"host %s %s ...\" line matches this connection)", err,
                    ck->set.user, ck->set.dbname, ck->set.dbname, ck->set.user);
        else if (r == -EPROTONOSUPPORT)
                add(ck, CHECK_FAIL, "replication connection", "the replication connection did not reach "
                    "PostgreSQL's replication protocol: %s; fix: connect the relay to PostgreSQL "
                    "directly, not through a connection pooler (PgBouncer, pgpool)", err);
        else if (r < 0)
                add(ck, CHECK_FAIL, "replication connection", "%s", err);
        else
                add(ck, CHECK_PASS, "replication connection", "IDENTIFY_SYSTEM: system %s, timeline %u, "
                    "database \"%s\"", sys.system_id, sys.timeline, sys.dbname);
        if (r == 0)
                snprintf(ck->system_id, sizeof(ck->system_id), "%s", sys.system_id);
        pgstream_free(s);
}

/*
 * --message-prefix and --ignore-message-prefix against the prefix
 * outbox_emit() of sql/outbox.sql writes in this database
 * (preflight_kit_prefix()). A prefix the kit writes and the relay does not
 * publish FAILs: each such message would stop the relay (exit 4,
 * relay_row.c), or with --ignore-message-prefix be passed over unpublished
 * (WARN). Without either option and without the kit there is no item.
 */
static void check_message_prefix(struct check *ck)
{
        const char *prefix = ck->conf->message_prefix, *ignore = ck->conf->ignore_message_prefix;
        char kit[CONFIG_MESSAGE_PREFIX_MAX + 1], err[1024];
        int r;

        r = preflight_kit_prefix(ck->c, kit, sizeof(kit), err, sizeof(err));
        if (r < 0) {
                add(ck, CHECK_WARN, "message prefix", "%s", err);
        } else if (r == 0) {
                if (prefix)
                        add(ck, CHECK_WARN, "message prefix", "\"%s\": outbox_emit() of sql/outbox.sql "
                            "is not in database \"%s\" (or not on the search path): nothing writes these "
                            "messages unless the application emits envelopes itself; fix: psql -v "
                            "message_prefix=%s -f sql/outbox.sql", prefix, ck->set.dbname, prefix);
        } else if (prefix && strcmp(kit, prefix) == 0) {
                add(ck, CHECK_PASS, "message prefix", "\"%s\": outbox_emit() writes it; transactional "
                    "messages of it are published, non-transactional ones counted and never "
                    "published", prefix);
        } else if (ignore && strcmp(kit, ignore) == 0) {
                add(ck, CHECK_WARN, "message prefix", "outbox_emit() in database \"%s\" writes prefix "
                    "\"%s\", which this relay passes over unpublished (--ignore-message-prefix): "
                    "nothing the application writes with outbox_emit() reaches Kafka; fix, if it "
                    "should: --message-prefix=%s instead", ck->set.dbname, kit, kit);
        } else if (prefix) {
                add(ck, CHECK_FAIL, "message prefix", "outbox_emit() in database \"%s\" writes prefix "
                    "\"%s\", but this relay publishes \"%s\": it would stop (exit 4) at the first "
                    "message outbox_emit() writes; fix: --message-prefix=%s, or load sql/outbox.sql "
                    "with -v message_prefix=%s", ck->set.dbname, kit, prefix, kit, prefix);
        } else {
                add(ck, CHECK_PASS, "message prefix", "none published (no --message-prefix); "
                    "outbox_emit() in database \"%s\" writes prefix \"%s\": should the application "
                    "call it, the relay stops (exit 4) at that message rather than pass it over; fix "
                    "then: --message-prefix=%s", ck->set.dbname, kit, kit);
        }
}

/*
 * --after-slot: the slot of the consumer the relay replaces (Debezium's) is
 * confirmed at or past the relay's slot's confirmed_flush_lsn, which before
 * the relay's first start is its consistent point: only then may the old
 * consumer stop without a gap that neither published.
 */
static void skip_after_slot(struct check *ck, const char *why)
{
        char name[96];

        snprintf(name, sizeof(name), "cut-over from slot \"%s\"", ck->conf->after_slot);
        skip(ck, name, why);
}

static void check_after_slot(struct check *ck)
{
        const struct relay_config *conf = ck->conf;
        struct preflight_slot old, mine;
        char name[96], err[1024], a[LSN_STRLEN], b[LSN_STRLEN];

        if (!conf->after_slot)
                return;
        snprintf(name, sizeof(name), "cut-over from slot \"%s\"", conf->after_slot);
        if (slotcmd_check_after(ck->c, conf, &old, err, sizeof(err)) < 0 ||
            preflight_read_slot(ck->c, conf->slot, &mine, err, sizeof(err)) < 0) {
                add(ck, CHECK_FAIL, name, "%s", err);
                return;
        }
        if (!mine.exists) {
                add(ck, CHECK_FAIL, name, "the relay's slot \"%s\" does not exist yet; fix: "
                    "`outbox-relay slot create --after-slot=%s` while the old consumer runs",
                    conf->slot, conf->after_slot);
        } else if (old.confirmed_flush_lsn != LSN_INVALID &&
                   old.confirmed_flush_lsn >= mine.confirmed_flush_lsn) {
                add(ck, CHECK_PASS, name, "confirmed up to %s, at or past %s, where slot \"%s\" "
                    "starts: the old consumer may stop; then start the relay and drop slot \"%s\"",
                    lsn_format(old.confirmed_flush_lsn, a), lsn_format(mine.confirmed_flush_lsn, b),
                    conf->slot, conf->after_slot);
        } else {
                add(ck, CHECK_FAIL, name, "confirmed up to %s, before %s, where slot \"%s\" starts: "
                    "rows committed in between are published by neither if the old consumer stops "
                    "now; fix: keep it running (%s) until it confirms past %s (Debezium confirms "
                    "after an event or a heartbeat: heartbeat.interval.ms), then check again",
                    lsn_format(old.confirmed_flush_lsn, a), lsn_format(mine.confirmed_flush_lsn, b),
                    conf->slot, old.active_pid ? "it holds the slot now" : "no process holds the "
                    "slot now: start it again", b);
        }
}

static void check_slot(struct check *ck)
{
        const char *slot = ck->conf->slot;
        struct preflight_slot s;
        char err[1024], name[96], a[LSN_STRLEN];

        snprintf(name, sizeof(name), "slot \"%s\"", slot);
        if (preflight_read_slot(ck->c, slot, &s, err, sizeof(err)) < 0) {
                add(ck, CHECK_FAIL, name, "%s", err);
                return;
        }
        ck->slot_exists = s.exists;
        if (!s.exists) {
                add(ck, CHECK_WARN, name, "does not exist; fix: run `outbox-relay slot create` or "
                    "start with --create-slot (a new slot starts at the current WAL: rows committed "
                    "before it are not published)");
                return;
        }
        if (preflight_check_slot(&s, slot, ck->set.dbname, ck->plugin, err, sizeof(err)) < 0) {
                add(ck, CHECK_FAIL, name, "%s", err);
                return;
        }
        ck->have_slot = true;
        ck->slot_lsn = s.confirmed_flush_lsn;
        if (s.active_pid)
                add(ck, CHECK_WARN, name, "in use by %s: a relay started now would wait as a warm "
                    "standby until it is free", s.holder);
        else
                add(ck, CHECK_PASS, name, "plugin %s, database \"%s\", confirmed_flush_lsn %s%s%s",
                    s.plugin, s.database, lsn_format(s.confirmed_flush_lsn, a),
                    s.wal_status[0] ? ", wal_status " : "", s.wal_status);
}

/* A setting of pg_settings as text into @buf (@size bytes), "" when absent or hidden from this role. */
static bool read_setting(struct check *ck, const char *name, char *buf, size_t size)
{
        const char *params[1] = {name};
        PGresult *r = PQexecParams(ck->c, "SELECT setting, unit FROM pg_catalog.pg_settings WHERE name = $1",
                                   1, NULL, params, NULL, NULL, 0);
        bool found = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;

        buf[0] = '\0';
        if (found)
                snprintf(buf, size, "%s%s", PQgetvalue(r, 0, 0), PQgetisnull(r, 0, 1) ? "" : PQgetvalue(r, 0, 1));
        PQclear(r);
        return found;
}

/*
 * A failover slot (PostgreSQL 17+; --failover, or the slot is one): on a
 * primary, synchronized_standby_slots must name the standbys' physical
 * slots, existing and streaming, or a failover can lose commits the relay
 * published (and an inactive one makes the walsender wait); on a standby,
 * what slot synchronization needs there. A standby's own settings cannot be
 * read from the primary: the item says so.
 */
static void check_failover(struct check *ck)
{
        static const char standby_needs[] = "each standby needs sync_replication_slots = on, "
                "hot_standby_feedback = on, primary_slot_name = its physical slot and a dbname in "
                "primary_conninfo (run check against a standby to see its settings)";
        bool want = ck->conf->failover || (ck->slot_read && ck->slot.exists && ck->slot.failover);
        char sss[1024], val[1024], missing[1024] = "", inactive[1024] = "", fine[1024] = "";
        size_t om = 0, oi = 0, of = 0;
        const char *p, *name;
        size_t len;
        PGresult *r;

        if (!want)
                return;
        if (ck->set.server_version_num < 170000) {
                add(ck, CHECK_FAIL, "failover slot", "PostgreSQL %d has no failover slots (they came with "
                    "17): the slot is not synchronized to any standby, and after a failover it is gone; "
                    "fix: leave out --failover", ck->set.server_version_num / 10000);
                return;
        }
        r = PQexec(ck->c, "SELECT pg_is_in_recovery()");
        if (PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "t") == 0) {
                PQclear(r);
                if (read_setting(ck, "sync_replication_slots", val, sizeof(val)) && strcmp(val, "on") != 0)
                        strbuf_append(missing, sizeof(missing), &om, "%ssync_replication_slots = on", om ? ", " : "");
                if (read_setting(ck, "hot_standby_feedback", val, sizeof(val)) && strcmp(val, "on") != 0)
                        strbuf_append(missing, sizeof(missing), &om, "%shot_standby_feedback = on", om ? ", " : "");
                if (read_setting(ck, "primary_slot_name", val, sizeof(val)) && !val[0])
                        strbuf_append(missing, sizeof(missing), &om, "%sprimary_slot_name", om ? ", " : "");
                if (read_setting(ck, "primary_conninfo", val, sizeof(val)) && !strstr(val, "dbname"))
                        strbuf_append(missing, sizeof(missing), &om, "%sa dbname in primary_conninfo", om ? ", " : "");
                if (om)
                        add(ck, CHECK_FAIL, "failover slot", "this standby does not synchronize failover "
                            "slots: it lacks %s; fix: set them (ALTER SYSTEM ...; SELECT pg_reload_conf())",
                            missing);
                else
                        add(ck, CHECK_PASS, "failover slot", "this standby synchronizes failover slots "
                            "(sync_replication_slots, hot_standby_feedback, primary_slot_name, a dbname "
                            "in primary_conninfo)");
                return;
        }
        PQclear(r);
        read_setting(ck, "synchronized_standby_slots", sss, sizeof(sss));
        if (!sss[0]) {
                add(ck, CHECK_FAIL, "failover slot", "synchronized_standby_slots is empty: the primary "
                    "sends the relay commits its standbys may not have, and a failover to such a standby "
                    "loses from the database rows Kafka has; fix: ALTER SYSTEM SET "
                    "synchronized_standby_slots = '<the standbys' physical slots>'; SELECT "
                    "pg_reload_conf(); and %s", standby_needs);
                return;
        }
        p = sss;
        while (*p) {
                const char *params[1];
                char one[128];

                while (*p == ' ' || *p == ',')
                        p++;
                name = p;
                while (*p && *p != ',' && *p != ' ')
                        p++;
                len = (size_t)(p - name);
                if (!len || len >= sizeof(one))
                        continue;
                snprintf(one, sizeof(one), "%.*s", (int)len, name);
                params[0] = one;
                r = PQexecParams(ck->c, "SELECT active FROM pg_catalog.pg_replication_slots WHERE "
                                 "slot_name = $1 AND slot_type = 'physical'", 1, NULL, params, NULL, NULL, 0);
                if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) == 0)
                        strbuf_append(missing, sizeof(missing), &om, "%s\"%s\"", om ? ", " : "", one);
                else if (strcmp(PQgetvalue(r, 0, 0), "t") != 0)
                        strbuf_append(inactive, sizeof(inactive), &oi, "%s\"%s\"", oi ? ", " : "", one);
                else
                        strbuf_append(fine, sizeof(fine), &of, "%s\"%s\"", of ? ", " : "", one);
                PQclear(r);
        }
        if (om)
                add(ck, CHECK_FAIL, "failover slot", "synchronized_standby_slots '%s' names %s, which is "
                    "not a physical slot here: the relay's walsender waits for it forever; fix: create it "
                    "(SELECT pg_create_physical_replication_slot('NAME')) for a standby's primary_slot_name, "
                    "or take it out of synchronized_standby_slots; %s", sss, missing, standby_needs);
        else if (oi)
                add(ck, CHECK_WARN, "failover slot", "synchronized_standby_slots '%s' names %s, which no "
                    "standby streams from now: until it does, the relay's walsender sends nothing newer than "
                    "that standby has; fix: start the standby, or take its slot out; %s", sss, inactive,
                    standby_needs);
        else
                add(ck, CHECK_PASS, "failover slot", "synchronized_standby_slots '%s': %s streaming, so the "
                    "relay gets only commits those standbys have; %s", sss, fine, standby_needs);
}

/*
 * PostgreSQL 18's idle_replication_slot_timeout: a slot nobody streams from
 * for that long is invalidated at a checkpoint, and with it every row the
 * relay has not published.
 */
static void check_idle_timeout(struct check *ck)
{
        char val[64];

        if (!read_setting(ck, "idle_replication_slot_timeout", val, sizeof(val)))
                return;
        if (strcmp(val, "0") == 0 || strcmp(val, "0s") == 0 || strcmp(val, "0min") == 0)
                add(ck, CHECK_PASS, "idle_replication_slot_timeout", "0: a slot is never invalidated for "
                    "being idle");
        else
                add(ck, CHECK_WARN, "idle_replication_slot_timeout", "%s: a slot nobody streams from for "
                    "longer (the relay down, or a warm standby waiting for it) is invalidated at the next "
                    "checkpoint, and the rows the relay has not published are lost with it "
                    "(`slot status` then shows invalidation_reason idle_timeout); fix: ALTER SYSTEM SET "
                    "idle_replication_slot_timeout = 0 (or longer than the longest relay outage); SELECT "
                    "pg_reload_conf()", val);
}

static void check_server_limits(struct check *ck)
{
        int64_t wst = ck->set.wal_sender_timeout_ms, si = ck->conf->status_interval_ms;
        char err[1536];

        if (preflight_check_sync_standby(&ck->set, err, sizeof(err)) < 0)
                add(ck, CHECK_FAIL, "synchronous_standby_names", "%s", err);
        else
                add(ck, CHECK_PASS, "synchronous_standby_names", "%s%s%s: does not name this relay "
                    "(application_name \"%s\")", ck->set.synchronous_standby_names[0] ? "'" : "",
                    ck->set.synchronous_standby_names[0] ? ck->set.synchronous_standby_names : "empty",
                    ck->set.synchronous_standby_names[0] ? "'" : "", ck->set.application_name);

        if (!ck->set.has_max_slot_wal_keep_size)
                skip(ck, "max_slot_wal_keep_size", "PostgreSQL before 13 has no such setting: a "
                     "slot retains WAL without bound");
        else if (ck->set.max_slot_wal_keep_size_mb < 0)
                add(ck, CHECK_WARN, "max_slot_wal_keep_size", "-1 (unlimited): a stopped or stuck "
                    "relay makes the slot retain WAL until the disk is full; fix: ALTER SYSTEM SET "
                    "max_slot_wal_keep_size = '10GB' (more than the WAL written during the longest "
                    "relay outage to survive, less than the free disk); SELECT pg_reload_conf()");
        else
                add(ck, CHECK_PASS, "max_slot_wal_keep_size", "%lld MB: a slot retaining more is "
                    "invalidated and the relay then stops with exit 3",
                    (long long)ck->set.max_slot_wal_keep_size_mb);
        if (wst == 0)
                add(ck, CHECK_WARN, "wal_sender_timeout", "0: the server never ends the connection "
                    "of a relay that hangs, so its slot stays active and a standby relay never takes "
                    "over; fix: ALTER SYSTEM SET wal_sender_timeout = '60s'; SELECT pg_reload_conf()");
        else if (si > wst / 2 - 100)
                add(ck, CHECK_PASS, "wal_sender_timeout", "%lld ms: the relay lowers its status "
                    "interval from %lld ms to %lld ms to stay under half of it", (long long)wst,
                    (long long)si, (long long)(wst / 2 - 100 < 100 ? 100 : wst / 2 - 100));
        else
                add(ck, CHECK_PASS, "wal_sender_timeout", "%lld ms; status updates every %lld ms",
                    (long long)wst, (long long)si);
}

static int add_topic(struct check *ck, const char *topic)
{
        char **n;

        for (size_t i = 0; i < ck->ntopics; i++)
                if (strcmp(ck->topics[i], topic) == 0)
                        return 0;
        n = realloc(ck->topics, (ck->ntopics + 1) * sizeof(*n));
        if (!n)
                return -ENOMEM;
        ck->topics = n;
        if (!(n[ck->ntopics] = strdup(topic)))
                return -ENOMEM;
        ck->ntopics++;
        return 0;
}

/*
 * The topics the template gives for the distinct values in the outbox
 * tables (first CHECK_MAX_TEMPLATE_VALUES per table). Sets *ret_bad to the
 * values that give no valid topic in rows the slot may not have confirmed
 * (the relay will meet them: the xmin test of sql/monitoring.sql's
 * oldest_unconfirmed_row, an upper bound), *ret_old to those in rows older
 * than that (or all rows while the slot does not exist: a new slot starts
 * after them). Returns 0, -EIO with the reason in @err.
 */
static int template_topics(struct check *ck, size_t *ret_bad, size_t *ret_old, char *err,
                           size_t errlen)
{
        const struct relay_config *conf = ck->conf;
        char *slot = PQescapeLiteral(ck->c, conf->slot, strlen(conf->slot));

        *ret_bad = *ret_old = 0;
        if (!slot)
                return -ENOMEM;
        for (size_t i = 0; i < conf->ntables; i++) {
                const struct table_name *t = &conf->tables[i];
                char *sql, *s, *n;
                const char **vals;
                size_t size = 512 + strlen(slot), o = 0;
                PGresult *r;

                size += (strlen(t->schema) + strlen(t->table)) * 2;
                for (size_t k = 0; k < ck->ntcols; k++)
                        size += strlen(ck->tcols[k]) * 2 + 16;
                sql = malloc(size);
                vals = calloc(ck->ntcols, sizeof(*vals));
                if (!sql || !vals) {
                        free(sql);
                        free(vals);
                        PQfreemem(slot);
                        return -ENOMEM;
                }
                strbuf_append(sql, size, &o, "SELECT DISTINCT ");
                for (size_t k = 0; k < ck->ntcols; k++) {
                        char *c = PQescapeIdentifier(ck->c, ck->tcols[k], strlen(ck->tcols[k]));

                        strbuf_append(sql, size, &o, "o.%s::text, ", c ? c : "");
                        PQfreemem(c);
                }
                s = PQescapeIdentifier(ck->c, t->schema, strlen(t->schema));
                n = PQescapeIdentifier(ck->c, t->table, strlen(t->table));
                strbuf_append(sql, size, &o, "coalesce(age(o.xmin) <= (SELECT age(catalog_xmin) FROM "
                       "pg_replication_slots WHERE slot_name = %s), false) FROM %s.%s AS o LIMIT %d",
                       slot, s ? s : "", n ? n : "", CHECK_MAX_TEMPLATE_VALUES);
                PQfreemem(s);
                PQfreemem(n);
                r = PQexec(ck->c, sql);
                free(sql);
                if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                        snprintf(err, errlen, "%s", PQresultErrorMessage(r));
                        PQclear(r);
                        free(vals);
                        PQfreemem(slot);
                        return -EIO;
                }
                for (int row = 0; row < PQntuples(r); row++) {
                        bool pending = strcmp(PQgetvalue(r, row, (int)ck->ntcols), "t") == 0;
                        const char *topic = NULL;
                        char rerr[512];

                        for (size_t k = 0; k < ck->ntcols; k++)
                                vals[k] = PQgetisnull(r, row, (int)k) ? NULL
                                                                      : PQgetvalue(r, row, (int)k);
                        if (record_render_topic(ck->spec, vals, &topic, rerr, sizeof(rerr)) < 0) {
                                (*(pending ? ret_bad : ret_old))++;
                                if (!ck->bad_example[0] || pending)
                                        snprintf(ck->bad_example, sizeof(ck->bad_example), "%s", rerr);
                        } else if (add_topic(ck, topic) < 0) {
                                ck->nomem = 1;
                        }
                }
                PQclear(r);
                free(vals);
        }
        PQfreemem(slot);
        return 0;
}

/* Whether the cluster creates a missing topic on first use; why not in @why. */
static bool auto_creates(struct check *ck, struct producer *p, int32_t broker, char *why, size_t size)
{
        const char *client = NULL;
        char v[32], err[512];
        int r;

        for (size_t i = 0; i < ck->conf->nprops; i++)
                if (strcmp(ck->conf->props[i].name, "allow.auto.create.topics") == 0)
                        client = ck->conf->props[i].value;
        if (client && strcmp(client, "true") != 0) {
                snprintf(why, size, "-X allow.auto.create.topics=%s", client);
                return false;
        }
        r = producer_broker_config(p, broker, "auto.create.topics.enable", PREFLIGHT_PROBE_TIMEOUT_MS,
                                   v, sizeof(v), err, sizeof(err));
        if (r < 0) {
                snprintf(why, size, "cannot read auto.create.topics.enable of broker %d: %s",
                         (int)broker, r == -ENOENT ? "no such setting" : err);
                return false;
        }
        if (strcmp(v, "true") != 0) {
                snprintf(why, size, "auto.create.topics.enable=%s on broker %d", v, (int)broker);
                return false;
        }
        snprintf(why, size, "auto.create.topics.enable=true");
        return true;
}

/* One verdict for the topics ck->topics[from, to) under item @name. */
static void topic_verdict(struct check *ck, const char *name, size_t from, size_t to, const bool *exists,
                          bool autocreate, const char *why, const char *note)
{
        char present[1024], missing[1024];
        size_t op = 0, om = 0, np = 0, nm = 0;
        /* One topic the item's name names; a template's one value still names its topic. */
        bool named = to - from == 1 && !note[0];

        present[0] = missing[0] = '\0';
        for (size_t i = from; i < to; i++) {
                size_t *o = exists[i] ? &op : &om, *cnt = exists[i] ? &np : &nm;
                char *buf = exists[i] ? present : missing;

                if (*cnt < CHECK_MAX_LISTED)
                        strbuf_append(buf, sizeof(present), o, "%s\"%s\"", *cnt ? ", " : "", ck->topics[i]);
                else if (*cnt == CHECK_MAX_LISTED)
                        strbuf_append(buf, sizeof(present), o, ", ...");
                (*cnt)++;
        }
        if (named && nm == 0)
                add(ck, CHECK_PASS, name, "exists");
        else if (named && autocreate)
                add(ck, CHECK_PASS, name, "does not exist yet; the broker creates it on first use (%s)",
                    why);
        else if (named)
                add(ck, CHECK_FAIL, name, "does not exist and is not created on first use (%s); fix: "
                    "create it (kafka-topics.sh --create --topic %s) or allow auto-creation", why,
                    ck->topics[from]);
        else if (nm == 0)
                add(ck, CHECK_PASS, name, "%zu exist%s: %s%s", np, np == 1 ? "s" : "", present, note);
        else if (autocreate && np == 0)
                add(ck, CHECK_PASS, name, "%zu %s not exist yet and %s created by the broker on first "
                    "use (%s): %s%s", nm, nm == 1 ? "does" : "do", nm == 1 ? "is" : "are", why, missing,
                    note);
        else if (autocreate)
                add(ck, CHECK_PASS, name, "%zu exist%s: %s; %zu %s not exist yet and %s created by the "
                    "broker on first use (%s): %s%s", np, np == 1 ? "s" : "", present, nm,
                    nm == 1 ? "does" : "do", nm == 1 ? "is" : "are", why, missing, note);
        else
                add(ck, CHECK_FAIL, name, "missing and not created on first use (%s): %s%s; fix: "
                    "create %s (kafka-topics.sh --create --topic NAME) or allow auto-creation",
                    why, missing, note, nm == 1 ? "it" : "them");
}

/*
 * The topics' max.message.bytes against the producer's batch: the broker
 * refuses a whole record batch larger than its topic's limit, so the relay
 * sends such a topic's records in smaller batches (at a cost to every topic
 * under --exactly-once), and a row whose record alone is larger cannot be
 * published.
 */
static void check_topic_limits(struct check *ck, struct producer *p, const bool *exists)
{
        int64_t batch = producer_batch_bytes(p), least = 0, bytes;
        char list[1024] = "", unread[700] = "", err[512];
        const char *least_topic = NULL;
        size_t o = 0, nread = 0, nlow = 0;

        for (size_t i = 0; i < ck->ntopics; i++) {
                if (!exists[i])
                        continue;
                if (producer_topic_max_bytes(p, ck->topics[i], PREFLIGHT_PROBE_TIMEOUT_MS, &bytes, err,
                                             sizeof(err)) < 0) {
                        if (!unread[0])
                                snprintf(unread, sizeof(unread), "cannot read max.message.bytes of topic "
                                         "\"%s\": %s", ck->topics[i], err);
                        continue;
                }
                nread++;
                if (bytes >= batch)
                        continue;
                if (nlow < CHECK_MAX_LISTED)
                        strbuf_append(list, sizeof(list), &o, "%s\"%s\" %lld bytes", nlow ? ", " : "",
                               ck->topics[i], (long long)bytes);
                else if (nlow == CHECK_MAX_LISTED)
                        strbuf_append(list, sizeof(list), &o, ", ...");
                nlow++;
                if (!least || bytes < least) {
                        least = bytes;
                        least_topic = ck->topics[i];
                }
        }
        if (!nread && !unread[0]) {
                add(ck, CHECK_PASS, "topic limits", "no topic exists yet; the relay reads each topic's "
                    "max.message.bytes before its first record");
        } else if (!nlow && !unread[0]) {
                add(ck, CHECK_PASS, "topic limits", "max.message.bytes of %zu topic%s at or above the "
                    "producer's batch of %lld bytes (the lesser of -X batch.size and message.max.bytes)",
                    nread, nread == 1 ? "" : "s", (long long)batch);
        } else if (!nlow) {
                add(ck, CHECK_WARN, "topic limits", "%s; the relay reads each topic's limit before its "
                    "first record, and without it finds a limit below its batches of %lld bytes only when "
                    "the broker refuses one; fix: grant the relay's principal DESCRIBE_CONFIGS on the "
                    "topics", unread, (long long)batch);
        } else {
                char how[256];

                if (ck->conf->exactly_once)
                        snprintf(how, sizeof(how), "with --exactly-once every batch of its one "
                                 "transactional producer, for every topic, shrinks to %lld bytes",
                                 (long long)least);
                else
                        snprintf(how, sizeof(how), "through a producer of their own, the other topics "
                                 "keeping their batches");
                add(ck, CHECK_WARN, "topic limits", "max.message.bytes below the producer's batch of "
                    "%lld bytes (the lesser of -X batch.size and message.max.bytes): %s. The broker "
                    "refuses a whole record batch larger than its topic's limit: the relay sends these "
                    "topics' records in batches that fit (%s), and a row whose record alone is larger than "
                    "its topic's limit cannot be published (--on-error)%s%s; fix: raise their "
                    "max.message.bytes to at least %lld (kafka-configs.sh --alter --entity-type topics "
                    "--entity-name %s --add-config max.message.bytes=%lld), or accept the smaller "
                    "batches, or set -X batch.size=%lld", (long long)batch, list, how,
                    unread[0] ? "; " : "", unread, (long long)batch, least_topic, (long long)batch,
                    (long long)least);
        }
}

/* The check produces nothing: no delivery reports; errors show in the requests' results. */
static void ignore_report(void *ctx, const struct producer_report *report)
{
        (void)ctx;
        (void)report;
}

static void ignore_event(void *ctx, enum producer_event event, const struct producer_error *error)
{
        (void)ctx;
        (void)event;
        (void)error;
}

/*
 * The checkpoint record: the topic is there (or the relay may create it), and
 * the newest checkpoint of the slot agrees with the slot and this
 * configuration, or the relay would stop at once (exit 3).
 */
static void check_checkpoint(struct check *ck, struct producer *p, const char **props)
{
        const struct relay_config *conf = ck->conf;
        const char *topic = conf->checkpoint_topic;
        struct checkpoint_source src = {conf->brokers, props, conf->nprops, topic};
        struct checkpoint c;
        char err[1024], key[512], mapping[CHECKPOINT_MAPPING_MAX], digest[17], name[320], why[1536];
        char a[LSN_STRLEN], b[LSN_STRLEN], command[512];
        struct checkpoint_topic t;
        bool exists, found, no_topic;

        snprintf(name, sizeof(name), "checkpoint topic \"%s\"", topic);
        if (checkpoint_topic_describe(p, topic, PREFLIGHT_PROBE_TIMEOUT_MS, &t, err, sizeof(err)) < 0) {
                add(ck, CHECK_FAIL, name, "cannot read the cluster's topics: %s", err);
                return;
        }
        exists = t.partitions > 0;
        if (!exists) {
                add(ck, CHECK_WARN, name, "does not exist yet: the relay creates it at its first start, "
                    "which needs CREATE; fix, to make it yourself: %s, and grant the relay READ, WRITE, "
                    "DESCRIBE and DESCRIBE_CONFIGS on it",
                    checkpoint_topic_create_command(topic, t.brokers, command, sizeof(command)));
        } else {
                switch (checkpoint_topic_judge(topic, &t, why, sizeof(why))) {
                case CHECKPOINT_TOPIC_UNTRUSTED:
                        add(ck, CHECK_FAIL, name, "%s", why);
                        return;
                case CHECKPOINT_TOPIC_WEAK:
                        add(ck, CHECK_WARN, name, "%s", why);
                        break;
                case CHECKPOINT_TOPIC_OK:
                        add(ck, CHECK_PASS, name, "one partition, %d replica%s, cleanup.policy=%s, "
                            "min.insync.replicas=%d", t.replicas, t.replicas == 1 ? "" : "s",
                            t.config.cleanup_policy, t.config.min_insync_replicas);
                        break;
                }
        }
        snprintf(name, sizeof(name), "checkpoint of slot \"%s\"", conf->slot);
        if (exists && ck->slot_exists && !ck->have_slot) {
                /* Invalidated, of another plugin or database: the slot's own item says what to do. */
                skip(ck, name, "the slot is not usable (see its item)");
                return;
        }
        if (!exists && ck->have_slot && conf->exactly_once && conf->accept_slot_position != ck->slot_lsn) {
                add(ck, CHECK_FAIL, name, "none, and no topic: with --exactly-once the relay stops, since "
                    "it cannot tell which transactions after the slot's LSN %s are in Kafka already; "
                    "fix: if rows may be published twice, start once with --accept-slot-position=%s",
                    lsn_format(ck->slot_lsn, a), a);
                return;
        }
        if (!exists || (!ck->have_slot && ck->system_id[0])) {
                /* Nothing to compare yet: the first start writes it. */
                add(ck, CHECK_PASS, name, "none yet%s: the first checkpoint is written when the relay "
                    "(or `slot create`) first uses the slot", !exists ? " (no topic)" : " (no slot)");
                return;
        }
        if (!ck->system_id[0]) {
                skip(ck, name, "the replication connection is not usable");
                return;
        }
        checkpoint_key(ck->system_id, ck->set.dbname, conf->slot, key, sizeof(key));
        if (checkpoint_read(&src, key, PREFLIGHT_PROBE_TIMEOUT_MS, &c, &found, &no_topic, err,
                            sizeof(err)) < 0) {
                add(ck, CHECK_FAIL, name, "cannot read it: %s; fix: grant the relay READ and DESCRIBE "
                    "on topic \"%s\"", err, topic);
                return;
        }
        config_mapping(conf, mapping, sizeof(mapping));
        checkpoint_digest(mapping, digest);
        if (!found && conf->exactly_once && conf->accept_slot_position != ck->slot_lsn) {
                add(ck, CHECK_FAIL, name, "none: with --exactly-once the relay stops, since it cannot "
                    "tell which transactions after the slot's LSN %s are in Kafka already; fix: if "
                    "rows may be published twice, start once with --accept-slot-position=%s",
                    lsn_format(ck->slot_lsn, a), a);
        } else if (!found) {
                add(ck, CHECK_PASS, name, "none yet: the relay adopts the slot's position, LSN %s, at "
                    "its first start", lsn_format(ck->slot_lsn, a));
        } else if (c.digest[0] && strcmp(c.digest, digest) != 0 && !conf->accept_config_change) {
                add(ck, CHECK_FAIL, name, "written by a relay with another table set or row mapping "
                    "(%s at %s): theirs \"%s\", this one \"%s\"; fix: give this configuration its own "
                    "--slot, or if the change is deliberate and no relay with the old configuration "
                    "runs, start once with --accept-config-change", c.writer, c.time, c.mapping,
                    mapping);
        } else if (ck->slot_lsn > c.lsn && conf->accept_slot_position != ck->slot_lsn) {
                add(ck, CHECK_FAIL, name, "the slot is confirmed up to LSN %s, beyond the newest "
                    "checkpoint, LSN %s: someone else consumed it and the rows in between were not "
                    "published by a relay; fix: publish them again from the outbox table, then start "
                    "once with --accept-slot-position=%s", lsn_format(ck->slot_lsn, a),
                    lsn_format(c.lsn, b), a);
        } else {
                add(ck, CHECK_PASS, name, "LSN %s (%s), the slot at %s; written by %s at %s",
                    lsn_format(c.lsn, a), c.mode, lsn_format(ck->slot_lsn, b), c.writer, c.time);
        }
}

/* --exactly-once: the brokers run transactions for a transactional id like the relay's. */
static void check_transactions(struct check *ck, struct producer_options opts)
{
        char tid[600], err[1024];
        struct producer_error e;
        struct producer *t = NULL;

        if (ck->conf->transactional_id)
                snprintf(tid, sizeof(tid), "%s.check", ck->conf->transactional_id);
        else
                snprintf(tid, sizeof(tid), "outbox-relay/%s/%s/%s.check", ck->system_id,
                         ck->set.dbname, ck->conf->slot);
        opts.transactional_id = tid;
        if (producer_new(&opts, ignore_report, ignore_event, NULL, &t, err, sizeof(err)) < 0) {
                add(ck, CHECK_FAIL, "kafka transactions", "%s", err);
                return;
        }
        if (producer_init_transactions(t, PREFLIGHT_PROBE_TIMEOUT_MS, &e) < 0)
                add(ck, CHECK_FAIL, "kafka transactions", "init_transactions for the probe id \"%s\" "
                    "failed: %s (%s); fix: --exactly-once needs brokers with transactions (a writable "
                    "transaction state log) and, with ACLs, WRITE and DESCRIBE on the relay's "
                    "TransactionalId", tid, e.text, e.name);
        else
                add(ck, CHECK_PASS, "kafka transactions", "init_transactions works (probe id \"%s\"; "
                    "the relay's own id is not touched, which would fence a running relay)", tid);
        producer_free(t);
}

/* Kafka is out of reach: every Kafka item after "kafka brokers" is a SKIP saying so. */
static void skip_kafka(struct check *ck, const char *why)
{
        const struct relay_config *conf = ck->conf;
        char name[320];

        skip(ck, "topics", why);
        skip(ck, "topic limits", why);
        snprintf(name, sizeof(name), "checkpoint topic \"%s\"", conf->checkpoint_topic);
        skip(ck, name, why);
        snprintf(name, sizeof(name), "checkpoint of slot \"%s\"", conf->slot);
        skip(ck, name, why);
        if (conf->exactly_once)
                skip(ck, "kafka transactions", why);
}

static void check_kafka(struct check *ck, bool db_ok)
{
        const struct relay_config *conf = ck->conf;
        struct producer *p = NULL;
        char err[1536], why[600], note[700], suffix[704], tname[320];
        size_t first_template = 0, bad = 0, old = 0;
        bool *exists = NULL, autocreate = false, any_missing = false, values_read = false;
        int32_t broker = -1;
        int r;

        const char **props = calloc(2 * conf->nprops + 1, sizeof(*props));
        struct producer_options opts = {.brokers = conf->brokers, .props = props, .nprops = conf->nprops};

        if (!props) {
                ck->nomem = 1;
                return;
        }
        for (size_t i = 0; i < conf->nprops; i++) {
                props[2 * i] = conf->props[i].name;
                props[2 * i + 1] = conf->props[i].value;
        }
        r = producer_new(&opts, ignore_report, ignore_event, NULL, &p, err, sizeof(err));
        if (r < 0) {
                add(ck, CHECK_FAIL, "kafka brokers", "%s", err);
                skip_kafka(ck, "no Kafka producer");
                free(props);
                return;
        }
        r = producer_check_brokers(p, PREFLIGHT_PROBE_TIMEOUT_MS, err, sizeof(err));
        if (r < 0) {
                /* -EACCES: a TLS or authentication failure, its own fix in @err */
                add(ck, CHECK_FAIL, "kafka brokers", "cannot reach any Kafka broker of \"%s\" within "
                    "%d s: %s%s", conf->brokers, PREFLIGHT_PROBE_TIMEOUT_MS / 1000, err,
                    r == -EACCES ? "" : "; fix: check --brokers, the -X security settings and that the "
                    "brokers are up");
                skip_kafka(ck, "no Kafka broker reachable");
                producer_free(p);
                free(props);
                return;
        }
        add(ck, CHECK_PASS, "kafka brokers", "\"%s\" reachable", conf->brokers);

        if (conf->dead_letter && add_topic(ck, conf->dead_letter_topic) < 0)
                goto nomem;
        first_template = ck->ntopics;
        note[0] = '\0';
        if (ck->ntcols == 0) {
                const char *topic = NULL;

                if (record_render_topic(ck->spec, NULL, &topic, err, sizeof(err)) < 0)
                        add(ck, CHECK_FAIL, "topic", "%s; fix: change --topic", err);
                else if (add_topic(ck, topic) < 0)
                        goto nomem;
        } else if (!db_ok || !ck->tables_ok) {
                snprintf(note, sizeof(note), "the outbox could not be read for the template's values");
        } else if (template_topics(ck, &bad, &old, err, sizeof(err)) < 0) {
                snprintf(note, sizeof(note), "cannot read the template's values: %.600s", err);
        } else {
                values_read = true;
                snprintf(note, sizeof(note), "for the first %d distinct values per table now in "
                         "the outbox", CHECK_MAX_TEMPLATE_VALUES);
        }
        /* A value the relay will meet that gives no topic stops it (exit 4): its own verdict. */
        snprintf(tname, sizeof(tname), "values of \"%s\"", conf->topic_template);
        if (bad && !conf->dead_letter)
                add(ck, CHECK_FAIL, tname, "%zu value%s in rows the slot has not confirmed give%s no "
                    "valid topic name (%s): the relay stops at the first such row (exit 4); fix: change "
                    "--topic, or let it stop and choose a remedy for that transaction (outbox-relay(7), RUNBOOK: \"A row "
                    "stops the relay\"), or start with --on-error=dead-letter", bad, bad == 1 ? "" : "s",
                    bad == 1 ? "s" : "", ck->bad_example);
        else if (bad)
                add(ck, CHECK_WARN, tname, "%zu value%s in rows the slot has not confirmed give%s no "
                    "valid topic name (%s): those rows will go to the dead-letter topic \"%s\"", bad,
                    bad == 1 ? "" : "s", bad == 1 ? "s" : "", ck->bad_example, conf->dead_letter_topic);
        else if (old)
                add(ck, CHECK_WARN, tname, "%zu value%s in rows %s give%s no valid topic name (%s): a "
                    "new row with such a value would stop the relay (exit 4)", old, old == 1 ? "" : "s",
                    ck->slot_exists ? "the slot has confirmed" : "written before the slot exists",
                    old == 1 ? "s" : "", ck->bad_example);
        if (ck->nomem)
                goto nomem;
        exists = calloc(ck->ntopics ? ck->ntopics : 1, sizeof(*exists));
        if (!exists)
                goto nomem;
        r = producer_topics_exist(p, (const char *const *)ck->topics, ck->ntopics,
                                  PREFLIGHT_PROBE_TIMEOUT_MS, exists, &broker, err, sizeof(err));
        if (r < 0) {
                add(ck, CHECK_FAIL, "topics", "cannot read the cluster's topics: %s", err);
                goto out;
        }
        for (size_t i = 0; i < ck->ntopics; i++)
                any_missing |= !exists[i];
        if (any_missing || (ck->ntcols && first_template == ck->ntopics))
                autocreate = auto_creates(ck, p, broker, why, sizeof(why));
        if (conf->dead_letter) {
                snprintf(tname, sizeof(tname), "dead-letter topic \"%s\"", conf->dead_letter_topic);
                topic_verdict(ck, tname, 0, 1, exists, autocreate, why, "");
        }
        if (ck->ntcols == 0) {
                if (first_template < ck->ntopics) {
                        snprintf(tname, sizeof(tname), "topic \"%s\"", ck->topics[first_template]);
                        topic_verdict(ck, tname, first_template, ck->ntopics, exists, autocreate,
                                      why, "");
                }
        } else {
                snprintf(tname, sizeof(tname), "topics of \"%s\"", conf->topic_template);
                if (first_template < ck->ntopics) {
                        snprintf(suffix, sizeof(suffix), " (%s)", note);
                        topic_verdict(ck, tname, first_template, ck->ntopics, exists, autocreate, why,
                                      suffix);
                } else if (autocreate) {
                        add(ck, CHECK_PASS, tname, "%s; topics are created by the broker on first use "
                            "(%s)", values_read ? "no rows in the outbox yet" : note, why);
                } else {
                        add(ck, CHECK_WARN, tname, "%s, and topics are not created on first use (%s): "
                            "each value's topic must exist before its first row, or that row is "
                            "unpublishable", values_read ? "no rows in the outbox yet" : note, why);
                }
        }
        check_topic_limits(ck, p, exists);
        check_checkpoint(ck, p, props);
        if (conf->exactly_once)
                check_transactions(ck, opts);
        goto out;
nomem:
        ck->nomem = 1;
out:
        free(exists);
        free(props);
        producer_free(p);
}

int check_run(const struct relay_config *conf, struct check_report *ret_report, char *err,
              size_t errlen)
{
        static const char *const db_items[] = {
                "server version", "wal_level", "server_encoding", "replication privilege", "tables",
                "replication connection", "wal2json", "slot", "synchronous_standby_names",
                "max_slot_wal_keep_size", "wal_sender_timeout",
        };
        struct check ck = {.conf = conf, .rep = ret_report};
        char cerr[1024];
        bool db_ok;
        int r;

        memset(ret_report, 0, sizeof(*ret_report));
        r = record_spec_new(conf->id_column, conf->key_column, conf->payload_column, conf->type_column,
                            conf->topic_template, &ck.spec, err, errlen);
        if (r < 0)
                return r;
        record_spec_template_columns(ck.spec, &ck.tcols, &ck.ntcols);
        /* What the daemon would warn about at start (unknown variables, a readable secret). */
        for (size_t i = 0; i < conf->nnotes; i++) {
                /* "configuration " and a size_t's 20 digits at most */
                char name[48];

                snprintf(name, sizeof(name), conf->nnotes > 1 ? "configuration %zu" : "configuration",
                         i + 1);
                add(&ck, CHECK_WARN, name, "%s", conf->notes[i]);
        }

        r = preflight_connect(conf->conninfo, PREFLIGHT_PROBE_TIMEOUT_MS, &ck.c, cerr, sizeof(cerr));
        if (r < 0) {
                add(&ck, CHECK_FAIL, "connection", "%s", cerr);
                for (size_t i = 0; i < sizeof(db_items) / sizeof(db_items[0]); i++)
                        skip(&ck, db_items[i], "no database connection");
                if (conf->message_prefix || conf->ignore_message_prefix)
                        skip(&ck, "message prefix", "no database connection");
                if (conf->after_slot)
                        skip_after_slot(&ck, "no database connection");
        } else {
                add(&ck, CHECK_PASS, "connection", "database \"%s\" on %s:%s as \"%s\"", PQdb(ck.c),
                    PQhost(ck.c), PQport(ck.c), PQuser(ck.c));
                check_settings(&ck);
        }
        db_ok = ck.have_settings;
        if (db_ok) {
                check_tables(&ck);
                check_header_columns(&ck);
                check_replication_connection(&ck);
                check_output_plugins(&ck);
                check_plugin_loads(&ck);
                check_publication(&ck);
                check_message_prefix(&ck);
                check_slot(&ck);
                check_failover(&ck);
                check_after_slot(&ck);
                check_server_limits(&ck);
                check_idle_timeout(&ck);
        } else if (ck.c) {
                for (size_t i = 4; i < sizeof(db_items) / sizeof(db_items[0]); i++)
                        skip(&ck, db_items[i], "the server's settings could not be read");
                if (conf->message_prefix || conf->ignore_message_prefix)
                        skip(&ck, "message prefix", "the server's settings could not be read");
                if (conf->after_slot)
                        skip_after_slot(&ck, "the server's settings could not be read");
        }
        check_kafka(&ck, db_ok);
        PQfinish(ck.c);
        for (size_t i = 0; i < ck.ntopics; i++)
                free(ck.topics[i]);
        free(ck.topics);
        record_spec_free(ck.spec);
        if (ck.nomem) {
                check_report_free(ret_report);
                return -ENOMEM;
        }
        return 0;
}

bool check_safe(const struct check_report *report)
{
        return report->counts[CHECK_FAIL] == 0;
}

void check_print(const struct check_report *report, FILE *out)
{
        static const char *const word[] = {"PASS", "WARN", "FAIL", "SKIP"};

        for (size_t i = 0; i < report->nitems; i++)
                fprintf(out, "%s  %s: %s\n", word[report->items[i].status], report->items[i].name,
                        report->items[i].text);
        fprintf(out, "%zu passed, %zu warning%s, %zu failed, %zu skipped: %s\n",
                report->counts[CHECK_PASS], report->counts[CHECK_WARN],
                report->counts[CHECK_WARN] == 1 ? "" : "s", report->counts[CHECK_FAIL],
                report->counts[CHECK_SKIP],
                check_safe(report) ? "safe to start" : "not safe to start");
}

void check_report_free(struct check_report *report)
{
        free(report->items);
        memset(report, 0, sizeof(*report));
}
