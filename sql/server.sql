-- SPDX-License-Identifier: Apache-2.0
--
-- Prepare a PostgreSQL server for outbox-relay, once per cluster, as a
-- superuser, with psql (it uses \gset and \if: ALTER SYSTEM cannot run inside
-- a DO block or a function):
--
--     sudo -u postgres psql -X -v ON_ERROR_STOP=1 -f sql/server.sql
--
-- It changes only what is missing, says what it did, and is safe to run again:
--
--   * wal_level = logical (takes effect after a restart of the server; the
--     script says when one is needed);
--   * output_plugin_libraries: PostgreSQL 14.24, 15.19, 16.15, 17.11, 18.6 and
--     later minor releases (2026-08-13) refuse every logical decoding output
--     plugin this setting does not list, to every role including superusers
--     (default 'pgoutput, test_decoding'). Where the server has the setting
--     and wal2json is not listed, wal2json is added, keeping every name already
--     listed, and the configuration is reloaded. Older minors do not know the
--     setting (and would refuse to start with it in postgresql.conf): there
--     the script leaves it alone.
--
-- The server also needs the wal2json library installed (Debian and Ubuntu:
-- apt-get install postgresql-15-wal2json, for your major version). The
-- settings are cluster-wide; run the table and role parts of the kit
-- (outbox.sql, role.sql) in the database that holds the outbox.
-- docker/postgres-init.sh runs this file in the official PostgreSQL image.

\set QUIET on

SELECT current_setting('wal_level') = 'logical' AS wal_level_ok,
       (SELECT pending_restart FROM pg_settings WHERE name = 'wal_level') AS wal_level_pending \gset
\if :wal_level_ok
\echo 'wal_level: logical'
\elif :wal_level_pending
\echo 'wal_level: already changed, not yet in effect: RESTART THE SERVER'
\else
ALTER SYSTEM SET wal_level = logical;
\echo 'wal_level: set to logical with ALTER SYSTEM; RESTART THE SERVER for it to take effect'
\endif

SELECT count(*) = 1 AS has_opl FROM pg_settings WHERE name = 'output_plugin_libraries' \gset
\if :has_opl
-- The current list as quoted literals, wal2json added when missing; the
-- setting's text is "name, name" with names double-quoted where needed.
SELECT coalesce(bool_or(name = 'wal2json'), false) AS opl_ok,
       coalesce(string_agg(quote_literal(name), ', ' ORDER BY ord), '') AS opl_names
  FROM (SELECT btrim(n, ' "') AS name, ord
          FROM pg_settings,
               regexp_split_to_table(setting, ',') WITH ORDINALITY AS t(n, ord)
         WHERE pg_settings.name = 'output_plugin_libraries' AND btrim(n, ' "') <> '') l \gset
\if :opl_ok
\echo 'output_plugin_libraries: lists wal2json'
\else
SELECT CASE WHEN :'opl_names' = '' THEN '' ELSE :'opl_names' || ', ' END
       || quote_literal('wal2json') AS opl_new \gset
ALTER SYSTEM SET output_plugin_libraries = :opl_new;
SELECT pg_reload_conf() AS reloaded \gset
\echo 'output_plugin_libraries: set to' :opl_new 'with ALTER SYSTEM and reloaded'
\endif
\else
\echo 'output_plugin_libraries: this server has no such setting (before the minor releases of 2026-08-13): every installed output plugin may be used'
\endif
