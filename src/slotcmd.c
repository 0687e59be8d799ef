// SPDX-License-Identifier: Apache-2.0
/*
 * `outbox-relay slot create | drop | status`. See slotcmd.h. Knows libpq and
 * pg_replication_slots, not Kafka.
 */
#include "slotcmd.h"

#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lsn.h"
#include "preflight.h"
#include "publication.h"

static void set_err(char *err, size_t errlen, const char *prefix, const char *msg)
{
        size_t n;

        snprintf(err, errlen, "%s%s", prefix, msg);
        n = strlen(err);
        while (n > 0 && err[n - 1] == '\n')
                err[--n] = '\0';
}

int slotcmd_status(const struct relay_config *conf, struct slotcmd_status *ret_st, char *err,
                   size_t errlen)
{
        struct slotcmd_status st = {0};
        struct preflight_slot s;
        PGconn *c;
        int rc;

        rc = preflight_connect(conf->conninfo, PREFLIGHT_PROBE_TIMEOUT_MS, &c, err, errlen);
        if (rc < 0)
                return rc;
        rc = preflight_read_slot(c, conf->slot, &s, err, errlen);
        if (rc == 0 && !s.exists) {
                snprintf(err, errlen, "replication slot \"%s\" does not exist in this cluster; create "
                         "it with `outbox-relay slot create`", conf->slot);
                rc = -ENOENT;
        } else if (rc == 0) {
                snprintf(st.slot, sizeof(st.slot), "%s", conf->slot);
                snprintf(st.plugin, sizeof(st.plugin), "%s", s.plugin);
                snprintf(st.slot_type, sizeof(st.slot_type), "%s", s.slot_type);
                snprintf(st.database, sizeof(st.database), "%s", s.database);
                st.active = s.active_pid != 0;
                st.active_pid = s.active_pid;
                snprintf(st.holder, sizeof(st.holder), "%s", s.holder);
                st.confirmed_flush_lsn = s.confirmed_flush_lsn;
                st.restart_lsn = s.restart_lsn;
                st.current_wal_lsn = s.current_wal_lsn;
                st.retained_bytes = st.restart_lsn == LSN_INVALID ? -1 :
                                    (int64_t)(st.current_wal_lsn - st.restart_lsn);
                st.lag_bytes = st.confirmed_flush_lsn == LSN_INVALID ? -1 :
                               (int64_t)(st.current_wal_lsn - st.confirmed_flush_lsn);
                st.has_wal_status = s.has_wal_status;
                snprintf(st.wal_status, sizeof(st.wal_status), "%s", s.wal_status);
                st.safe_wal_size_null = s.safe_wal_size_null;
                st.safe_wal_size = s.safe_wal_size;
                st.has_failover = PQserverVersion(c) >= 170000;
                st.failover = s.failover;
                st.synced = s.synced;
                snprintf(st.invalidation_reason, sizeof(st.invalidation_reason), "%s",
                         s.invalidation_reason);
                *ret_st = st;
        }
        PQfinish(c);
        return rc;
}

static void print_json(const struct slotcmd_status *st, FILE *out)
{
        cJSON *o = cJSON_CreateObject();
        char a[LSN_STRLEN], num[32];
        char *text;

/* Integers as their decimal text: cJSON numbers are doubles. */
#define RAW(key, fmt, v) \
        do { \
                snprintf(num, sizeof(num), fmt, v); \
                cJSON_AddRawToObject(o, key, num); \
        } while (0)
        cJSON_AddStringToObject(o, "slot", st->slot);
        cJSON_AddStringToObject(o, "plugin", st->plugin);
        cJSON_AddStringToObject(o, "slot_type", st->slot_type);
        cJSON_AddStringToObject(o, "database", st->database);
        cJSON_AddBoolToObject(o, "active", st->active);
        if (st->active_pid) {
                RAW("active_pid", "%d", st->active_pid);
                cJSON_AddStringToObject(o, "holder", st->holder);
        } else
                cJSON_AddNullToObject(o, "active_pid");
        cJSON_AddStringToObject(o, "confirmed_flush_lsn", lsn_format(st->confirmed_flush_lsn, a));
        /* An invalidated slot has no restart_lsn: null, not 0/0 and -1. */
        if (st->restart_lsn == LSN_INVALID)
                cJSON_AddNullToObject(o, "restart_lsn");
        else
                cJSON_AddStringToObject(o, "restart_lsn", lsn_format(st->restart_lsn, a));
        cJSON_AddStringToObject(o, "current_wal_lsn", lsn_format(st->current_wal_lsn, a));
        if (st->retained_bytes < 0)
                cJSON_AddNullToObject(o, "retained_bytes");
        else
                RAW("retained_bytes", "%" PRId64, st->retained_bytes);
        RAW("lag_bytes", "%" PRId64, st->lag_bytes);
        if (st->has_wal_status) {
                cJSON_AddStringToObject(o, "wal_status", st->wal_status);
                if (st->safe_wal_size_null)
                        cJSON_AddNullToObject(o, "safe_wal_size");
                else
                        RAW("safe_wal_size", "%" PRId64, st->safe_wal_size);
        }
        if (st->has_failover) {
                cJSON_AddBoolToObject(o, "failover", st->failover);
                cJSON_AddBoolToObject(o, "synced", st->synced);
                if (st->invalidation_reason[0])
                        cJSON_AddStringToObject(o, "invalidation_reason", st->invalidation_reason);
                else
                        cJSON_AddNullToObject(o, "invalidation_reason");
        }
#undef RAW
        text = cJSON_PrintUnformatted(o);
        fprintf(out, "%s\n", text ? text : "{}");
        cJSON_free(text);
        cJSON_Delete(o);
}

void slotcmd_print_status(const struct slotcmd_status *st, bool json, FILE *out)
{
        char a[LSN_STRLEN];

        if (json) {
                print_json(st, out);
                return;
        }
        fprintf(out, "slot:                %s\n", st->slot);
        fprintf(out, "plugin:              %s\n", st->plugin);
        fprintf(out, "slot_type:           %s\n", st->slot_type);
        fprintf(out, "database:            %s\n", st->database);
        fprintf(out, "active:              %s\n", st->active ? "yes" : "no");
        if (st->active_pid)
                fprintf(out, "active_pid:          %d (%s)\n", st->active_pid, st->holder);
        else
                fprintf(out, "active_pid:          -\n");
        fprintf(out, "confirmed_flush_lsn: %s\n", lsn_format(st->confirmed_flush_lsn, a));
        fprintf(out, "restart_lsn:         %s\n", st->restart_lsn == LSN_INVALID ? "- (none: the slot "
                "retains no WAL)" : lsn_format(st->restart_lsn, a));
        fprintf(out, "current_wal_lsn:     %s\n", lsn_format(st->current_wal_lsn, a));
        if (st->retained_bytes < 0)
                fprintf(out, "retained_bytes:      -\n");
        else
                fprintf(out, "retained_bytes:      %" PRId64 " (WAL kept for the slot, from "
                        "restart_lsn)\n", st->retained_bytes);
        fprintf(out, "lag_bytes:           %" PRId64 " (WAL written since confirmed_flush_lsn)\n",
                st->lag_bytes);
        if (st->has_wal_status) {
                fprintf(out, "wal_status:          %s\n", st->wal_status);
                if (!st->safe_wal_size_null)
                        fprintf(out, "safe_wal_size:       %" PRId64 "\n", st->safe_wal_size);
                else
                        fprintf(out, "safe_wal_size:       %s\n",
                                strcmp(st->wal_status, "lost") == 0 ? "-" : "unlimited");
        }
        if (st->has_failover) {
                fprintf(out, "failover:            %s\n", st->failover ? "yes" : "no");
                fprintf(out, "synced:              %s\n", st->synced ? "yes (a standby's copy of the "
                        "primary's failover slot)" : "no");
                fprintf(out, "invalidation_reason: %s\n", st->invalidation_reason[0] ?
                        st->invalidation_reason : "- (valid)");
        }
}

/* pgoutput: the publication, created before the slot if missing, then judged. */
static int slot_publication(PGconn *c, const struct relay_config *conf, struct slotcmd_created *cr, char *err,
                            size_t errlen)
{
        struct publication pub;
        int rc;

        rc = publication_read(c, config_publication(conf), conf->tables, conf->ntables, &pub, err, errlen);
        if (rc < 0)
                return rc;
        if (!pub.exists) {
                publication_release(&pub);
                rc = publication_create(c, conf, err, errlen);
                if (rc < 0)
                        return rc == -EEXIST ? -EINVAL : rc;
                cr->publication_created = true;
                rc = publication_read(c, config_publication(conf), conf->tables, conf->ntables, &pub, err,
                                      errlen);
                if (rc < 0)
                        return rc;
        }
        rc = publication_judge(&pub, conf, err, errlen, NULL, 0);
        publication_release(&pub);
        return rc < 0 ? -EINVAL : 0;
}

int slotcmd_check_after(PGconn *c, const struct relay_config *conf, struct preflight_slot *ret_slot,
                        char *err, size_t errlen)
{
        int rc;

        if (strcmp(conf->after_slot, conf->slot) == 0) {
                snprintf(err, errlen, "--after-slot names the relay's own slot \"%s\": name the slot of "
                         "the consumer the relay replaces (Debezium's slot.name)", conf->slot);
                return -EINVAL;
        }
        rc = preflight_read_slot(c, conf->after_slot, ret_slot, err, errlen);
        if (rc < 0)
                return -EIO;
        if (!ret_slot->exists) {
                snprintf(err, errlen, "--after-slot: replication slot \"%s\" does not exist in this "
                         "cluster: name the slot of the consumer the relay replaces (Debezium's "
                         "slot.name, default \"debezium\"; SELECT slot_name FROM pg_replication_slots)",
                         conf->after_slot);
                return -ENOENT;
        }
        if (strcmp(ret_slot->slot_type, "logical") != 0 || strcmp(ret_slot->database, PQdb(c)) != 0) {
                snprintf(err, errlen, "--after-slot: replication slot \"%s\" is a %s slot of database "
                         "\"%s\", not a logical slot of \"%s\": it cannot have published this outbox",
                         conf->after_slot, ret_slot->slot_type, ret_slot->database, PQdb(c));
                return -EINVAL;
        }
        if (strcmp(ret_slot->wal_status, "lost") == 0 || ret_slot->restart_lsn == LSN_INVALID) {
                snprintf(err, errlen, "--after-slot: replication slot \"%s\" was invalidated "
                         "(wal_status lost): its consumer cannot publish what it had not confirmed, "
                         "from LSN %s on; recover those rows as outbox-relay(7), RUNBOOK, \"A lost "
                         "slot\" says, then create the slot without --after-slot", conf->after_slot,
                         lsn_format(ret_slot->confirmed_flush_lsn, (char[LSN_STRLEN]){0}));
                return -EINVAL;
        }
        return 0;
}

int slotcmd_wait_after(const struct relay_config *conf, uint64_t consistent_lsn,
                       struct slotcmd_after *ret_after, char *err, size_t errlen)
{
        struct slotcmd_after af = {0};
        struct preflight_slot s;
        struct timespec start, now, nap = {0, 200 * 1000 * 1000};
        char a[LSN_STRLEN], b[LSN_STRLEN];
        PGconn *c;
        int rc;

        rc = preflight_connect(conf->conninfo, PREFLIGHT_PROBE_TIMEOUT_MS, &c, err, errlen);
        if (rc < 0)
                return rc;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (;;) {
                rc = slotcmd_check_after(c, conf, &s, err, errlen);
                if (rc < 0)
                        goto out;
                clock_gettime(CLOCK_MONOTONIC, &now);
                af.waited_ms = (int64_t)(now.tv_sec - start.tv_sec) * 1000 +
                               (now.tv_nsec - start.tv_nsec) / 1000000;
                af.confirmed_flush_lsn = s.confirmed_flush_lsn;
                af.active_pid = s.active_pid;
                snprintf(af.plugin, sizeof(af.plugin), "%s", s.plugin);
                if (s.confirmed_flush_lsn != LSN_INVALID && s.confirmed_flush_lsn >= consistent_lsn)
                        break;
                if (af.waited_ms >= conf->after_slot_timeout_ms) {
                        snprintf(err, errlen, "slot \"%s\" (plugin %s, %s) is confirmed up to LSN %s, "
                                 "%" PRIu64 " bytes before the new slot \"%s\"'s consistent point %s, "
                                 "after waiting %" PRId64 " ms (--after-slot-timeout): rows committed in "
                                 "between are published by neither if its consumer stops now. Keep it "
                                 "running until it confirms past %s (Debezium confirms after an event "
                                 "or a heartbeat: set heartbeat.interval.ms), then run `outbox-relay "
                                 "check --after-slot=%s` until its cut-over item passes, and only then "
                                 "stop it. Slot \"%s\" was created and stays", conf->after_slot, s.plugin,
                                 s.active_pid ? "in use" : "held by no process: its consumer is not "
                                 "running, start it again", lsn_format(s.confirmed_flush_lsn, a),
                                 consistent_lsn - (s.confirmed_flush_lsn == LSN_INVALID ? 0 :
                                                   s.confirmed_flush_lsn),
                                 conf->slot, lsn_format(consistent_lsn, b), af.waited_ms, b,
                                 conf->after_slot, conf->slot);
                        rc = -ETIMEDOUT;
                        goto out;
                }
                nanosleep(&nap, NULL);
        }
        *ret_after = af;
out:
        PQfinish(c);
        return rc;
}

int slotcmd_create(const struct relay_config *conf, struct slotcmd_created *ret_created, char *err,
                   size_t errlen)
{
        struct slotcmd_created cr = {0};
        struct preflight_settings set;
        struct preflight_slot s;
        const char *plugin;
        char a[LSN_STRLEN];
        PGconn *c;
        int rc;

        rc = preflight_connect(conf->conninfo, PREFLIGHT_PROBE_TIMEOUT_MS, &c, err, errlen);
        if (rc < 0)
                return rc;
        rc = preflight_read_slot(c, conf->slot, &s, err, errlen);
        if (rc == 0 && s.exists) {
                snprintf(err, errlen, "replication slot \"%s\" already exists (plugin %s, database "
                         "\"%s\", confirmed_flush_lsn %s%s): nothing done%s", conf->slot, s.plugin,
                         s.database, lsn_format(s.confirmed_flush_lsn, a),
                         strcmp(s.wal_status, "lost") == 0 ? ", wal_status lost" : "",
                         strcmp(s.wal_status, "lost") == 0 ?
                         "; it was invalidated: note its confirmed_flush_lsn, drop it with "
                         "`outbox-relay slot drop --yes` and create it again (outbox-relay(7), RUNBOOK: "
                         "\"A lost slot\")" : "");
                rc = -EEXIST;
                goto out;
        }
        if (rc == 0)
                rc = preflight_read_settings(c, &set, err, errlen);
        if (rc < 0)
                goto out;
        if (conf->after_slot) {
                struct preflight_slot old;

                rc = slotcmd_check_after(c, conf, &old, err, errlen);
                if (rc < 0)
                        goto out;
        }
        plugin = preflight_choose_plugin(&set, NULL, conf->plugin, cr.why, sizeof(cr.why));
        for (;;) {
                rc = preflight_check_plugin_libraries(&set, plugin, err, errlen);
                if (rc == 0 && strcmp(plugin, "pgoutput") == 0)
                        rc = slot_publication(c, conf, &cr, err, errlen);
                if (rc < 0)
                        goto out;
                /* A slot's creation waits for running transactions; the server gives up after the timeout. */
                rc = preflight_create_slot(c, conf->slot, plugin, false, conf->failover,
                                           (int)conf->slot_create_timeout_ms, &cr.consistent_lsn, err,
                                           errlen, NULL);
                if (rc == -ENOENT && strcmp(conf->plugin, "auto") == 0 && strcmp(plugin, "wal2json") == 0) {
                        plugin = "pgoutput";
                        snprintf(cr.why, sizeof(cr.why), "--plugin=auto: wal2json is not installed");
                        continue;
                }
                break;
        }
        if (rc == -ETIMEDOUT) {
                char blockers[1536];

                preflight_slot_blockers(c, blockers, sizeof(blockers));
                if (blockers[0])
                        snprintf(err + strlen(err), errlen - strlen(err), "; it waited for %s; run it "
                                 "again when they have ended, or raise --slot-create-timeout",
                                 blockers);
        }
        if (rc < 0)
                goto out;
        snprintf(cr.plugin, sizeof(cr.plugin), "%s", plugin);
        snprintf(cr.database, sizeof(cr.database), "%s", PQdb(c));
        for (size_t i = 0; i < conf->ntables; i++) {
                int64_t n;
                char ignored[256];

                if (preflight_existing_rows(c, &conf->tables[i], &n, ignored, sizeof(ignored)) == 0)
                        cr.existing_rows += n;
        }
        preflight_other_consumers(c, conf, cr.existing_rows, cr.consistent_lsn, cr.other_consumers,
                                  sizeof(cr.other_consumers));
        *ret_created = cr;
out:
        PQfinish(c);
        return rc;
}

int slotcmd_drop(const struct relay_config *conf, char *err, size_t errlen)
{
        const char *params[1] = {conf->slot};
        struct preflight_slot s;
        char a[LSN_STRLEN], b[LSN_STRLEN];
        const char *state;
        PGconn *c;
        PGresult *r;
        int rc;

        rc = preflight_connect(conf->conninfo, PREFLIGHT_PROBE_TIMEOUT_MS, &c, err, errlen);
        if (rc < 0)
                return rc;
        rc = preflight_read_slot(c, conf->slot, &s, err, errlen);
        if (rc < 0) {
                rc = -EIO;
                goto out;
        }
        if (!s.exists) {
                snprintf(err, errlen, "replication slot \"%s\" does not exist: nothing to drop",
                         conf->slot);
                rc = -ENOENT;
                goto out;
        }
        if (!conf->yes) {
                snprintf(err, errlen, "would drop replication slot \"%s\" (plugin %s, database \"%s\", "
                         "confirmed_flush_lsn %s, restart_lsn %s%s): a new slot starts at the "
                         "current WAL and skips every row committed in between; repeat with --yes to "
                         "drop it", conf->slot, s.plugin, s.database,
                         lsn_format(s.confirmed_flush_lsn, a),
                         s.restart_lsn == LSN_INVALID ? "- (invalidated)" : lsn_format(s.restart_lsn, b),
                         s.active_pid ? ", active" : "");
                rc = -EPERM;
                goto out;
        }
        if (s.active_pid) {
                snprintf(err, errlen, "replication slot \"%s\" is active, used by %s: stop that "
                         "relay (or walsender) first; nothing dropped", conf->slot, s.holder);
                rc = -EBUSY;
                goto out;
        }
        r = PQexecParams(c, "SELECT pg_drop_replication_slot($1)", 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
                set_err(err, errlen, "cannot drop replication slot: ", PQresultErrorMessage(r));
                rc = state && strcmp(state, "55006") == 0 ? -EBUSY :
                     state && strcmp(state, "42704") == 0 ? -ENOENT : -EIO;
        }
        PQclear(r);
out:
        PQfinish(c);
        return rc;
}
