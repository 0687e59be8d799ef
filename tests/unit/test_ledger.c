// SPDX-License-Identifier: Apache-2.0
/* Unit tests of the LSN ledger (ledger.c): confirm only after every ack. */
#include <errno.h>
#include <stdlib.h>

#include "unit_check.h"
#include "ledger.h"

static void test_in_order(void)
{
        struct ledger *l = ledger_new(100);
        ledger_ticket a, b;

        CHECK_INT(ledger_flush_lsn(l), 100);
        CHECK_INT(ledger_begin(l, 200, 0), 0);
        CHECK_INT(ledger_add_message(l, &a), 0);
        CHECK_INT(ledger_add_message(l, &b), 0);
        CHECK_INT(ledger_commit(l, 200), 0);
        CHECK_INT(ledger_flush_lsn(l), 100);
        CHECK_INT(ledger_ack(l, a), 0);
        CHECK_INT(ledger_flush_lsn(l), 100);
        CHECK_INT(ledger_ack(l, b), 0);
        CHECK_INT(ledger_flush_lsn(l), 200);
        CHECK_INT(ledger_ack(l, b), -ENOENT);
        CHECK_INT(ledger_outstanding(l), 0);
        ledger_free(l);
}

/* Acks across partitions arrive out of order: the flush LSN waits for the oldest. */
static void test_out_of_order_across_partitions(void)
{
        struct ledger *l = ledger_new(0);
        ledger_ticket t[3][2];

        for (int i = 0; i < 3; i++) {
                CHECK_INT(ledger_begin(l, 1000 * (uint64_t)(i + 1), 0), 0);
                CHECK_INT(ledger_add_message(l, &t[i][0]), 0);
                CHECK_INT(ledger_add_message(l, &t[i][1]), 0);
                CHECK_INT(ledger_commit(l, 1000 * (uint64_t)(i + 1)), 0);
        }
        CHECK_INT(ledger_ack(l, t[2][0]), 0);
        CHECK_INT(ledger_ack(l, t[2][1]), 0);
        CHECK_INT(ledger_ack(l, t[1][1]), 0);
        CHECK_INT(ledger_flush_lsn(l), 0);
        CHECK_INT(ledger_ack(l, t[0][1]), 0);
        CHECK_INT(ledger_flush_lsn(l), 0);
        CHECK_INT(ledger_ack(l, t[0][0]), 0);
        CHECK_INT(ledger_flush_lsn(l), 1000);  /* txn 2 still has t[1][0] */
        CHECK_INT(ledger_ack(l, t[1][0]), 0);
        CHECK_INT(ledger_flush_lsn(l), 3000);
        CHECK_INT(ledger_transactions(l), 0);
        ledger_free(l);
}

/* An uncommitted transaction holds the flush LSN even when its messages are acked. */
static void test_open_transaction_holds(void)
{
        struct ledger *l = ledger_new(0);
        ledger_ticket a;

        CHECK_INT(ledger_begin(l, 500, 0), 0);
        CHECK_INT(ledger_add_message(l, &a), 0);
        CHECK_INT(ledger_ack(l, a), 0);
        CHECK_INT(ledger_flush_lsn(l), 0);
        CHECK_INT(ledger_commit(l, 500), 0);
        CHECK_INT(ledger_flush_lsn(l), 500);
        ledger_free(l);
}

/* Empty transactions move the flush LSN at once, or fold behind pending ones. */
static void test_empty_transactions(void)
{
        struct ledger *l = ledger_new(0);
        ledger_ticket a;

        CHECK_INT(ledger_begin(l, 10, 0), 0);
        CHECK_INT(ledger_commit(l, 10), 0);
        CHECK_INT(ledger_flush_lsn(l), 10);
        CHECK_INT(ledger_begin(l, 20, 0), 0);
        CHECK_INT(ledger_add_message(l, &a), 0);
        CHECK_INT(ledger_commit(l, 20), 0);
        for (uint64_t e = 30; e < 30 + 100000; e++) {
                CHECK(ledger_begin(l, e, 0) == 0 && ledger_commit(l, e) == 0);
        }
        CHECK_INT(ledger_transactions(l), 1);  /* folded: no growth */
        CHECK_INT(ledger_flush_lsn(l), 10);
        CHECK_INT(ledger_ack(l, a), 0);
        CHECK_INT(ledger_flush_lsn(l), 30 + 100000 - 1);
        ledger_free(l);
}

/* A keepalive is adopted only after everything read before it is acknowledged. */
static void test_keepalive(void)
{
        struct ledger *l = ledger_new(0);
        ledger_ticket a, b;

        ledger_keepalive(l, 50);
        CHECK_INT(ledger_flush_lsn(l), 50);
        CHECK_INT(ledger_begin(l, 100, 0), 0);
        CHECK_INT(ledger_add_message(l, &a), 0);
        CHECK_INT(ledger_commit(l, 100), 0);
        ledger_keepalive(l, 400);
        CHECK_INT(ledger_flush_lsn(l), 50);  /* a unacknowledged */
        /* A later transaction does not delay the earlier keepalive. */
        CHECK_INT(ledger_begin(l, 500, 0), 0);
        CHECK_INT(ledger_add_message(l, &b), 0);
        CHECK_INT(ledger_ack(l, a), 0);
        CHECK_INT(ledger_flush_lsn(l), 400);
        /* Keepalive while a transaction is open: wait for it. */
        ledger_keepalive(l, 600);
        CHECK_INT(ledger_flush_lsn(l), 400);
        CHECK_INT(ledger_ack(l, b), 0);
        CHECK_INT(ledger_flush_lsn(l), 400);  /* still open */
        CHECK_INT(ledger_commit(l, 500), 0);
        CHECK_INT(ledger_flush_lsn(l), 600);
        /* Never backwards. */
        ledger_keepalive(l, 300);
        CHECK_INT(ledger_flush_lsn(l), 600);
        ledger_free(l);
}

/* Keepalive while an empty transaction is open that later folds. */
static void test_keepalive_fold(void)
{
        struct ledger *l = ledger_new(0);
        ledger_ticket a;

        CHECK_INT(ledger_begin(l, 100, 0), 0);
        CHECK_INT(ledger_add_message(l, &a), 0);
        CHECK_INT(ledger_commit(l, 100), 0);
        CHECK_INT(ledger_begin(l, 200, 0), 0);
        ledger_keepalive(l, 300);
        CHECK_INT(ledger_commit(l, 200), 0);
        CHECK_INT(ledger_flush_lsn(l), 0);
        CHECK_INT(ledger_ack(l, a), 0);
        CHECK_INT(ledger_flush_lsn(l), 300);
        ledger_free(l);
}

/* The oldest stamp is that of the oldest transaction not yet confirmable. */
static void test_oldest_stamp(void)
{
        struct ledger *l = ledger_new(0);
        ledger_ticket a, b;
        int64_t st = 0;

        CHECK_INT(ledger_oldest_stamp(l, &st), -ENOENT);
        CHECK_INT(ledger_begin(l, 100, 1111), 0);
        CHECK_INT(ledger_add_message(l, &a), 0);
        CHECK_INT(ledger_commit(l, 100), 0);
        CHECK_INT(ledger_begin(l, 200, 2222), 0);
        CHECK_INT(ledger_add_message(l, &b), 0);
        CHECK_INT(ledger_commit(l, 200), 0);
        CHECK_INT(ledger_oldest_stamp(l, &st), 0);
        CHECK_INT(st, 1111);
        /* Each ticket finds its own transaction's stamp, acked in any order. */
        CHECK_INT(ledger_ticket_stamp(l, b, &st), 0);
        CHECK_INT(st, 2222);
        CHECK_INT(ledger_ticket_stamp(l, a, &st), 0);
        CHECK_INT(st, 1111);
        CHECK_INT(ledger_ack(l, a), 0);
        CHECK_INT(ledger_ticket_stamp(l, a, &st), -ENOENT);
        CHECK_INT(ledger_oldest_stamp(l, &st), 0);
        CHECK_INT(st, 2222);
        CHECK_INT(ledger_ack(l, b), 0);
        CHECK_INT(ledger_oldest_stamp(l, &st), -ENOENT);
        ledger_free(l);
}

static void test_protocol_errors(void)
{
        struct ledger *l = ledger_new(100);
        ledger_ticket a;

        CHECK_INT(ledger_add_message(l, &a), -EPROTO);
        CHECK_INT(ledger_commit(l, 200), -EPROTO);
        CHECK_INT(ledger_begin(l, 100, 0), -ERANGE);
        CHECK_INT(ledger_begin(l, 200, 0), 0);
        CHECK_INT(ledger_begin(l, 300, 0), -EBUSY);
        CHECK_INT(ledger_commit(l, 250), -ERANGE);
        CHECK_INT(ledger_add_message(l, &a), 0);
        CHECK_INT(ledger_cancel_message(l, a), 0);
        CHECK_INT(ledger_commit(l, 200), 0);
        CHECK_INT(ledger_flush_lsn(l), 200);
        ledger_free(l);
}

static void test_reset(void)
{
        struct ledger *l = ledger_new(0);
        ledger_ticket a, b;

        CHECK_INT(ledger_begin(l, 100, 0), 0);
        CHECK_INT(ledger_add_message(l, &a), 0);
        CHECK_INT(ledger_commit(l, 100), 0);
        ledger_reset(l);
        CHECK_INT(ledger_ack(l, a), -ENOENT);  /* ticket of the discarded producer */
        CHECK_INT(ledger_flush_lsn(l), 0);
        CHECK_INT(ledger_begin(l, 100, 0), 0);
        CHECK_INT(ledger_add_message(l, &b), 0);
        CHECK_INT(ledger_commit(l, 100), 0);
        CHECK_INT(ledger_ack(l, b), 0);
        CHECK_INT(ledger_flush_lsn(l), 100);
        ledger_free(l);
}

/* --exactly-once: acknowledged rows of an aborted Kafka transaction are not confirmed work. */
static void test_rewind(void)
{
        struct ledger *l = ledger_new(0);
        ledger_ticket a, b;

        CHECK_INT(ledger_begin(l, 100, 0), 0);
        CHECK_INT(ledger_add_message(l, &a), 0);
        CHECK_INT(ledger_commit(l, 100), 0);
        CHECK_INT(ledger_begin(l, 200, 0), 0);
        CHECK_INT(ledger_add_message(l, &b), 0);
        CHECK_INT(ledger_commit(l, 200), 0);
        CHECK_INT(ledger_ack(l, a), 0);
        CHECK_INT(ledger_ack(l, b), 0);
        CHECK_INT(ledger_flush_lsn(l), 200);
        /* only what reaches 100 was committed in Kafka */
        ledger_rewind(l, 100);
        CHECK_INT(ledger_flush_lsn(l), 100);
        /* the transaction ending at 200 is begun again, not taken for confirmed */
        CHECK_INT(ledger_begin(l, 200, 0), 0);
        CHECK_INT(ledger_add_message(l, &b), 0);
        CHECK_INT(ledger_commit(l, 200), 0);
        CHECK_INT(ledger_flush_lsn(l), 100);
        CHECK_INT(ledger_ack(l, b), 0);
        CHECK_INT(ledger_flush_lsn(l), 200);
        /* never raised */
        ledger_rewind(l, 500);
        CHECK_INT(ledger_flush_lsn(l), 200);
        ledger_free(l);
}

/* Many transactions, acks in a random order: the flush LSN is always a fully acked prefix. */
static void test_random(void)
{
        enum { N = 5000, M = 3 };
        struct ledger *l = ledger_new(0);
        ledger_ticket *t = malloc(sizeof(*t) * N * M);
        int *order = malloc(sizeof(int) * N * M);
        int *left = calloc(N, sizeof(int));
        int ok = 1;

        srand(42);
        for (int i = 0; i < N; i++) {
                ledger_begin(l, (uint64_t)(i + 1) * 10, 0);
                for (int j = 0; j < M; j++)
                        ledger_add_message(l, &t[i * M + j]);
                left[i] = M;
                ledger_commit(l, (uint64_t)(i + 1) * 10);
        }
        for (int i = 0; i < N * M; i++)
                order[i] = i;
        for (int i = N * M - 1; i > 0; i--) {
                int k = rand() % (i + 1), tmp = order[i];

                order[i] = order[k];
                order[k] = tmp;
        }
        for (int i = 0; i < N * M; i++) {
                int first = 0;
                uint64_t want;

                ledger_ack(l, t[order[i]]);
                left[order[i] / M]--;
                while (first < N && left[first] == 0)
                        first++;
                want = (uint64_t)first * 10;
                if (ledger_flush_lsn(l) != want)
                        ok = 0;
        }
        CHECK(ok);
        CHECK_INT(ledger_flush_lsn(l), (uint64_t)N * 10);
        free(t);
        free(order);
        free(left);
        ledger_free(l);
}

/* Bit 63 of a ticket stays clear through epoch wrap-around: the relay marks checkpoint opaques with it. */
static void test_ticket_bit_63_free(void)
{
        struct ledger *l = ledger_new(0);
        uint64_t lsn = 0x100;
        ledger_ticket t;

        for (int i = 0; i < 70000; i++) {
                ledger_reset(l);
                if (i % 1000 != 0 && i != 69999)
                        continue;
                CHECK(ledger_begin(l, lsn, 0) == 0);
                CHECK(ledger_add_message(l, &t) == 0);
                CHECK((t >> 63) == 0);
                CHECK(ledger_commit(l, lsn) == 0);
                CHECK(ledger_ack(l, t) == 0);
                CHECK_INT(ledger_flush_lsn(l), lsn);
                lsn += 0x10;
        }
        ledger_free(l);
}

int main(void)
{
        test_ticket_bit_63_free();
        test_in_order();
        test_out_of_order_across_partitions();
        test_open_transaction_holds();
        test_empty_transactions();
        test_keepalive();
        test_keepalive_fold();
        test_protocol_errors();
        test_oldest_stamp();
        test_reset();
        test_rewind();
        test_random();
        return check_summary();
}
