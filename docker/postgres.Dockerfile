# SPDX-License-Identifier: Apache-2.0
# PostgreSQL 15 with wal2json and logical decoding, for docker/compose.yaml.
FROM postgres:15-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15-wal2json \
    && rm -rf /var/lib/apt/lists/*
COPY sql/outbox.sql /docker-entrypoint-initdb.d/10-outbox.sql
CMD ["postgres", "-c", "wal_level=logical", "-c", "max_replication_slots=10", "-c", "max_wal_senders=10"]
