/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The redrive command's own header, shared by its four files and nothing
 * else. They stand in layers, each calling only those below it:
 *
 *   redrive.c              the command: what was asked, one of the paths,
 *                          the wait for every delivery report, the report
 *                          at the end
 *   redrive_table.c        records from the outbox table(s), with SQL
 *   redrive_dead_letter.c  records from the dead-letter topic
 *   redrive_kit.c          what they share: times, headers, quoting, the
 *                          requested work IDs, sending within the
 *                          in-flight bounds while serving delivery reports
 */
#ifndef RELAY_REDRIVE_PRIVATE_H
#define RELAY_REDRIVE_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "producer.h"
#include "redrive.h"

#define REDRIVE_ERRLEN 1024

/* A record handed to Kafka, until its delivery report: what the report line names. */
struct redrive_pending {
        char *work_id;      /* NULL: the slot is free */
        char *topic;
        char *from;         /* where it was read: 'table "public"."outbox"', or the dead letter's offset */
        size_t next_free;   /* free list */
};

struct redrive {
        const struct relay_config *conf;
        FILE *out;
        struct redrive_result res;
        uint64_t skipped;             /* selected dead letters that cannot be redriven (in missing) */

        /* The selection. */
        const char **ids;             /* requested work IDs, sorted, each once; borrowed from conf */
        bool *found;                  /* per ids[i]: a record of it was selected */
        size_t nids;
        bool has_since, has_until;
        int64_t since_us, until_us;   /* µs since the Unix epoch */
        int64_t start_us;             /* the redrive's start (this host's clock) */

        /* The redrive headers, the same on every record. */
        char by[320];                 /* user@host */
        char at[40];                  /* RFC 3339 */
        struct producer_header rh[4];

        /* Kafka. */
        struct producer *prod;
        const char **props;           /* name, value pairs of conf->props */
        struct redrive_pending *slots; /* the smaller of --max-inflight-messages and --max-records */
        size_t nslots, free_head;     /* free_head == nslots: none free */
        uint64_t outstanding;         /* handed to Kafka, no delivery report yet */
        bool kafka_failed;            /* a fault that is not the record's: send nothing more */
};

/*
 * redrive_kafka_start() - make the producer (the relay's settings and -X)
 * and check that a broker answers within REDRIVE_KAFKA_TIMEOUT_MS. Returns
 * 0, -EINVAL (a property refused), -ECONNREFUSED (no broker), -ENOMEM, with
 * the reason in @err.
 */
int redrive_kafka_start(struct redrive *rd, char *err, size_t errlen);

/*
 * redrive_send() - hand @m to Kafka once the in-flight bounds allow it,
 * serving delivery reports meanwhile. @work_id (@id_len bytes) and @from
 * name the record in the report line. A record Kafka refuses at once for
 * its own sake is counted and logged. Returns 0; or -EIO once Kafka failed
 * otherwise (logged; send nothing more).
 */
int redrive_send(struct redrive *rd, struct producer_msg *m, const char *work_id, size_t id_len,
                 const char *from);

/*
 * redrive_drain() - wait for every delivery report of what was sent; after
 * a producer failure at most REDRIVE_KAFKA_TIMEOUT_MS, then what is left
 * counts as failed.
 */
void redrive_drain(struct redrive *rd);

/* redrive_wall_us() - this host's clock, µs since the Unix epoch. */
int64_t redrive_wall_us(void);

/* redrive_wanted() - true when no work IDs were requested, or @id (@len bytes) is one of them. */
bool redrive_wanted(const struct redrive *rd, const char *id, size_t len);

/* redrive_mark_found() - a record of requested work ID @id (@len bytes) was selected. */
void redrive_mark_found(struct redrive *rd, const char *id, size_t len);

/* redrive_quote() - @s (@len bytes) in double quotes, '"', '\\' and control bytes escaped, into @buf. */
const char *redrive_quote(const char *s, size_t len, char *buf, size_t size);

/* redrive_horizon_text() - @ms as "7 days", "36 hours" or "90 s" into @buf. Returns @buf. */
const char *redrive_horizon_text(int64_t ms, char *buf, size_t size);

/* redrive_table_run() - the table path (redrive_table.c); returns as redrive_run(). */
int redrive_table_run(struct redrive *rd, char *err, size_t errlen);

/* redrive_dead_letter_run() - the dead-letter path (redrive_dead_letter.c); as redrive_run(). */
int redrive_dead_letter_run(struct redrive *rd, char *err, size_t errlen);

#endif
