// SPDX-License-Identifier: Apache-2.0
/*
 * Topics' max.message.bytes, and a producer whose record batches fit them.
 * The broker compares a topic's max.message.bytes with a whole record batch;
 * librdkafka fills batches up to its batch.size whatever the topic. So the
 * relay reads a topic's limit (DescribeConfigs) before its first record: at
 * start for the topics known then (a --topic without columns, the
 * dead-letter topic), else when a row first names it. A topic whose limit is
 * below the producer's batch gets batches that fit: a lane of its own in the
 * default mode (producer_fit_topic(), the other topics keep their batches);
 * under --exactly-once a new producer whose every batch fits, since a Kafka
 * transaction is one producer's (the open one is aborted and streamed again).
 * Only a record larger than the limit alone in a batch is a bad row. A batch
 * refused all the same (the limit unreadable, or lowered since) is the
 * batch's fault, not the rows': the relay reads the limit again and streams
 * again from the slot with a producer that fits it. See relay_parts.h; it
 * knows nothing of rows or the stream.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "relay_parts.h"

#define LIMIT_READ_TRIES 3        /* a refused topic whose limit cannot be read: restreams before a stop */

static int cmp_limit(const void *key, const void *elem)
{
        return strcmp(key, ((const struct relay_topic_limit *)elem)->name);
}

static struct relay_topic_limit *find(const struct relay *r, const char *topic)
{
        if (!r->limits.n)
                return NULL;
        return bsearch(topic, r->limits.v, r->limits.n, sizeof(*r->limits.v), cmp_limit);
}

/* Does a topic of max.message.bytes @bytes (0: unknown) need batches smaller than the producer's? */
static bool below_batch(const struct relay *r, int64_t bytes)
{
        return bytes > 0 && bytes < producer_batch_bytes(r->prod);
}

/*
 * The entry of @topic, added (unread) if new. NULL when out of memory
 * (recorded) or at the bound: then recorded too when @needed (a refused
 * topic must be read), else said once (the topic is produced unread).
 */
static struct relay_topic_limit *entry(struct relay *r, const char *topic, bool needed)
{
        struct relay_limits *l = &r->limits;
        struct relay_topic_limit *e = find(r, topic);
        size_t at = 0;

        if (e)
                return e;
        if (l->n == RELAY_TOPIC_LIMITS_MAX) {
                if (needed)
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "the broker refused a record batch for topic "
                                   "\"%s\" as too large, and the relay knows the limits of %d topics "
                                   "already, its most: set -X batch.size at or below the least "
                                   "max.message.bytes of the topics", topic, RELAY_TOPIC_LIMITS_MAX);
                else if (!l->full_logged)
                        log_warning("the relay knows the max.message.bytes of %d topics, its most: the "
                                    "limits of further topics (\"%s\" first) are not read, and one below "
                                    "the producer's batch stops the relay when the broker refuses a batch; "
                                    "set -X batch.size at or below the least limit of the topics if some "
                                    "are that low", RELAY_TOPIC_LIMITS_MAX, topic);
                l->full_logged = true;
                return NULL;
        }
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 8;
                struct relay_topic_limit *v = realloc(l->v, cap * sizeof(*v));

                if (!v)
                        goto nomem;
                l->v = v;
                l->cap = cap;
        }
        while (at < l->n && strcmp(l->v[at].name, topic) < 0)
                at++;
        memmove(&l->v[at + 1], &l->v[at], (l->n - at) * sizeof(*l->v));
        l->v[at] = (struct relay_topic_limit){.name = strdup(topic)};
        l->n++;
        if (!l->v[at].name) {
                l->n--;
                memmove(&l->v[at], &l->v[at + 1], (l->n - at) * sizeof(*l->v));
                goto nomem;
        }
        return &l->v[at];
nomem:
        relay_fail(r, RELAY_EXIT_RETRY, "out of memory remembering the limit of topic \"%s\"", topic);
        return NULL;
}

int64_t relay_topic_limit(const struct relay *r, const char *topic)
{
        const struct relay_topic_limit *e = find(r, topic);

        return e ? e->max_bytes : 0;
}

void relay_limits_free(struct relay *r)
{
        for (size_t i = 0; i < r->limits.n; i++)
                free(r->limits.v[i].name);
        free(r->limits.v);
        r->limits = (struct relay_limits){0};
}

bool relay_too_large_alone(const struct relay *r, const struct producer_msg *m, char *reason, size_t size)
{
        int64_t limit = relay_topic_limit(r, m->topic);
        size_t bytes;

        if (!limit || (int64_t)(bytes = producer_record_batch_bytes(m)) <= limit)
                return false;
        snprintf(reason, size, "the record is %zu bytes alone in a record batch, more than the "
                 "max.message.bytes of topic \"%s\", %" PRId64 " bytes; raise the topic's "
                 "max.message.bytes (and -X message.max.bytes if it is lower) or store less in the row",
                 bytes, m->topic, limit);
        return true;
}

/*
 * While streaming: ask for @e's limit without waiting. The record that needs
 * it is held back, and the stream not read (relay_limit_asking()), until
 * relay_limit_serve() has the answer or gives up; the one wait serves HTTP
 * (health probes), Kafka and the server meanwhile. No longer than a status
 * interval: a broker that does not answer (frozen, far away) must not hold
 * up a row's transaction for long. A limit not read in time is left to a
 * refusal, like one the relay may not read.
 */
static void ask(struct relay *r, const struct relay_topic_limit *e)
{
        struct relay_limits *l = &r->limits;
        int ms = l->read_ms ? l->read_ms : RELAY_LIMIT_READ_MS;

        if (r->fb.interval_ms > 0 && r->fb.interval_ms < ms)
                ms = (int)r->fb.interval_ms;
        producer_topic_max_bytes_ask(r->prod, e->name, ms);
        snprintf(l->asking, sizeof(l->asking), "%s", e->name);
        l->ask_ms = ms;
        /* librdkafka times the request out itself; this is the guard behind it. */
        l->ask_deadline_ms = relay_mono_ms() + ms + 1000;
}

/*
 * One DescribeConfigs for @e with r->prod, blocking (not streaming). Returns
 * 0 with e->max_bytes set, or the error of producer_topic_max_bytes() with
 * the reason in @err.
 */
static int read_one(struct relay *r, struct relay_topic_limit *e, char *err, size_t errlen)
{
        int64_t bytes = 0;
        int ms = r->limits.read_ms ? r->limits.read_ms : RELAY_LIMIT_READ_MS;
        int ret = producer_topic_max_bytes(r->prod, e->name, ms, &bytes, err, errlen);

        e->read = true;
        if (ret == 0)
                e->max_bytes = bytes;
        return ret;
}

/*
 * @e's limit was read (@ret: 0, or the error with the reason in @err): fit
 * its batches. Returns as relay_fit_topic().
 */
static int fit_read(struct relay *r, struct relay_topic_limit *e, int ret, const char *err)
{
        const char *topic = e->name;

        if (ret == -ESRCH) {
                log_debug("topic \"%s\" does not exist yet: the broker's default limit applies", topic);
                return 0;
        }
        if (ret < 0) {
                if (!r->limits.unreadable_logged)
                        log_warning("cannot read max.message.bytes of topic \"%s\": %s. A topic whose limit "
                                    "is below the producer's batch of %" PRId64 " bytes is then found only "
                                    "when the broker refuses a batch of its records, and the relay streams "
                                    "again from the slot (in the default mode rows of it may then arrive "
                                    "out of order once); grant the relay's Kafka principal DESCRIBE_CONFIGS "
                                    "on the topics", topic, err, producer_batch_bytes(r->prod));
                r->limits.unreadable_logged = true;
                return 0;
        }
        if (e->max_bytes >= producer_topic_batch_bytes(r->prod, topic))
                return 0;
        if (!relay_eos_on(r)) {
                char why[ERRLEN];

                ret = producer_fit_topic(r->prod, topic, e->max_bytes, why, sizeof(why));
                if (ret < 0) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "cannot send the records of topic \"%s\" in "
                                   "batches of at most its max.message.bytes, %" PRId64 " bytes: %s; set "
                                   "-X batch.size at or below it", topic, e->max_bytes, why);
                        return -ECANCELED;
                }
                log_info("topic \"%s\": max.message.bytes is %" PRId64 " bytes, below the producer's batch "
                         "of %" PRId64 " bytes: its records go in batches of at most %" PRId64 " bytes",
                         topic, e->max_bytes, producer_batch_bytes(r->prod),
                         producer_topic_batch_bytes(r->prod, topic));
                return 0;
        }
        log_warning("topic \"%s\": max.message.bytes is %" PRId64 " bytes, below the producer's batch of "
                    "%" PRId64 " bytes. A Kafka transaction is one producer's, so every batch of the next "
                    "one fits it: aborting the open Kafka transaction and streaming again from the slot "
                    "(once); to avoid this, set -X batch.size at or below the least limit of the topics",
                    topic, e->max_bytes, producer_topic_batch_bytes(r->prod, topic));
        /* A retry, not an error: nothing is lost. */
        if (!r->failure)
                r->failure = RELAY_EXIT_RETRY;
        return -EAGAIN;
}

int relay_fit_topic(struct relay *r, const char *topic)
{
        struct relay_topic_limit *e = find(r, topic);
        char err[ERRLEN];
        int ret;

        if (e && e->read)
                return 0;
        if (!(e = entry(r, topic, false)))
                return r->failure ? -ECANCELED : 0;
        if (r->streaming) {
                /* One question at a time: another topic's answer first. */
                if (!r->limits.asking[0])
                        ask(r, e);
                r->held_back = true;
                return -EINPROGRESS;
        }
        ret = read_one(r, e, err, sizeof(err));
        return fit_read(r, e, ret, err);
}

bool relay_limit_asking(const struct relay *r)
{
        return r->limits.asking[0] != '\0';
}

void relay_limit_serve(struct relay *r)
{
        struct relay_limits *l = &r->limits;
        struct relay_topic_limit *e;
        char err[ERRLEN] = "";
        int64_t bytes = 0;
        int ret;

        if (!l->asking[0])
                return;
        if (!r->prod) {
                l->asking[0] = '\0';
                return;
        }
        /*
         * The session ended, or is ending, meanwhile: the answer is dropped
         * and the next session asks again (fitting now could record a retry
         * for a session that is over, or break a stop's drain).
         */
        if (!r->streaming || r->failure || *r->stop) {
                producer_topic_max_bytes_forget(r->prod);
                l->asking[0] = '\0';
                return;
        }
        ret = producer_topic_max_bytes_answer(r->prod, &bytes, err, sizeof(err));
        if (ret == -EAGAIN && relay_mono_ms() < l->ask_deadline_ms)
                return;
        if (ret == -EAGAIN || ret == -ENOENT) {
                producer_topic_max_bytes_forget(r->prod);
                if (ret == -ENOENT) {
                        l->asking[0] = '\0';
                        return;
                }
                snprintf(err, sizeof(err), "no answer to DescribeConfigs within %d ms", l->ask_ms);
                ret = -EIO;
        }
        e = find(r, l->asking);
        l->asking[0] = '\0';
        if (!e)
                return;
        e->read = true;
        if (ret == 0)
                e->max_bytes = bytes;
        fit_read(r, e, ret, err);
}

void relay_refused_batch(struct relay *r, const struct producer_msg *m)
{
        struct relay_topic_limit *e = entry(r, m->topic, true);
        char work_id[256], limit[96];
        int64_t batch = producer_topic_batch_bytes(r->prod, m->topic);

        if (!e)
                return;
        if (!e->refused) {
                /* What the producer did when it was refused, for read_limits()'s verdict. */
                e->refused = true;
                e->refused_limit = e->max_bytes;
                e->refused_batch = batch;
                r->stats.c.refused_batches++;
        }
        /* Once per producer: the default mode streams again, --exactly-once aborts anyway. */
        if (r->limits.refit)
                return;
        r->limits.refit = true;
        producer_header_value(m, "ce_id", work_id, sizeof(work_id));
        if (e->max_bytes)
                snprintf(limit, sizeof(limit), "its max.message.bytes, read as %" PRId64 " bytes before",
                         e->max_bytes);
        else
                snprintf(limit, sizeof(limit), "its max.message.bytes");
        log_warning("the broker refused a record batch for topic \"%s\" as too large (MSG_SIZE_TOO_LARGE); "
                    "the record of work ID \"%s\" (%zu bytes alone) is not judged by it. %s from the slot "
                    "with a producer whose batches fit %s (this producer's batches for it are up to %"
                    PRId64 " bytes); to avoid this, raise the topic's max.message.bytes to at least that "
                    "or set -X batch.size at or below its limit", m->topic, work_id,
                    producer_record_batch_bytes(m), relay_eos_on(r) ? "Aborting the Kafka transaction "
                    "and streaming again" : "Streaming again", limit, batch);
        /*
         * A retry, not an error: nothing is lost. In the default mode the
         * reports still due come in while the relay drains (other topics
         * refused, the acks), and the records left unacknowledged make it
         * discard this producer; under --exactly-once the failed Kafka
         * transaction is aborted at its commit.
         */
        if (!relay_eos_on(r) && !r->failure)
                r->failure = RELAY_EXIT_RETRY;
}

void relay_know_topic(struct relay *r, const char *topic)
{
        struct relay_topic_limit *e = entry(r, topic, false);

        if (e && !e->read)
                e->unread = true;
}

/*
 * Read the limit of every topic marked unread or refused, with r->prod.
 * Returns 1 when a new producer would fit a topic differently, 0, or
 * -ECANCELED after recording a failure that a new producer cannot cure.
 */
static int read_limits(struct relay *r)
{
        char err[ERRLEN];
        int changed = 0;

        for (size_t i = 0; i < r->limits.n; i++) {
                struct relay_topic_limit *e = &r->limits.v[i];
                int64_t before = e->max_bytes;
                int ret;

                if (!e->unread && !e->refused)
                        continue;
                ret = read_one(r, e, err, sizeof(err));
                if (ret == -ECANCELED)
                        return r->failure ? -ECANCELED : changed;
                if (ret < 0 && !e->refused) {
                        /* Known at start only (a topic made on first use, say): a refusal reads it. */
                        log_info("max.message.bytes of topic \"%s\" not read (%s): a batch the broker "
                                 "refuses as too large will read it", e->name, err);
                        e->unread = false;
                        continue;
                }
                if (ret < 0 && ++e->read_failures < LIMIT_READ_TRIES) {
                        log_warning("cannot read max.message.bytes of topic \"%s\" after the broker refused "
                                    "a batch of its records: %s", e->name, err);
                        continue;
                }
                if (ret < 0) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "the broker refused a record batch for topic "
                                   "\"%s\" as too large, and its max.message.bytes cannot be read "
                                   "(DescribeConfigs: %s): without it the relay cannot make batches that "
                                   "fit, nor tell a bad row from a batch too large. Grant the relay's Kafka "
                                   "principal DESCRIBE_CONFIGS on the topic (an ACL), or set -X batch.size "
                                   "at or below the topic's max.message.bytes (the producer's batches are "
                                   "up to %" PRId64 " bytes), then start the relay again", e->name, err,
                                   producer_batch_bytes(r->prod));
                        return -ECANCELED;
                }
                e->read_failures = 0;
                if (e->refused && e->max_bytes == e->refused_limit && e->refused_batch <= e->max_bytes) {
                        /* Its batches fitted the limit already: no new producer cures this. */
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "the broker refused a record batch for topic "
                                   "\"%s\" as too large although the producer's batches for it are at most "
                                   "%" PRId64 " bytes and its max.message.bytes is %" PRId64 " bytes, and no "
                                   "record in it is larger alone. Check the topic's and the broker's "
                                   "settings (kafka-configs.sh --describe --entity-type topics "
                                   "--entity-name %s), or set -X batch.size well below the limit, then "
                                   "start the relay again", e->name, e->refused_batch, e->max_bytes,
                                   e->name);
                        return -ECANCELED;
                }
                if (below_batch(r, before) != below_batch(r, e->max_bytes) ||
                    (below_batch(r, e->max_bytes) && e->max_bytes != before))
                        changed = 1;
                if (below_batch(r, e->max_bytes))
                        log_info("topic \"%s\": max.message.bytes is %" PRId64 " bytes, below the producer's "
                                 "batch of %" PRId64 " bytes: its records go in batches that fit it", e->name,
                                 e->max_bytes, producer_batch_bytes(r->prod));
                e->unread = e->refused = false;
        }
        return changed;
}

static int make_producer(struct relay *r, char *err, size_t errlen)
{
        struct producer_topic_limit *l = calloc(r->limits.n ? r->limits.n : 1, sizeof(*l));
        int ret;

        if (!l)
                return -ENOMEM;
        for (size_t i = 0; i < r->limits.n; i++)
                l[i] = (struct producer_topic_limit){r->limits.v[i].name, r->limits.v[i].max_bytes};
        r->prod_opts.limits = l;
        r->prod_opts.nlimits = r->limits.n;
        r->limits.refit = false;
        ret = producer_new(&r->prod_opts, r->on_delivery, r->on_kafka_event, r, &r->prod, err, errlen);
        r->prod_opts.limits = NULL;
        r->prod_opts.nlimits = 0;
        free(l);
        return ret;
}

int relay_new_producer(struct relay *r, char *err, size_t errlen)
{
        int ret = make_producer(r, err, errlen);

        if (ret < 0)
                return ret;
        return relay_fit_producer(r, err, errlen);
}

int relay_fit_producer(struct relay *r, char *err, size_t errlen)
{
        bool pending = false;
        int ret;

        for (size_t i = 0; i < r->limits.n; i++)
                pending |= r->limits.v[i].unread || r->limits.v[i].refused;
        if (!pending)
                return 0;
        ret = read_limits(r);
        if (ret <= 0) {
                if (ret == -ECANCELED)
                        snprintf(err, errlen, "stopping (see above)");
                return ret;
        }
        r->prod = producer_free(r->prod);
        return make_producer(r, err, errlen);
}
