// SPDX-License-Identifier: Apache-2.0
/*
 * The time bound of a Kafka transaction under --exactly-once
 * (relay_eos_time_bound_ms()): --kafka-commit-interval on a live stream;
 * while the relay drains a backlog, as long as the lag, capped, and never
 * shorter than what the operator set.
 */
#include "unit_check.h"
#include "relay_parts.h"

static void test_live_stream_keeps_the_bound(void)
{
        CHECK_INT(relay_eos_time_bound_ms(20, 0), 20);
        CHECK_INT(relay_eos_time_bound_ms(20, 40000), 20);
        CHECK_INT(relay_eos_time_bound_ms(20, RELAY_EOS_BACKLOG_LAG_US), 20);
        /* a server clock that went backwards between commit and send */
        CHECK_INT(relay_eos_time_bound_ms(20, -5000000), 20);
}

static void test_backlog_lengthens_the_bound(void)
{
        /* as long as the lag a row has already: 300 ms behind, 300 ms transactions */
        CHECK_INT(relay_eos_time_bound_ms(20, RELAY_EOS_BACKLOG_LAG_US + 1000),
                  RELAY_EOS_BACKLOG_LAG_US / 1000 + 1);
        CHECK_INT(relay_eos_time_bound_ms(20, 300000), 300);
        CHECK_INT(relay_eos_time_bound_ms(20, 700000), 700);
        /* capped, however far behind... */
        CHECK_INT(relay_eos_time_bound_ms(20, 3600LL * 1000000), RELAY_EOS_BACKLOG_MAX_MS);
        CHECK_INT(relay_eos_time_bound_ms(300, 1000000), RELAY_EOS_BACKLOG_MAX_MS);
        /* ...but never below the operator's own bound */
        CHECK_INT(relay_eos_time_bound_ms(500, 300000), 500);
        CHECK_INT(relay_eos_time_bound_ms(5000, 1000000), 5000);
        /* 0: a Kafka transaction per PostgreSQL commit, backlog or not */
        CHECK_INT(relay_eos_time_bound_ms(0, 1000000), 0);
}

int main(void)
{
        test_live_stream_keeps_the_bound();
        test_backlog_lengthens_the_bound();
        return check_summary();
}
