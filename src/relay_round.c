// SPDX-License-Identifier: Apache-2.0
/*
 * The side connection's round: how the relay knows, before it confirms an
 * LSN, that nothing it cannot see hid outbox rows before it. One ordinary
 * connection (pgside.h) runs a round of catalog checks (PREFLIGHT_WATCH_SQL)
 * whenever there is something new to confirm and at least every status
 * interval, and the LSN a passed round verifies is one of the three bounds on
 * the confirmed LSN (relay_confirmable_lsn(), relay_report.c), beside the
 * ledger's flush LSN and the newest acknowledged checkpoint (relay_watch.c).
 * It knows nothing of Kafka or the checkpoint: relay.c serves it, and a
 * failed check stops the relay through relay_fail() without confirming past
 * the last verified LSN. See relay_parts.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pgsnapshot.h"
#include "publication.h"
#include "relay_parts.h"

#define ROUND_MIN_GAP_MS 50       /* rounds at most this often while there is something to verify */
#define SIDE_RETRY_MS 1000        /* after a lost side connection */
#define HELD_WARN_MS 30000        /* rounds held back by an unseen catalog change this long say so */

int relay_round_init(struct relay *r)
{
        struct relay_round *w = &r->round;
        const struct relay_config *conf = r->conf;

        w->side = pgside_new(conf->conninfo);
        if (!w->side)
                return -ENOMEM;
        w->schemas = preflight_watch_array(conf->tables, conf->ntables, true);
        w->tables = preflight_watch_array(conf->tables, conf->ntables, false);
        if (!w->schemas || !w->tables)
                return -ENOMEM;
        return 0;
}

void relay_round_free(struct relay *r)
{
        r->round.side = pgside_free(r->round.side);
        free(r->round.decoded);
        free(r->round.schemas);
        free(r->round.tables);
}

void relay_round_before_stream(struct relay *r, const struct preflight_slot *slot)
{
        struct relay_round *w = &r->round;

        w->verified = LSN_INVALID;       /* nothing new is confirmed before the first round */
        w->ndecoded = 0;
        w->slot_start_lsn = slot->confirmed_flush_lsn;
        w->slot_checked = false;
}

void relay_round_stream_started(struct relay *r)
{
        struct relay_round *w = &r->round;

        w->walsender_pid = pgstream_backend_pid(r->pg);
        w->round_lsn = LSN_INVALID;
        w->hurry_lsn = LSN_INVALID;
        w->hurry_gap_ms = 0;
        w->last_round_ms = 0;
        w->held_since_ms = 0;
        w->held_warned = false;
        w->side_retry_ms = 0;
}

void relay_round_session_ended(struct relay *r)
{
        if (pgside_abandon(r->round.side))
                log_debug("closed the side connection's attempt or round in progress: the stream ended");
}

/* The slot's plugin is pgoutput: its publication is checked too (what the preflight read at start). */
static bool pgoutput(const struct relay *r)
{
        return strcmp(r->pre.plugin, "pgoutput") == 0;
}

/*
 * pgoutput's publication as the relay started with it: the same publication
 * (OID), not altered (its row's xmin: ALTER PUBLICATION ... SET changes it),
 * publishing inserts, and each table listed by the same pg_publication_rel
 * row (removed and added again is another row). pgoutput reads the
 * publication as it was when each row was written, so a row inserted while
 * its table was out of it, or inserts were not published, never arrives:
 * a change stops the relay before it confirms past it, and says so.
 */
static int check_publication(struct relay *r, PGresult *res)
{
        const char *pub = config_publication(r->conf), *what = NULL;
        char a[LSN_STRLEN], why[600], create[1024];

        lsn_format(r->fb.sent_flush_lsn, a);
        if (PQgetisnull(res, 0, 7))
                what = "was dropped (or renamed)";
        else if (strtoul(PQgetvalue(res, 0, 7), NULL, 10) != r->pre.publication_oid)
                what = "was dropped and created again";
        else if (strcmp(PQgetvalue(res, 0, 9), "t") != 0)
                what = "no longer publishes inserts";
        else if (strcmp(PQgetvalue(res, 0, 8), r->pre.publication_xmin) != 0)
                what = "was altered (ALTER PUBLICATION ... SET, RENAME or OWNER)";
        for (size_t i = 0; !what && i < r->conf->ntables; i++) {
                uint32_t oid = PQgetisnull(res, (int)i, 10) ? 0 :
                               (uint32_t)strtoul(PQgetvalue(res, (int)i, 10), NULL, 10);

                if (oid != r->pre.pubrel_oids[i]) {
                        snprintf(why, sizeof(why), "%s \"%s\".\"%s\"", oid ? "removed and added again" :
                                 "no longer lists", r->conf->tables[i].schema, r->conf->tables[i].table);
                        what = why;
                }
        }
        if (!what)
                return 0;
        publication_create_sql(r->conf, create, sizeof(create));
        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "publication \"%s\" %s while the relay ran: pgoutput does not "
                   "send rows inserted while a table is out of the publication or inserts are not "
                   "published, and they are never sent later. Stopping; nothing after LSN %s is "
                   "confirmed. Make the publication the relay's again (`outbox-relay check` gives the SQL; "
                   "it was: %s), publish the rows committed since LSN %s by other means (outbox-relay "
                   "redrive --since), then start the relay once with --accept-config-change", pub, what, a,
                   create, a);
        return -EINVAL;
}

/*
 * sync_state where PostgreSQL hides it (from roles without pg_read_all_stats,
 * as sql/role.sql's): the walsender named by synchronous_standby_names, so
 * that commits may wait for it. Taken as a synchronous standby (the round's
 * snapshot checks are waived, verified_by_round()): otherwise a commit waits
 * for the relay's confirmation, and the relay for the commit to be visible,
 * and every commit of the cluster with them (found by a breaker helper).
 */
#define SYNC_NAMED "named"

/*
 * This relay's walsender's sync_state from a round's result, into *@ret:
 * pg_stat_replication's, or SYNC_NAMED or "async" where that is hidden.
 * Returns 0, or -ENOENT when the round saw no walsender of the slot.
 */
static int sync_state(PGresult *res, const char **ret)
{
        if (!PQgetisnull(res, 0, 6)) {
                *ret = PQgetvalue(res, 0, 6);
                return 0;
        }
        if (PQnfields(res) < 22 || PQgetisnull(res, 0, 20) || PQgetisnull(res, 0, 21))
                return -ENOENT;
        *ret = preflight_sync_standby_named(PQgetvalue(res, 0, 21), PQgetvalue(res, 0, 20)) ? SYNC_NAMED :
               "async";
        return 0;
}

/* Act on a round's result. Returns 0 if everything holds. */
static int judge_round(struct relay *r, PGresult *res)
{
        struct relay_round *w = &r->round;
        char a[LSN_STRLEN], b[LSN_STRLEN];
        uint64_t confirmed = r->fb.sent_flush_lsn;
        const char *sync;

        lsn_format(confirmed, a);
        if (PQresultStatus(res) != PGRES_TUPLES_OK || (size_t)PQntuples(res) != r->conf->ntables) {
                log_warning("the side connection's catalog check failed: %s; nothing new is confirmed "
                            "until it passes", PQresultErrorMessage(res));
                return -EAGAIN;
        }
        for (size_t i = 0; i < r->conf->ntables; i++) {
                const struct table_name *t = &r->conf->tables[i];
                uint32_t oid = PQgetisnull(res, (int)i, 1) ? 0 :
                               (uint32_t)strtoul(PQgetvalue(res, (int)i, 1), NULL, 10);
                char kind = PQgetisnull(res, (int)i, 2) ? '?' : PQgetvalue(res, (int)i, 2)[0];
                char persistence = PQgetisnull(res, (int)i, 3) ? '?' : PQgetvalue(res, (int)i, 3)[0];

                if (!oid) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "outbox table \"%s\".\"%s\" no longer exists "
                                   "(dropped or renamed while the relay ran): rows inserted under another "
                                   "name are not published. Stopping; nothing after LSN %s is confirmed. "
                                   "Put the table back under its name, or restart the relay with the new "
                                   "name (--table)", t->schema, t->table, a);
                        return -EINVAL;
                }
                if (oid != r->pre.table_oids[i]) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "outbox table \"%s\".\"%s\" is another "
                                   "relation now (OID %u, was %u when the relay started): it was dropped "
                                   "and created again, or another table was renamed to its name. Stopping; "
                                   "nothing after LSN %s is confirmed. Check which rows of either table "
                                   "were published, then restart the relay", t->schema, t->table, oid,
                                   r->pre.table_oids[i], a);
                        return -EINVAL;
                }
                if (kind != 'r') {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "outbox table \"%s\".\"%s\" is no longer a "
                                   "plain table (relkind '%c'). Stopping; nothing after LSN %s is confirmed",
                                   t->schema, t->table, kind, a);
                        return -EINVAL;
                }
                if (persistence != 'p') {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "outbox table \"%s\".\"%s\" is %s now: rows "
                                   "inserted into it are not written to the WAL, so they are never "
                                   "published, not even after SET LOGGED. Stopping; nothing after LSN %s "
                                   "is confirmed. Make it LOGGED again, publish the rows inserted since it "
                                   "became unlogged by other means, then restart the relay (sql/outbox.sql's "
                                   "event trigger refuses such DDL at the source)", t->schema, t->table,
                                   persistence == 'u' ? "UNLOGGED" : "TEMPORARY", a);
                        return -EINVAL;
                }
        }
        if (pgoutput(r) && check_publication(r, res) < 0)
                return -EINVAL;
        if (!w->slot_checked && !PQgetisnull(res, 0, 5)) {
                uint64_t now = LSN_INVALID;

                lsn_parse(PQgetvalue(res, 0, 5), strlen(PQgetvalue(res, 0, 5)), &now);
                if (now > w->slot_start_lsn) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "replication slot \"%s\" moved from LSN %s to "
                                   "%s between the relay's reading it and its starting to stream: someone "
                                   "else consumed it, and the outbox rows committed in between were never "
                                   "published by this relay. Publish them again from the outbox table, then "
                                   "start once with --accept-slot-position=%s", r->conf->slot,
                                   lsn_format(w->slot_start_lsn, b), lsn_format(now, a), a);
                        return -EINVAL;
                }
                w->slot_checked = true;
        }
        if (sync_state(res, &sync) == 0) {
                bool bad = strcmp(sync, "sync") == 0 || strcmp(sync, "quorum") == 0 ||
                           strcmp(sync, "potential") == 0 || strcmp(sync, SYNC_NAMED) == 0;

                if (bad && strcmp(sync, w->sync_state) != 0 && strcmp(sync, SYNC_NAMED) == 0)
                        log_error("this relay's walsender (PID %d) is named by synchronous_standby_names "
                                  "('%s', application_name \"%s\"; its sync_state is shown only to "
                                  "superusers and pg_read_all_stats): every commit in the cluster may now "
                                  "wait for the relay, that is for Kafka. Name the physical standbys in "
                                  "synchronous_standby_names explicitly (not '*', and not the relay's "
                                  "application_name), then SELECT pg_reload_conf()", w->walsender_pid,
                                  PQgetvalue(res, 0, 21), PQgetvalue(res, 0, 20));
                else if (bad && strcmp(sync, w->sync_state) != 0)
                        log_error("this relay's walsender (PID %d) is a synchronous standby (sync_state "
                                  "\"%s\" in pg_stat_replication): every commit in the cluster now waits "
                                  "for the relay, that is for Kafka. Name the physical standbys in "
                                  "synchronous_standby_names explicitly (not '*', and not the relay's "
                                  "application_name), then SELECT pg_reload_conf()", w->walsender_pid, sync);
                else if (!bad && w->sync_state[0] && strcmp(w->sync_state, "async") != 0)
                        log_info("this relay's walsender is no longer a synchronous standby (sync_state "
                                 "\"%s\")", sync);
                snprintf(w->sync_state, sizeof(w->sync_state), "%s", sync);
        }
        return 0;
}

int relay_round_decoded(struct relay *r, uint32_t xid, uint64_t end_lsn)
{
        struct relay_round *w = &r->round;

        if (end_lsn <= w->verified)
                return 0;
        if (w->ndecoded == w->decoded_cap) {
                size_t cap = w->decoded_cap ? 2 * w->decoded_cap : 256;
                struct relay_decoded *d = realloc(w->decoded, cap * sizeof(*d));

                if (!d)
                        return -ENOMEM;
                w->decoded = d;
                w->decoded_cap = cap;
        }
        w->decoded[w->ndecoded++] = (struct relay_decoded){.xid = xid, .end_lsn = end_lsn};
        return 0;
}

bool relay_round_full(const struct relay *r)
{
        return r->round.ndecoded >= RELAY_DECODED_MAX;
}

/* The updaters in @members ("{xid,...}", array_agg()'s text): the first that @s cannot show ended, or 0. */
static uint32_t unseen_updater(const struct pg_snapshot *s, const char *members)
{
        for (const char *p = members; *p; ) {
                char *end;
                unsigned long xid;

                while (*p == '{' || *p == ',' || *p == '}')
                        p++;
                if (!*p)
                        break;
                xid = strtoul(p, &end, 10);
                if (end == p)
                        break;
                if (xid && !pgsnap_before_xmin(s, (uint32_t)xid))
                        return (uint32_t)xid;
                p = end;
        }
        return 0;
}

/*
 * Whether a catalog row the round read (of pg_class, pg_namespace,
 * pg_publication and pg_publication_rel) carries a change by a transaction
 * that the round's snapshot @s cannot show ended (pgsnap_before_xmin()):
 * then that transaction in *@ret_xid and what the row is in @what (@size
 * bytes). The row version a snapshot reads has an xmax only if the
 * transaction that updated or deleted it had not ended for that snapshot,
 * or aborted (or it only locked the row): such a transaction can have
 * committed below the round's LSN and still be invisible. The relay may
 * never have read it (pgoutput sends nothing of a transaction that
 * publishes nothing, as one that takes the outbox out of the publication
 * and then inserts into it), so the commits read (relay_round_decoded())
 * cannot tell; and it may be a subtransaction, which the snapshot does not
 * list. Only an xmax older than every transaction the snapshot saw running
 * is surely ended, and since the row version is still the visible one,
 * aborted. Each xmax is judged both as a transaction ID (columns 12 to 15)
 * and by the updaters of the MultiXactId it can be (16 to 19), since SQL
 * cannot tell which it is (PREFLIGHT_WATCH_SQL). A result without those
 * columns counts as such a change.
 */
static bool unseen_catalog_change(const struct relay *r, PGresult *res, const struct pg_snapshot *s,
                                  uint32_t *ret_xid, char *what, size_t size)
{
        static const char *const catalogs[] = {"pg_class", "pg_namespace", "pg_publication",
                                               "pg_publication_rel"};

        *ret_xid = 0;
        if (PQnfields(res) < 20) {
                snprintf(what, size, "a catalog row (the check's result has %d columns, not 20)", PQnfields(res));
                return true;
        }
        for (int i = 0; i < PQntuples(res); i++) {
                for (int k = 0; k < 4; k++) {
                        uint32_t xid = PQgetisnull(res, i, 12 + k) ? 0 :
                                       (uint32_t)strtoul(PQgetvalue(res, i, 12 + k), NULL, 10);

                        bool multi = false;

                        if (xid && pgsnap_before_xmin(s, xid))
                                xid = 0;
                        if (!xid && !PQgetisnull(res, i, 16 + k)) {
                                xid = unseen_updater(s, PQgetvalue(res, i, 16 + k));
                                multi = true;
                        }
                        if (xid) {
                                /* A plain xmax of the same number as a live MultiXactId looks the same. */
                                snprintf(what, size, "the %s row of \"%s\".\"%s\"%s%s", catalogs[k],
                                         r->conf->tables[i].schema, r->conf->tables[i].table,
                                         k == 1 ? " (its schema)" : k == 2 ? " (its publication)" : "",
                                         multi ? " as an updater of the MultiXactId its xmax may be (the "
                                         "number may instead be an ended transaction's: then the hold "
                                         "ends with this one)" : "");
                                *ret_xid = xid;
                                return true;
                        }
                }
        }
        return false;
}

/*
 * What a round checks: each configured outbox name still the same relation
 * (OID), a table, permanent (not UNLOGGED or TEMPORARY), pgoutput's
 * publication unchanged, the slot unmoved since the relay read it, and this
 * relay's walsender not a synchronous standby. Why its snapshot matters: a
 * commit is decoded and sent as soon as it is flushed, and is visible to
 * other sessions only once its backend has left the process array (after
 * waiting for synchronous standbys), so a catalog read in between sees the
 * catalog from before it (pgsnapshot.h).
 *
 * How far a passed round verifies: up to its LSN, but not to the commit of
 * a transaction read that the round's snapshot (column 11) still saw in
 * progress, whose catalog changes the round could not see, and not at all
 * while a change of a catalog row it read is unseen
 * (unseen_catalog_change()); the next round looks again. A walsender that is
 * a synchronous standby is waited for by every commit, none visible before
 * the relay confirms it: that is logged as an error already (judge_round()),
 * and the round counts as before, so that the cluster's commits do not wait
 * for good.
 */
static uint64_t verified_by_round(struct relay *r, PGresult *res)
{
        struct relay_round *w = &r->round;
        uint64_t upto = w->round_lsn, before = w->verified;
        int64_t now = relay_mono_ms();
        struct pg_snapshot s;
        char a[LSN_STRLEN], b[LSN_STRLEN], what[400];
        uint32_t xid;

        if (strcmp(w->sync_state, "sync") == 0 || strcmp(w->sync_state, "quorum") == 0 ||
            strcmp(w->sync_state, SYNC_NAMED) == 0)
                return upto;
        if (PQnfields(res) < 12 || PQgetisnull(res, 0, 11) || pgsnap_parse(PQgetvalue(res, 0, 11), &s) < 0) {
                log_warning("the side connection's catalog check gave no snapshot (%s); nothing new is "
                            "confirmed until one does", PQnfields(res) < 12 || PQgetisnull(res, 0, 11) ?
                            "none" : PQgetvalue(res, 0, 11));
                return w->verified;
        }
        if (unseen_catalog_change(r, res, &s, &xid, what, sizeof(what))) {
                if (!w->held_since_ms)
                        w->held_since_ms = now;
                log_debug("transaction %u changed %s, and the catalog check does not see it ended yet: "
                          "verified up to LSN %s only", xid, what, lsn_format(before, b));
                if (!w->held_warned && now - w->held_since_ms >= HELD_WARN_MS) {
                        log_warning("nothing new has been confirmed for %" PRId64 " s (from LSN %s on): "
                                    "transaction %u (or a subtransaction of a savepoint: pg_stat_activity "
                                    "shows its top-level one) changed %s, and the relay cannot yet show that "
                                    "it ended: it is still open, or it rolled back while a transaction older "
                                    "than it still runs (the oldest is %" PRIu32 ", as backend_xid or "
                                    "backend_xmin in pg_stat_activity, or in pg_prepared_xacts). Until then "
                                    "the relay cannot tell whether the change hides outbox rows. End those "
                                    "transactions and confirmation goes on; nothing is lost meanwhile",
                                    (now - w->held_since_ms) / 1000, lsn_format(before, b), xid, what,
                                    (uint32_t)s.xmin);
                        w->held_warned = true;
                }
                pgsnap_free(&s);
                return before;
        }
        if (w->held_warned)
                log_info("the change of a catalog row the relay checks has ended: confirming again");
        w->held_since_ms = 0;
        w->held_warned = false;
        for (size_t i = 0; i < w->ndecoded && w->decoded[i].end_lsn <= upto; i++) {
                if (!pgsnap_ended(&s, w->decoded[i].xid)) {
                        log_debug("transaction %u ending at LSN %s was read but the catalog check did not "
                                  "see it ended yet: verified up to LSN %s only", w->decoded[i].xid,
                                  lsn_format(w->decoded[i].end_lsn, a), lsn_format(before, b));
                        upto = before;
                        break;
                }
                before = w->decoded[i].end_lsn;
        }
        pgsnap_free(&s);
        return upto;
}

/* Forget the commits the verified LSN covers. */
static void prune_decoded(struct relay_round *w)
{
        size_t i = 0;

        while (i < w->ndecoded && w->decoded[i].end_lsn <= w->verified)
                i++;
        if (i) {
                memmove(w->decoded, w->decoded + i, (w->ndecoded - i) * sizeof(*w->decoded));
                w->ndecoded -= i;
        }
}

/* What a round sent now verifies: the LSN received, or acknowledged, so far. */
static uint64_t received_lsn(const struct relay *r)
{
        uint64_t received = r->fb.server_lsn > r->fb.write_lsn ? r->fb.server_lsn : r->fb.write_lsn;

        return ledger_flush_lsn(r->ledger) > received ? ledger_flush_lsn(r->ledger) : received;
}

static void start_round(struct relay *r)
{
        struct relay_round *w = &r->round;
        int64_t now = relay_mono_ms();
        uint64_t received = received_lsn(r);
        const char *params[4] = {w->schemas, w->tables, r->conf->slot,
                                 pgoutput(r) ? config_publication(r->conf) : NULL};

        if (pgside_busy(w->side) || now < w->side_retry_ms)
                return;
        /* A commit waits: without the gap, or a shorter one (relay_round_hurry()). */
        if (!(received > w->verified && (now - w->last_round_ms >= ROUND_MIN_GAP_MS ||
                                          (w->hurry_lsn > w->verified &&
                                           now - w->last_round_ms >= w->hurry_gap_ms))) &&
            now - w->last_round_ms < r->fb.interval_ms && w->slot_checked)
                return;
        if (pgside_query(w->side, PREFLIGHT_WATCH_SQL, 4, params) < 0)
                return;
        w->round_lsn = received;
        w->last_round_ms = now;
}

void relay_round_hurry(struct relay *r, uint64_t lsn)
{
        if (lsn > r->round.hurry_lsn) {
                r->round.hurry_lsn = lsn;
                r->round.hurry_gap_ms = 0;
        }
}

int64_t relay_round_due_ms(const struct relay *r)
{
        const struct relay_round *w = &r->round;
        int64_t due;

        /* Not when relay_round_serve() sends none: after a failure other than a row's. */
        if (!r->streaming || (r->failure && r->failure != RELAY_EXIT_DATA) || w->hurry_lsn <= w->verified ||
            received_lsn(r) <= w->verified || pgside_busy(w->side))
                return -1;
        due = w->last_round_ms + w->hurry_gap_ms;
        if (due < w->side_retry_ms)
                due = w->side_retry_ms;
        due -= relay_mono_ms();
        return due > 0 ? due : 0;
}

void relay_round_poll_fd(const struct relay *r, struct pollfd *pfd)
{
        pfd->fd = r->streaming ? pgside_fd(r->round.side) : -1;
        pfd->events = pfd->fd >= 0 ? pgside_events(r->round.side) : 0;
}

static void collect_round(struct relay *r)
{
        struct relay_round *w = &r->round;
        char err[ERRLEN];
        PGresult *res;

        switch (pgside_serve(w->side, err, sizeof(err))) {
        case PGSIDE_LOST:
                if (!w->side_down)
                        log_warning("lost the side connection to the database: %s; nothing new is "
                                    "confirmed until it is back", err);
                w->side_down = true;
                w->side_retry_ms = relay_mono_ms() + SIDE_RETRY_MS;
                break;
        case PGSIDE_RESULT:
                res = pgside_result(w->side);
                if (w->side_down)
                        log_info("the side connection to the database is back");
                w->side_down = false;
                if (judge_round(r, res) == 0) {
                        uint64_t upto = verified_by_round(r, res);

                        if (upto > w->verified) {
                                w->verified = upto;
                                log_debug("verified the outbox tables and the slot up to LSN %s",
                                          lsn_format(w->verified, (char[LSN_STRLEN]){0}));
                                prune_decoded(w);
                        }
                }
                /* Held back short of what a commit waits for: the next such round a little later. */
                if (w->hurry_lsn > w->verified) {
                        w->hurry_gap_ms = w->hurry_gap_ms ? 2 * w->hurry_gap_ms : 1;
                        if (w->hurry_gap_ms > ROUND_MIN_GAP_MS)
                                w->hurry_gap_ms = ROUND_MIN_GAP_MS;
                }
                PQclear(res);
                break;
        case PGSIDE_NONE:
                break;
        }
}

void relay_round_serve(struct relay *r)
{
        /* After a row error the drain still confirms what came before it; after anything else, nothing. */
        if (!r->streaming || (r->failure && r->failure != RELAY_EXIT_DATA))
                return;
        collect_round(r);
        if (r->failure && r->failure != RELAY_EXIT_DATA)
                return;
        start_round(r);
}
