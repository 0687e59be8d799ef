// SPDX-License-Identifier: Apache-2.0
/*
 * Redrive from the dead-letter topic: read it twice up to its end at the
 * start (topicscan.h), first to count the selection and check the
 * deduplication horizon, then to publish each selected dead letter to its
 * intended topic (outbox_relay_topic) without the relay's outbox_relay_*
 * headers. Selected by ce_id, ce_time and ce_type, the headers the relay
 * wrote on the row's record before dead-lettering it. See redrive.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cloudevents.h"
#include "log.h"
#include "redrive_private.h"
#include "topicscan.h"

/* What the selection needs of one dead letter. */
struct dead_letter {
        struct producer_header in[TOPICSCAN_MAX_HEADERS];
        size_t nin;
        const char *id;     /* ce_id, or NULL */
        size_t id_len;
        int64_t time_us;    /* ce_time, else the record's timestamp */
};

/* The last header of @dl named @name: its value and length, or NULL. */
static const char *header(const struct dead_letter *dl, const char *name, size_t *ret_len)
{
        const char *v = NULL;

        for (size_t i = 0; i < dl->nin; i++)
                if (strcmp(dl->in[i].name, name) == 0) {
                        v = dl->in[i].value;
                        *ret_len = dl->in[i].len;
                }
        return v;
}

/* Read @rec's headers into @dl and tell whether the selection takes it. */
static bool selected(const struct redrive *rd, const struct topicscan_record *rec,
                     struct dead_letter *dl)
{
        const struct relay_config *conf = rd->conf;
        const char *v;
        char text[64];
        size_t len = 0;

        dl->nin = rec->nheaders;
        for (size_t i = 0; i < rec->nheaders; i++)
                dl->in[i] = (struct producer_header){rec->headers[i].name, rec->headers[i].value,
                                                     rec->headers[i].len};
        dl->id = header(dl, "ce_id", &dl->id_len);
        dl->time_us = rec->timestamp_ms >= 0 ? rec->timestamp_ms * 1000 : 0;
        v = header(dl, "ce_time", &len);
        if (v && len < sizeof(text)) {
                memcpy(text, v, len);
                text[len] = '\0';
                redrive_parse_time(text, &dl->time_us);
        }
        if (rd->nids && (!dl->id || !redrive_wanted(rd, dl->id, dl->id_len)))
                return false;
        if ((rd->has_since && dl->time_us < rd->since_us) ||
            (rd->has_until && dl->time_us >= rd->until_us))
                return false;
        if (conf->kind) {
                v = header(dl, "ce_type", &len);
                if (!v || len != strlen(conf->kind) || memcmp(v, conf->kind, len) != 0)
                        return false;
        }
        if (conf->error_code) {
                v = header(dl, "outbox_relay_error_code", &len);
                if (!v || len != strlen(conf->error_code) || memcmp(v, conf->error_code, len) != 0)
                        return false;
        }
        return true;
}

static const char *where(const struct redrive *rd, const struct topicscan_record *rec, char *buf,
                         size_t size)
{
        snprintf(buf, size, "dead-letter topic \"%s\" partition %" PRId32 " offset %" PRId64,
                 rd->conf->dead_letter_topic, rec->partition, rec->offset);
        return buf;
}

/*
 * The record @rec becomes, into @m with headers @h and its topic in @topic
 * (RECORD_TOPIC_MAX + 1 bytes). Returns 0, or negative with the reason in @err.
 */
static int build(const struct redrive *rd, const struct topicscan_record *rec,
                 const struct dead_letter *dl, struct producer_header *h, char *topic,
                 struct producer_msg *m, char *err, size_t errlen)
{
        const char *t;
        size_t tlen;
        int n;

        if (rec->headers_cut) {
                snprintf(err, errlen, "it has more than %d headers", TOPICSCAN_MAX_HEADERS);
                return -E2BIG;
        }
        n = redrive_dead_letter_headers(dl->in, dl->nin, rd->rh, 4, h, REDRIVE_MAX_HEADERS, &t, &tlen,
                                        err, errlen);
        if (n == -E2BIG)
                snprintf(err, errlen, "it has more headers than a record may carry");
        if (n < 0)
                return n;
        if (tlen > RECORD_TOPIC_MAX) {
                snprintf(err, errlen, "its intended topic is longer than Kafka's %d bytes",
                         RECORD_TOPIC_MAX);
                return -ENOENT;
        }
        memcpy(topic, t, tlen);
        topic[tlen] = '\0';
        *m = (struct producer_msg){
                .topic = topic,
                .key = rec->key,
                .key_len = rec->key_len,
                .value = rec->value,
                .value_len = rec->value_len,
                .timestamp_ms = 0,  /* produce time, as the relay's default */
                .headers = h,
                .nheaders = (size_t)n,
        };
        return 0;
}

/* The first pass: count, check what cannot be redriven and the horizon. */
static int first_pass(struct redrive *rd, struct topicscan *scan, struct dead_letter *dl,
                      int64_t *ret_old, int64_t *ret_oldest_us, char *err, size_t errlen)
{
        const struct relay_config *conf = rd->conf;
        int64_t horizon_us = rd->start_us - conf->dedup_horizon_ms * 1000;
        struct producer_header h[REDRIVE_MAX_HEADERS];
        struct topicscan_record rec;
        char topic[RECORD_TOPIC_MAX + 1], why[REDRIVE_ERRLEN], id[600], pos[400];
        struct producer_msg m;
        int n;

        while ((n = topicscan_next(scan, &rec, err, errlen)) > 0) {
                if (!selected(rd, &rec, dl))
                        continue;
                if (++rd->res.selected > (uint64_t)conf->max_records) {
                        snprintf(err, errlen, "the selection has more than %" PRId64 " dead letters "
                                 "(--max-records): narrow it (--since, --until, --kind, fewer "
                                 "--work-id) or raise --max-records; nothing was published",
                                 conf->max_records);
                        return -E2BIG;
                }
                if (dl->id)
                        redrive_mark_found(rd, dl->id, dl->id_len);
                if (build(rd, &rec, dl, h, topic, &m, why, sizeof(why)) < 0) {
                        rd->skipped++;
                        log_error("cannot redrive work ID %s from %s: %s",
                                  dl->id ? redrive_quote(dl->id, dl->id_len, id, sizeof(id)) : "(none)",
                                  where(rd, &rec, pos, sizeof(pos)), why);
                        continue;
                }
                if (dl->time_us < horizon_us) {
                        if (*ret_old == 0 || dl->time_us < *ret_oldest_us)
                                *ret_oldest_us = dl->time_us;
                        (*ret_old)++;
                }
        }
        if (n < 0)
                return n == -ETIMEDOUT ? -ECONNREFUSED : -EIO;
        return 0;
}

/* The second pass: publish what the first one counted. */
static void second_pass(struct redrive *rd, struct topicscan *scan, struct dead_letter *dl)
{
        struct producer_header h[REDRIVE_MAX_HEADERS];
        struct topicscan_record rec;
        char topic[RECORD_TOPIC_MAX + 1], why[REDRIVE_ERRLEN], pos[400], err[REDRIVE_ERRLEN];
        struct producer_msg m;
        int n;

        topicscan_rewind(scan);
        while ((n = topicscan_next(scan, &rec, err, sizeof(err))) > 0) {
                if (!selected(rd, &rec, dl) || build(rd, &rec, dl, h, topic, &m, why, sizeof(why)) < 0)
                        continue;
                if (redrive_send(rd, &m, dl->id ? dl->id : "", dl->id ? dl->id_len : 0,
                                 where(rd, &rec, pos, sizeof(pos))) < 0)
                        return;
        }
        if (n < 0)
                log_error("redrive from the dead-letter topic \"%s\" stopped: %s",
                          rd->conf->dead_letter_topic, err);
}

int redrive_dead_letter_run(struct redrive *rd, char *err, size_t errlen)
{
        const struct relay_config *conf = rd->conf;
        const char **props = calloc(2 * conf->nprops + 1, sizeof(*props));
        struct topicscan_options opts;
        struct topicscan *scan = NULL;
        struct dead_letter *dl = calloc(1, sizeof(*dl));
        int64_t old = 0, oldest_us = 0;
        char oldest[40], hz[40];
        int r;

        if (!props || !dl) {
                free(props);
                free(dl);
                return -ENOMEM;
        }
        for (size_t i = 0; i < conf->nprops; i++) {
                props[2 * i] = conf->props[i].name;
                props[2 * i + 1] = conf->props[i].value;
        }
        opts = (struct topicscan_options){
                .brokers = conf->brokers,
                .props = props,
                .nprops = conf->nprops,
                .topic = conf->dead_letter_topic,
                /* A dead letter is stamped when it was dead-lettered, after its commit: a lower bound. */
                .since_ms = rd->has_since && rd->since_us > 0 ? rd->since_us / 1000 : 0,
                .timeout_ms = REDRIVE_KAFKA_TIMEOUT_MS,
        };
        r = topicscan_open(&opts, &scan, err, errlen);
        if (r == -ETIMEDOUT)
                r = -ECONNREFUSED;
        if (r == -ENOENT)
                snprintf(err + strlen(err), errlen - strlen(err), ": nothing was ever dead-lettered "
                         "there, or --dead-letter-topic names another topic");
        if (r < 0)
                goto out;
        r = first_pass(rd, scan, dl, &old, &oldest_us, err, errlen);
        if (r < 0)
                goto out;
        redrive_horizon_text(conf->dedup_horizon_ms, hz, sizeof(hz));
        if (old && !conf->yes) {
                snprintf(err, errlen, "%" PRId64 " of the %" PRIu64 " selected dead letters are of rows "
                         "committed more than the deduplication horizon (%s, --dedup-horizon) ago, "
                         "the oldest at %s: a receiver that has forgotten their work IDs applies "
                         "them again if they ever reached it. Find out first whether their effects "
                         "happened (outbox-relay(7), REDRIVE), then repeat with --yes; nothing was "
                         "published", old, rd->res.selected, hz,
                         ce_format_time(oldest_us, oldest, sizeof(oldest)));
                r = -EPERM;
                goto out;
        }
        if (old)
                log_warning("%" PRId64 " of the selected dead letters are older than the "
                            "deduplication horizon (%s): redriving them anyway (--yes)", old, hz);
        if (rd->res.selected > rd->skipped) {
                r = redrive_kafka_start(rd, err, errlen);
                if (r < 0)
                        goto out;
                second_pass(rd, scan, dl);
        }
        r = 0;
out:
        topicscan_free(scan);
        free(props);
        free(dl);
        return r;
}
