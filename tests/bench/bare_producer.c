// SPDX-License-Identifier: Apache-2.0
/*
 * The benchmark's "limit, broker" contestant: a bare librdkafka producer that
 * writes the same number of same-sized records, with the same headers and the
 * same producer settings as outbox-relay (src/producer.c), to the same broker,
 * and nothing else: no PostgreSQL, no decoding, no ledger. What it achieves is
 * what the broker and librdkafka allow on this machine.
 *
 * Two modes:
 *   backlog (default): produce -n records as fast as librdkafka accepts them,
 *     then wait for every delivery report.
 *   --rate R --duration S: produce R records per second for S seconds, each
 *     stamped (ce_time header, record timestamp) with the moment it was due,
 *     so a consumer can measure produce-to-receipt latency.
 *
 * Prints one JSON object on stdout at the end: counts, elapsed seconds, and
 * its own getrusage() (user and system CPU seconds, peak RSS in KiB).
 * Exits 0 when every record was acknowledged, 1 otherwise, 2 on usage errors.
 * Knows nothing of the relay's modules: it must stay a reference, not a copy.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define BP_MAX_PROPS 64

struct bp_params {
        const char *brokers;
        const char *topic;
        const char *type;       /* ce_type header value */
        const char *source;     /* ce_source header value */
        const char *value;      /* record value, the same for every record */
        long long count;        /* records in backlog mode */
        int key_len;            /* bytes of each key, zero-padded counter */
        double rate;            /* records per second; 0: backlog mode */
        double duration_s;
        long long inflight_max; /* the relay's --max-inflight-messages default */
        const char *props[BP_MAX_PROPS][2];
        int nprops;
};

struct bp_stats {
        long long produced, acked, failed;
        char first_error[256];
};

static volatile sig_atomic_t bp_stop;

static void bp_on_signal(int sig)
{
        (void)sig;
        bp_stop = 1;
}

static double bp_now(clockid_t clk)
{
        struct timespec ts;

        clock_gettime(clk, &ts);
        return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* @locality: the thread calling rd_kafka_poll()/rd_kafka_flush(), i.e. main. */
static void bp_dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
        struct bp_stats *st = opaque;

        (void)rk;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
                st->acked++;
                return;
        }
        if (st->failed++ == 0)
                snprintf(st->first_error, sizeof(st->first_error), "%s", rd_kafka_err2str(m->err));
}

static int bp_set(rd_kafka_conf_t *kc, const char *name, const char *value)
{
        char err[512];

        if (rd_kafka_conf_set(kc, name, value, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
                fprintf(stderr, "bare_producer: error: librdkafka refused %s=%s: %s\n", name, value,
                        err);
                return -EINVAL;
        }
        return 0;
}

/* The relay's producer settings (src/producer.c), in the same order. */
static rd_kafka_t *bp_producer_new(const struct bp_params *p, struct bp_stats *st)
{
        rd_kafka_conf_t *kc = rd_kafka_conf_new();
        char num[32], err[512];
        rd_kafka_t *rk;

        snprintf(num, sizeof(num), "%lld", p->inflight_max + 10000);
        if (bp_set(kc, "bootstrap.servers", p->brokers) < 0 ||
            bp_set(kc, "partitioner", "murmur2_random") < 0 || bp_set(kc, "linger.ms", "5") < 0 ||
            bp_set(kc, "client.id", "bare-producer") < 0 ||
            bp_set(kc, "queue.buffering.max.messages", num) < 0)
                goto fail;
        for (int i = 0; i < p->nprops; i++)
                if (bp_set(kc, p->props[i][0], p->props[i][1]) < 0)
                        goto fail;
        if (bp_set(kc, "enable.idempotence", "true") < 0 || bp_set(kc, "acks", "all") < 0 ||
            bp_set(kc, "delivery.report.only.error", "false") < 0)
                goto fail;
        rd_kafka_conf_set_dr_msg_cb(kc, bp_dr_msg_cb);
        rd_kafka_conf_set_opaque(kc, st);
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, err, sizeof(err));
        if (!rk) {
                fprintf(stderr, "bare_producer: error: cannot create the producer: %s\n", err);
                goto fail;
        }
        return rk;
fail:
        rd_kafka_conf_destroy(kc);
        return NULL;
}

/* RFC 3339 UTC with microseconds, as the relay writes ce_time. */
static void bp_rfc3339(double t, char *buf, size_t size)
{
        time_t secs = (time_t)t;
        long us = (long)((t - (double)secs) * 1e6);
        struct tm tm;

        if (us < 0 || us > 999999)
                us = 0;
        gmtime_r(&secs, &tm);
        snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, us);
}

/*
 * Hand one record to librdkafka with the relay's header set (names, order and
 * value sizes as relay.c's publish_row() writes them). @t: wall-clock seconds
 * used for ce_time and the record timestamp. Retries while the queue is full,
 * serving delivery reports meanwhile, as the relay does.
 */
static int bp_produce(rd_kafka_t *rk, const struct bp_params *p, struct bp_stats *st, long long seq,
                      double t)
{
        char key[64], ctime_text[96], lsn[24], xid[16];
        rd_kafka_headers_t *h;
        rd_kafka_resp_err_t e;

        snprintf(key, sizeof(key), "%0*lld", p->key_len, seq);
        bp_rfc3339(t, ctime_text, sizeof(ctime_text));
        snprintf(lsn, sizeof(lsn), "%X/%08X", 1u, (unsigned)(0x10000000u + (unsigned)seq * 64u));
        snprintf(xid, sizeof(xid), "%u", 700000u + (unsigned)(seq / 5));
        for (;;) {
                h = rd_kafka_headers_new(8);
                rd_kafka_header_add(h, "ce_specversion", -1, "1.0", 3);
                rd_kafka_header_add(h, "ce_id", -1, key, -1);
                rd_kafka_header_add(h, "ce_type", -1, p->type, -1);
                rd_kafka_header_add(h, "ce_source", -1, p->source, -1);
                rd_kafka_header_add(h, "ce_time", -1, ctime_text, -1);
                rd_kafka_header_add(h, "content-type", -1, "application/json", 16);
                rd_kafka_header_add(h, "ce_pglsn", -1, lsn, -1);
                rd_kafka_header_add(h, "ce_pgxid", -1, xid, -1);
                e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(p->topic),
                                      RD_KAFKA_V_KEY(key, strlen(key)),
                                      RD_KAFKA_V_VALUE((void *)p->value, strlen(p->value)),
                                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                      RD_KAFKA_V_TIMESTAMP((int64_t)(t * 1000.0)),
                                      RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
                if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
                        st->produced++;
                        return 0;
                }
                rd_kafka_headers_destroy(h);
                if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || bp_stop) {
                        fprintf(stderr, "bare_producer: error: produce: %s\n", rd_kafka_err2str(e));
                        return -EIO;
                }
                rd_kafka_poll(rk, 100);
        }
}

static void bp_usage(FILE *out)
{
        fprintf(out,
                "Usage: bare_producer -b BROKERS -t TOPIC [OPTION]...\n"
                "  -b, --brokers LIST      bootstrap servers\n"
                "  -t, --topic NAME        topic to write\n"
                "  -n, --count N           records in backlog mode (default 1000)\n"
                "  -k, --key-len N         key bytes, a zero-padded counter (default 10)\n"
                "  -V, --value TEXT        record value (default: 256 bytes of JSON)\n"
                "      --type TEXT         ce_type header (default bench)\n"
                "      --source TEXT       ce_source header\n"
                "  -r, --rate R            records per second (steady mode)\n"
                "  -D, --duration S        seconds of steady mode (default 10)\n"
                "      --max-inflight N    as the relay's --max-inflight-messages (default 5000)\n"
                "  -X NAME=VALUE           librdkafka property; repeatable\n");
}

static int bp_parse(int argc, char **argv, struct bp_params *p)
{
        static const struct option longopts[] = {
                {"brokers", required_argument, NULL, 'b'},  {"topic", required_argument, NULL, 't'},
                {"count", required_argument, NULL, 'n'},    {"key-len", required_argument, NULL, 'k'},
                {"value", required_argument, NULL, 'V'},    {"type", required_argument, NULL, 1},
                {"source", required_argument, NULL, 2},     {"rate", required_argument, NULL, 'r'},
                {"duration", required_argument, NULL, 'D'}, {"max-inflight", required_argument, NULL, 3},
                {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
        };
        int c;

        while ((c = getopt_long(argc, argv, "b:t:n:k:V:r:D:X:h", longopts, NULL)) != -1) {
                switch (c) {
                case 'b': p->brokers = optarg; break;
                case 't': p->topic = optarg; break;
                case 'n': p->count = atoll(optarg); break;
                case 'k': p->key_len = atoi(optarg); break;
                case 'V': p->value = optarg; break;
                case 1: p->type = optarg; break;
                case 2: p->source = optarg; break;
                case 'r': p->rate = atof(optarg); break;
                case 'D': p->duration_s = atof(optarg); break;
                case 3: p->inflight_max = atoll(optarg); break;
                case 'X': {
                        char *eq = strchr(optarg, '=');

                        if (!eq || p->nprops >= BP_MAX_PROPS) {
                                fprintf(stderr, "bare_producer: error: bad -X \"%s\"\n", optarg);
                                return -EINVAL;
                        }
                        *eq = '\0';
                        p->props[p->nprops][0] = optarg;
                        p->props[p->nprops][1] = eq + 1;
                        p->nprops++;
                        break;
                }
                case 'h': bp_usage(stdout); exit(0);
                default: bp_usage(stderr); return -EINVAL;
                }
        }
        if (!p->brokers || !p->topic || p->count < 0 || p->key_len < 1 || p->key_len > 40 ||
            p->rate < 0 || p->duration_s < 0 || p->inflight_max < 1) {
                bp_usage(stderr);
                return -EINVAL;
        }
        return 0;
}

int main(int argc, char **argv)
{
        static char default_value[257];
        struct bp_params p = {
                .type = "bench", .source = "postgresql://0/postgres/public.outbox",
                .count = 1000, .key_len = 10, .duration_s = 10, .inflight_max = 5000,
        };
        struct bp_stats st = {0};
        struct rusage ru;
        double t0, elapsed;
        rd_kafka_t *rk;
        int rc = 0;

        memset(default_value, 'x', sizeof(default_value) - 1);
        memcpy(default_value, "{\"pad\": \"", 9);
        memcpy(default_value + sizeof(default_value) - 3, "\"}", 2);
        p.value = default_value;
        if (bp_parse(argc, argv, &p) < 0)
                return 2;
        signal(SIGINT, bp_on_signal);
        signal(SIGTERM, bp_on_signal);
        rk = bp_producer_new(&p, &st);
        if (!rk)
                return 2;
        t0 = bp_now(CLOCK_MONOTONIC);
        if (p.rate > 0) {
                /* Steady: record i is due at t0 + i / rate. Each turn produces every
                 * record due by now, stamped with the wall-clock time of that turn,
                 * then serves delivery reports for 1 ms: at most ~1000 wake-ups a
                 * second whatever the rate, so the load generator stays light. */
                long long total = (long long)(p.rate * p.duration_s), i = 0;

                while (i < total && !bp_stop) {
                        double now = bp_now(CLOCK_MONOTONIC) - t0, wall = bp_now(CLOCK_REALTIME);

                        for (; i < total && (double)i / p.rate <= now; i++) {
                                if (bp_produce(rk, &p, &st, i, wall) < 0) {
                                        rc = 1;
                                        bp_stop = 1;
                                        break;
                                }
                        }
                        rd_kafka_poll(rk, 1);
                }
        } else {
                for (long long i = 0; i < p.count && !bp_stop; i++) {
                        if (bp_produce(rk, &p, &st, i, bp_now(CLOCK_REALTIME)) < 0) {
                                rc = 1;
                                break;
                        }
                        rd_kafka_poll(rk, 0);
                }
        }
        while (rd_kafka_outq_len(rk) > 0 && !bp_stop)
                rd_kafka_poll(rk, 50);
        elapsed = bp_now(CLOCK_MONOTONIC) - t0;
        rd_kafka_flush(rk, 1000);
        rd_kafka_destroy(rk);
        getrusage(RUSAGE_SELF, &ru);
        if (st.acked != st.produced || st.failed)
                rc = 1;
        printf("{\"produced\": %lld, \"acked\": %lld, \"failed\": %lld, \"first_error\": \"%s\", "
               "\"elapsed_s\": %.6f, \"utime_s\": %.6f, \"stime_s\": %.6f, \"maxrss_kb\": %ld}\n",
               st.produced, st.acked, st.failed, st.first_error, elapsed,
               (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
               (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, ru.ru_maxrss);
        return rc;
}
