// SPDX-License-Identifier: Apache-2.0
/*
 * What happens to one decoded record and one outbox row. A B line opens a
 * transaction in the LSN ledger (or marks it as already confirmed, or as one
 * the operator skips or dead-letters), an I line of an outbox table becomes a
 * Kafka record with CloudEvents headers and a ledger ticket, a C line closes
 * the transaction; everything else is counted and ignored. A row that cannot
 * be published is dead-lettered or stops the relay, named by its work ID and
 * LSN. See relay_parts.h.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cloudevents.h"
#include "envelope.h"
#include "log.h"
#include "relay_parts.h"

#define NONTX_LOG_GAP_MS 10000  /* non-transactional messages with the prefix: one log line this often */

static const char *action_name(enum w2j_action a)
{
        static const char *const names[] = {"begin", "commit", "insert", "update", "delete",
                                            "truncate", "message", "unknown action"};
        return names[a];
}

static bool is_outbox(const struct relay *r, const char *schema, const char *table)
{
        for (size_t i = 0; i < r->conf->ntables; i++)
                if (strcmp(r->conf->tables[i].table, table) == 0 &&
                    strcmp(r->conf->tables[i].schema, schema) == 0)
                        return true;
        return false;
}

size_t relay_headers(struct relay *r, const struct w2j_record *rec, const struct outbox_row *row,
                     struct producer_header *h, char *source, size_t source_size)
{
        const struct relay_txn *t = &r->txn;

        if (rec->action == W2J_MESSAGE)
                ce_format_message_source(r->system_id, r->pre.dbname, rec->prefix, source, source_size);
        else
                ce_format_source(r->system_id, r->pre.dbname, rec->schema, rec->table, source,
                                 source_size);
        return ce_record_headers(row, source, t->time_text, t->lsn_text, t->xid_text, h, MAX_HEADERS);
}

/* The Kafka record of @row with its headers @h, under @ticket. */
static struct producer_msg row_msg(const struct relay *r, const struct outbox_row *row, const char *topic,
                                   const struct producer_header *h, size_t nh, uint64_t ticket)
{
        return (struct producer_msg){
                .topic = topic,
                .key = row->key && !row->key->is_null ? row->key->ptr : NULL,
                .key_len = row->key && !row->key->is_null ? row->key->len : 0,
                .value = row->payload && !row->payload->is_null ? row->payload->ptr : NULL,
                .value_len = row->payload && !row->payload->is_null ? row->payload->len : 0,
                /* 0: librdkafka stamps the produce time, which retention and Kafka's limits assume. */
                .timestamp_ms = r->conf->commit_timestamp ? r->txn.commit_time_us / 1000 : 0,
                .headers = h,
                .nheaders = nh,
                .ticket = ticket,
        };
}

/*
 * A row of the open transaction that cannot be published (found before
 * producing it): dead-letter it if the operator chose so, else stop.
 * @row holds what extraction found; @topic is the intended topic, if any.
 */
static void row_error(struct relay *r, const struct w2j_record *rec, const struct outbox_row *row,
                      const char *topic, const char *code, const char *reason)
{
        char a[LSN_STRLEN], source[1024], what[4096];
        const char *id = row->id && !row->id->is_null ? row->id->ptr : "(none)";
        struct producer_header h[MAX_HEADERS];
        struct producer_msg m;
        ledger_ticket ticket;
        size_t nh;
        int ret;

        if (rec->action == W2J_MESSAGE)
                snprintf(what, sizeof(what), "work ID \"%s\" of the logical message with prefix \"%s\"",
                         id, rec->prefix);
        else
                snprintf(what, sizeof(what), "work ID \"%s\" of table \"%s\".\"%s\"", id, rec->schema,
                         rec->table);
        if (r->conf->dead_letter || r->txn.operator_dead_letter) {
                if (ledger_add_message(r->ledger, &ticket) < 0) {
                        relay_fail(r, RELAY_EXIT_RETRY, "row outside a transaction: the stream is malformed");
                        return;
                }
                nh = relay_headers(r, rec, row, h, source, sizeof(source));
                m = row_msg(r, row, topic, h, nh, ticket);
                /* Held back for a commit in flight, it is offered again: logged and counted then. */
                ret = r->guarantee->before_record(r, r->conf->dead_letter_topic, id, strlen(id),
                                                  r->txn.end_lsn, true);
                if (ret < 0) {
                        ledger_cancel_message(r->ledger, ticket);
                        if (ret != -EAGAIN)
                                r->stats.c.row_errors++;
                        return;
                }
                /*
                 * Said once: a copy held back (librdkafka's queue full) is the
                 * next row offered, again. A new session begins with BEGIN.
                 */
                if (!r->txn.noted) {
                        r->stats.c.row_errors++;
                        log_warning("dead-lettering %s at LSN %s (transaction %u ending at LSN %s): %s", what,
                                    lsn_format(rec->lsn, a), r->txn.xid, r->txn.lsn_text, reason);
                }
                ret = relay_dead_letter(r, &m, topic, code, reason, id, r->txn.lsn_text);
                r->txn.noted = ret == -EAGAIN;
                if (ret < 0) {
                        ledger_cancel_message(r->ledger, ticket);
                        return;
                }
                r->guarantee->record_sent(r, producer_msg_bytes(&m));
                return;
        }
        r->stats.c.row_errors++;
        relay_fail(r, RELAY_EXIT_DATA,
                   "cannot publish %s%s at LSN %s (transaction %u ending at LSN %s): %s. Nothing from "
                   "this transaction on is confirmed. Every start reads the %s again from the WAL as it "
                   "was committed%s: fix the relay's options if they are the cause and restart, or "
                   "choose a remedy for this transaction: --dead-letter-transaction=%s or "
                   "--skip-transaction=%s, then %s",
                   rec->action == W2J_MESSAGE ? "" : "the row with ", what, lsn_format(rec->lsn, a),
                   r->txn.xid, r->txn.lsn_text, reason,
                   rec->action == W2J_MESSAGE ? "message" : "row",
                   rec->action == W2J_MESSAGE ? "" : ", so changing it in the table changes nothing",
                   r->txn.lsn_text, r->txn.lsn_text,
                   rec->action == W2J_MESSAGE ?
                   "emit a corrected message (outbox_emit() in a new transaction)" :
                   "publish a corrected row by deleting it and inserting it again, corrected, in one "
                   "transaction");
}

static void publish_row(struct relay *r, const struct w2j_record *rec)
{
        struct outbox_row row = {0};
        struct producer_header h[MAX_HEADERS];
        struct producer_msg m;
        struct producer_error e;
        char err[ERRLEN], source[1024], before_code[64], before_reason[768];
        ledger_ticket ticket;
        size_t nh;
        int ret;

        ret = record_extract(r->spec, rec, &row, err, sizeof(err));
        if (ret < 0) {
                row_error(r, rec, &row, row.topic, record_error_code(ret), err);
                return;
        }
        nh = relay_headers(r, rec, &row, h, source, sizeof(source));
        m = row_msg(r, &row, row.topic, h, nh, 0);
        /* A row whose record Kafka refused in an aborted transaction: its policy now. */
        if (r->guarantee->row_refused_before(r, r->txn.end_lsn, row.id->ptr, row.id->len, before_code,
                                             sizeof(before_code), before_reason, sizeof(before_reason))) {
                row_error(r, rec, &row, row.topic, before_code, before_reason);
                return;
        }
        /* Its topic's limit read and its batches fitted before its first record (or held back). */
        if (relay_fit_topic(r, row.topic) < 0)
                return;
        /* Larger than the topic's limit alone in a batch: no batching can carry it. */
        if (relay_too_large_alone(r, &m, err, sizeof(err))) {
                char reason[ERRLEN + 32];

                snprintf(reason, sizeof(reason), "%s (MSG_SIZE_TOO_LARGE)", err);
                row_error(r, rec, &row, row.topic, "MSG_SIZE_TOO_LARGE", reason);
                return;
        }
        ret = ledger_add_message(r->ledger, &ticket);
        if (ret < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "insert at LSN %s outside a transaction: the stream is "
                           "malformed", lsn_format(rec->lsn, source));
                return;
        }
        m.ticket = ticket;
        if (r->guarantee->before_record(r, row.topic, row.id->ptr, row.id->len, r->txn.end_lsn, false) < 0) {
                ledger_cancel_message(r->ledger, ticket);
                return;
        }
        ret = relay_produce(r, &m, &e);
        /*
         * Refused at once for what its delivery report would have said (an ACL
         * refusing the topic, known from metadata a start may or may not have
         * before its first record): judged as that report, so that a restart
         * says and does what the first start did. --exactly-once judges a
         * refused record with its transaction (record_refused()).
         */
        if (ret < 0 && ret != -EAGAIN && !relay_eos_on(r) && e.fault == PRODUCER_FAULT_RECORD &&
            e.code != PRODUCER_ERR_MSG_SIZE_TOO_LARGE) {
                r->stats.c.published++;
                relay_on_delivery(r, &(struct producer_report){.msg = m, .error = e});
                return;
        }
        if (ret < 0) {
                ledger_cancel_message(r->ledger, ticket);
                if (ret == -EAGAIN)
                        return;  /* librdkafka's queue is full: held back, offered again */
                if (r->guarantee->record_refused(r, &e) < 0)
                        return;  /* the Kafka transaction had failed: aborted, streaming again */
                if (e.fault == PRODUCER_FAULT_RECORD) {
                        char reason[ERRLEN + 256];

                        /* In the words of its delivery report, had librdkafka taken it first. */
                        if (e.code == PRODUCER_ERR_MSG_SIZE_TOO_LARGE)
                                snprintf(reason, sizeof(reason), "the producer refused it: the message is "
                                         "larger than -X message.max.bytes (raise it, and the topic's "
                                         "max.message.bytes, or store less in the row)");
                        else
                                relay_refused_reason(row.topic, e.text, &e, reason, sizeof(reason));
                        row_error(r, rec, &row, row.topic,
                                  e.code == PRODUCER_ERR_MSG_SIZE_TOO_LARGE ? "MSG_SIZE_TOO_LARGE" :
                                  e.name, reason);
                        return;
                }
                if (e.fault == PRODUCER_FAULT_FATAL) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "cannot hand the message of work ID \"%.*s\" "
                                   "to Kafka for topic \"%s\" (transaction ending at LSN %s): %s (%s), "
                                   "which no retry can cure. Stopping: nothing from this transaction on "
                                   "is confirmed. %s, then start the relay again", (int)row.id->len,
                                   row.id->ptr, row.topic, r->txn.lsn_text, e.text, e.name,
                                   producer_fix(e.code) ? producer_fix(e.code) :
                                   "Check the relay's -X settings");
                        return;
                }
                relay_fail(r, RELAY_EXIT_RETRY, "cannot hand the message of work ID \"%.*s\" to Kafka for "
                           "topic \"%s\" (transaction ending at LSN %s): %s (%s)", (int)row.id->len,
                           row.id->ptr, row.topic, r->txn.lsn_text, e.text, e.name);
                r->producer_broken = true;
                return;
        }
        log_debug("published work ID \"%.*s\" to topic \"%s\" (transaction ending at LSN %s)",
                  (int)row.id->len, row.id->ptr, row.topic, r->txn.lsn_text);
        r->stats.c.published++;
        r->guarantee->record_sent(r, producer_msg_bytes(&m));
}

/*
 * A logical message with the relay's prefix (--message-prefix). A
 * transactional one is published as the row its envelope stands for
 * (envelope.h), in its place among the transaction's rows; a malformed
 * envelope is a row error, its content the dead-letter record's value. A
 * non-transactional one is never published: it survives a rollback, so it
 * may announce work that never committed. It is counted, and logged with
 * its LSN at most every NONTX_LOG_GAP_MS.
 */
static void handle_message(struct relay *r, const struct w2j_record *rec)
{
        struct relay_stats *st = &r->stats;
        struct envelope env = {0};
        struct w2j_record row;
        struct w2j_value whole;
        struct outbox_row bad = {0};
        char err[ERRLEN], a[LSN_STRLEN];
        int64_t now;
        int ret;

        if (!rec->transactional) {
                st->c.nontx_messages++;
                now = relay_mono_ms();
                if (st->nontx_log_ms && now - st->nontx_log_ms < NONTX_LOG_GAP_MS) {
                        st->nontx_unlogged++;
                        return;
                }
                log_warning("not publishing the non-transactional logical message with prefix \"%s\" "
                            "at LSN %s: it was written with pg_logical_emit_message(false, ...), which "
                            "reaches the WAL even when its transaction rolls back, so it may announce "
                            "work that never happened; write outbox messages transactionally "
                            "(outbox_emit() does). Counted in "
                            "outbox_relay_nontransactional_messages_total (%llu so far; %llu since the "
                            "last such line were not logged)", rec->prefix, lsn_format(rec->lsn, a),
                            (unsigned long long)st->c.nontx_messages,
                            (unsigned long long)st->nontx_unlogged);
                st->nontx_log_ms = now;
                st->nontx_unlogged = 0;
                return;
        }
        /* Exactly as an outbox table's row: relay_handle_record()'s W2J_INSERT. */
        if (r->txn.skip || r->txn.eos_skip)
                return;
        if (r->txn.operator_skip) {
                st->c.skipped_rows++;
                log_warning("skipped logical message with prefix \"%s\" at LSN %s (--skip-transaction)",
                            rec->prefix, lsn_format(rec->lsn, a));
                return;
        }
        if (r->guarantee->row_in_kafka(r))
                return;  /* a split transaction's message, in Kafka already */
        ret = envelope_parse(&env, rec, r->conf->payload_column, &row, err, sizeof(err));
        if (ret == 0) {
                publish_row(r, &row);
        } else if (ret == -EILSEQ) {
                /* A row whose payload is not JSON: named, and dead-lettered with its key and topic. */
                char ignored[ERRLEN];

                record_extract(r->spec, &row, &bad, ignored, sizeof(ignored));
                row_error(r, &row, &bad, bad.topic, "INVALID_JSON", err);
        } else {
                whole = (struct w2j_value){rec->content ? rec->content : "", rec->content_len,
                                           false, false};
                bad.payload = &whole;
                row_error(r, rec, &bad, NULL, "INVALID_ENVELOPE", err);
        }
        envelope_clear(&env);
}

/*
 * Whether a logical message of @prefix, not the relay's, looks like an
 * outbox's: its prefix contains "outbox" (any case: sql/outbox.sql's
 * default and what people name theirs), or is the one outbox_emit() of this
 * database writes (outbox_message_prefix(), read at start). Passing over such
 * a transactional message would lose it for good: no table row is left to
 * redrive. --ignore-message-prefix names the one prefix to pass over.
 */
static bool outbox_like_prefix(const struct relay *r, const char *prefix)
{
        static const char word[] = "outbox";

        if (!prefix)
                return false;
        if (r->conf->ignore_message_prefix && strcmp(prefix, r->conf->ignore_message_prefix) == 0)
                return false;
        if (r->pre.kit_prefix[0] && strcmp(prefix, r->pre.kit_prefix) == 0)
                return true;
        for (const char *p = prefix; *p; p++)
                if (strncasecmp(p, word, sizeof(word) - 1) == 0)
                        return true;
        return false;
}

/* A transactional message of an outbox-like prefix the relay does not publish: stop before it. */
static void foreign_outbox_message(struct relay *r, const struct w2j_record *rec)
{
        const char *mine = r->conf->message_prefix;
        char a[LSN_STRLEN], kit[400] = "";

        if (r->pre.kit_prefix[0] && strcmp(rec->prefix, r->pre.kit_prefix) == 0)
                snprintf(kit, sizeof(kit), " (outbox_emit() in database \"%s\" writes it)", r->pre.dbname);
        relay_fail(r, RELAY_EXIT_DATA,
                   "not passing over the transactional logical message with prefix \"%s\"%s at LSN %s "
                   "(transaction %u ending at LSN %s): it looks like an outbox message, and this relay "
                   "publishes %s%s%s, so confirming past it would lose it for good (no table row is left "
                   "to redrive). Nothing from this transaction on is confirmed. Fix: if it is this "
                   "outbox's, stop every relay of this slot and start with --message-prefix=%s "
                   "--accept-config-change (the prefix is part of the slot's mapping); if another "
                   "application writes it, start with --ignore-message-prefix=%s",
                   rec->prefix, kit, lsn_format(rec->lsn, a), r->txn.xid, r->txn.lsn_text,
                   mine ? "prefix \"" : "no logical messages (no --message-prefix)", mine ? mine : "",
                   mine ? "\" (--message-prefix)" : "", rec->prefix, rec->prefix);
}

static void begin_transaction(struct relay *r, const struct w2j_record *rec)
{
        struct relay_txn *t = &r->txn;
        char a[LSN_STRLEN];
        int ret;

        t->noted = false;
        t->skip = rec->next_lsn <= ledger_flush_lsn(r->ledger);
        if (t->skip) {
                log_debug("skipping transaction %u ending at %s: already confirmed", rec->xid,
                          lsn_format(rec->next_lsn, a));
                return;
        }
        ret = ledger_begin(r->ledger, rec->next_lsn, rec->commit_time_us);
        if (ret < 0) {
                relay_fail(r, RELAY_EXIT_RETRY, "transaction %u ending at LSN %s begins %s: the stream is "
                           "malformed", rec->xid, lsn_format(rec->next_lsn, a),
                           ret == -EBUSY ? "inside another" : "before the previous one ended");
                return;
        }
        /* In Kafka already (--exactly-once: the newest checkpoint reaches past it). */
        t->eos_skip = r->guarantee->txn_begins(r, rec->next_lsn);
        t->xid = rec->xid;
        t->end_lsn = rec->next_lsn;
        t->commit_time_us = rec->commit_time_us;
        lsn_format(rec->next_lsn, t->lsn_text);
        snprintf(t->xid_text, sizeof(t->xid_text), "%u", rec->xid);
        ce_format_time(rec->commit_time_us, t->time_text, sizeof(t->time_text));
        t->operator_skip = rec->next_lsn == r->conf->skip_transaction;
        t->operator_dead_letter = rec->next_lsn == r->conf->dead_letter_transaction;
        if (t->operator_skip)
                log_warning("SKIPPING transaction %u ending at LSN %s as requested with "
                            "--skip-transaction by %s: its outbox rows are NOT published",
                            rec->xid, t->lsn_text, r->who);
        if (t->operator_dead_letter)
                log_warning("transaction %u ending at LSN %s: rows that cannot be published go to "
                            "\"%s\" as requested with --dead-letter-transaction by %s", rec->xid,
                            t->lsn_text, r->conf->dead_letter_topic, r->who);
}

void relay_handle_line(struct relay *r, const struct replmsg *m)
{
        struct w2j_record rec;
        char a[LSN_STRLEN];
        int ret;

        ret = w2j_decode(r->dec, m->data, m->data_len, &rec);
        if (ret < 0) {
                relay_fail(r, RELAY_EXIT_DATA,
                           "cannot decode the wal2json line at LSN %s (%s); stopping without skipping it, "
                           "nothing from it on is confirmed; first 200 bytes: %.*s",
                           lsn_format(m->data_start, a),
                           ret == -E2BIG ? "line too long" : ret == -ENOMEM ? "out of memory" : "invalid JSON",
                           (int)(m->data_len < 200 ? m->data_len : 200), m->data);
                return;
        }
        relay_handle_record(r, &rec, m->data_start);
}

void relay_handle_record(struct relay *r, const struct w2j_record *recp, uint64_t data_start)
{
        struct relay_txn *t = &r->txn;
        struct w2j_record rec = *recp;
        char a[LSN_STRLEN];
        int ret;

        switch (rec.action) {
        case W2J_BEGIN:
                begin_transaction(r, &rec);
                break;
        case W2J_COMMIT:
                if (t->skip) {
                        t->skip = false;
                        break;
                }
                if (t->operator_skip)
                        r->stats.c.skipped_transactions++;
                t->operator_skip = t->operator_dead_letter = false;
                ret = ledger_commit(r->ledger, rec.next_lsn);
                if (ret < 0) {
                        relay_fail(r, RELAY_EXIT_RETRY, "commit of transaction %u at LSN %s does not match "
                                   "its begin: the stream is malformed", rec.xid,
                                   lsn_format(rec.next_lsn, a));
                        break;
                }
                if (relay_round_decoded(r, rec.xid, rec.next_lsn) < 0) {
                        relay_fail(r, RELAY_EXIT_RETRY, "out of memory recording transaction %u at LSN %s "
                                   "for the catalog check", rec.xid, lsn_format(rec.next_lsn, a));
                        break;
                }
                t->eos_skip = false;
                r->guarantee->txn_ends(r, rec.next_lsn);
                break;
        case W2J_INSERT:
                if (t->skip || t->eos_skip)
                        break;
                if (is_outbox(r, rec.schema, rec.table)) {
                        if (t->operator_skip) {
                                r->stats.c.skipped_rows++;
                                log_warning("skipped row of table \"%s\".\"%s\" at LSN %s "
                                            "(--skip-transaction)", rec.schema, rec.table,
                                            lsn_format(rec.lsn, a));
                                break;
                        }
                        if (r->guarantee->row_in_kafka(r))
                                break;  /* a split transaction's row, in Kafka already */
                        publish_row(r, &rec);
                        break;
                }
                /* fall through */
        case W2J_MESSAGE:
                if (rec.action == W2J_MESSAGE && r->conf->message_prefix && rec.prefix &&
                    strcmp(rec.prefix, r->conf->message_prefix) == 0) {
                        handle_message(r, &rec);
                        break;
                }
                if (rec.action == W2J_MESSAGE && rec.transactional && !t->skip && !t->eos_skip &&
                    !t->operator_skip && outbox_like_prefix(r, rec.prefix)) {
                        foreign_outbox_message(r, &rec);
                        break;
                }
                /* fall through */
        default:
                r->stats.c.ignored++;
                if (r->stats.ignored[rec.action]++ == 0)
                        log_info("not publishing %s records%s%s (first at LSN %s); counted in metrics",
                                 action_name(rec.action), rec.table ? " of " : "",
                                 rec.table ? rec.table : "", lsn_format(data_start, a));
                break;
        }
}
