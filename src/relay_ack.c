// SPDX-License-Identifier: Apache-2.0
/*
 * What happens on an ack or a nack. A delivery report is the only truth
 * about a message: an ack releases its ticket in the LSN ledger; a nack is
 * classified by the producer module. A cluster fault discards the producer
 * (everything unconfirmed is sent again from the slot), a fatal one stops
 * the relay, a batch refused as too large for its topic while the record
 * alone fits is the batch's fault (relay_limit.c), and a record's own fault
 * is kept (copied) for the loop, which then dead-letters it or stops: a
 * delivery report never produces. See relay_parts.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cloudevents.h"
#include "log.h"
#include "relay_parts.h"

bool relay_backpressured(const struct relay *r)
{
        return (int64_t)ledger_outstanding(r->ledger) >= r->conf->max_inflight_messages ||
               (int64_t)producer_inflight_bytes(r->prod) >= r->conf->max_inflight_bytes ||
               r->kafka_full || relay_limit_asking(r) || r->nacks.n > 0 || relay_round_full(r);
}

int relay_produce(struct relay *r, const struct producer_msg *m, struct producer_error *ret_error)
{
        int ret = producer_send(r->prod, m, ret_error);

        if (ret != -ENOBUFS)
                return ret;
        /* librdkafka's queue is full: the next wait serves delivery reports, then it is offered again. */
        r->kafka_full = true;
        r->held_back = true;
        r->stats.c.queue_full++;
        return -EAGAIN;
}

/*
 * Stop for a dead-letter copy of work ID @work_id (@table, transaction @xid
 * ending at LSN @lsn) that Kafka refused with @e (@text: its words, or the
 * size the record has alone). One wording whether librdkafka refused the copy
 * at once (the topic's metadata already known in error) or in its delivery
 * report: which of the two happens is a race against the metadata request of
 * a topic new to the producer, and a restart must say what the first start
 * said.
 */
static void dead_letter_refused(struct relay *r, int code, const char *work_id, const char *table,
                                const char *xid, const char *lsn, const char *text,
                                const struct producer_error *e)
{
        const char *fix = producer_fix(e->code);

        relay_fail(r, code, "the dead-letter publish of work ID \"%s\" (%s, transaction %s ending at LSN %s) "
                   "to \"%s\" failed: %s (%s). Stopping: nothing from this transaction on is confirmed. %s "
                   "and restart, or skip it: --skip-transaction=%s", work_id, table, xid, lsn,
                   r->conf->dead_letter_topic, text, e->name, fix ? fix : "Let the dead-letter topic "
                   "take the row (e.g. raise its max.message.bytes and -X message.max.bytes)", lsn);
}

int relay_dead_letter(struct relay *r, const struct producer_msg *m, const char *topic,
                      const char *code, const char *reason, const char *work_id,
                      const char *lsn_text)
{
        struct producer_header h[MAX_HEADERS + 4];
        struct producer_msg dl = *m;
        struct producer_error e;
        char source[1024] = "", table[512], xid[16];
        size_t nh = 0;
        int ret;

        for (size_t i = 0; i < m->nheaders && nh < MAX_HEADERS; i++) {
                h[nh++] = m->headers[i];
                if (strcmp(m->headers[i].name, "ce_source") == 0)
                        snprintf(source, sizeof(source), "%.*s", (int)m->headers[i].len,
                                 m->headers[i].value);
        }
        h[nh++] = (struct producer_header){"outbox_relay_error", reason, strlen(reason)};
        h[nh++] = (struct producer_header){"outbox_relay_error_code", code, strlen(code)};
        h[nh++] = (struct producer_header){"outbox_relay_topic", topic ? topic : "",
                                           topic ? strlen(topic) : 0};
        dl.topic = r->conf->dead_letter_topic;
        dl.timestamp_ms = 0;  /* produce time: the dead-letter topic must take an old row too */
        dl.headers = h;
        dl.nheaders = nh;
        ret = relay_fit_topic(r, dl.topic);
        if (ret == -EINPROGRESS)
                return -EAGAIN;   /* its limit is being read: held back */
        if (ret < 0)
                return -ENOBUFS;  /* a retry or a stop, recorded: the row stays unconfirmed */
        ret = relay_produce(r, &dl, &e);
        if (ret == -EAGAIN)
                return ret;  /* librdkafka's queue is full: held back */
        /* --exactly-once: refused by a failed Kafka transaction, it is aborted and streamed again. */
        if (ret < 0 && r->guarantee->record_refused(r, &e) < 0)
                return -ECANCELED;
        if (ret < 0) {
                producer_header_value(m, "ce_pgxid", xid, sizeof(xid));
                dead_letter_refused(r, e.fault == PRODUCER_FAULT_FATAL ? RELAY_EXIT_ENVIRONMENT :
                                    RELAY_EXIT_DATA, work_id, ce_table_of_source(source, table, sizeof(table)),
                                    xid, lsn_text, e.text, &e);
                return ret;
        }
        r->stats.c.dead_lettered++;
        return 0;
}

/* Keep a copy of a failed report for relay_handle_nacks(). */
static void keep_nack(struct relay *r, const struct producer_report *rep)
{
        const struct producer_msg *m = &rep->msg;
        size_t size = strlen(m->topic) + 1 + m->key_len + m->value_len, o = 0;
        struct relay_nack *n;

        for (size_t i = 0; i < m->nheaders; i++)
                size += strlen(m->headers[i].name) + 1 + m->headers[i].len;
        if (r->nacks.n == r->nacks.cap) {
                size_t cap = r->nacks.cap ? r->nacks.cap * 2 : 16;
                struct relay_nack *v = realloc(r->nacks.v, cap * sizeof(*v));

                if (!v)
                        goto nomem;
                r->nacks.v = v;
                r->nacks.cap = cap;
        }
        n = &r->nacks.v[r->nacks.n];
        *n = (struct relay_nack){.msg = *m, .error = rep->error};
        n->buf = malloc(size ? size : 1);
        n->headers = calloc(m->nheaders ? m->nheaders : 1, sizeof(*n->headers));
        if (!n->buf || !n->headers) {
                free(n->buf);
                free(n->headers);
                goto nomem;
        }
#define COPY(dst, src, len) \
        do { \
                memcpy(n->buf + o, (src), (len)); \
                (dst) = n->buf + o; \
                o += (len); \
        } while (0)
        COPY(n->msg.topic, m->topic, strlen(m->topic) + 1);
        if (m->key)
                COPY(n->msg.key, m->key, m->key_len);
        if (m->value)
                COPY(n->msg.value, m->value, m->value_len);
        for (size_t i = 0; i < m->nheaders; i++) {
                COPY(n->headers[i].name, m->headers[i].name, strlen(m->headers[i].name) + 1);
                n->headers[i].len = m->headers[i].len;
                n->headers[i].value = NULL;
                if (m->headers[i].value)
                        COPY(n->headers[i].value, m->headers[i].value, m->headers[i].len);
        }
#undef COPY
        n->msg.headers = n->headers;
        r->nacks.n++;
        return;
nomem:
        relay_fail(r, RELAY_EXIT_RETRY, "out of memory keeping a failed delivery report");
        r->producer_broken = true;
}

static void free_nack(struct relay_nack *n)
{
        free(n->buf);
        free(n->headers);
}

void relay_drop_nacks(struct relay *r)
{
        for (size_t i = 0; i < r->nacks.n; i++)
                free_nack(&r->nacks.v[i]);
        r->nacks.n = 0;
}

void relay_nacks_free(struct relay *r)
{
        relay_drop_nacks(r);
        free(r->nacks.v);
        r->nacks.v = NULL;
        r->nacks.cap = 0;
}

void relay_refused_reason(const char *topic, const char *text, const struct producer_error *e, char *buf,
                          size_t size)
{
        const char *fix = producer_fix(e->code);

        snprintf(buf, size, "Kafka refused the message for topic \"%s\": %s (%s)%s%s", topic, text, e->name,
                 fix ? ". " : "", fix ? fix : "");
}

void relay_on_delivery(void *ctx, const struct producer_report *rep)
{
        struct relay *r = ctx;
        const struct producer_msg *m = &rep->msg;
        char work_id[256], lsn[32], xid[16], source[1024], table[512], size[512];
        const char *text;
        uint64_t ticket = m->ticket;

        if (m->ticket & TICKET_CHECKPOINT) {
                if (m->ticket & TICKET_EOS)
                        relay_eos_report(r, rep);
                else
                        relay_watch_checkpoint_report(r, rep);
                return;
        }
        relay_eos_report(r, rep);
        /* Purged from a failed or aborted Kafka transaction: streaming again from the slot redoes it. */
        if (rep->error.code == PRODUCER_ERR_PURGE_QUEUE || rep->error.code == PRODUCER_ERR_PURGE_INFLIGHT)
                return;
        if (rep->error.code == 0) {
                int64_t stamp;
                bool stamped = ledger_ticket_stamp(r->ledger, ticket, &stamp) == 0;

                if (ledger_ack(r->ledger, ticket) == 0) {
                        r->stats.c.acked++;
                        r->stats.last_progress_ms = relay_mono_ms();
                        metrics_labels_add(r->stats.topics, m->topic, 1);
                        if (stamped)
                                metrics_histogram_observe(&r->stats.latency,
                                                          (relay_wall_us() - stamp) / 1e6);
                }
                return;
        }
        metrics_labels_add(r->stats.errors, rep->error.name, 1);
        producer_header_value(m, "ce_id", work_id, sizeof(work_id));
        producer_header_value(m, "ce_pglsn", lsn, sizeof(lsn));
        producer_header_value(m, "ce_pgxid", xid, sizeof(xid));
        producer_header_value(m, "ce_source", source, sizeof(source));
        ce_table_of_source(source, table, sizeof(table));
        if (rep->error.fault == PRODUCER_FAULT_FATAL) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "delivery of work ID \"%s\" to topic \"%s\" "
                           "(transaction ending at LSN %s) failed: %s (%s), which no retry can cure. "
                           "Stopping: nothing from this transaction on is confirmed. %s, then start "
                           "the relay again", work_id, m->topic, lsn, rep->error.text, rep->error.name,
                           producer_fix(rep->error.code) ? producer_fix(rep->error.code) :
                           "Check the relay's -X settings and the cluster");
                return;
        }
        text = rep->error.text;
        if (rep->error.code == PRODUCER_ERR_MSG_SIZE_TOO_LARGE) {
                /* The broker judged the batch: only a record too large alone is the row's fault. */
                if (!relay_too_large_alone(r, m, size, sizeof(size))) {
                        relay_refused_batch(r, m);
                        return;
                }
                text = size;
        }
        if (strcmp(m->topic, r->conf->dead_letter_topic) == 0) {
                dead_letter_refused(r, RELAY_EXIT_DATA, work_id, table, xid, lsn, text, &rep->error);
                return;
        }
        if (relay_eos_on(r) && rep->error.fault == PRODUCER_FAULT_RECORD) {
                char reason[1024];
                uint64_t end = LSN_INVALID;

                /* The Kafka transaction fails: aborted at its commit, replayed, this row then judged. */
                relay_refused_reason(m->topic, text, &rep->error, reason, sizeof(reason));
                lsn_parse(lsn, strlen(lsn), &end);
                relay_eos_poison(r, end, work_id, &rep->error, reason);
                return;
        }
        if (rep->error.fault != PRODUCER_FAULT_RECORD) {
                /* Timed out, brokers gone: not the row's fault. Start over with a new producer. */
                relay_fail(r, RELAY_EXIT_RETRY, "delivery of work ID \"%s\" to topic \"%s\" (transaction "
                           "ending at LSN %s) failed: %s (%s); discarding the producer and streaming "
                           "again from the slot (messages not yet confirmed will be sent again)",
                           work_id, m->topic, lsn, rep->error.text, rep->error.name);
                r->producer_broken = true;
                return;
        }
        keep_nack(r, rep);
}

/* Returns 0, or -EAGAIN when its dead-letter copy is held back (offered again at the next turn). */
static int handle_nack(struct relay *r, struct relay_nack *n)
{
        char work_id[256], lsn[32], xid[16], source[1024], table[512], reason[1024], size[512];
        const struct producer_msg *m = &n->msg;

        producer_header_value(m, "ce_id", work_id, sizeof(work_id));
        producer_header_value(m, "ce_pglsn", lsn, sizeof(lsn));
        producer_header_value(m, "ce_pgxid", xid, sizeof(xid));
        producer_header_value(m, "ce_source", source, sizeof(source));
        ce_table_of_source(source, table, sizeof(table));
        if (!n->noted)
                r->stats.c.row_errors++;
        snprintf(reason, sizeof(reason), "Kafka refused the message for topic \"%s\": %s (%s)",
                 m->topic, n->error.code == PRODUCER_ERR_MSG_SIZE_TOO_LARGE &&
                 relay_too_large_alone(r, m, size, sizeof(size)) ? size : n->error.text, n->error.name);
        if (r->conf->dead_letter ||
            (r->conf->dead_letter_transaction && lsn[0] &&
             strcmp(lsn, lsn_format(r->conf->dead_letter_transaction, (char[LSN_STRLEN]){0})) == 0)) {
                struct producer_msg dl = *m;

                if (!n->noted)
                        log_warning("dead-lettering work ID \"%s\" of %s (transaction %s ending at LSN %s): %s",
                                    work_id, table, xid, lsn, reason);
                n->noted = true;
                return relay_dead_letter(r, &dl, m->topic, n->error.name, reason, work_id, lsn) == -EAGAIN ?
                       -EAGAIN : 0;
        }
        relay_fail(r, RELAY_EXIT_DATA, "cannot publish the row with work ID \"%s\" of %s (transaction %s "
                   "ending at LSN %s): %s. Nothing from this transaction on is confirmed. %s and "
                   "restart, or choose a remedy for this transaction: --dead-letter-transaction=%s or "
                   "--skip-transaction=%s (every start reads the row again from the WAL as it was "
                   "committed: to change it, delete it and insert it again, corrected, in one "
                   "transaction)",
                   work_id, table, xid, lsn, reason, producer_fix(n->error.code) ?
                   producer_fix(n->error.code) : "Fix the topic or its limits", lsn, lsn);
        return 0;
}

/*
 * Put @batch's entries from @from on back in front of what came meanwhile
 * (r->nacks), in order, for the next turn. Recorded when out of memory.
 */
static void keep_back(struct relay *r, struct relay_nacks *batch, size_t from)
{
        size_t left = batch->n - from, n = left + r->nacks.n;
        struct relay_nack *v = batch->v;

        if (n > batch->cap && !(v = realloc(batch->v, n * sizeof(*v)))) {
                for (size_t i = from; i < batch->n; i++)
                        free_nack(&batch->v[i]);
                free(batch->v);
                relay_fail(r, RELAY_EXIT_RETRY, "out of memory keeping failed delivery reports");
                return;
        }
        memmove(v, v + from, left * sizeof(*v));
        if (r->nacks.n)
                memcpy(v + left, r->nacks.v, r->nacks.n * sizeof(*v));
        free(r->nacks.v);
        r->nacks = (struct relay_nacks){.v = v, .n = n, .cap = n > batch->cap ? n : batch->cap};
}

void relay_handle_nacks(struct relay *r)
{
        /*
         * Taken out first: handling one may serve delivery reports (an abort
         * keeps Kafka answered), which collect new ones. One whose dead-letter
         * copy is held back waits, with the rest after it, for the next turn.
         */
        while (r->nacks.n > 0 && !r->failure) {
                struct relay_nacks batch = r->nacks;
                size_t i = 0;

                r->nacks = (struct relay_nacks){0};
                for (; i < batch.n && !r->failure; i++) {
                        if (handle_nack(r, &batch.v[i]) == -EAGAIN) {
                                r->held_back = false;  /* a report, not the stream's record */
                                break;
                        }
                        free_nack(&batch.v[i]);
                }
                if (i < batch.n && !r->failure) {
                        keep_back(r, &batch, i);
                        return;
                }
                for (; i < batch.n; i++)
                        free_nack(&batch.v[i]);
                if (r->nacks.v) {
                        /* New ones came meanwhile: keep the larger array for them. */
                        free(batch.v);
                } else {
                        r->nacks.v = batch.v;
                        r->nacks.cap = batch.cap;
                }
        }
}

void relay_on_kafka_event(void *ctx, enum producer_event ev, const struct producer_error *e)
{
        struct relay *r = ctx;

        switch (ev) {
        case PRODUCER_EVENT_BROKERS_DOWN:
                log_warning("kafka: all brokers are down (%s); waiting for them with %" PRIu64
                            " messages unacknowledged, nothing unacknowledged is confirmed", e->text,
                            ledger_outstanding(r->ledger));
                return;
        case PRODUCER_EVENT_BROKERS_UP:
                log_info("kafka: brokers are reachable again");
                return;
        case PRODUCER_EVENT_ERROR:
                log_warning("kafka: %s: %s", e->name, e->text);
                return;
        case PRODUCER_EVENT_FATAL:
                if (relay_eos_timed_out(r, e)) {
                        relay_fail(r, RELAY_EXIT_RETRY, "fatal Kafka producer error: %s: %s: the "
                                   "transaction coordinator aborted the open Kafka transaction past the "
                                   "producer's transaction.timeout.ms (not a newer relay's fence); "
                                   "discarding the producer and streaming again from the slot", e->name,
                                   e->text);
                        r->producer_broken = true;
                } else if (e->fault == PRODUCER_FAULT_CLUSTER || relay_eos_abort_refused(r, e)) {
                        relay_fail(r, RELAY_EXIT_RETRY, "fatal Kafka producer error: %s: %s; discarding "
                                   "the producer and streaming again from the slot", e->name, e->text);
                        r->producer_broken = true;
                } else {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "fatal Kafka producer error: %s: %s, which "
                                   "no retry can cure. Stopping: nothing unacknowledged is confirmed. %s, "
                                   "then start the relay again", e->name, e->text,
                                   producer_fix(e->code) ? producer_fix(e->code) :
                                   "Check the relay's -X settings and the cluster");
                }
                return;
        }
}
