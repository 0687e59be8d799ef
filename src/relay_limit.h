/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Topics' max.message.bytes (relay_limit.c): what the relay knows of each
 * topic's limit, and the producer whose record batches fit them. Every
 * function takes the relay (relay_parts.h) for its producer, its
 * configuration and its failures; only relay_limit.c writes struct
 * relay_limits. Formats: the limit is Kafka's topic config
 * max.message.bytes, read with DescribeConfigs (KIP-133) through
 * librdkafka's admin API.
 */
#ifndef RELAY_RELAY_LIMIT_H
#define RELAY_RELAY_LIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "producer.h"

struct relay;

#define RELAY_TOPIC_LIMITS_MAX 4096           /* topics whose max.message.bytes is remembered, at most */

/*
 * A topic's max.message.bytes: read at start for the topics
 * known then, else before its first record, and again after the broker
 * refused a record batch of it as too large. Every producer the relay makes
 * fits its batches to them.
 */
struct relay_topic_limit {
        char *name;
        int64_t max_bytes;         /* 0: not known */
        bool read;                 /* read (or tried): its records may be produced */
        bool unread;               /* known at start: read it before streaming */
        bool refused;              /* a batch was refused since the producer was made: read it again */
        int64_t refused_limit;     /* max_bytes when it was refused */
        int64_t refused_batch;     /* the producer's largest batch for it then, bytes */
        int read_failures;         /* DescribeConfigs failures in a row after a refusal */
};

/*
 * Every topic the relay met, sorted by name; at most RELAY_TOPIC_LIMITS_MAX
 * (the limits of further topics are not read).
 */
struct relay_limits {
        struct relay_topic_limit *v;
        size_t n, cap;
        int read_ms;               /* one DescribeConfigs at most, ms; 0: RELAY_LIMIT_READ_MS */
        bool refit;                /* a refused batch was reported since the producer was made */
        bool unreadable_logged;    /* a limit could not be read, and that was said */
        bool full_logged;          /* RELAY_TOPIC_LIMITS_MAX topics are known, and that was said */
        char asking[256];          /* while streaming: the topic whose limit is asked for, "" if none */
        int ask_ms;                /* its DescribeConfigs request timeout, ms */
        int64_t ask_deadline_ms;   /* monotonic: given up after this */
};

#define RELAY_LIMIT_READ_MS 5000

/* relay_topic_limit() - @topic's max.message.bytes in bytes if known, else 0. */
int64_t relay_topic_limit(const struct relay *r, const char *topic);

/*
 * relay_too_large_alone() - is @m's record, alone in a record batch
 * (producer_record_batch_bytes()), larger than its topic's known
 * max.message.bytes? Then true, with a sentence saying so and the fix in
 * @reason (@size bytes). False when it fits or the limit is not known.
 */
bool relay_too_large_alone(const struct relay *r, const struct producer_msg *m, char *reason, size_t size);

/*
 * relay_refused_batch() - the broker refused a record batch holding @m as
 * too large, and @m alone does not exceed a known limit: remember to read
 * the topic's limit for the next producer, and say so (a warning, once per
 * producer); in the default mode also record a retry (without an error
 * line), so that the relay streams again from the slot with a new producer
 * whose batches fit (under
 * --exactly-once the failed Kafka transaction is aborted and streamed again
 * anyway). Called from a delivery report: never blocks.
 */
void relay_refused_batch(struct relay *r, const struct producer_msg *m);

/*
 * relay_fit_topic() - before a record of @topic is produced. The first time:
 * read its limit (DescribeConfigs; before streaming blocking up to
 * RELAY_LIMIT_READ_MS; while streaming asked without waiting, no longer
 * than the status interval, and answered in relay_limit_serve(); a topic
 * that does not exist yet or a limit that cannot be read is left to a
 * refusal, said once) and, when it is below the producer's batch for it,
 * fit it: a lane of its own in the default mode; under --exactly-once a
 * retry (no error line), so that the open Kafka transaction is aborted and
 * a new producer fits every batch. Returns 0 to produce; -EINPROGRESS while
 * streaming when the limit is being read (r->held_back set: the caller
 * undoes what it did, the record is offered again after the answer);
 * -EAGAIN (that retry) or -ECANCELED (a stop) after recording it: produce
 * nothing.
 */
int relay_fit_topic(struct relay *r, const char *topic);

/*
 * relay_limit_asking() - a topic's limit is being read while streaming:
 * nothing more is offered until relay_limit_serve() has the answer.
 */
bool relay_limit_asking(const struct relay *r);

/*
 * relay_limit_serve() - in relay_wait(), after Kafka was polled: take the
 * answer to the question relay_fit_topic() asked and fit the topic, or give
 * up on it past its deadline (the limit is then left to a refusal, said
 * once) or when the session or producer it was asked with has ended (the
 * next one asks again). Never blocks.
 */
void relay_limit_serve(struct relay *r);

/* relay_know_topic() - @topic is known at start: read its limit before streaming. */
void relay_know_topic(struct relay *r, const char *topic);

/*
 * relay_new_producer() - make r->prod with the known limits
 * (producer_options.limits), then relay_fit_producer(). Returns 0, or
 * producer_new()'s error with the reason in @err, or -ECANCELED after
 * recording a failure no new producer cures.
 */
int relay_new_producer(struct relay *r, char *err, size_t errlen);

/*
 * relay_fit_producer() - read the limits of the topics known at start or
 * refused since (DescribeConfigs with r->prod, up to 5 s each; at most
 * three tries for a refused topic, then a stop), and when one changes what
 * must be fitted, replace r->prod (nothing may be in flight). Returns 0, an
 * error of producer_new() with the reason in @err, or -ECANCELED after
 * recording a stop (a refused topic's limit unreadable, or a refusal of
 * batches that fitted it already).
 */
int relay_fit_producer(struct relay *r, char *err, size_t errlen);

/* relay_limits_free() - forget every limit. */
void relay_limits_free(struct relay *r);

#endif
