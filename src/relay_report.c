// SPDX-License-Identifier: Apache-2.0
/*
 * What the relay tells the server, Kafka and the operator: standby status
 * updates (write and flush LSN, on the interval, on request, soon after the
 * ledger's flush LSN moved) and how far they may confirm (the least of what
 * relay_watch.c and the ledger allow), the reading of quick reply requests
 * as a server shutdown, the value of a checkpoint record, the first failure
 * and its exit status, the numbers /metrics and /readyz serve, and the
 * periodic stats line. The bottom of the relay's parts: it calls none of
 * them. See relay_parts.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cloudevents.h"
#include "log.h"
#include "monoclock.h"
#include "relay_parts.h"

#define STOPPING_QUICK 3          /* quick reply requests in a row: the server is shutting down */
#define STOPPING_QUICK_MAX_MS 2000 /* a request this soon after our last update is quick (at most) */

const char RELAY_STATE_STREAMING[] = "streaming";

int64_t relay_mono_ms(void)
{
        return monoclock_ms();
}

int64_t relay_wall_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void relay_fail(struct relay *r, int code, const char *fmt, ...)
{
        char msg[2048];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        log_error("%s", msg);
        if (!r->failure || (r->failure == RELAY_EXIT_RETRY && code != RELAY_EXIT_RETRY))
                r->failure = code;
}

int relay_send_status(struct relay *r)
{
        char err[ERRLEN], a[LSN_STRLEN], b[LSN_STRLEN];
        uint64_t flush = relay_confirmable_lsn(r);
        uint64_t write = r->fb.write_lsn > flush ? r->fb.write_lsn : flush;

        if (pgstream_send_status(r->pg, write, flush, relay_wall_us(), err, sizeof(err)) < 0) {
                /* After a failure that ended the stream this only repeats it. */
                if (!r->failure)
                        relay_fail(r, RELAY_EXIT_RETRY, "could not send standby status update: %s", err);
                return -EIO;
        }
        if (flush > r->fb.sent_flush_lsn)
                r->stats.last_confirm_ms = r->stats.last_progress_ms = relay_mono_ms();
        if (flush != r->fb.sent_flush_lsn)
                log_debug("confirmed flush LSN %s (write %s, %" PRIu64 " messages outstanding)",
                          lsn_format(flush, a), lsn_format(write, b), ledger_outstanding(r->ledger));
        r->fb.sent_flush_lsn = flush;
        r->fb.last_status_ms = relay_mono_ms();
        r->fb.reply_pending = false;
        r->stats.c.status_updates++;
        relay_publish_metrics(r);
        return 0;
}

int64_t relay_status_due_ms(const struct relay *r)
{
        int64_t since = relay_mono_ms() - r->fb.last_status_ms, left = r->fb.interval_ms - since;

        if (r->fb.reply_pending)
                return 0;
        if (relay_confirmable_lsn(r) != r->fb.sent_flush_lsn && STATUS_MIN_GAP_MS - since < left)
                left = STATUS_MIN_GAP_MS - since;
        return left < 0 ? 0 : left;
}

int relay_maybe_send_status(struct relay *r)
{
        return relay_status_due_ms(r) == 0 ? relay_send_status(r) : 0;
}

/*
 * A walsender asks for a reply in two places (walsender.c, PostgreSQL 10 to
 * 18): WalSndKeepaliveIfNecessary(), once half of wal_sender_timeout has
 * passed since the last message it received from the client, and WalSndDone(),
 * at the end of a shutdown (or a standby's promotion), again as soon as the
 * reply arrives, until the reported flush LSN reaches what it sent. The relay
 * sends a standby status update at least every half wal_sender_timeout, so a
 * request that arrives sooner than a quarter of it (at most
 * STOPPING_QUICK_MAX_MS, in case the setting was lowered since the relay read
 * it; any request when it is 0) after our last update cannot be of the first
 * kind. STOPPING_QUICK of them in a row mean a shutdown that waits for the
 * relay: it gets a grace period for acks to drain, then the relay ends the
 * stream (relay.c) rather than hold the shutdown up.
 *
 * Measured from our last update, not between requests: a relay 200 ms of
 * round trip away from its server, or short of CPU, sees requests that far
 * apart, and would never recognize the shutdown that way. One request
 * crossing our update on the wire may look quick; the next one cannot.
 */
static bool reply_request_is_quick(const struct relay *r, int64_t now)
{
        int64_t wst = r->pre.wal_sender_timeout_ms;
        int64_t quick = wst / 4 < STOPPING_QUICK_MAX_MS ? wst / 4 : STOPPING_QUICK_MAX_MS;

        if (wst <= 0)
                return true;
        return r->fb.last_status_ms > 0 && now - r->fb.last_status_ms < quick;
}

void relay_note_reply_request(struct relay *r, uint64_t wal_end)
{
        int64_t now = relay_mono_ms();
        char a[LSN_STRLEN];

        r->fb.quick_requests = reply_request_is_quick(r, now) ? r->fb.quick_requests + 1 : 0;
        r->fb.reply_pending = true;
        if (r->fb.quick_requests >= STOPPING_QUICK && !r->fb.server_stopping_ms) {
                r->fb.server_stopping_ms = now;
                log_info("the server is shutting down and waits for confirmation of LSN %s (%" PRIu64
                         " messages unacknowledged)", lsn_format(wal_end, a),
                         ledger_outstanding(r->ledger));
        }
}

void relay_note_standby(struct relay *r, const char *holder)
{
        struct relay_standby *sb = &r->standby;
        int64_t now = relay_mono_ms();

        r->stats.c.standby_checks++;
        if (!sb->on) {
                sb->on = true;
                sb->since_ms = now;
        } else if (strcmp(sb->holder, holder) == 0 && now - sb->logged_ms < RELAY_STANDBY_REMIND_MS) {
                return;
        }
        if (strcmp(sb->holder, holder) == 0 && sb->logged_ms)
                log_info("%s: still waiting as a warm standby (for %" PRId64 " min; a reminder every "
                         "%d min)", holder, (now - sb->since_ms) / 60000,
                         RELAY_STANDBY_REMIND_MS / 60000);
        else
                log_info("%s: waiting as a warm standby (logged again when the holder changes, "
                         "else every %d min)", holder, RELAY_STANDBY_REMIND_MS / 60000);
        snprintf(sb->holder, sizeof(sb->holder), "%s", holder);
        sb->logged_ms = now;
}

/* A failed notification is logged when it starts failing, and when it works again. */
static void notified(struct relay *r, int ret)
{
        if (ret < 0 && !r->notify_failing)
                log_warning("cannot notify the service manager at $NOTIFY_SOCKET: %s (systemd "
                            "will not see the relay ready, or will miss its watchdog pings)",
                            strerror(-ret));
        else if (ret == 0 && r->notify_failing)
                log_info("notifying the service manager works again");
        r->notify_failing = ret < 0;
}

void relay_set_state(struct relay *r, const char *state)
{
        r->state = state;
        notified(r, sdnotify_status(&r->notify, *r->stop ? "stopping" : state));
}

void relay_notify_turn(struct relay *r)
{
        int ret = 0;

        if (!r->notify.on)
                return;
        if (*r->stop)
                ret = sdnotify_stopping(&r->notify);
        if (ret == 0)
                ret = sdnotify_status(&r->notify, *r->stop ? "stopping" : r->state);
        if (ret == 0 && !*r->stop && (r->state == RELAY_STATE_STREAMING || r->standby.on))
                ret = sdnotify_ready(&r->notify);
        if (ret == 0)
                ret = sdnotify_watchdog(&r->notify, relay_mono_ms());
        notified(r, ret);
}

int64_t relay_notify_due_ms(const struct relay *r)
{
        return sdnotify_watchdog_due_ms(&r->notify, relay_mono_ms());
}

void relay_note_active(struct relay *r)
{
        struct relay_standby *sb = &r->standby;

        if (sb->on)
                log_info("the slot is free: taking over after %.1f s as a warm standby",
                         (relay_mono_ms() - sb->since_ms) / 1000.0);
        *sb = (struct relay_standby){0};
}

/* The periodic one-line summary at info level (--stats-interval). */
static void maybe_log_stats(struct relay *r, int64_t now, int64_t oldest_ms)
{
        struct relay_stats *st = &r->stats;
        int64_t span = now - st->last_stats_ms;
        uint64_t flush = ledger_flush_lsn(r->ledger), errors;
        char a[LSN_STRLEN], b[LSN_STRLEN];

        if (r->conf->stats_interval_ms <= 0 || !st->errors)
                return;
        errors = metrics_labels_total(st->errors);
        if (!st->last_stats_ms) {
                st->last_stats_ms = now;
                return;
        }
        if (span < r->conf->stats_interval_ms)
                return;
        log_info("stats: %" PRIu64 " rows acknowledged in %.0f s (%.1f/s), %" PRIu64 " dead-lettered, "
                 "%" PRIu64 " delivery errors; confirmed LSN %s, server WAL end %s (lag %" PRIu64
                 " bytes); %" PRIu64 " messages outstanding, oldest unacknowledged %.1f s; %" PRIu64
                 " reconnects", st->c.acked - st->prev.acked, span / 1000.0,
                 (st->c.acked - st->prev.acked) * 1000.0 / (double)span,
                 st->c.dead_lettered - st->prev.dead_lettered, errors - st->prev_errors,
                 lsn_format(flush, a), lsn_format(r->fb.server_lsn, b),
                 r->fb.server_lsn > flush ? r->fb.server_lsn - flush : 0, ledger_outstanding(r->ledger),
                 oldest_ms / 1000.0, st->c.reconnects);
        st->prev = st->c;
        st->prev_errors = errors;
        st->last_stats_ms = now;
}

void relay_publish_metrics(struct relay *r)
{
        int64_t oldest, now = relay_mono_ms(), oldest_ms = 0;
        bool pending = ledger_oldest_stamp(r->ledger, &oldest) == 0;

        /* Commit time of the oldest transaction read but not yet confirmable. */
        if (pending && relay_wall_us() > oldest)
                oldest_ms = (relay_wall_us() - oldest) / 1000;
        if (!pending && r->streaming) {
                /* Nothing waits for Kafka: caught up, which is progress. */
                r->stats.last_progress_ms = now;
                if (relay_confirmable_lsn(r) == r->fb.sent_flush_lsn &&
                    relay_confirmable_lsn(r) == ledger_flush_lsn(r->ledger))
                        r->stats.last_confirm_ms = now;
        }
        maybe_log_stats(r, now, oldest_ms);
        if (!r->metrics)
                return;
        metrics_update(r->metrics, &(struct metrics_snapshot){
                .c = r->stats.c,
                .flush_lsn = relay_confirmable_lsn(r),
                .checkpoint_lsn = r->watch.ckpt_acked,
                .write_lsn = r->fb.write_lsn,
                .server_lsn = r->fb.server_lsn,
                .outstanding = ledger_outstanding(r->ledger),
                .inflight_bytes = r->prod ? producer_inflight_bytes(r->prod) : 0,
                .oldest_unacked_ms = oldest_ms,
                .since_confirm_ms = r->stats.last_confirm_ms ? now - r->stats.last_confirm_ms : -1,
                .since_progress_ms = r->stats.last_progress_ms ? now - r->stats.last_progress_ms : -1,
                .ready_timeout_ms = r->conf->ready_timeout_ms,
                .brokers_up = r->prod ? producer_brokers_up(r->prod) : 0,
                .streaming = r->streaming && !r->failure && r->state == RELAY_STATE_STREAMING,
                .standby = r->standby.on,
                .state = r->failure ? "failed" : r->state,
                .blocked = relay_confirm_blocked(r),
                .published_by_topic = r->stats.topics,
                .errors_by_code = r->stats.errors,
                .latency = &r->stats.latency,
                .exactly_once = r->conf->exactly_once,
                .txn_committed = r->eos.stats_committed,
                .txn_aborted = r->eos.stats_aborted,
                .txn_records = r->eos.stats_rows,
                .txn_commit_latency = &r->eos.commit_latency,
        });
}

void relay_keep_answered(struct relay *r)
{
        if (r->prod)
                producer_poll(r->prod);
        if (!r->streaming)
                return;
        pgstream_flush(r->pg);
        if (relay_maybe_send_status(r) < 0)
                r->streaming = false;
}

uint64_t relay_confirmable_lsn(const struct relay *r)
{
        const struct relay_watch *w = &r->watch;
        uint64_t c = ledger_flush_lsn(r->ledger);

        if (w->ckpt_unknown)
                return r->fb.sent_flush_lsn;
        if (w->ckpt_acked < c)
                c = w->ckpt_acked;
        if (r->round.verified < c)
                c = r->round.verified;
        return c > r->fb.sent_flush_lsn ? c : r->fb.sent_flush_lsn;
}

const char *relay_confirm_blocked(const struct relay *r)
{
        const struct relay_watch *w = &r->watch;

        if (!r->streaming)
                return NULL;
        if (r->round.side_down)
                return "the side connection to the database is down: nothing new is confirmed until "
                       "it is back";
        if (w->ckpt_unknown)
                return "the newest checkpoint could not be read from Kafka: nothing new is confirmed "
                       "until it is";
        return NULL;
}

void relay_publication_state(const struct relay *r, char buf[CHECKPOINT_PUBLICATION_MAX])
{
        uint64_t h = CHECKPOINT_FNV_START;    /* of the list's text, as checkpoint_digest() */
        size_t used;
        char one[16];
        int n;

        buf[0] = '\0';
        if (strcmp(r->pre.plugin, "pgoutput") != 0 || !r->pre.publication_oid || !r->pre.pubrel_oids)
                return;
        n = snprintf(buf, CHECKPOINT_PUBLICATION_MAX, "oid=%u xmin=%s rels=", r->pre.publication_oid,
                     r->pre.publication_xmin);
        used = (size_t)n;
        for (size_t i = 0; i < r->conf->ntables; i++) {
                int k = snprintf(one, sizeof(one), "%s%u", i ? "," : "", r->pre.pubrel_oids[i]);

                h = checkpoint_fnv(h, one, (size_t)k);
                if (used + (size_t)k < CHECKPOINT_PUBLICATION_MAX) {
                        memcpy(buf + used, one, (size_t)k + 1);
                        used += (size_t)k;
                } else {
                        used = CHECKPOINT_PUBLICATION_MAX;   /* too long: by its digest below */
                }
        }
        if (used >= CHECKPOINT_PUBLICATION_MAX)
                snprintf(buf, CHECKPOINT_PUBLICATION_MAX, "oid=%u xmin=%s rels#%016" PRIx64,
                         r->pre.publication_oid, r->pre.publication_xmin, h);
}

int relay_checkpoint_value(struct relay *r, struct checkpoint *c, const char *mode, char *value, size_t size)
{
        const struct relay_watch *w = &r->watch;
        int n;

        c->timeline = r->sys.timeline;
        snprintf(c->digest, sizeof(c->digest), "%s", w->digest);
        snprintf(c->mapping, sizeof(c->mapping), "%s", w->mapping);
        relay_publication_state(r, c->publication);
        snprintf(c->mode, sizeof(c->mode), "%s", mode);
        snprintf(c->writer, sizeof(c->writer), "%s", w->writer);
        ce_format_time(relay_wall_us(), c->time, sizeof(c->time));
        n = checkpoint_format(c, value, size);
        if (n < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "cannot format a checkpoint record: %s", strerror(-n));
                return -EIO;
        }
        return n;
}
