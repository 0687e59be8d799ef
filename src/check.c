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

#include "lsn.h"
#include "pgstream.h"
#include "preflight.h"
#include "producer.h"
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
        char **topics;         /* topics to look for in the cluster */
        size_t ntopics;
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

/* Append @s to @buf (@size bytes) at *@o, truncating. */
static void append(char *buf, size_t size, size_t *o, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t size, size_t *o, const char *fmt, ...)
{
        va_list ap;
        int n;

        if (*o >= size)
                return;
        va_start(ap, fmt);
        n = vsnprintf(buf + *o, size - *o, fmt, ap);
        va_end(ap);
        if (n > 0)
                *o += (size_t)n;
        if (*o >= size)
                *o = size - 1;
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

/* The transactions a slot's creation waits for, as text for the timeout message. */
static void running_transactions(struct check *ck, char *buf, size_t size)
{
        PGresult *r = PQexec(ck->c,
                "SELECT pid, usename, application_name, state, "
                "extract(epoch FROM now() - xact_start)::bigint FROM pg_stat_activity "
                "WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() "
                "ORDER BY xact_start LIMIT 5");
        size_t o = 0;

        buf[0] = '\0';
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0) {
                append(buf, size, &o, "; transactions holding it up (pg_stat_activity): ");
                for (int i = 0; i < PQntuples(r); i++)
                        append(buf, size, &o, "%sPID %s (user \"%s\", application \"%s\", %s for %s s)",
                               i ? ", " : "", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
                               PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
        }
        PQclear(r);
}

static void check_wal2json(struct check *ck)
{
        char err[1024], hint[1200], state[6] = "", slot[64], lsn[LSN_STRLEN];
        struct pgstream_system sys;
        struct pgstream *s = NULL;
        uint64_t at;
        int r;

        if (strcmp(ck->set.wal_level, "logical") != 0 || !(ck->set.rolreplication || ck->set.rolsuper)) {
                skip(ck, "wal2json", "needs wal_level logical and a role with REPLICATION");
                return;
        }
        r = pgstream_connect(ck->conf->conninfo, &s, &sys, err, sizeof(err));
        if (r < 0) {
                add(ck, CHECK_FAIL, "wal2json", "cannot open a replication connection: %s; fix: allow "
                    "role \"%s\" to connect for replication in pg_hba.conf (host replication %s ...)",
                    err, ck->set.user, ck->set.user);
                return;
        }
        snprintf(slot, sizeof(slot), "outbox_relay_check_%ld", (long)getpid());
        r = pgstream_create_slot(s, slot, "wal2json", true, PREFLIGHT_PROBE_TIMEOUT_MS, &at, err,
                                 sizeof(err), state);
        if (r == 0) {
                add(ck, CHECK_PASS, "wal2json", "loads: temporary slot \"%s\" created at %s and "
                    "dropped", slot, lsn_format(at, lsn));
        } else if (r == -ETIMEDOUT) {
                running_transactions(ck, hint, sizeof(hint));
                add(ck, CHECK_FAIL, "wal2json", "could not tell: creating a temporary slot did not "
                    "finish within %d s, because a slot's creation waits for the transactions "
                    "running on the server to end%s; fix: run the check again when they have ended",
                    PREFLIGHT_PROBE_TIMEOUT_MS / 1000, hint);
        } else {
                if (preflight_check_plugin_libraries(&ck->set, hint, sizeof(hint)) == 0)
                        snprintf(hint, sizeof(hint), "%s", strstr(err, "could not access file") ?
                                 "fix: install wal2json on the server (Debian: postgresql-NN-wal2json)" :
                                 strstr(err, "output_plugin_libraries") ?
                                 "fix: as a superuser, add wal2json to output_plugin_libraries, one "
                                 "quoted name each and keeping what SHOW output_plugin_libraries "
                                 "lists, e.g. ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', "
                                 "'wal2json'; SELECT pg_reload_conf();" :
                                 "fix: see the server's message");
                add(ck, CHECK_FAIL, "wal2json",
                    "cannot create a temporary slot with wal2json: %s%s%s%s; %s",
                    err, state[0] ? " (SQLSTATE " : "", state, state[0] ? ")" : "", hint);
        }
        pgstream_free(s);  /* a temporary slot goes with its connection */
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
        if (!s.exists) {
                add(ck, CHECK_WARN, name, "does not exist; fix: run `outbox-relay slot create` or "
                    "start with --create-slot (a new slot starts at the current WAL: rows committed "
                    "before it are not published)");
                return;
        }
        if (preflight_check_slot(&s, slot, ck->set.dbname, err, sizeof(err)) < 0) {
                add(ck, CHECK_FAIL, name, "%s", err);
                return;
        }
        if (s.active_pid)
                add(ck, CHECK_WARN, name, "in use by PID %d (another relay?): this relay would wait "
                    "as a warm standby until it is free", s.active_pid);
        else
                add(ck, CHECK_PASS, name, "plugin wal2json, database \"%s\", confirmed_flush_lsn %s%s%s",
                    s.database, lsn_format(s.confirmed_flush_lsn, a),
                    s.wal_status[0] ? ", wal_status " : "", s.wal_status);
}

static void check_server_limits(struct check *ck)
{
        int64_t wst = ck->set.wal_sender_timeout_ms, si = ck->conf->status_interval_ms;

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
 * values that give no valid topic. Returns 0, -EIO with the reason in @err.
 */
static int template_topics(struct check *ck, size_t *ret_bad, char *err, size_t errlen)
{
        const struct relay_config *conf = ck->conf;

        *ret_bad = 0;
        for (size_t i = 0; i < conf->ntables; i++) {
                const struct table_name *t = &conf->tables[i];
                char *sql, *s, *n;
                const char **vals;
                size_t size = 256, o = 0;
                PGresult *r;

                size += (strlen(t->schema) + strlen(t->table)) * 2;
                for (size_t k = 0; k < ck->ntcols; k++)
                        size += strlen(ck->tcols[k]) * 2 + 16;
                sql = malloc(size);
                vals = calloc(ck->ntcols, sizeof(*vals));
                if (!sql || !vals) {
                        free(sql);
                        free(vals);
                        return -ENOMEM;
                }
                append(sql, size, &o, "SELECT DISTINCT ");
                for (size_t k = 0; k < ck->ntcols; k++) {
                        char *c = PQescapeIdentifier(ck->c, ck->tcols[k], strlen(ck->tcols[k]));

                        append(sql, size, &o, "%s%s::text", k ? ", " : "", c ? c : "");
                        PQfreemem(c);
                }
                s = PQescapeIdentifier(ck->c, t->schema, strlen(t->schema));
                n = PQescapeIdentifier(ck->c, t->table, strlen(t->table));
                append(sql, size, &o, " FROM %s.%s LIMIT %d", s ? s : "", n ? n : "",
                       CHECK_MAX_TEMPLATE_VALUES);
                PQfreemem(s);
                PQfreemem(n);
                r = PQexec(ck->c, sql);
                free(sql);
                if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                        snprintf(err, errlen, "%s", PQresultErrorMessage(r));
                        PQclear(r);
                        free(vals);
                        return -EIO;
                }
                for (int row = 0; row < PQntuples(r); row++) {
                        const char *topic = NULL;
                        char rerr[512];

                        for (size_t k = 0; k < ck->ntcols; k++)
                                vals[k] = PQgetisnull(r, row, (int)k) ? NULL
                                                                      : PQgetvalue(r, row, (int)k);
                        if (record_render_topic(ck->spec, vals, &topic, rerr, sizeof(rerr)) < 0)
                                (*ret_bad)++;
                        else if (add_topic(ck, topic) < 0)
                                ck->nomem = 1;
                }
                PQclear(r);
                free(vals);
        }
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

        present[0] = missing[0] = '\0';
        for (size_t i = from; i < to; i++) {
                size_t *o = exists[i] ? &op : &om, *cnt = exists[i] ? &np : &nm;
                char *buf = exists[i] ? present : missing;

                if (*cnt < CHECK_MAX_LISTED)
                        append(buf, sizeof(present), o, "%s\"%s\"", *cnt ? ", " : "", ck->topics[i]);
                else if (*cnt == CHECK_MAX_LISTED)
                        append(buf, sizeof(present), o, ", ...");
                (*cnt)++;
        }
        if (to - from == 1 && nm == 0)
                add(ck, CHECK_PASS, name, "exists");
        else if (to - from == 1 && autocreate)
                add(ck, CHECK_PASS, name, "does not exist yet; the broker creates it on first use (%s)",
                    why);
        else if (to - from == 1)
                add(ck, CHECK_FAIL, name, "does not exist and is not created on first use (%s); fix: "
                    "create it (kafka-topics.sh --create --topic %s) or allow auto-creation", why,
                    ck->topics[from]);
        else if (nm == 0)
                add(ck, CHECK_PASS, name, "%zu exist%s: %s%s", np, np == 1 ? "s" : "", present, note);
        else if (autocreate)
                add(ck, CHECK_PASS, name, "%zu exist%s%s; %zu do not exist yet and are created by the "
                    "broker on first use (%s): %s%s", np, np ? ": " : "", present, nm, why, missing,
                    note);
        else
                add(ck, CHECK_FAIL, name, "missing and not created on first use (%s): %s%s; fix: "
                    "create %s (kafka-topics.sh --create --topic NAME) or allow auto-creation",
                    why, missing, note, nm == 1 ? "it" : "them");
}

/* The check produces nothing: no delivery reports; errors show in the requests' results. */
static void ignore_report(void *ctx, const struct producer_report *report)
{
        (void)ctx;
        (void)report;
}

static void ignore_error(void *ctx, int fatal, int err, const char *reason)
{
        (void)ctx;
        (void)fatal;
        (void)err;
        (void)reason;
}

static void check_kafka(struct check *ck, bool db_ok)
{
        const struct relay_config *conf = ck->conf;
        struct producer *p = NULL;
        char err[1024], why[600], note[700], suffix[704], tname[320];
        size_t first_template = 0, bad = 0;
        bool *exists = NULL, autocreate = false, any_missing = false, values_read = false;
        int32_t broker = -1;
        int r;

        r = producer_new(conf, ignore_report, ignore_error, NULL, &p, err, sizeof(err));
        if (r < 0) {
                add(ck, CHECK_FAIL, "kafka brokers", "%s", err);
                skip(ck, "topics", "no Kafka producer");
                return;
        }
        if (producer_check_brokers(p, PREFLIGHT_PROBE_TIMEOUT_MS, err, sizeof(err)) < 0) {
                add(ck, CHECK_FAIL, "kafka brokers", "cannot reach any Kafka broker of \"%s\" within "
                    "%d s: %s; fix: check --brokers, the -X security settings and that the brokers "
                    "are up", conf->brokers, PREFLIGHT_PROBE_TIMEOUT_MS / 1000, err);
                skip(ck, "topics", "no Kafka broker reachable");
                producer_free(p);
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
        } else if (template_topics(ck, &bad, err, sizeof(err)) < 0) {
                snprintf(note, sizeof(note), "cannot read the template's values: %.600s", err);
        } else {
                values_read = true;
                snprintf(note, sizeof(note), "for the first %d distinct values per table now in "
                         "the outbox", CHECK_MAX_TEMPLATE_VALUES);
                if (bad)
                        snprintf(note + strlen(note), sizeof(note) - strlen(note), "; %zu of them "
                                 "give%s no valid topic name", bad, bad == 1 ? "s" : "");
        }
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
        goto out;
nomem:
        ck->nomem = 1;
out:
        free(exists);
        producer_free(p);
}

int check_run(const struct relay_config *conf, struct check_report *ret_report, char *err,
              size_t errlen)
{
        static const char *const db_items[] = {
                "server version", "wal_level", "server_encoding", "replication privilege", "tables",
                "wal2json", "slot", "max_slot_wal_keep_size", "wal_sender_timeout",
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

        r = preflight_connect(conf->conninfo, PREFLIGHT_PROBE_TIMEOUT_MS, &ck.c, cerr, sizeof(cerr));
        if (r < 0) {
                add(&ck, CHECK_FAIL, "connection", "%s", cerr);
                for (size_t i = 0; i < sizeof(db_items) / sizeof(db_items[0]); i++)
                        skip(&ck, db_items[i], "no database connection");
        } else {
                add(&ck, CHECK_PASS, "connection", "database \"%s\" on %s:%s as \"%s\"", PQdb(ck.c),
                    PQhost(ck.c), PQport(ck.c), PQuser(ck.c));
                check_settings(&ck);
        }
        db_ok = ck.have_settings;
        if (db_ok) {
                check_tables(&ck);
                check_wal2json(&ck);
                check_slot(&ck);
                check_server_limits(&ck);
        } else if (ck.c) {
                for (size_t i = 4; i < sizeof(db_items) / sizeof(db_items[0]); i++)
                        skip(&ck, db_items[i], "the server's settings could not be read");
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
