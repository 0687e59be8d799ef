// SPDX-License-Identifier: Apache-2.0
/*
 * Fuzz target for the LSN ledger (src/ledger.c). The input is a start LSN
 * (two bytes) and then operations of two bytes each, an opcode and an
 * argument, played against the ledger and against a model that keeps every
 * transaction and every unacknowledged message. After each operation:
 *
 *   - the flush LSN never decreases;
 *   - it never reaches the end LSN of an open transaction, nor of one that
 *     has a message not yet acknowledged (that would lose the message if the
 *     relay stopped then);
 *   - it never exceeds an LSN the ledger was given;
 *   - when nothing is open or outstanding, it is the highest end LSN or
 *     keepalive walEnd given (the ledger does not hold back for nothing);
 *   - the oldest stamp is that of the oldest transaction open or with a
 *     message outstanding;
 *   - the outstanding count and the return codes are those ledger.h gives.
 *
 * LSNs follow the stream as the server sends it: a transaction ends after
 * every LSN sent before its begin line, a keepalive's walEnd is at least the
 * last one sent, and after ledger_reset() the stream restarts from the flush
 * LSN. As relay.c does, a transaction that ends at or before the flush LSN
 * (a resend after a restart) is skipped rather than given to the ledger.
 * Some operations break the rules on purpose, to see the errors ledger.h
 * promises: begin inside a transaction or going backwards, commit with
 * another end LSN, acknowledgement of a ticket from before a reset.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "ledger.h"

enum op {
        OP_BEGIN,      /* arg: LSN distance past the stream position */
        OP_ADD,
        OP_CANCEL,
        OP_COMMIT,     /* variant 1: a wrong end LSN */
        OP_ACK,        /* arg: which outstanding message */
        OP_KEEPALIVE,  /* arg: walEnd distance from the stream position */
        OP_RESET,
        OP_ACK_STALE,  /* arg: which ticket from before a reset */
};

struct txn {
        uint64_t end_lsn;
        int64_t stamp;
        uint64_t unacked;
        bool committed;
};

struct message {
        ledger_ticket ticket;
        size_t txn;
};

struct model {
        struct txn *txns;          /* transactions given to the ledger since the last reset */
        size_t ntxns;
        struct message *live;      /* handed out, not acknowledged nor cancelled */
        size_t nlive;
        ledger_ticket *stale;      /* live when ledger_reset() was called */
        size_t nstale;
        bool open;                 /* txns[ntxns - 1] is open */
        bool skipping;             /* inside a transaction relay.c skips */
        uint64_t pos;              /* highest LSN the stream has sent */
        uint64_t last_end;         /* what ledger_begin() compares with */
        uint64_t flush;            /* the ledger's flush LSN after the last operation */
        uint64_t drained_flush;    /* the flush LSN once everything given is acknowledged */
        uint64_t max_given;        /* highest LSN ever given to the ledger */
        int64_t next_stamp;        /* for the next ledger_begin(): the operation's number */
};

static uint64_t max_u64(uint64_t a, uint64_t b)
{
        return a > b ? a : b;
}

static void check_oldest_stamp(const struct ledger *l, const struct model *m)
{
        int64_t got = INT64_MIN;

        for (size_t i = 0; i < m->ntxns; i++) {
                if ((m->open && i == m->ntxns - 1) || m->txns[i].unacked > 0) {
                        FUZZ_CHECK(ledger_oldest_stamp(l, &got) == 0);
                        FUZZ_CHECK(got == m->txns[i].stamp);
                        return;
                }
        }
        FUZZ_CHECK(ledger_oldest_stamp(l, &got) == -ENOENT);
        FUZZ_CHECK(got == INT64_MIN);
}

static void check_invariants(const struct ledger *l, struct model *m)
{
        uint64_t flush = ledger_flush_lsn(l);

        FUZZ_CHECK(flush >= m->flush);
        FUZZ_CHECK(flush <= m->max_given);
        for (size_t i = 0; i < m->ntxns; i++) {
                const struct txn *t = &m->txns[i];
                bool open = m->open && i == m->ntxns - 1;

                if (open || t->unacked > 0)
                        FUZZ_CHECK(flush < t->end_lsn);
        }
        FUZZ_CHECK(ledger_outstanding(l) == m->nlive);
        FUZZ_CHECK(ledger_in_transaction(l) == m->open);
        check_oldest_stamp(l, m);
        if (!m->open && m->nlive == 0)
                FUZZ_CHECK(flush == m->drained_flush);
        m->flush = flush;
}

static void do_begin(struct ledger *l, struct model *m, unsigned variant, uint8_t arg)
{
        uint64_t end;
        int want, r;

        switch (variant) {
        case 1:
                end = m->pos + 1 + ((uint64_t)arg << 20);
                break;
        case 2:  /* backwards: a resend (skipped) or a malformed stream (-ERANGE) */
                end = m->last_end > arg ? m->last_end - arg : 0;
                break;
        default:
                end = m->pos + 1 + arg;
                break;
        }
        m->skipping = false;
        if (m->open) {
                FUZZ_CHECK(ledger_begin(l, end, m->next_stamp) == -EBUSY);
                return;
        }
        if (end <= m->flush) {
                m->skipping = true;  /* relay.c: "already confirmed" */
                return;
        }
        want = end <= m->last_end && m->last_end != 0 ? -ERANGE : 0;
        r = ledger_begin(l, end, m->next_stamp);
        FUZZ_CHECK(r == want);
        if (r < 0)
                return;
        m->txns[m->ntxns++] = (struct txn){end, m->next_stamp, 0, false};
        m->open = true;
        m->last_end = end;
        m->pos = max_u64(m->pos, end);
}

static void do_add(struct ledger *l, struct model *m)
{
        ledger_ticket t;

        if (m->skipping)
                return;
        if (!m->open) {
                FUZZ_CHECK(ledger_add_message(l, &t) == -EPROTO);
                return;
        }
        FUZZ_CHECK(ledger_add_message(l, &t) == 0);
        m->live[m->nlive++] = (struct message){t, m->ntxns - 1};
        m->txns[m->ntxns - 1].unacked++;
}

static void do_cancel(struct ledger *l, struct model *m)
{
        if (m->skipping)
                return;
        /* relay.c cancels the message it added last, when produce fails. */
        if (m->open && m->nlive > 0 && m->live[m->nlive - 1].txn == m->ntxns - 1) {
                FUZZ_CHECK(ledger_cancel_message(l, m->live[m->nlive - 1].ticket) == 0);
                m->txns[m->ntxns - 1].unacked--;
                m->nlive--;
        } else if (!m->open || m->txns[m->ntxns - 1].unacked == 0) {
                FUZZ_CHECK(ledger_cancel_message(l, 0) == -EPROTO);
        }
}

static void do_commit(struct ledger *l, struct model *m, unsigned variant, uint8_t arg)
{
        struct txn *t;

        if (m->skipping) {
                m->skipping = false;
                return;
        }
        if (!m->open) {
                FUZZ_CHECK(ledger_commit(l, m->pos) == -EPROTO);
                return;
        }
        t = &m->txns[m->ntxns - 1];
        if (variant == 1) {
                FUZZ_CHECK(ledger_commit(l, t->end_lsn + 1 + arg) == -ERANGE);
                return;
        }
        FUZZ_CHECK(ledger_commit(l, t->end_lsn) == 0);
        t->committed = true;
        m->open = false;
        m->drained_flush = max_u64(m->drained_flush, t->end_lsn);
        m->max_given = max_u64(m->max_given, t->end_lsn);
}

static void do_ack(struct ledger *l, struct model *m, uint8_t arg)
{
        size_t i;

        if (m->nlive == 0)
                return;
        i = arg % m->nlive;
        FUZZ_CHECK(ledger_ack(l, m->live[i].ticket) == 0);
        m->txns[m->live[i].txn].unacked--;
        /* Delivery reports come in any order: keep the rest in order of adding. */
        memmove(&m->live[i], &m->live[i + 1], (m->nlive - i - 1) * sizeof(m->live[0]));
        m->nlive--;
}

static void do_keepalive(struct ledger *l, struct model *m, unsigned variant, uint8_t arg)
{
        uint64_t wal_end;

        switch (variant) {
        case 1:
                wal_end = m->pos + ((uint64_t)arg << 20);
                break;
        case 2:  /* an older walEnd than already seen: harmless, adopted no earlier */
                wal_end = m->pos > arg ? m->pos - arg : 0;
                break;
        default:
                wal_end = m->pos + arg;
                break;
        }
        ledger_keepalive(l, wal_end);
        m->pos = max_u64(m->pos, wal_end);
        m->drained_flush = max_u64(m->drained_flush, wal_end);
        m->max_given = max_u64(m->max_given, wal_end);
}

static void do_reset(struct ledger *l, struct model *m)
{
        ledger_reset(l);
        for (size_t i = 0; i < m->nlive; i++)
                m->stale[m->nstale++] = m->live[i].ticket;
        m->nlive = 0;
        m->ntxns = 0;
        m->open = false;
        m->skipping = false;
        /* Streaming restarts from the slot, at the flush LSN. */
        m->pos = m->last_end = m->drained_flush = ledger_flush_lsn(l);
}

static void do_ack_stale(struct ledger *l, struct model *m, uint8_t arg)
{
        ledger_ticket t;

        if (m->nstale == 0)
                return;
        t = m->stale[arg % m->nstale];
        /* Tickets carry a 15-bit epoch; 32768 resets do not fit in one input. */
        for (size_t i = 0; i < m->nlive; i++)
                FUZZ_CHECK(m->live[i].ticket != t);
        FUZZ_CHECK(ledger_ack(l, t) == -ENOENT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct model m = {0};
        struct ledger *l;
        size_t nops = size >= 2 ? (size - 2) / 2 : 0;
        uint64_t start;

        if (size < 2)
                return 0;
        start = (uint64_t)(data[0] << 8 | data[1]) << 16;
        l = ledger_new(start);
        FUZZ_CHECK(l != NULL);
        m.txns = calloc(nops + 1, sizeof(*m.txns));
        m.live = calloc(nops + 1, sizeof(*m.live));
        m.stale = calloc(nops + 1, sizeof(*m.stale));
        FUZZ_CHECK(m.txns && m.live && m.stale);
        m.pos = m.last_end = m.flush = m.drained_flush = m.max_given = start;
        check_invariants(l, &m);
        for (size_t i = 0; i < nops; i++) {
                uint8_t code = data[2 + 2 * i], arg = data[3 + 2 * i];
                unsigned variant = (code >> 3) & 3;

                m.next_stamp = (int64_t)i - 1000;  /* opaque to the ledger; distinct per begin */

                switch ((enum op)(code & 7)) {
                case OP_BEGIN: do_begin(l, &m, variant, arg); break;
                case OP_ADD: do_add(l, &m); break;
                case OP_CANCEL: do_cancel(l, &m); break;
                case OP_COMMIT: do_commit(l, &m, variant, arg); break;
                case OP_ACK: do_ack(l, &m, arg); break;
                case OP_KEEPALIVE: do_keepalive(l, &m, variant, arg); break;
                case OP_RESET: do_reset(l, &m); break;
                case OP_ACK_STALE: do_ack_stale(l, &m, arg); break;
                }
                check_invariants(l, &m);
        }
        ledger_free(l);
        free(m.txns);
        free(m.live);
        free(m.stale);
        return 0;
}
