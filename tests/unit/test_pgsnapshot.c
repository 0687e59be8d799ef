// SPDX-License-Identifier: Apache-2.0
/*
 * A PostgreSQL snapshot's text form (pg_current_snapshot()) and whether a
 * decoded transaction has ended in it (pgsnapshot.h): the side connection's
 * round verifies no commit its snapshot still sees in progress.
 */
#include <errno.h>

#include "unit_check.h"
#include "pgsnapshot.h"

static void test_parse(void)
{
        struct pg_snapshot s;

        CHECK_INT(pgsnap_parse("745:750:747,745", &s), 0);
        CHECK(s.xmin == 745 && s.xmax == 750);
        CHECK_INT((long long)s.nxip, 2);
        CHECK(s.xip[0] == 745 && s.xip[1] == 747);   /* sorted */
        pgsnap_free(&s);
        CHECK(s.xip == NULL && s.nxip == 0);
        CHECK_INT(pgsnap_parse("10:10:", &s), 0);
        CHECK_INT((long long)s.nxip, 0);
        pgsnap_free(&s);
        /* full IDs past the first epoch */
        CHECK_INT(pgsnap_parse("4294967300:4294967310:4294967305", &s), 0);
        CHECK(s.xmin == UINT64_C(4294967300) && s.xip[0] == UINT64_C(4294967305));
        pgsnap_free(&s);
        CHECK_INT(pgsnap_parse("", &s), -EINVAL);
        CHECK_INT(pgsnap_parse("10:9:", &s), -EINVAL);          /* xmin past xmax */
        CHECK_INT(pgsnap_parse("10:20", &s), -EINVAL);          /* no third part */
        CHECK_INT(pgsnap_parse("10:20:5", &s), -EINVAL);        /* listed before xmin */
        CHECK_INT(pgsnap_parse("10:20:20", &s), -EINVAL);       /* listed at xmax */
        CHECK_INT(pgsnap_parse("10:20:11,", &s), -EINVAL);
        CHECK_INT(pgsnap_parse("10:20:11;12", &s), -EINVAL);
        CHECK_INT(pgsnap_parse("x:20:", &s), -EINVAL);
        CHECK_INT(pgsnap_parse("99999999999999999999:1:", &s), -EINVAL);
        CHECK(s.xip == NULL);
        CHECK_INT(pgsnap_parse(NULL, &s), -EINVAL);
}

static void test_ended(void)
{
        struct pg_snapshot s;

        CHECK_INT(pgsnap_parse("745:750:745,747", &s), 0);
        CHECK(pgsnap_ended(&s, 700));     /* before xmin */
        CHECK(!pgsnap_ended(&s, 745));    /* listed: the commit flushed, not yet visible */
        CHECK(pgsnap_ended(&s, 746));
        CHECK(!pgsnap_ended(&s, 747));
        CHECK(pgsnap_ended(&s, 749));
        CHECK(!pgsnap_ended(&s, 750));    /* xmax: not assigned before the snapshot */
        CHECK(!pgsnap_ended(&s, 751));    /* after it: taken for 2^32 - 1 back, before ID 0 */
        pgsnap_free(&s);

        /* 32-bit IDs against full ones across an epoch: xmax is in epoch 1 */
        CHECK_INT(pgsnap_parse("4294967290:4294967306:4294967295,4294967300", &s), 0);
        CHECK(!pgsnap_ended(&s, 4294967295u));  /* epoch 0's last, listed */
        CHECK(!pgsnap_ended(&s, 4));             /* 4294967300 in epoch 1, listed */
        CHECK(pgsnap_ended(&s, 5));
        CHECK(pgsnap_ended(&s, 4294967294u));
        CHECK(pgsnap_ended(&s, 100));             /* read as epoch 0's 100: long ended */
        CHECK(!pgsnap_ended(&s, 10));             /* 4294967306 = xmax */
        pgsnap_free(&s);
}

static void test_before_xmin(void)
{
        struct pg_snapshot s;

        CHECK_INT(pgsnap_parse("745:750:745,747", &s), 0);
        CHECK(pgsnap_before_xmin(&s, 744));
        CHECK(pgsnap_before_xmin(&s, 2));         /* frozen */
        CHECK(!pgsnap_before_xmin(&s, 745));      /* listed */
        CHECK(!pgsnap_before_xmin(&s, 746));      /* perhaps a running subtransaction */
        CHECK(!pgsnap_before_xmin(&s, 750));
        CHECK(!pgsnap_before_xmin(&s, 760));      /* assigned after the snapshot */
        pgsnap_free(&s);

        /* xmin in epoch 1: epoch 0's IDs precede it, epoch 1's later ones do not */
        CHECK_INT(pgsnap_parse("4294967306:4294967310:", &s), 0);
        CHECK(pgsnap_before_xmin(&s, 4294967290u));
        CHECK(pgsnap_before_xmin(&s, 9));          /* 4294967305 */
        CHECK(!pgsnap_before_xmin(&s, 10));        /* xmin itself */
        CHECK(!pgsnap_before_xmin(&s, 20));        /* after xmax, epoch 1 */
        pgsnap_free(&s);
}

int main(void)
{
        test_parse();
        test_ended();
        test_before_xmin();
        return check_summary();
}
