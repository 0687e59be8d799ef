// SPDX-License-Identifier: Apache-2.0
/*
 * Unit tests of preflight.c's version gate: the one place that refuses a
 * server older than PostgreSQL 14; the output plugin's choice, allowance
 * and verdict. (The SQL of preflight.c runs against real
 * servers of each major: tests/sqlmatrix, tests/integration/test_sql_matrix.py.)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "unit_check.h"
#include "preflight.h"

static int version(int num, const char *text, char *err, size_t errlen)
{
        struct preflight_settings set = {0};

        set.server_version_num = num;
        snprintf(set.server_version, sizeof(set.server_version), "%s", text);
        err[0] = '\0';
        return preflight_check_version(&set, err, errlen);
}

/* synchronous_standby_names in each of the server's forms (syncrep_gram.y). */
static void test_sync_standby(void)
{
        struct preflight_settings set = {0};
        char err[1536];

        CHECK(!preflight_sync_standby_named("", "outbox-relay"));
        CHECK(preflight_sync_standby_named("*", "outbox-relay"));
        CHECK(preflight_sync_standby_named("FIRST 1 (*)", "outbox-relay"));
        CHECK(preflight_sync_standby_named("ANY 2 (s1, \"*\")", "outbox-relay"));
        CHECK(!preflight_sync_standby_named("s1, s2", "outbox-relay"));
        CHECK(!preflight_sync_standby_named("FIRST 2 (s1, s2)", "outbox-relay"));
        /* a quoted name, case-insensitive as SyncRepGetStandbyPriority() compares */
        CHECK(preflight_sync_standby_named("s1, \"Outbox-Relay\"", "outbox-relay"));
        CHECK(preflight_sync_standby_named("2 (s1, relay_a)", "RELAY_A"));
        CHECK(preflight_sync_standby_named("first 1 (s1, relay_a)", "relay_a"));
        /* the keywords and the count are not names */
        CHECK(!preflight_sync_standby_named("ANY 1 (s1)", "any"));
        CHECK(!preflight_sync_standby_named("FIRST 1 (s1)", "1"));
        CHECK(!preflight_sync_standby_named("1 (s1)", "1"));
        /* but a number is a name in a list, and a doubled quote is a quote */
        CHECK(preflight_sync_standby_named("s1, 7", "7"));
        CHECK(preflight_sync_standby_named("\"a\"\"b\"", "a\"b"));
        CHECK(!preflight_sync_standby_named("\"a\"\"b\"", "a"));
        /* a name that only starts like the relay's is another name */
        CHECK(!preflight_sync_standby_named("outbox_relay_2", "outbox_relay"));

        snprintf(set.application_name, sizeof(set.application_name), "outbox-relay");
        CHECK_INT(preflight_check_sync_standby(&set, err, sizeof(err)), 0);
        snprintf(set.synchronous_standby_names, sizeof(set.synchronous_standby_names), "*");
        CHECK_INT(preflight_check_sync_standby(&set, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "synchronous_standby_names = '*' names this relay") == err);
        CHECK(strstr(err, "ALTER SYSTEM SET synchronous_standby_names") != NULL);
}

/* --plugin=auto: the slot's plugin, else what output_plugin_libraries allows; the fix for each plugin. */
static void test_choose_plugin(void)
{
        struct preflight_settings set = {0};
        struct preflight_slot slot = {0};
        char why[512], err[4096];

        /* no setting (before 15.19 and the like): wal2json */
        CHECK_STR(preflight_choose_plugin(&set, NULL, "auto", why, sizeof(why)), "wal2json");
        CHECK(strstr(why, "no output_plugin_libraries") != NULL);
        CHECK(preflight_plugin_allowed(&set, "wal2json") && preflight_plugin_allowed(&set, "pgoutput"));
        /* the default list: pgoutput, and the check's fix names it */
        set.has_output_plugin_libraries = true;
        snprintf(set.output_plugin_libraries, sizeof(set.output_plugin_libraries), "pgoutput, test_decoding");
        CHECK_STR(preflight_choose_plugin(&set, NULL, "auto", why, sizeof(why)), "pgoutput");
        CHECK(strstr(why, "does not list wal2json") != NULL);
        CHECK_INT(preflight_check_plugin_libraries(&set, "pgoutput", err, sizeof(err)), 0);
        CHECK_INT(preflight_check_plugin_libraries(&set, "wal2json", err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "'pgoutput', 'test_decoding', 'wal2json'; SELECT pg_reload_conf()") != NULL);
        CHECK(strstr(err, "or start with --plugin=pgoutput") != NULL);
        /* listed (quoted or not): wal2json */
        snprintf(set.output_plugin_libraries, sizeof(set.output_plugin_libraries),
                 "pgoutput, \"wal2json\"");
        CHECK_STR(preflight_choose_plugin(&set, NULL, "auto", why, sizeof(why)), "wal2json");
        /* a list without pgoutput: its fix keeps the names and adds pgoutput once */
        snprintf(set.output_plugin_libraries, sizeof(set.output_plugin_libraries), "wal2json");
        CHECK_INT(preflight_check_plugin_libraries(&set, "pgoutput", err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "ALTER SYSTEM SET output_plugin_libraries = 'wal2json', 'pgoutput';") != NULL);
        /* an existing slot keeps its plugin under auto, whatever the list says */
        slot.exists = true;
        snprintf(slot.slot_type, sizeof(slot.slot_type), "logical");
        snprintf(slot.plugin, sizeof(slot.plugin), "pgoutput");
        CHECK_STR(preflight_choose_plugin(&set, &slot, "auto", why, sizeof(why)), "pgoutput");
        CHECK_STR(why, "the slot's own plugin");
        /* a slot of a plugin the relay does not decode: as if there were none */
        snprintf(slot.plugin, sizeof(slot.plugin), "test_decoding");
        CHECK_STR(preflight_choose_plugin(&set, &slot, "auto", why, sizeof(why)), "wal2json");
        /* --plugin named: that one, and the verdict on the slot's says the rest */
        snprintf(slot.plugin, sizeof(slot.plugin), "pgoutput");
        CHECK_STR(preflight_choose_plugin(&set, &slot, "wal2json", why, sizeof(why)), "wal2json");
        snprintf(slot.database, sizeof(slot.database), "shop");
        slot.restart_lsn = 1;
        CHECK_INT(preflight_slot_verdict(&slot, "shop", "wal2json"), PREFLIGHT_SLOT_OTHER_DECODER);
        CHECK_INT(preflight_check_slot(&slot, "s", "shop", "wal2json", err, sizeof(err)), -EDOM);
        CHECK(strstr(err, "Start with --plugin=pgoutput") != NULL);
        CHECK_INT(preflight_slot_verdict(&slot, "shop", NULL), PREFLIGHT_SLOT_OK);
        /* invalidated on 17+: the reason and its remedy */
        snprintf(slot.invalidation_reason, sizeof(slot.invalidation_reason), "idle_timeout");
        CHECK_INT(preflight_check_slot(&slot, "s", "shop", "pgoutput", err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "invalidation_reason idle_timeout") && strstr(err, "idle_replication_slot_timeout to 0"));
}

int main(void)
{
        char err[512];

        CHECK_INT(PREFLIGHT_MIN_SERVER_VERSION, 140000);
        test_choose_plugin();

        /* every supported major, at its first and a late minor */
        CHECK_INT(version(140000, "14.0", err, sizeof(err)), 0);
        CHECK_STR(err, "");
        CHECK_INT(version(140024, "14.24", err, sizeof(err)), 0);
        CHECK_INT(version(150020, "15.20 (Debian 15.20-0+deb12u1)", err, sizeof(err)), 0);
        CHECK_INT(version(160015, "16.15", err, sizeof(err)), 0);
        CHECK_INT(version(170011, "17.11", err, sizeof(err)), 0);
        CHECK_INT(version(180006, "18.6", err, sizeof(err)), 0);
        /* a newer major than the tested ones is not refused */
        CHECK_INT(version(190000, "19devel", err, sizeof(err)), 0);

        /* older ones are refused, naming the range and what to do */
        CHECK_INT(version(139999, "13.23", err, sizeof(err)), -EINVAL);
        CHECK_STR(err, "server version 13.23 (server_version_num 139999) is too old: outbox-relay "
                       "supports PostgreSQL 14 to 18, the major versions the PostgreSQL project "
                       "supports; upgrade the server to 14 or later (pg_upgrade, or dump and restore)");
        CHECK_INT(version(100023, "10.23", err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "server version 10.23 ") == err);
        CHECK_INT(version(90624, "", err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "server version unknown (server_version_num 90624)") == err);
        /* truncated to the buffer, still terminated */
        CHECK_INT(version(130000, "13.0", err, 16), -EINVAL);
        CHECK_INT((long long)strlen(err), 15);

        test_sync_standby();
        return check_summary();
}
