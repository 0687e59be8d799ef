// SPDX-License-Identifier: Apache-2.0
/*
 * What a pgoutput message becomes (--plugin=pgoutput). The decoder
 * (pgoutput.h) holds each transaction until its Commit and then hands out
 * its events; each becomes the record wal2json would have given
 * (wal2json.h), so that relay_row.c handles a row the same whichever plugin
 * decoded it and its Kafka record is the same byte for byte. Events are
 * handed out while the in-flight bounds allow: a large transaction is a
 * state the loop advances (relay_pgo_drain() before every read), not a
 * wait inside a read. The Relation message's OID is each row's table
 * identity: a row under a configured name whose OID is not the one the
 * relay started with, or of an outbox table under another name, stops the
 * relay at that row. Only this file writes struct relay_pgo. See
 * relay_pgoutput.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "relay_parts.h"

int relay_pgo_record(const struct pgo_event *ev, struct relay_pgo *p, struct w2j_record *ret_rec)
{
        static const char codes[] = {
                [PGO_BEGIN] = 'B', [PGO_COMMIT] = 'C', [PGO_INSERT] = 'I', [PGO_UPDATE] = 'U',
                [PGO_DELETE] = 'D', [PGO_TRUNCATE] = 'T', [PGO_MESSAGE] = 'M',
        };
        static const enum w2j_action actions[] = {
                [PGO_BEGIN] = W2J_BEGIN, [PGO_COMMIT] = W2J_COMMIT, [PGO_INSERT] = W2J_INSERT,
                [PGO_UPDATE] = W2J_UPDATE, [PGO_DELETE] = W2J_DELETE, [PGO_TRUNCATE] = W2J_TRUNCATE,
                [PGO_MESSAGE] = W2J_MESSAGE,
        };
        struct w2j_record rec = {
                .action = actions[ev->kind],
                .action_code = codes[ev->kind],
                .xid = ev->xid,
                .lsn = ev->lsn,
                .commit_time_us = ev->commit_time_us,
        };

        switch (ev->kind) {
        case PGO_BEGIN:
        case PGO_COMMIT:
                rec.next_lsn = ev->end_lsn;
                break;
        case PGO_INSERT:
                if (ev->nvalues > p->cols_cap) {
                        struct w2j_column *nc = realloc(p->cols, ev->nvalues * sizeof(*nc));

                        if (!nc)
                                return -ENOMEM;
                        p->cols = nc;
                        p->cols_cap = ev->nvalues;
                }
                for (size_t i = 0; i < ev->nvalues; i++) {
                        const struct pgo_column *c = &ev->rel->columns[i];
                        const struct pgo_value *v = &ev->values[i];

                        p->cols[i].name = c->name;
                        p->cols[i].type = NULL;
                        p->cols[i].typeoid = c->typeoid;
                        w2j_value_from_text(c->typeoid, v->ptr, v->len, v->is_null, &p->cols[i].value);
                }
                rec.ncolumns = ev->nvalues;
                rec.columns = p->cols;
                /* fall through */
        case PGO_UPDATE:
        case PGO_DELETE:
        case PGO_TRUNCATE:
                rec.schema = ev->rel ? ev->rel->schema : NULL;
                rec.table = ev->rel ? ev->rel->name : NULL;
                break;
        case PGO_MESSAGE:
                rec.transactional = ev->transactional;
                rec.prefix = ev->prefix;
                /*
                 * Whole, NUL bytes too: wal2json cuts the content at its first NUL, so
                 * that a binary message's text before it could pass for an envelope;
                 * here such content is refused as not JSON (envelope.h).
                 */
                rec.content = ev->content;
                rec.content_len = ev->content_len;
                break;
        }
        *ret_rec = rec;
        return 0;
}

/*
 * An insert of relation @rel: true if it is not an outbox table, or one as
 * the relay started with it; false after stopping the relay.
 */
static bool same_identity(struct relay *r, const struct pgo_relation *rel)
{
        char a[LSN_STRLEN];

        lsn_format(r->fb.sent_flush_lsn, a);
        for (size_t i = 0; i < r->conf->ntables; i++) {
                const struct table_name *t = &r->conf->tables[i];
                bool same_name = strcmp(t->schema, rel->schema) == 0 && strcmp(t->table, rel->name) == 0;
                bool same_oid = rel->oid == r->pre.table_oids[i];

                if (same_name && same_oid)
                        return true;
                if (same_oid) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "outbox table \"%s\".\"%s\" (OID %u) sends "
                                   "rows as \"%s\".\"%s\" now: it was renamed while the relay ran. "
                                   "Stopping; nothing after LSN %s is confirmed. Put the table back under "
                                   "its name, or restart the relay with the new name (--table)", t->schema,
                                   t->table, rel->oid, rel->schema, rel->name, a);
                        return false;
                }
                if (same_name) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "outbox table \"%s\".\"%s\" is another "
                                   "relation now (OID %u in the stream, %u when the relay started): it was "
                                   "dropped and created again, or another table was renamed to its name. "
                                   "Stopping; nothing after LSN %s is confirmed. Check which rows of either "
                                   "table were published, then restart the relay", t->schema, t->table,
                                   rel->oid, r->pre.table_oids[i], a);
                        return false;
                }
        }
        return true;
}

static void decode_failed(struct relay *r, int ret, uint64_t lsn, const char *what)
{
        char a[LSN_STRLEN];

        lsn_format(lsn, a);
        switch (ret) {
        case -ENOMEM:
                relay_fail(r, RELAY_EXIT_RETRY, "out of memory decoding the pgoutput %s at LSN %s", what, a);
                return;
        case -EIO:
                relay_fail(r, RELAY_EXIT_RETRY, "%s (the pgoutput %s at LSN %s); nothing from it on is "
                           "confirmed: give the relay room under $TMPDIR for transactions larger than %zu "
                           "bytes", pgo_error(r->pgo.dec), what, a, (size_t)PGO_TXN_MEMORY_DEFAULT);
                return;
        case -ENOTSUP:
                /* A retry, not an error: nothing of that transaction was handed on. */
                log_warning("%s (the pgoutput %s at LSN %s). Streaming again from the slot with pgoutput's "
                            "streaming off for the rest of this process: the server then holds such a "
                            "transaction until its commit and sends it whole", pgo_error(r->pgo.dec), what, a);
                r->pgo.no_streaming = true;
                if (!r->failure)
                        r->failure = RELAY_EXIT_RETRY;
                return;
        case -ENOSPC:
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "cannot decode the pgoutput %s at LSN %s: %s. "
                           "Stopping; nothing from it on is confirmed. Make publication \"%s\" list only "
                           "the outbox tables (`outbox-relay check` gives the SQL)", what, a,
                           pgo_error(r->pgo.dec), config_publication(r->conf));
                return;
        default:
                relay_fail(r, RELAY_EXIT_DATA, "cannot decode the pgoutput %s at LSN %s: %s; stopping "
                           "without skipping it, nothing from it on is confirmed", what, a,
                           pgo_error(r->pgo.dec));
                return;
        }
}

bool relay_pgo_drain(struct relay *r)
{
        int failure = r->failure;

        while (r->failure == failure && !relay_backpressured(r) && !relay_eos_busy(r)) {
                struct pgo_event ev;
                struct w2j_record rec;
                int ret = pgo_next(r->pgo.dec, &ev);

                if (ret == 0)
                        return false;
                if (ret < 0) {
                        decode_failed(r, ret, r->txn.end_lsn, "transaction ending");
                        return false;
                }
                if (ev.kind == PGO_INSERT && !same_identity(r, ev.rel))
                        return false;
                if (relay_pgo_record(&ev, &r->pgo, &rec) < 0) {
                        relay_fail(r, RELAY_EXIT_RETRY, "out of memory");
                        return false;
                }
                r->held_back = false;
                relay_handle_record(r, &rec, ev.lsn);
                if (r->held_back) {
                        /* Held back for the commit its probe began: handed out again after it. */
                        r->held_back = false;
                        pgo_unget(r->pgo.dec, &ev);
                        return true;
                }
        }
        return r->failure == failure && pgo_ready(r->pgo.dec);
}

int relay_pgo_init(struct relay_pgo *p, bool on)
{
        *p = (struct relay_pgo){0};
        if (!on)
                return 0;
        p->dec = pgo_decoder_new(PGO_TXN_MEMORY_DEFAULT);
        return p->dec ? 0 : -ENOMEM;
}

void relay_pgo_free(struct relay_pgo *p)
{
        pgo_decoder_free(p->dec);
        free(p->cols);
        *p = (struct relay_pgo){0};
}

bool relay_pgo_on(const struct relay_pgo *p)
{
        return p->dec != NULL;
}

void relay_pgo_session_start(struct relay_pgo *p)
{
        if (p->dec)
                pgo_reset(p->dec);
}

bool relay_pgo_ready(const struct relay_pgo *p)
{
        return p->dec && pgo_ready(p->dec);
}

bool relay_pgo_busy(const struct relay_pgo *p)
{
        return p->dec && (pgo_ready(p->dec) || pgo_in_transaction(p->dec));
}

/*
 * PostgreSQL 14 to 17 can leave a committed transactional logical message
 * out of a streamed transaction altogether (seen on 14.24, 15.18, 16.15 and
 * 17.11, not on 18.6: a message in a subtransaction, a later savepoint
 * rolled back after a speculative insert of a TOASTed row); table rows came
 * whole in every case tried. So a relay that publishes logical messages
 * (--message-prefix) streams from 18 on only.
 */
bool relay_pgo_streaming(struct relay_pgo *p, int server_version_num, bool message_prefix)
{
        bool on = !p->no_streaming && (!message_prefix || server_version_num >= 180000);

        if (!on && !p->no_streaming && !p->said_streaming) {
                log_info("pgoutput: streaming off: PostgreSQL %d can leave a logical message out of a "
                         "streamed transaction, and the relay publishes them (--message-prefix); a "
                         "transaction past logical_decoding_work_mem is spilled by the server and sent "
                         "at its commit", server_version_num / 10000);
                p->said_streaming = true;
        }
        return on;
}

void relay_pgo_line(struct relay *r, const struct replmsg *m)
{
        int ret = pgo_decode(r->pgo.dec, m->data, m->data_len, m->data_start);

        if (ret < 0) {
                char what[64];

                snprintf(what, sizeof(what), "message '%c' of %zu bytes",
                         m->data_len && m->data[0] > ' ' && m->data[0] < 0x7f ? m->data[0] : '?',
                         m->data_len);
                decode_failed(r, ret, m->data_start ? m->data_start : r->fb.write_lsn, what);
                return;
        }
        relay_pgo_drain(r);
}
