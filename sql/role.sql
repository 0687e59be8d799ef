-- SPDX-License-Identifier: Apache-2.0
--
-- A least-privilege login for outbox-relay: REPLICATION (to create and read
-- its logical replication slot) and SELECT on the outbox table, nothing else.
-- Run it once per database as a superuser (or a role with CREATEROLE that
-- itself has REPLICATION) with psql, which fills in the names:
--
--     psql -X -v ON_ERROR_STOP=1 -d shop -f sql/role.sql \
--          -v relay_role=outbox_relay -v outbox_schema=public -v outbox_table=outbox
--
-- (the -v settings shown are the defaults). For a second outbox table run it
-- again with that table: CREATE ROLE is skipped when the role exists.
--
-- The role is created without a password, so nobody can log in with it yet.
-- Set one without writing it into a shell history or a script:
--
--     psql -d shop -c '\password outbox_relay'
--
-- psql prompts twice and sends only a SCRAM-SHA-256 verifier (with the
-- default password_encryption = scram-sha-256), never the password itself.
-- Give the relay the password through a password file, not the command line
-- or the environment (both are visible in ps output and /proc):
--
--     # ~/.pgpass of the relay's user, or the file $PGPASSFILE names; mode 0600
--     # hostname:port:database:username:password
--     db.internal:5432:shop:outbox_relay:the-password
--
-- and run outbox-relay -d 'host=db.internal dbname=shop user=outbox_relay'.
-- The relay's replication connection (replication=database) is a logical
-- one: libpq looks the password up under the real database name, so one
-- line serves both connections of the relay.
--
-- pg_hba.conf: a logical replication connection is matched by the ordinary
-- database lines, not by the "replication" keyword (which matches physical
-- replication only). One line is enough:
--
--     host    shop    outbox_relay    10.0.0.0/8    scram-sha-256
--
-- Do not add a "host replication outbox_relay ..." line: the relay does not
-- need it, and it would let this role stream the whole cluster's WAL
-- (pg_basebackup, pg_receivewal).
--
-- What REPLICATION still allows, so keep the password as safe as the data:
-- through a logical slot the role can decode every change of every table in
-- the databases it may connect to (wal2json without add-tables), and it can
-- create and drop any replication slot of the cluster, including other
-- applications' slots. PostgreSQL has no narrower privilege for logical
-- decoding. Limit the databases it may connect to (REVOKE CONNECT ... FROM
-- PUBLIC, then GRANT CONNECT to the roles that need each database) if it
-- must not see them. In a cluster upgraded from before PostgreSQL 15 every
-- role may still create objects in schema public: REVOKE CREATE ON SCHEMA
-- public FROM PUBLIC.
--
-- What the relay does with the role: reads settings and catalogs
-- (pg_settings, pg_class, pg_attribute, pg_replication_slots: readable by
-- every role), counts the outbox's rows when it creates the slot (the SELECT
-- below), calls pg_create_logical_replication_slot() for --create-slot, and
-- streams with START_REPLICATION. It never writes to any table. The
-- output_plugin_libraries setting (PostgreSQL 14.24, 15.19, 16.15, 17.11,
-- 18.6 and later minors; sql/server.sql sets it) is hidden from such a role,
-- so the relay's startup cannot read it; `outbox-relay check` still finds
-- out by creating a temporary slot, and otherwise creating the slot or
-- streaming fails with the server's own message.

\if :{?relay_role}
\else
\set relay_role outbox_relay
\endif
\if :{?outbox_schema}
\else
\set outbox_schema public
\endif
\if :{?outbox_table}
\else
\set outbox_table outbox
\endif

SELECT NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'relay_role') AS create_role \gset
\if :create_role
-- NOINHERIT: privileges granted later to a group it joins are not used.
CREATE ROLE :"relay_role" LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT
    NOBYPASSRLS;
COMMENT ON ROLE :"relay_role" IS 'outbox-relay: REPLICATION and SELECT on the outbox (sql/role.sql)';
\endif

GRANT USAGE ON SCHEMA :"outbox_schema" TO :"relay_role";
GRANT SELECT ON TABLE :"outbox_schema".:"outbox_table" TO :"relay_role";
