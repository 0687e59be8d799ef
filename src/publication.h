/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The publication pgoutput streams (--plugin=pgoutput): the outbox tables,
 * each listed by name and nothing else, inserts only, no row filter or
 * column list, so that the server sends every outbox row and only those:
 *
 *   CREATE PUBLICATION outbox_relay FOR TABLE "public"."outbox" WITH (publish = 'insert');
 *
 * Read from pg_publication and pg_publication_rel (PostgreSQL documentation
 * "System Catalogs"; row filters and column lists, prqual and prattrs, and
 * FOR TABLES IN SCHEMA, pg_publication_namespace, from 15), judged against
 * the configuration with the SQL that fixes it, and created when the relay
 * may. pgoutput reads a publication with the catalog as it was when each
 * change was written: a row inserted while its table was not in the
 * publication, or before the publication existed, is never sent. So the
 * publication is created before the slot, and whatever is missing from it
 * is refused, never quietly added. Knows libpq and those catalogs, nothing
 * of Kafka or the stream.
 */
#ifndef RELAY_PUBLICATION_H
#define RELAY_PUBLICATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "config.h"

/* What publication_read() found. */
struct publication {
        bool exists;
        uint32_t oid;             /* pg_publication.oid */
        char xmin[16];            /* its row's xmin: ALTER PUBLICATION ... SET, RENAME TO, OWNER TO change it */
        bool all_tables;          /* FOR ALL TABLES */
        bool in_schema;           /* FOR TABLES IN SCHEMA (15+) */
        bool via_root;            /* publish_via_partition_root (pubviaroot, 13+) */
        bool insert, update, del, truncate; /* pubinsert, pubupdate, pubdelete, pubtruncate */
        size_t ntables;           /* the configured tables */
        uint32_t *rel_oids;       /* per configured table: its pg_publication_rel.oid, 0 if not listed */
        bool *filtered;           /* per configured table: a row filter or a column list (15+) */
        size_t nextra;            /* tables listed that are not configured */
        char extra[512];          /* their names, "schema"."table", comma-separated, truncated */
};

/*
 * publication_read() - the publication @name and, for each of the @n
 * configured @tables, whether and how it lists it, into @ret_pub (exists
 * false when there is none; rel_oids and filtered allocated: release with
 * publication_release()). Returns 0, -EIO with "cannot read publication
 * ...: <server's message>" in @err, -ENOMEM.
 */
int publication_read(PGconn *c, const char *name, const struct table_name *tables, size_t n,
                     struct publication *ret_pub, char *err, size_t errlen);

/* publication_release() - free what publication_read() allocated; safe on a zeroed one and twice. */
void publication_release(struct publication *pub);

/*
 * publication_create_sql() - CREATE PUBLICATION <name> FOR TABLE <the
 * configured tables, quoted> WITH (publish = 'insert') for @conf, into @buf
 * (@size bytes, truncated).
 */
void publication_create_sql(const struct relay_config *conf, char *buf, size_t size);

/*
 * publication_judge() - 0 when @pub (read for @conf's tables) exists, lists
 * every configured table without a row filter or column list and no other
 * table, is not FOR ALL TABLES or FOR TABLES IN SCHEMA, and publishes
 * inserts; -ENOENT when it does not exist, -EINVAL when it is otherwise;
 * both with what is wrong, what it costs, and the SQL that fixes it in
 * @err. @warn (may be NULL, @warnlen bytes) receives "" or a sentence on
 * what it publishes besides inserts (updates, deletes, truncates: decoded
 * and sent, and ignored by the relay).
 */
int publication_judge(const struct publication *pub, const struct relay_config *conf, char *err,
                      size_t errlen, char *warn, size_t warnlen);

/*
 * publication_create() - publication_create_sql() for @conf, run on @c.
 * Returns 0; -EEXIST (42710: it exists); -EACCES (42501: the role may not
 * create publications in the database or does not own a table); -EIO (the
 * connection failed); -EINVAL (any other refusal); each with "cannot create
 * publication ...: <server's message>" and the SQL to run as a table's
 * owner in @err.
 */
int publication_create(PGconn *c, const struct relay_config *conf, char *err, size_t errlen);

#endif
