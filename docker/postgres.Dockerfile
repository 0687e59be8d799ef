# SPDX-License-Identifier: Apache-2.0
# PostgreSQL 15 with wal2json and logical decoding, for docker/compose.yaml.
# Works on images from before and after the minor releases of 2026-08-13
# (15.19 and later refuse output plugins not listed in output_plugin_libraries;
# 15.18 and older refuse to start with that setting): sql/server.sql, run once
# at initdb, adds wal2json to the list only where pg_settings has it.
FROM postgres:15-trixie
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15-wal2json \
    && rm -rf /var/lib/apt/lists/*
COPY sql/server.sql /docker-entrypoint-initdb.d/00-server.sql
COPY sql/outbox.sql /docker-entrypoint-initdb.d/10-outbox.sql
CMD ["postgres", "-c", "wal_level=logical", "-c", "max_replication_slots=10", "-c", "max_wal_senders=10"]
