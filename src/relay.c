// SPDX-License-Identifier: Apache-2.0
/*
 * The orchestrator's loop: how it turns. relay_run() checks the database
 * (preflight), creates the producer, then runs sessions: connect, verify the
 * slot, START_REPLICATION, read XLogData into relay_row.c while the in-flight
 * bounds allow, end the copy. Between sessions it keeps what Kafka
 * acknowledged, discards the rest (and a broken producer), and waits with
 * jittered backoff, or as a warm standby while another process holds the
 * slot. Every wait is relay_wait(): one poll() over the stop pipe, Kafka,
 * HTTP and the replication socket, that also sends due standby status
 * updates, and only this file calls it: the parts below it never wait.
 * `slot create`'s first checkpoint (relay_checkpoint_new_slot()) is a
 * short run of its own. The top of the relay's family: it calls its parts
 * (relay_parts.h), which never call back into it.
 */
#include "relay.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "relay_parts.h"

#define READ_BUDGET 4096          /* CopyData messages handled per loop turn before waiting again */
#define CHECKPOINT_ACK_MS 30000   /* waiting for a checkpoint written before streaming */
#define WAIT_MAX_MS 1000          /* relay_wait() sleeps at most this long: clocks and metrics move */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 15000
#define SLOT_BUSY_MAX_MS 2000     /* warm standby: how often to look at a slot held by another relay */
#define RECONNECT_DRAIN_MS 5000   /* wait this long for acks before discarding the producer */
#define BROKER_CHECK_MS 10000
#define STOPPING_GRACE_MS 2000    /* a stopping server: let acks drain this long before ending the stream */

#define PLUGIN_OPTIONS_MAX 18      /* names and values of an output plugin's options */

enum { SESSION_ENDED, SESSION_SLOT_BUSY };

/*
 * After poll(): empty the signal pipe, or poll() would not block again (a
 * stop's byte too: the flag says it, and the drain after SIGTERM would spin
 * for --shutdown-timeout). A SIGHUP's byte while no stop is requested reloads.
 */
static void check_reload(struct relay *r, short revents)
{
        char buf[64];

        if (!(revents & POLLIN))
                return;
        while (read(r->stop_fd, buf, sizeof(buf)) > 0)
                ;
        if (*r->stop)
                return;
        if (r->reload && *r->reload->requested) {
                *r->reload->requested = 0;
                sdnotify_reloading(&r->notify);
                r->reload->fn(r->reload->ctx);
                sdnotify_reloaded(&r->notify);
        }
}

/*
 * relay_wait()'s work after poll(): @pg_revents of the replication socket,
 * @read_timer: read it even if poll() did not say so (batched reads).
 * Returns as relay_wait().
 */
static int serve(struct relay *r, short pg_revents, bool read_timer)
{
        char err[ERRLEN];

        if (r->streaming && ((pg_revents & (POLLIN | POLLERR | POLLHUP)) || read_timer) &&
            pgstream_consume(r->pg, err, sizeof(err)) < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "lost the replication connection: %s", err);
                r->streaming = false;
                return -EIO;
        }
        if (r->streaming && (pg_revents & POLLOUT))
                pgstream_flush(r->pg);
        if (r->prod) {
                producer_poll(r->prod);
                /* Delivery reports served: a produce refused for a full queue may be tried again. */
                r->kafka_full = false;
        }
        if (r->metrics)
                metrics_serve(r->metrics);
        relay_round_serve(r);
        relay_watch_serve(r);
        relay_limit_serve(r);
        if (r->streaming && relay_maybe_send_status(r) < 0) {
                r->streaming = false;
                return -EIO;
        }
        relay_publish_metrics(r);
        return 0;
}

int relay_wait(struct relay *r, int timeout_ms, unsigned flags)
{
        enum { STOP, KAFKA, HTTP, PG, SIDE, NFDS };
        struct pollfd pfd[NFDS] = {
                [STOP] = {r->stop_fd, POLLIN, 0},
                [KAFKA] = {r->prod ? producer_fd(r->prod) : -1, POLLIN, 0},
                [HTTP] = {r->metrics ? metrics_fd(r->metrics) : -1, POLLIN, 0},
                [PG] = {-1, 0, 0},
                [SIDE] = {-1, 0, 0},
        };
        int64_t t = timeout_ms < 0 || timeout_ms > WAIT_MAX_MS ? WAIT_MAX_MS : timeout_ms;
        int http = r->metrics ? metrics_timeout_ms(r->metrics) : -1;
        int64_t ping = relay_notify_due_ms(r);
        int64_t round = relay_round_due_ms(r);
        bool read_timer = false;
        int ret;

        /*
         * The one wait is the top loop's: nothing that handles what came (a
         * turn of stream() or end_session(), a Kafka commit's step, what this
         * wait serves) waits in it again. What cannot go on holds back.
         */
        assert(!r->handling);
        if (r->streaming) {
                pfd[PG].fd = pgstream_socket(r->pg);
                if (flags & RELAY_WAIT_READ) {
                        pfd[PG].events |= POLLIN;
                        /* Batched reads: a tail below the batch is read on this timer. */
                        read_timer = r->reads.batch;
                        if (read_timer && t > RELAY_READ_BATCH_WAIT_MS)
                                t = RELAY_READ_BATCH_WAIT_MS;
                }
                if (pgstream_want_write(r->pg))
                        pfd[PG].events |= POLLOUT;
                if (relay_status_due_ms(r) < t)
                        t = relay_status_due_ms(r);
        }
        relay_round_poll_fd(r, &pfd[SIDE]);
        /* libmicrohttpd closes idle connections only when it runs: at its deadline too. */
        if (http >= 0 && http < t)
                t = http;
        if (ping >= 0 && ping < t)
                t = ping;
        if (round >= 0 && round < t)
                t = round;
        if (poll(pfd, NFDS, (int)t) < 0 && errno != EINTR)
                for (int i = 0; i < NFDS; i++)
                        pfd[i].revents = 0;
        check_reload(r, pfd[STOP].revents);
        /* The watchdog's ping says this loop turns: here, and nowhere else. */
        relay_notify_turn(r);
        r->handling = true;
        ret = serve(r, pfd[PG].revents, read_timer);
        r->handling = false;
        return ret;
}

static const char *operator_name(void)
{
        struct passwd *pw = getpwuid(geteuid());
        const char *user = getenv("USER");

        return user && *user ? user : pw ? pw->pw_name : "unknown";
}

static bool stage_full(const struct relay *r)
{
        return r->stage.n >= RELAY_STAGE_MAX || r->stage.bytes >= RELAY_STAGE_MAX_BYTES;
}

/* Keep a copy of a message, after the others. Returns 0 or -ENOMEM. */
static int stage_push(struct relay *r, const char *buf, size_t len)
{
        struct relay_stage *st = &r->stage;
        struct relay_staged *e;

        assert(st->n < RELAY_STAGE_MAX);
        e = &st->q[(st->head + st->n) % RELAY_STAGE_MAX];
        e->data = malloc(len ? len : 1);
        if (!e->data)
                return -ENOMEM;
        memcpy(e->data, buf, len);
        e->len = len;
        st->n++;
        st->bytes += len;
        return 0;
}

static void stage_pop(struct relay *r)
{
        struct relay_stage *st = &r->stage;
        struct relay_staged *e = &st->q[st->head];

        st->bytes -= e->len;
        free(e->data);
        e->data = NULL;
        st->head = (st->head + 1) % RELAY_STAGE_MAX;
        st->n--;
}

/* A session's end: what was staged is not handled (never confirmed); streaming again reads it anew. */
static void stage_clear(struct relay *r)
{
        while (r->stage.n)
                stage_pop(r);
        r->stage.head = 0;
}

/* Parse a CopyData message of @len bytes into @ret_m. Returns 0, or -EBADMSG (recorded). */
static int parse_message(struct relay *r, const char *buf, size_t len, struct replmsg *ret_m)
{
        if (replmsg_parse(buf, len, ret_m) == 0)
                return 0;
        relay_fail(r, RELAY_EXIT_RETRY, "unexpected replication message of %zu bytes, type 0x%02x", len,
                   len ? (unsigned char)buf[0] : 0);
        return -EBADMSG;
}

/*
 * Handle one message the server sent, parsed (@staged: from the staging
 * queue, its reply request noted when it arrived): a primary keepalive, or
 * XLogData for relay_row.c.
 */
static void handle_message(struct relay *r, const struct replmsg *m, bool staged)
{
        if (m->kind == REPLMSG_KEEPALIVE) {
                /*
                 * Not inside a pgoutput transaction whose Begin the ledger has not
                 * seen yet (its end LSN comes with its Commit): the keepalive's
                 * walEnd is then no promise about it.
                 */
                if (!relay_pgo_busy(&r->pgo))
                        ledger_keepalive(r->ledger, m->wal_end);
                if (m->reply_requested && !staged)
                        relay_note_reply_request(r, m->wal_end);
                return;
        }
        if (m->data_start > r->fb.write_lsn)
                r->fb.write_lsn = m->data_start;
        r->fb.send_time_us = m->send_time_us;
        /* pgoutput's decoder gives its records to relay_row.c itself; wal2json's lines go there. */
        if (relay_pgo_on(&r->pgo))
                relay_pgo_line(r, m);
        else
                relay_handle_line(r, m);
}

/*
 * Read what the server sent, within the in-flight bounds. @draining: the
 * relay is stopping; lines are dropped unread (never confirmed) and only
 * reply requests are served. While a Kafka commit is in flight
 * (relay_eos_busy()) messages go to the staging queue, in order, and are
 * handled once it has ended, before anything read after them; a record the
 * commit of a probe held back (r->held_back) waits there too. Returns 1
 * if more may be buffered, 0 if not, negative after a failure during this
 * call (one recorded before does not stop a drain from reading).
 */
static int read_stream(struct relay *r, bool draining)
{
        char err[ERRLEN], state[6] = "";
        int failure = r->failure;  /* a drain after a row error still reads */

        /*
         * A commit in flight: the wait does not wake for the socket (stream()),
         * so what the kernel holds is taken in here, at each turn, to be staged.
         */
        if (!draining && r->streaming && relay_eos_busy(r) && !stage_full(r) &&
            pgstream_consume(r->pg, err, sizeof(err)) < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "lost the replication connection: %s", err);
                r->streaming = false;
                return -EIO;
        }
        for (int budget = READ_BUDGET; budget > 0 && r->failure == failure; budget--) {
                const char *buf;
                size_t len;
                struct replmsg m;
                int ret;

                if (!r->streaming)
                        return -EIO;
                if (!draining && relay_backpressured(r))
                        return 0;
                if (!draining && !relay_eos_busy(r)) {
                        /* The rest of a pgoutput transaction handed out before reading on. */
                        if (relay_pgo_ready(&r->pgo)) {
                                relay_pgo_drain(r);
                                continue;
                        }
                        /* Then what waited for a commit, in order. */
                        if (r->stage.n) {
                                struct relay_staged *e = &r->stage.q[r->stage.head];

                                if (parse_message(r, e->data, e->len, &m) < 0)
                                        return -EBADMSG;
                                r->held_back = false;
                                handle_message(r, &m, true);
                                if (r->held_back)
                                        r->held_back = false;  /* again after the commit it began */
                                else
                                        stage_pop(r);
                                continue;
                        }
                } else if (!draining && stage_full(r)) {
                        return 0;
                }
                ret = pgstream_read(r->pg, &buf, &len, err, sizeof(err), state);
                if (ret == 0)
                        return 0;
                if (ret < 0) {
                        char a[LSN_STRLEN];

                        relay_fail(r, RELAY_EXIT_RETRY, "replication stream from slot \"%s\" ended at LSN "
                                   "%s: %s%s%s%s", r->conf->slot, lsn_format(r->fb.write_lsn, a), err,
                                   state[0] ? " (SQLSTATE " : "", state, state[0] ? ")" : "");
                        r->streaming = false;
                        return ret;
                }
                r->reads.window_bytes += len;
                if (parse_message(r, buf, len, &m) < 0)
                        return -EBADMSG;
                if (m.wal_end > r->fb.server_lsn)
                        r->fb.server_lsn = m.wal_end;
                if (draining) {
                        if (m.kind == REPLMSG_KEEPALIVE && m.reply_requested)
                                relay_note_reply_request(r, m.wal_end);
                        continue;
                }
                if (relay_eos_busy(r) || r->stage.n) {
                        /* A Kafka commit is in flight: the server is answered now, the rest waits. */
                        if (m.kind == REPLMSG_KEEPALIVE && m.reply_requested)
                                relay_note_reply_request(r, m.wal_end);
                        if (stage_push(r, buf, len) < 0) {
                                relay_fail(r, RELAY_EXIT_RETRY, "out of memory");
                                return -ENOMEM;
                        }
                        continue;
                }
                r->held_back = false;
                handle_message(r, &m, false);
                if (r->held_back) {
                        r->held_back = false;
                        if (stage_push(r, buf, len) < 0) {
                                relay_fail(r, RELAY_EXIT_RETRY, "out of memory");
                                return -ENOMEM;
                        }
                }
        }
        return r->failure != failure ? -1 : 1;
}

/*
 * One turn of stream(): a step of the Kafka commit in flight, what the
 * server sent, failed delivery reports. Returns what read_stream() says
 * (1: more may be buffered, 0: not), or -1 to end the session.
 */
static int stream_turn(struct relay *r)
{
        int more;

        /*
         * --exactly-once: a checkpoint-only Kafka transaction when one is due,
         * and the commit in flight, one step a turn.
         */
        if (relay_eos_on(r))
                relay_eos_checkpoint(r, relay_watch_checkpoint_target(r));
        if (relay_eos_step(r) < 0)
                return -1;
        /*
         * Failed reports before new rows: a dead-letter copy held back for a
         * full queue goes before the stream fills the queue again (rows wait
         * while one is kept: relay_backpressured()).
         */
        relay_handle_nacks(r);
        if (r->failure)
                return -1;
        more = read_stream(r, false);
        if (more < 0)
                return -1;
        /*
         * A stopping server waits for the relay's confirmation. Acks get a
         * grace period; what only lacks the side connection's check (its
         * backend is terminated first) cannot get it: no reason to wait.
         */
        if (r->fb.server_stopping_ms && relay_confirmable_lsn(r) < r->fb.server_lsn &&
            (relay_mono_ms() - r->fb.server_stopping_ms > STOPPING_GRACE_MS ||
             (r->round.side_down && ledger_outstanding(r->ledger) == 0))) {
                char a[LSN_STRLEN];

                relay_fail(r, RELAY_EXIT_RETRY, "the server is shutting down and %" PRIu64
                           " messages are still unacknowledged (or not yet verified and "
                           "checkpointed): ending the stream at confirmed LSN %s so the shutdown "
                           "is not held up; what follows will be sent again after reconnecting",
                           ledger_outstanding(r->ledger), lsn_format(relay_confirmable_lsn(r), a));
                return -1;
        }
        if (more == 0 && relay_eos_idle(r) < 0)
                return -1;
        return more;
}

/*
 * Batch the socket's reads while the server sends faster than
 * RELAY_READ_BATCH_RATE, measured over RELAY_READ_WINDOW_MS or more; wake
 * at every arrival again once it is slower than RELAY_READ_SINGLE_RATE. A
 * window in which the loop held back from reading (the in-flight bounds)
 * says nothing of the server's rate and is passed over. What
 * a batch costs: a tail below RELAY_READ_BATCH is read up to
 * RELAY_READ_BATCH_WAIT_MS late, and only at a rate that brings
 * RELAY_READ_BATCH in a few milliseconds.
 */
static void pace_reads(struct relay *r)
{
        int64_t now = relay_mono_ms(), span = now - r->reads.window_ms;
        uint64_t rate;
        bool batch;
        int e;

        if (span < RELAY_READ_WINDOW_MS)
                return;
        rate = r->reads.window_bytes * 1000 / (uint64_t)span;
        batch = r->reads.batch ? rate >= RELAY_READ_SINGLE_RATE : rate >= RELAY_READ_BATCH_RATE;
        batch = batch && !r->reads.unsupported;
        r->reads.window_ms = now;
        r->reads.window_bytes = 0;
        if (r->reads.held) {
                r->reads.held = false;
                return;
        }
        if (batch == r->reads.batch)
                return;
        e = pgstream_set_read_batch(r->pg, batch ? RELAY_READ_BATCH : 1);
        if (e < 0) {
                log_debug("replication reads not batched: %s", strerror(-e));
                r->reads.unsupported = true;
                return;
        }
        log_debug("replication reads %s at %" PRIu64 " bytes/s", batch ? "batched" : "unbatched", rate);
        r->reads.batch = batch;
}

static void stream(struct relay *r)
{
        r->fb.server_stopping_ms = 0;
        r->fb.quick_requests = 0;
        while (!r->failure && !*r->stop) {
                bool held;
                int more;

                /* Nothing in a turn waits: what cannot go on holds back until the next wait. */
                r->handling = true;
                more = stream_turn(r);
                r->handling = false;
                if (more < 0)
                        break;
                pace_reads(r);
                /*
                 * Idle: sleep no longer than the open Kafka transaction's time bound
                 * (or the commit in flight needs). A commit in flight is woken by
                 * Kafka and its own deadlines, not by each chunk the server sends:
                 * read_stream() takes those in and stages them at every turn, and
                 * a wake-up for each would take CPU from the commit it waits for.
                 */
                held = relay_backpressured(r);
                /* A commit in flight still reads, at each turn (read_stream()): its bytes count. */
                r->reads.held |= held;
                if (relay_wait(r, more > 0 ? 0 : (int)relay_eos_idle_due_ms(r),
                               held || relay_eos_busy(r) ? 0 : RELAY_WAIT_READ) < 0)
                        break;
        }
}

/*
 * End the session: on a requested stop, wait for acknowledgements
 * (bounded) while answering the server; then report the flush LSN and end
 * the copy if the connection still works.
 */
static void end_session(struct relay *r)
{
        /*
         * On a requested stop wait up to --shutdown-timeout; after a row error
         * a little, so earlier transactions still acked get confirmed and are
         * not sent again; after a lost connection or broken producer not at all.
         */
        int64_t wait_ms = !r->failure ? r->conf->shutdown_timeout_ms :
                          r->failure == RELAY_EXIT_DATA && !r->producer_broken ?
                          (r->conf->shutdown_timeout_ms < 5000 ? r->conf->shutdown_timeout_ms : 5000) : 0;
        int64_t deadline = relay_mono_ms() + wait_ms;
        int failure = r->failure;
        char err[ERRLEN];
        uint64_t flush;

        if (!r->failure)
                log_info("stopping: waiting up to %" PRId64 " ms for %" PRIu64 " outstanding "
                         "acknowledgements", wait_ms, ledger_outstanding(r->ledger));
        /* --exactly-once: a stop commits what is open; after a failure it is aborted (and redone). */
        if (!r->failure && r->streaming)
                relay_eos_flush(r);
        else if (r->failure == RELAY_EXIT_DATA)
                while (relay_eos_abort(r) == -EAGAIN)
                        relay_wait(r, 0, 0);
        /* Until everything is acknowledged, and verified and checkpointed so that it can be confirmed. */
        while (r->streaming && (ledger_outstanding(r->ledger) > 0 || relay_eos_busy(r) ||
                                relay_confirmable_lsn(r) < relay_eos_stop_target(r, ledger_flush_lsn(r->ledger))) &&
               relay_mono_ms() < deadline && r->failure == failure) {
                int64_t t = deadline - relay_mono_ms();

                int ret;

                if (relay_eos_on(r))
                        relay_eos_checkpoint(r, relay_watch_checkpoint_target(r));
                if (relay_eos_step(r) < 0)
                        break;
                if (relay_eos_busy(r) && relay_eos_idle_due_ms(r) < t)
                        t = relay_eos_idle_due_ms(r);
                if (relay_wait(r, (int)t, RELAY_WAIT_READ) < 0)
                        break;
                r->handling = true;
                ret = read_stream(r, true);
                if (ret >= 0)
                        relay_handle_nacks(r);
                r->handling = false;
                if (ret < 0)
                        break;
        }
        stage_clear(r);
        if (!r->failure && ledger_outstanding(r->ledger) > 0)
                log_warning("stopping with %" PRIu64 " messages unacknowledged: they will be sent "
                            "again on the next start", ledger_outstanding(r->ledger));
        /* A last report; after a lost connection it fails quietly. */
        flush = relay_confirmable_lsn(r);
        if (r->streaming &&
            pgstream_send_status(r->pg, r->fb.write_lsn > flush ? r->fb.write_lsn : flush, flush,
                                 relay_wall_us(), err, sizeof(err)) == 0) {
                int64_t t0 = relay_mono_ms();
                int e;

                r->fb.sent_flush_lsn = flush;
                /* A stopping server may not end the copy until it is confirmed: do not wait long. */
                e = pgstream_finish(r->pg, r->fb.server_stopping_ms ? 1000 : 5000, err, sizeof(err));
                if (e < 0 && !r->failure)
                        log_warning("ending the replication stream: %s", err);
                else if (e == 0)
                        log_debug("ended the replication stream in %" PRId64 " ms", relay_mono_ms() - t0);
        }
        r->streaming = false;
}

static int build_add_tables(const struct relay_config *conf, char **ret_tables)
{
        size_t size = 1, o = 0;
        char *buf;

        for (size_t i = 0; i < conf->ntables; i++)
                size += 2 * (strlen(conf->tables[i].schema) + strlen(conf->tables[i].table)) + 3;
        buf = malloc(size);
        if (!buf)
                return -ENOMEM;
        for (size_t i = 0; i < conf->ntables; i++) {
                int n;

                if (i)
                        buf[o++] = ',';
                n = w2j_escape_table_name(conf->tables[i].schema, buf + o, size - o);
                if (n < 0)
                        goto fail;
                o += (size_t)n;
                buf[o++] = '.';
                n = w2j_escape_table_name(conf->tables[i].table, buf + o, size - o);
                if (n < 0)
                        goto fail;
                o += (size_t)n;
        }
        buf[o] = '\0';
        *ret_tables = buf;
        return 0;
fail:
        free(buf);
        return -ENOSPC;
}

/* Check, after every (re)connect, that the slot is still the one the relay was streaming. */
static int check_slot(struct relay *r, struct preflight_slot *ret_slot)
{
        struct preflight_slot slot;
        enum preflight_slot_verdict v;
        char err[ERRLEN];

        if (preflight_read_slot(pgstream_conn(r->pg), r->conf->slot, &slot, err, sizeof(err)) < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "%s", err);
                return -EIO;
        }
        v = preflight_slot_verdict(&slot, r->pre.dbname, r->pre.plugin);
        preflight_slot_explain(v, &slot, r->conf->slot, r->pre.dbname, r->pre.plugin,
                               PREFLIGHT_RECONNECTING, ledger_flush_lsn(r->ledger), err, sizeof(err));
        if (v == PREFLIGHT_SLOT_ACTIVE) {
                relay_note_standby(r, err);
                return -EBUSY;
        }
        if (v != PREFLIGHT_SLOT_OK) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "%s", err);
                return -EINVAL;
        }
        *ret_slot = slot;
        return 0;
}

static int new_producer(struct relay *r, char *err, size_t errlen);

/*
 * --exactly-once, the slot free: a new transactional producer whose
 * init_transactions() fences every older producer of the id (a stale relay
 * of this slot, paused or cut off) and aborts its open transaction, before
 * the newest checkpoint is read. Only here, not at start: a warm standby
 * must not fence the active relay. Returns 0 or -EIO (recorded).
 */
static int eos_session(struct relay *r)
{
        char err[ERRLEN], turn[sizeof(r->eos.tid) + 32], fenced[sizeof(r->eos.tid) + 128];
        int ret;

        r->prod = producer_free(r->prod);
        r->eos.open = r->eos.aborting = false;
        /*
         * Only this producer has the second id's, to fence it or take turns:
         * the one of start() (a warm standby's) never takes a transaction.
         */
        r->prod_opts.transactional_second = true;
        ret = new_producer(r, err, sizeof(err));
        r->prod_opts.transactional_second = false;
        if (ret < 0) {
                if (!r->failure)
                        relay_fail(r, RELAY_EXIT_RETRY, "cannot create the Kafka producer: %s", err);
                return -EIO;
        }
        if (relay_eos_init(r) < 0)
                return -EIO;
        turn[0] = fenced[0] = '\0';
        if (producer_paired(r->prod))
                snprintf(turn, sizeof(turn), " and \"%s.1\" in turn", r->eos.tid);
        else if (producer_second_id_refused(r->prod))
                snprintf(fenced, sizeof(fenced), " (the broker refuses \"%s.1\" to the relay's credentials, so "
                         "none of their producers holds it)", r->eos.tid);
        else
                snprintf(fenced, sizeof(fenced), ", and of \"%s.1\"", r->eos.tid);
        log_info("exactly-once: Kafka transactions as \"%s\"%s (librdkafka %s), commit interval %" PRId64
                 " ms; older producers of that id are fenced%s", r->eos.tid, turn, producer_library_version(),
                 r->eos.interval_ms, fenced);
        if (r->prod_opts.transactional_pair && producer_second_id_refused(r->prod))
                log_warning("exactly-once: the broker refuses transactional.id \"%s.1\" to the relay, so one "
                            "producer takes every Kafka transaction, and records arrive later than with two "
                            "(--kafka-transactional-producers=auto); fix: grant WRITE and DESCRIBE on a "
                            "PREFIXED TransactionalId ACL \"%s\", or set --kafka-transactional-producers=1",
                            r->eos.tid, r->eos.tid);
        return 0;
}

/*
 * The output plugin's options for START_REPLICATION: wal2json's (format
 * version 2 with what the relay reads, add-tables), or pgoutput's (protocol
 * version 2, streaming, text values, the publication, logical messages). Either sends
 * logical messages of every prefix (relay_row.c decides). Sets @st.
 */
static void plugin_options(struct relay *r, const char *opts[PLUGIN_OPTIONS_MAX],
                           struct pgstream_start *st)
{
        const char *w2j[] = {
                "format-version", "2",       "include-transaction", "true",
                "include-lsn", "true",       "include-xids", "true",
                "include-timestamp", "true",
                /* OIDs, not names: cheaper for the walsender, and never unescaped (wal2json). */
                "include-types", "false",    "include-type-oids", "true",
                "add-tables", r->add_tables,
                /*
                 * No add-msg-prefixes: the walsender sends every logical message, so that
                 * one whose prefix looks like an outbox's but is not --message-prefix stops
                 * the relay instead of being passed over unseen (relay_row.c).
                 */
        };
        const char *pgo[] = {
                /*
                 * Version 2 (PostgreSQL 14, the relay's oldest), text values (binary is off),
                 * no two-phase. Streaming: a transaction past the walsender's
                 * logical_decoding_work_mem comes in blocks as it is decoded, held by the
                 * relay (pgoutput.c) until its Stream Commit, rather than spilled to disk in
                 * pg_replslot/ on the server and decoded again at its commit.
                 */
                "proto_version", "2",
                "streaming", relay_pgo_on(&r->pgo) && relay_pgo_streaming(&r->pgo, r->pre.server_version_num,
                                                                          r->conf->message_prefix != NULL)
                             ? "on" : "off",
                "publication_names", config_publication(r->conf),
                /*
                 * Always, as wal2json sends them without add-msg-prefixes: messages of every
                 * prefix, so that one of an outbox's prefix is never passed over unseen.
                 */
                "messages", "true",
        };
        const char **v = relay_pgo_on(&r->pgo) ? pgo : w2j;
        size_t n = relay_pgo_on(&r->pgo) ? sizeof(pgo) / sizeof(pgo[0]) : sizeof(w2j) / sizeof(w2j[0]);

        memcpy(opts, v, n * sizeof(*v));
        *st = (struct pgstream_start){r->conf->slot, opts, n / 2};
}

/* One replication connection, from connect to end. Returns SESSION_*. */
static int session(struct relay *r)
{
        const char *opts[PLUGIN_OPTIONS_MAX];
        struct pgstream_start st;
        char err[ERRLEN], state[6] = "", a[LSN_STRLEN];
        struct preflight_slot slot;
        struct checkpoint newest;
        int ret;

        relay_set_state(r, "connecting");
        ret = pgstream_connect(r->conf->conninfo, &r->pg, &r->sys, err, sizeof(err));
        if (ret == -EPROTONOSUPPORT) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "the replication connection did not reach a "
                           "PostgreSQL server's replication protocol: %s. A connection pooler (PgBouncer, "
                           "pgpool) cannot carry logical replication: connect the relay to PostgreSQL "
                           "directly, not through a pooler (-d, or the PG* environment)", err);
                return SESSION_ENDED;
        }
        if (ret < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "cannot open the replication connection: %s", err);
                return SESSION_ENDED;
        }
        if (!r->system_id[0]) {
                snprintf(r->system_id, sizeof(r->system_id), "%s", r->sys.system_id);
        } else if (strcmp(r->system_id, r->sys.system_id) != 0) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT,
                           "the server's system identifier changed from %s to %s: this is another "
                           "cluster (restored, re-initialised or a different server at the same "
                           "address). Its slot positions have nothing to do with what was published "
                           "from LSN %s on. Stopping so that an operator decides how to reconcile the "
                           "outbox", r->system_id, r->sys.system_id,
                           lsn_format(ledger_flush_lsn(r->ledger), a));
                return SESSION_ENDED;
        }
        /* What the checkpoint's timeline is judged against (relay_watch_before_stream()). */
        free(r->tli_history);
        r->tli_history = NULL;
        if (r->sys.timeline > 1 &&
            pgstream_timeline_history(r->pg, r->sys.timeline, &r->tli_history, &r->tli_history_len, err,
                                      sizeof(err)) < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "cannot read the history of timeline %u: %s", r->sys.timeline,
                           err);
                return SESSION_ENDED;
        }
        ret = check_slot(r, &slot);
        if (ret == -EBUSY) {
                relay_set_state(r, "standby: the slot is held by another process");
                return relay_watch_standby(r) < 0 ? SESSION_ENDED : SESSION_SLOT_BUSY;
        }
        if (ret < 0)
                return SESSION_ENDED;
        if (relay_eos_on(r) && eos_session(r) < 0)
                return SESSION_ENDED;
        relay_set_state(r, "checking the slot's checkpoint");
        relay_round_before_stream(r, &slot);
        if (relay_watch_before_stream(r, &slot, &newest) < 0)
                return SESSION_ENDED;
        if (relay_eos_on(r))
                relay_eos_resume(r, &newest);
        relay_pgo_session_start(&r->pgo);
        plugin_options(r, opts, &st);
        ret = pgstream_start(r->pg, &st, err, sizeof(err), state);
        if (ret < 0) {
                if (strcmp(state, "55006") == 0) {
                        relay_note_standby(r, err);
                        relay_set_state(r, "standby: the slot is held by another process");
                        return SESSION_SLOT_BUSY;
                }
                if (strcmp(state, "42704") == 0) {
                        /*
                         * The slot was there a moment ago (check_slot): dropped in
                         * between, by someone racing this reconnect. The same
                         * verdict, and the same advice, as a slot found missing.
                         */
                        preflight_slot_explain(PREFLIGHT_SLOT_MISSING, &slot, r->conf->slot,
                                               r->pre.dbname, r->pre.plugin, PREFLIGHT_RECONNECTING,
                                               ledger_flush_lsn(r->ledger), err, sizeof(err));
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "%s", err);
                        return SESSION_ENDED;
                }
                relay_fail(r, strcmp(state, "42501") == 0 ||
                           strcmp(state, "55000") == 0 ? RELAY_EXIT_ENVIRONMENT : RELAY_EXIT_RETRY,
                           "cannot start replication from slot \"%s\": %s%s%s%s", r->conf->slot, err,
                           state[0] ? " (SQLSTATE " : "", state, state[0] ? ")" : "");
                return SESSION_ENDED;
        }
        r->streaming = true;
        /* A new socket: every arrival wakes the loop until the rate says otherwise. */
        r->reads = (struct relay_reads){.window_ms = relay_mono_ms()};
        relay_round_stream_started(r);
        relay_watch_stream_started(r);
        relay_set_state(r, RELAY_STATE_STREAMING);
        relay_note_active(r);
        log_info("streaming from slot \"%s\" (confirmed flush LSN %s) of system %s, database \"%s\"",
                 r->conf->slot, lsn_format(ledger_flush_lsn(r->ledger), a), r->sys.system_id,
                 r->sys.dbname);
        r->stats.c.connects++;
        r->fb.last_status_ms = relay_mono_ms();
        stream(r);
        relay_set_state(r, *r->stop ? "stopping" : "stream ended");
        end_session(r);
        return SESSION_ENDED;
}

/* Write a checkpoint of @lsn and wait for Kafka to acknowledge it. Returns 0 or -EIO (recorded). */
static int checkpoint_now(struct relay *r, uint64_t lsn)
{
        struct relay_watch *w = &r->watch;
        int64_t deadline = relay_mono_ms() + CHECKPOINT_ACK_MS;
        int ret;

        while ((ret = relay_watch_send_checkpoint(r, lsn)) == -ENOBUFS && !r->failure && !*r->stop &&
               relay_mono_ms() < deadline)
                relay_wait(r, 100, 0);
        if (ret < 0) {
                if (ret == -ENOBUFS && !r->failure && !*r->stop)
                        relay_fail(r, RELAY_EXIT_RETRY, "librdkafka's queue stayed full for %d s: cannot "
                                   "write the checkpoint record", CHECKPOINT_ACK_MS / 1000);
                return -EIO;
        }
        while (w->ckpt_inflight && !r->failure && !*r->stop && relay_mono_ms() < deadline)
                relay_wait(r, 100, 0);
        if (r->failure || *r->stop)
                return -EIO;
        if (w->ckpt_acked < lsn) {
                relay_fail(r, RELAY_EXIT_RETRY, "Kafka did not acknowledge the checkpoint record within %d "
                           "s", CHECKPOINT_ACK_MS / 1000);
                return -EIO;
        }
        return 0;
}

/*
 * Before the new slot's first checkpoint: the newest one of a dropped slot
 * of that name, below @lsn, says what no slot decoded. Returns 0 (go on and
 * write), -EINVAL with the failure in @err (refused), -EIO.
 */
static int judge_dropped_slot(struct relay *r, uint64_t lsn, bool refuse_older, char *err, size_t errlen)
{
        const struct relay_config *conf = r->conf;
        char a[LSN_STRLEN], b[LSN_STRLEN];
        struct checkpoint c;
        bool found = false;
        int ret;

        ret = relay_watch_read_newest(r, &c, &found, err, errlen);
        if (ret == -EINVAL) {
                snprintf(err, errlen, "the slot was created, but the newest checkpoint of a slot of that "
                         "name cannot be read (see above)");
                return -EINVAL;
        }
        if (ret < 0) {
                char why[512];

                snprintf(why, sizeof(why), "%s", err);
                snprintf(err, errlen, "the slot was created, but the newest checkpoint of a slot of that name "
                         "cannot be read (%s); start again", why);
                return -EIO;
        }
        if (!found || c.lsn == LSN_INVALID || c.lsn >= lsn)
                return 0;
        lsn_format(lsn, a);
        lsn_format(c.lsn, b);
        if (refuse_older && conf->accept_slot_position != lsn) {
                snprintf(err, errlen, "replication slot \"%s\" did not exist and was created by this start "
                         "(--create-slot) at LSN %s, but a relay of a slot of that name published up to LSN "
                         "%s (its checkpoint, written by %s at %s): that slot was dropped, and the outbox "
                         "rows committed between LSN %s and %s were decoded by no slot and are not "
                         "published. The new slot is kept and holds what is committed from now on. Publish "
                         "the rows committed since the old slot was lost again from the outbox table "
                         "(outbox-relay(7), \"A lost slot\" under RUNBOOK), then start once with "
                         "--accept-slot-position=%s; give --create-slot at a relay's first start only",
                         conf->slot, a, b, c.writer, c.time, b, a, a);
                return -EINVAL;
        }
        if (refuse_older)
                log_warning("accepting replication slot \"%s\" created by this start at LSN %s in place of "
                            "a dropped one published up to LSN %s, as requested with "
                            "--accept-slot-position: rows committed in between are not published by this "
                            "relay; remove the option after this start", conf->slot, a, b);
        else
                log_warning("a relay of a slot named \"%s\" published up to LSN %s (its checkpoint, written "
                            "by %s at %s): the rows committed between LSN %s and the new slot's %s are not "
                            "published unless published again from the outbox table (outbox-relay(7), "
                            "\"A lost slot\" under RUNBOOK)", conf->slot, b, c.writer, c.time, b, a);
        return 0;
}

int relay_checkpoint_new_slot(const struct relay_config *conf, uint64_t lsn, bool refuse_older, char *err,
                              size_t errlen)
{
        volatile sig_atomic_t never = 0;
        struct relay r = {.conf = conf, .guarantee = relay_guarantee_of(conf), .on_delivery = relay_on_delivery,
                          .on_kafka_event = relay_on_kafka_event, .stop = &never, .stop_fd = -1,
                          .state = "slot create"};
        struct pgstream_system sys;
        struct pgstream *pg = NULL;
        int ret = -EIO;

        r.ledger = ledger_new(LSN_INVALID);
        r.prod_props = calloc(2 * conf->nprops + 1, sizeof(*r.prod_props));
        if (!r.ledger || !r.prod_props || relay_watch_init(&r) < 0) {
                snprintf(err, errlen, "out of memory");
                goto out;
        }
        for (size_t i = 0; i < conf->nprops; i++) {
                r.prod_props[2 * i] = conf->props[i].name;
                r.prod_props[2 * i + 1] = conf->props[i].value;
        }
        r.prod_opts = (struct producer_options){.brokers = conf->brokers, .props = r.prod_props,
                                                .nprops = conf->nprops};
        if (pgstream_connect(conf->conninfo, &pg, &sys, err, errlen) < 0)
                goto out;
        r.sys = sys;
        snprintf(r.system_id, sizeof(r.system_id), "%s", sys.system_id);
        snprintf(r.pre.dbname, sizeof(r.pre.dbname), "%s", sys.dbname);
        if (producer_new(&r.prod_opts, r.on_delivery, r.on_kafka_event, &r, &r.prod, err,
                         errlen) < 0)
                goto out;
        if (producer_check_brokers(r.prod, 10000, err, errlen) < 0) {
                char why[512];

                snprintf(why, sizeof(why), "%s", err);
                snprintf(err, errlen, "the slot was created, but its first checkpoint cannot be written: "
                         "no Kafka broker of \"%s\" answered within 10 s (%s). Give `slot create` the "
                         "relay's -b and -X settings and run `slot drop --yes` and `slot create` again, or "
                         "start the relay once with --accept-slot-position=%s", conf->brokers, why,
                         lsn_format(lsn, (char[LSN_STRLEN]){0}));
                goto out;
        }
        /* No mapping: `slot create` streams nothing; the first relay writes its own. */
        r.watch.mapping[0] = r.watch.digest[0] = '\0';
        if (checkpoint_key(r.system_id, r.pre.dbname, conf->slot, r.watch.key, sizeof(r.watch.key)) < 0 ||
            relay_watch_ensure_topic(&r) < 0)
                goto not_written;
        ret = judge_dropped_slot(&r, lsn, refuse_older, err, errlen);
        if (ret < 0)
                goto out;
        if (checkpoint_now(&r, lsn) == 0) {
                ret = 0;
                goto out;
        }
not_written:
        ret = r.failure == RELAY_EXIT_ENVIRONMENT ? -EINVAL : -EIO;
        snprintf(err, errlen, "cannot write the new slot's checkpoint to topic \"%s\" (see above); a relay "
                 "started now will refuse the slot until it is accepted with --accept-slot-position",
                 conf->checkpoint_topic);
out:
        pgstream_free(pg);
        producer_free(r.prod);
        ledger_free(r.ledger);
        free(r.prod_props);
        return ret;
}

/* Wait up to @ms unless a stop is requested, serving Kafka and HTTP meanwhile. */
static void pause_ms(struct relay *r, int64_t ms)
{
        int64_t deadline = relay_mono_ms() + ms;

        while (!*r->stop && relay_mono_ms() < deadline)
                relay_wait(r, (int)(deadline - relay_mono_ms()), 0);
}

/* A producer whose batches fit the topics' known limits (relay_limit.c). */
static int new_producer(struct relay *r, char *err, size_t errlen)
{
        return relay_new_producer(r, err, errlen);
}

/*
 * Between sessions: keep acknowledged work, discard the rest (and a broken
 * producer). Returns 0; -ECANCELED when a failure that must stop the relay
 * (r->failure, not RELAY_EXIT_RETRY) arrived meanwhile; -EIO when no new
 * producer could be made.
 */
static int recover(struct relay *r)
{
        char err[ERRLEN];
        int64_t deadline = relay_mono_ms() + RECONNECT_DRAIN_MS;

        /* Acknowledgements still due: none once every message in flight has its report. */
        while (!r->producer_broken && ledger_outstanding(r->ledger) > 0 &&
               producer_inflight_bytes(r->prod) > 0 && relay_mono_ms() < deadline && !*r->stop)
                relay_wait(r, 100, 0);
        relay_drop_nacks(r);
        /* --exactly-once: what is open is aborted; streaming again redoes it. */
        if (!r->producer_broken) {
                int ret;

                while ((ret = relay_eos_abort(r)) == -EAGAIN)
                        relay_wait(r, 0, 0);
                if (ret < 0)
                        r->producer_broken = true;
        }
        /*
         * A failure no retry cures, learnt while draining or aborting, stops the
         * relay as it would have in the session. Fenced, for one: another relay
         * holds the id now, and restarting would fence it in turn (a relay that
         * found its stream lost before its producer's fatal _FENCED once went
         * back to waiting as a warm standby after saying it was stopping).
         */
        if (r->failure && r->failure != RELAY_EXIT_RETRY)
                return -ECANCELED;
        if (ledger_outstanding(r->ledger) > 0 && !relay_eos_on(r))
                r->producer_broken = true;
        if (r->producer_broken) {
                log_warning("discarding the Kafka producer with %" PRIu64 " messages unacknowledged: "
                            "they will be sent again", ledger_outstanding(r->ledger));
                r->prod = producer_free(r->prod);
                r->eos.open = r->eos.aborting = false;
                if (new_producer(r, err, sizeof(err)) < 0) {
                        /* A topic's limit no new producer can fit stops the relay (recorded). */
                        if (r->failure && r->failure != RELAY_EXIT_RETRY)
                                return -ECANCELED;
                        log_error("cannot create a new Kafka producer: %s", err);
                        return -EIO;
                }
                r->stats.c.producer_restarts++;
        }
        if (relay_eos_on(r))
                /* Acknowledged is not committed: back to what the newest committed checkpoint covers. */
                ledger_rewind(r->ledger, r->watch.ckpt_acked > r->fb.sent_flush_lsn ? r->watch.ckpt_acked :
                                         r->fb.sent_flush_lsn);
        else
                ledger_reset(r->ledger);
        r->producer_broken = false;
        r->failure = 0;
        r->txn.skip = r->txn.operator_skip = r->txn.operator_dead_letter = false;
        return 0;
}

/* The first line of a run, once its options are known to be usable: what runs, from which settings. */
static void log_starting(const struct relay_config *conf)
{
        extern char **environ;
        size_t nenv = 0;

        for (char **e = environ; *e; e++)
                nenv += strncmp(*e, "OUTBOX_RELAY_", 13) == 0;
        log_info("outbox-relay %s starting (pid %d): settings from the command line, %zu OUTBOX_RELAY_* "
                 "environment variable%s%s%s%s; slot \"%s\", brokers \"%s\", HTTP %s%s", RELAY_VERSION,
                 (int)getpid(), nenv, nenv == 1 ? "" : "s", conf->config_file ? " and the file \"" : "",
                 conf->config_file ? conf->config_file : "", conf->config_file ? "\"" : "",
                 conf->slot, conf->brokers, conf->metrics_address ? "on " : "off",
                 conf->metrics_address ? conf->metrics_address : "");
}

/* Can the producer reach a broker? 0, or -1 with the failure recorded (exit 1). */
static int check_brokers(struct relay *r)
{
        char kerr[1536];
        int ret = producer_check_brokers(r->prod, BROKER_CHECK_MS, kerr, sizeof(kerr));

        if (ret < 0) {
                /* -EACCES: a TLS or authentication failure, its own fix in @kerr */
                relay_fail(r, RELAY_EXIT_RETRY, "cannot reach any Kafka broker of \"%s\" within %d s: "
                           "%s%s", r->conf->brokers, BROKER_CHECK_MS / 1000, kerr,
                           ret == -EACCES ? "" : "; check --brokers and that the brokers are up");
                return -1;
        }
        return 0;
}

/* Everything relay_run() sets up before the first session. Returns 0 or an enum relay_exit code. */
/* The row mapping from the options (record.h). Returns 0 or an enum relay_exit code. */
static int compile_spec(struct relay *r)
{
        const struct relay_config *conf = r->conf;
        char err[ERRLEN];
        int ret;

        ret = record_spec_new(conf->id_column, conf->key_column, conf->payload_column,
                              conf->type_column, conf->topic_template, &r->spec, err, sizeof(err));
        if (ret < 0) {
                log_error("%s", ret == -ENOMEM ? "out of memory" : err);
                return ret == -ENOMEM ? RELAY_EXIT_RETRY : RELAY_EXIT_USAGE;
        }
        record_spec_allow_null_payload(r->spec, conf->null_tombstone);
        if (conf->headers_column && !conf->no_headers_column &&
            record_spec_set_headers_column(r->spec, conf->headers_column) < 0) {
                log_error("out of memory");
                return RELAY_EXIT_RETRY;
        }
        for (size_t i = 0; i < conf->ncolumn_headers; i++) {
                const struct column_header *ch = &conf->column_headers[i];

                ret = record_spec_add_column_header(r->spec, ch->column, ch->header, err, sizeof(err));
                if (ret < 0) {
                        log_error("%s", ret == -ENOMEM ? "out of memory" : err);
                        return ret == -ENOMEM ? RELAY_EXIT_RETRY : RELAY_EXIT_USAGE;
                }
        }
        return 0;
}

/* The decoder, ledger, label sets and producer options. Returns 0 or RELAY_EXIT_RETRY. */
static int allocate(struct relay *r)
{
        const struct relay_config *conf = r->conf;

        r->dec = w2j_decoder_new();
        r->ledger = ledger_new(LSN_INVALID);
        r->stats.topics = metrics_labels_new((unsigned)conf->metrics_max_topics);
        r->stats.errors = metrics_labels_new(64);
        r->prod_props = calloc(2 * conf->nprops + 1, sizeof(*r->prod_props));
        if (!r->dec || !r->ledger || !r->stats.topics || !r->stats.errors || !r->prod_props) {
                log_error("out of memory");
                return RELAY_EXIT_RETRY;
        }
        for (size_t i = 0; i < conf->nprops; i++) {
                r->prod_props[2 * i] = conf->props[i].name;
                r->prod_props[2 * i + 1] = conf->props[i].value;
        }
        r->prod_opts = (struct producer_options){
                .brokers = conf->brokers,
                .props = r->prod_props,
                .nprops = conf->nprops,
                /* Room for our in-flight bound so that QUEUE_FULL stays exceptional. */
                .queue_messages = conf->max_inflight_messages + 10000,
                .statistics = conf->metrics_address != NULL,
        };
        if (relay_watch_init(r) < 0 || relay_round_init(r) < 0) {
                log_error("out of memory");
                return RELAY_EXIT_RETRY;
        }
        return 0;
}

/* What preflight found, said and applied: the status interval, the operator's remedies, the slot. */
static void adopt_preflight(struct relay *r)
{
        const struct relay_config *conf = r->conf;
        char a[LSN_STRLEN];

        r->fb.interval_ms = conf->status_interval_ms;
        if (r->pre.wal_sender_timeout_ms > 0 && r->fb.interval_ms > r->pre.wal_sender_timeout_ms / 2 - 100) {
                r->fb.interval_ms = r->pre.wal_sender_timeout_ms / 2 - 100;
                if (r->fb.interval_ms < 100)
                        r->fb.interval_ms = 100;
                log_info("status interval lowered to %" PRId64 " ms, under half the server's "
                         "wal_sender_timeout of %" PRId64 " ms", r->fb.interval_ms,
                         r->pre.wal_sender_timeout_ms);
        }
        if (conf->skip_transaction && conf->skip_transaction <= r->pre.confirmed_flush_lsn)
                log_warning("--skip-transaction=%s has no effect: the slot is already confirmed past "
                            "it; remove the option", lsn_format(conf->skip_transaction, a));
        else if (conf->skip_transaction)
                log_warning("will skip the transaction ending at LSN %s (--skip-transaction, by %s)",
                            lsn_format(conf->skip_transaction, a), r->who);
        if (conf->dead_letter_transaction && conf->dead_letter_transaction <= r->pre.confirmed_flush_lsn)
                log_warning("--dead-letter-transaction=%s has no effect: the slot is already confirmed "
                            "past it; remove the option", lsn_format(conf->dead_letter_transaction, a));
        if (r->pre.slot_created)
                log_info("slot \"%s\" of database \"%s\": created now, at the current WAL",
                         conf->slot, r->pre.dbname);
        else
                log_info("slot \"%s\" of database \"%s\": resuming at confirmed_flush_lsn %s",
                         conf->slot, r->pre.dbname, lsn_format(r->pre.confirmed_flush_lsn, a));
        r->fb.sent_flush_lsn = r->pre.confirmed_flush_lsn;
}

/* Everything relay_run() sets up before the first session. Returns 0 or an enum relay_exit code. */
static int start(struct relay *r)
{
        const struct relay_config *conf = r->conf;
        const char *const *tcols, *topic;
        size_t ntcols;
        char err[ERRLEN];
        int ret;

        snprintf(r->who, sizeof(r->who), "user %s (uid %d)", operator_name(), (int)geteuid());
        srand((unsigned)(relay_wall_us() ^ getpid()));
        relay_set_state(r, "starting");
        ret = compile_spec(r);
        if (ret)
                return ret;
        record_spec_template_columns(r->spec, &tcols, &ntcols);
        log_starting(conf);
        ret = allocate(r);
        if (ret)
                return ret;
        /*
         * The producer first: its settings are checked before a slot may be
         * created (as a transactional one with --exactly-once, whose limits
         * differ; its real id needs the system identifier, after preflight).
         */
        if (relay_eos_on(r))
                r->prod_opts.transactional_id = "outbox-relay-settings-check";
        ret = new_producer(r, err, sizeof(err));
        if (ret < 0) {
                relay_fail(r, ret == -EINVAL ? RELAY_EXIT_USAGE : RELAY_EXIT_RETRY, "%s", err);
                return r->failure;
        }
        /*
         * Kafka before the database: --create-slot must not make a slot that
         * the relay then leaves without its first checkpoint.
         */
        if (check_brokers(r) < 0)
                return r->failure;
        /* Nor make a slot beside a checkpoint topic it cannot use. */
        ret = relay_watch_verify_topic(r, err, sizeof(err));
        if (ret == -EAGAIN)
                relay_fail(r, RELAY_EXIT_RETRY, "cannot look for the checkpoint topic \"%s\": %s",
                           conf->checkpoint_topic, err);
        if (ret < 0)
                return r->failure;
        ret = preflight_run(conf, tcols, ntcols, &r->pre, err, sizeof(err));
        if (ret < 0) {
                relay_fail(r, ret == -ECONNREFUSED || ret == -ECONNRESET ? RELAY_EXIT_RETRY :
                           ret == -EDOM ? RELAY_EXIT_USAGE : RELAY_EXIT_ENVIRONMENT, "%s", err);
                return r->failure;
        }
        if (relay_pgo_init(&r->pgo, strcmp(r->pre.plugin, "pgoutput") == 0) < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "out of memory");
                return r->failure;
        }
        /*
         * A slot made now gets its first checkpoint before anything else: a
         * slot without one is later taken for one whose checkpoint was lost.
         */
        if (r->pre.slot_created &&
            (ret = relay_checkpoint_new_slot(conf, r->pre.confirmed_flush_lsn, true, err, sizeof(err))) < 0) {
                relay_fail(r, ret == -EINVAL ? RELAY_EXIT_ENVIRONMENT : RELAY_EXIT_RETRY, "%s", err);
                return r->failure;
        }
        if (relay_eos_on(r)) {
                /* The transactional producer needs the system identifier for its id. */
                relay_eos_transactional_id(r, r->eos.tid, sizeof(r->eos.tid));
                r->prod_opts.transactional_id = r->eos.tid;
                r->prod_opts.transactional_pair = relay_eos_wants_pair(conf);
                r->prod_opts.transactional_pair_optional = strcmp(conf->txn_producers, "auto") == 0;
                r->prod = producer_free(r->prod);
                ret = new_producer(r, err, sizeof(err));
                if (ret < 0) {
                        relay_fail(r, ret == -EINVAL ? RELAY_EXIT_USAGE : RELAY_EXIT_RETRY, "%s", err);
                        return r->failure;
                }
        }
        if (record_spec_set_json_types(r->spec, r->pre.json_domains, r->pre.njson_domains) < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "out of memory");
                return r->failure;
        }
        adopt_preflight(r);
        ledger_free(r->ledger);
        r->ledger = ledger_new(r->pre.confirmed_flush_lsn);
        if (!r->ledger || build_add_tables(conf, &r->add_tables) < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "out of memory");
                return r->failure;
        }
        if (conf->metrics_address) {
                ret = metrics_new(conf->metrics_address, conf->slot, &r->metrics, err, sizeof(err));
                if (ret < 0) {
                        relay_fail(r, RELAY_EXIT_USAGE, "%s", err);
                        return r->failure;
                }
        }
        /* The transactional producer made above is new: it reaches the brokers too. */
        if (relay_eos_on(r) && check_brokers(r) < 0)
                return r->failure;
        /* The topics known now: batches fit their max.message.bytes from the first record on. */
        if (ntcols == 0 && record_render_topic(r->spec, NULL, &topic, err, sizeof(err)) == 0)
                relay_know_topic(r, topic);
        if (conf->dead_letter || conf->dead_letter_transaction)
                relay_know_topic(r, conf->dead_letter_topic);
        ret = relay_fit_producer(r, err, sizeof(err));
        if (ret < 0 && !r->failure)
                relay_fail(r, ret == -EINVAL ? RELAY_EXIT_USAGE : RELAY_EXIT_RETRY, "%s", err);
        return r->failure;
}

static void finish(struct relay *r)
{
        producer_free(r->prod);
        pgstream_free(r->pg);
        free(r->tli_history);
        metrics_free(r->metrics);
        metrics_labels_free(r->stats.topics);
        metrics_labels_free(r->stats.errors);
        ledger_free(r->ledger);
        w2j_decoder_free(r->dec);
        relay_pgo_free(&r->pgo);
        record_spec_free(r->spec);
        relay_nacks_free(r);
        relay_round_free(r);
        relay_limits_free(r);
        preflight_result_release(&r->pre);
        free(r->prod_props);
        free(r->add_tables);
}

int relay_run(const struct relay_config *conf, int stop_fd, volatile sig_atomic_t *stop,
              const struct relay_reload *reload)
{
        struct relay r = {.conf = conf, .guarantee = relay_guarantee_of(conf), .on_delivery = relay_on_delivery,
                          .on_kafka_event = relay_on_kafka_event, .stop = stop, .stop_fd = stop_fd,
                          .reload = reload};
        int64_t backoff = BACKOFF_MIN_MS;
        char a[LSN_STRLEN];
        int code;

        /* The service manager learns the state at once; the watchdog from the first wait on. */
        if (sdnotify_init(&r.notify) < 0)
                log_warning("ignoring $WATCHDOG_USEC=\"%s\": not a number of microseconds",
                            getenv("WATCHDOG_USEC"));
        else if (r.notify.watchdog_ms)
                log_info("systemd watchdog: a ping every %" PRId64 " ms from the relay's loop",
                         r.notify.watchdog_ms);
        code = start(&r);
        if (code) {
                finish(&r);
                return code;
        }
        for (;;) {
                int64_t started = relay_mono_ms(), delay;

                code = session(&r);
                r.pg_session_code = code;
                r.pg = pgstream_free(r.pg);
                r.streaming = false;
                relay_round_session_ended(&r);
                if (r.failure && r.failure != RELAY_EXIT_RETRY)
                        break;
                if (*stop && !r.failure)
                        break;
                if (*stop) {
                        r.failure = 0;  /* stopped while reconnecting: nothing else went wrong */
                        break;
                }
                code = recover(&r);
                if (code < 0) {
                        if (code != -ECANCELED)
                                r.failure = RELAY_EXIT_RETRY;
                        break;
                }
                code = r.pg_session_code;
                if (relay_mono_ms() - started > 60000)
                        backoff = BACKOFF_MIN_MS;
                if (code == SESSION_SLOT_BUSY) {
                        delay = r.fb.interval_ms < SLOT_BUSY_MAX_MS ? r.fb.interval_ms : SLOT_BUSY_MAX_MS;
                } else {
                        /* Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"). */
                        delay = backoff / 2 + rand() % (backoff / 2 + 1);
                        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
                        log_info("reconnecting in %" PRId64 " ms", delay);
                        relay_set_state(&r, "reconnecting");
                }
                if (code != SESSION_SLOT_BUSY)
                        r.stats.c.reconnects++;  /* a standby's looks are counted by relay_note_standby() */
                pause_ms(&r, delay);
                if (*stop)
                        break;
        }
        {
                /* Every message handed to Kafka ends acknowledged, refused or unreported. */
                uint64_t handed = r.stats.c.published + r.stats.c.dead_lettered;
                uint64_t failed = r.stats.errors ? metrics_labels_total(r.stats.errors) : 0;
                uint64_t rest = handed > r.stats.c.acked + failed ? handed - r.stats.c.acked - failed : 0;

                log_info("stopped: %" PRIu64 " messages handed to Kafka (%" PRIu64 " rows, %" PRIu64
                         " dead-letter copies) = %" PRIu64 " acknowledged + %"
                         PRIu64 " refused or failed + %" PRIu64 " without a delivery report; %" PRIu64
                         " transactions skipped by request; acknowledged up to LSN %s, last confirmed "
                         "to the server %s (what follows is sent again on the next start)", handed,
                         r.stats.c.published, r.stats.c.dead_lettered, r.stats.c.acked, failed, rest,
                         r.stats.c.skipped_transactions,
                         lsn_format(ledger_flush_lsn(r.ledger), a),
                         lsn_format(r.fb.sent_flush_lsn, (char[LSN_STRLEN]){0}));
        }
        finish(&r);
        return r.failure;
}
