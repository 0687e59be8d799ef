// SPDX-License-Identifier: Apache-2.0
/*
 * `outbox-relay redrive`, the command: what was asked (--work-id, --since,
 * --until, the redrive headers' reason, operator and time), one of the two
 * paths (redrive_table.c, redrive_dead_letter.c), the wait for every
 * delivery report, and the report at the end. The top of the redrive
 * files: the paths and redrive_kit.c below it never call it. See redrive.h
 * and redrive_private.h.
 */
#include "redrive.h"

#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cloudevents.h"
#include "log.h"
#include "redrive_private.h"

/* The requested work IDs in strcmp() order, as redrive_wanted() looks them up. */
static int cmp_id(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *operator_name(void)
{
        struct passwd *pw = getpwuid(geteuid());
        const char *user = getenv("USER");

        return user && *user ? user : pw ? pw->pw_name : "unknown";
}

static int setup(struct redrive *rd, const struct relay_config *conf, FILE *out)
{
        char host[256] = "unknown";
        size_t n = 0;

        rd->conf = conf;
        rd->out = out;
        rd->start_us = redrive_wall_us();
        if (conf->since)
                rd->has_since = redrive_parse_time(conf->since, &rd->since_us) == 0;
        if (conf->until)
                rd->has_until = redrive_parse_time(conf->until, &rd->until_us) == 0;
        rd->ids = calloc(conf->nwork_ids + 1, sizeof(*rd->ids));
        rd->found = calloc(conf->nwork_ids + 1, sizeof(*rd->found));
        if (!rd->ids || !rd->found)
                return -ENOMEM;
        if (conf->nwork_ids) {
                memcpy(rd->ids, conf->work_ids, conf->nwork_ids * sizeof(*rd->ids));
                qsort(rd->ids, conf->nwork_ids, sizeof(*rd->ids), cmp_id);
        }
        for (size_t i = 0; i < conf->nwork_ids; i++)
                if (n == 0 || strcmp(rd->ids[n - 1], rd->ids[i]) != 0)
                        rd->ids[n++] = rd->ids[i];
        rd->nids = n;
        if (gethostname(host, sizeof(host)) < 0)
                snprintf(host, sizeof(host), "unknown");
        host[sizeof(host) - 1] = '\0';
        snprintf(rd->by, sizeof(rd->by), "%s@%s", operator_name(), host);
        ce_format_time(rd->start_us, rd->at, sizeof(rd->at));
        rd->rh[0] = (struct producer_header){"outbox_relay_redrive_reason", conf->reason,
                                             strlen(conf->reason)};
        rd->rh[1] = (struct producer_header){"outbox_relay_redrive_by", rd->by, strlen(rd->by)};
        rd->rh[2] = (struct producer_header){"outbox_relay_redrive_at", rd->at, strlen(rd->at)};
        rd->rh[3] = conf->from_dead_letter ?
                    (struct producer_header){"outbox_relay_redrive_from", "dead-letter", 11} :
                    (struct producer_header){"outbox_relay_redrive_from", "table", 5};
        return 0;
}

static void cleanup(struct redrive *rd)
{
        rd->prod = producer_free(rd->prod);
        for (size_t i = 0; rd->slots && i < rd->nslots; i++) {
                free(rd->slots[i].work_id);
                free(rd->slots[i].topic);
                free(rd->slots[i].from);
        }
        free(rd->slots);
        free(rd->props);
        free(rd->ids);
        free(rd->found);
}

/* Requested work IDs of which nothing was selected. */
static void report_missing(struct redrive *rd)
{
        const struct relay_config *conf = rd->conf;
        bool narrowed = conf->since || conf->until || conf->kind || conf->error_code;
        char id[600], where[512] = "";
        size_t o = 0;

        if (conf->from_dead_letter) {
                snprintf(where, sizeof(where), "the dead-letter topic \"%s\"", conf->dead_letter_topic);
        } else {
                for (size_t i = 0; i < conf->ntables && o + 8 < sizeof(where); i++)
                        o += (size_t)snprintf(where + o, sizeof(where) - o, "%s\"%s\".\"%s\"",
                                              i ? ", " : conf->ntables > 1 ? "tables " : "table ",
                                              conf->tables[i].schema, conf->tables[i].table);
        }
        for (size_t i = 0; i < rd->nids; i++) {
                if (rd->found[i])
                        continue;
                rd->res.missing++;
                redrive_quote(rd->ids[i], strlen(rd->ids[i]), id, sizeof(id));
                if (conf->from_dead_letter)
                        log_error("work ID %s is not in %s%s: nothing to redrive for it (it was never "
                                  "dead-lettered, or retention removed it)", id, where,
                                  narrowed ? " within --since, --until, --kind and --error-code" : "");
                else
                        log_error("work ID %s is gone: no row of %s has it%s (deleted by a cleanup, "
                                  "or never written); if it was dead-lettered, redrive it with "
                                  "--from-dead-letter", id, where,
                                  narrowed ? " within --since, --until and --kind" : "");
        }
}

int redrive_run(const struct relay_config *conf, FILE *out, struct redrive_result *ret_res, char *err,
                size_t errlen)
{
        struct redrive rd = {0};
        uint64_t done;
        int r;

        r = setup(&rd, conf, out);
        if (r == 0)
                r = conf->from_dead_letter ? redrive_dead_letter_run(&rd, err, errlen) :
                                             redrive_table_run(&rd, err, errlen);
        if (r < 0) {
                if (r == -ENOMEM)
                        snprintf(err, errlen, "out of memory");
                cleanup(&rd);
                return r;
        }
        redrive_drain(&rd);
        /* Selected and never sent, after Kafka or the database failed: not acknowledged either. */
        done = rd.res.acknowledged + rd.res.refused + rd.res.failed + rd.skipped;
        if (rd.res.selected > done)
                rd.res.failed += rd.res.selected - done;
        report_missing(&rd);
        rd.res.missing += rd.skipped;
        fprintf(out, "redrive by %s at %s: %" PRIu64 " selected, %" PRIu64 " acknowledged, %" PRIu64
                " refused, %" PRIu64 " failed, %" PRIu64 " not found or not redrivable\n", rd.by,
                rd.at, rd.res.selected, rd.res.acknowledged, rd.res.refused, rd.res.failed,
                rd.res.missing);
        *ret_res = rd.res;
        cleanup(&rd);
        return 0;
}
