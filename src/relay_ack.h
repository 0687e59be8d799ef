/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A record handed to librdkafka, and what happens on its ack or nack
 * (relay_ack.c): delivery reports, Kafka's refusals handled outside the
 * callback, the dead-letter topic. Every function takes the relay
 * (relay_parts.h) for its producer, ledger and guarantee; only
 * relay_ack.c writes struct relay_nacks. Formats: the records are
 * CloudEvents' Kafka binary mode (cloudevents.h); the dead-letter headers
 * are the relay's own (outbox-relay(7)).
 */
#ifndef RELAY_RELAY_ACK_H
#define RELAY_RELAY_ACK_H

#include <stdbool.h>
#include <stddef.h>

#include "producer.h"

struct relay;

/*
 * A failed delivery report the loop handles after producer_poll() returns
 * (a report may not produce): the message copied into @buf.
 */
struct relay_nack {
        struct producer_msg msg;
        struct producer_error error;
        struct producer_header *headers;
        char *buf;
        bool noted;                /* its dead-lettering was logged and counted; the copy was held back */
};

struct relay_nacks {
        struct relay_nack *v;      /* at most one per message in flight: bounded like them */
        size_t n, cap;
};

/*
 * relay_produce() - producer_send(@m), never waiting. Returns 0; -EAGAIN
 * when librdkafka's queue is full (queue.buffering.max.messages or
 * .kbytes): nothing was sent, r->held_back and r->kafka_full are set, and
 * the caller undoes what it did and leaves the record to be offered again
 * after the next wait (which serves delivery reports); -EIO with
 * @ret_error as producer_send().
 */
int relay_produce(struct relay *r, const struct producer_msg *m, struct producer_error *ret_error);

/*
 * relay_backpressured() - true while the in-flight bounds (messages, bytes)
 * are reached, librdkafka's queue was full at the last produce, a topic's
 * limit is being read, or a failed delivery report waits to be handled
 * (its dead-letter copy goes first): nothing more is offered until then.
 */
bool relay_backpressured(const struct relay *r);

/*
 * relay_refused_reason() - why Kafka refused a row's record for @topic with
 * @e (@text: its words, or the record's size alone against the topic's
 * limit), with the fix when there is one: the reason a row error, a
 * dead-letter record's outbox_relay_error header and --exactly-once's replay
 * give, whether librdkafka refused the record at once or in its delivery
 * report. Writes at most @size bytes (truncated) into @buf, caller-owned.
 */
void relay_refused_reason(const char *topic, const char *text, const struct producer_error *e, char *buf,
                          size_t size);

/* relay_on_delivery() - the producer's delivery report callback (producer_dr_fn). */
void relay_on_delivery(void *ctx, const struct producer_report *rep);

/* relay_on_kafka_event() - the producer's event callback (producer_event_fn). */
void relay_on_kafka_event(void *ctx, enum producer_event ev, const struct producer_error *e);

/*
 * relay_handle_nacks() - act on the failed delivery reports collected since
 * the last call (records refused as their own fault): dead-letter, or stop.
 * Produces, so never from inside a report.
 */
void relay_handle_nacks(struct relay *r);

/* relay_drop_nacks() - forget collected failed reports (their messages are sent again). */
void relay_drop_nacks(struct relay *r);

/*
 * relay_dead_letter() - publish a row that cannot be published to the
 * dead-letter topic under @m->ticket: @m's key, value and headers plus
 * outbox_relay_error (@reason), outbox_relay_error_code (@code) and
 * outbox_relay_topic (@topic, the intended one, or ""). @work_id and
 * @lsn_text name the row in errors. Returns 0; -EAGAIN when it is held
 * back (r->held_back: the dead-letter topic's limit is being read, or
 * librdkafka's queue is full), nothing sent; -ECANCELED when the open
 * --exactly-once transaction had failed (relay_eos_produce_failed(): the loop
 * aborts it and streams again); or a negative errno after recording the
 * failure.
 */
int relay_dead_letter(struct relay *r, const struct producer_msg *m, const char *topic,
                      const char *code, const char *reason, const char *work_id,
                      const char *lsn_text);

/* relay_nacks_free() - relay_drop_nacks(), then free the list itself. */
void relay_nacks_free(struct relay *r);

#endif
