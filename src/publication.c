// SPDX-License-Identifier: Apache-2.0
/*
 * The pgoutput publication of the outbox tables: read, judged, created.
 * See publication.h. Knows libpq and pg_publication, not Kafka.
 */
#include "publication.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

/* @ident as a double-quoted SQL identifier ('"' doubled), appended. */
static void append_ident(char *buf, size_t size, size_t *o, const char *ident)
{
        strbuf_append(buf, size, o, "\"");
        for (const char *p = ident; *p; p++) {
                if (*p == '"')
                        strbuf_append(buf, size, o, "\"\"");
                else
                        strbuf_append(buf, size, o, "%c", *p);
        }
        strbuf_append(buf, size, o, "\"");
}

static void append_tables(char *buf, size_t size, size_t *o, const struct relay_config *conf)
{
        for (size_t i = 0; i < conf->ntables; i++) {
                if (i)
                        strbuf_append(buf, size, o, ", ");
                append_ident(buf, size, o, conf->tables[i].schema);
                strbuf_append(buf, size, o, ".");
                append_ident(buf, size, o, conf->tables[i].table);
        }
}

void publication_create_sql(const struct relay_config *conf, char *buf, size_t size)
{
        size_t o = 0;

        buf[0] = '\0';
        strbuf_append(buf, size, &o, "CREATE PUBLICATION ");
        append_ident(buf, size, &o, config_publication(conf));
        strbuf_append(buf, size, &o, " FOR TABLE ");
        append_tables(buf, size, &o, conf);
        strbuf_append(buf, size, &o, " WITH (publish = 'insert');");
}

void publication_release(struct publication *pub)
{
        free(pub->rel_oids);
        free(pub->filtered);
        pub->rel_oids = NULL;
        pub->filtered = NULL;
}

int publication_read(PGconn *c, const char *name, const struct table_name *tables, size_t n,
                     struct publication *ret_pub, char *err, size_t errlen)
{
        bool v15 = PQserverVersion(c) >= 150000;
        struct publication pub = {.ntables = n};
        const char *params[1] = {name};
        char sql[1024], oid[16];
        PGresult *r;
        size_t o = 0;

        /* Version-gated here and nowhere else: schemas, row filters and column lists came in 15. */
        snprintf(sql, sizeof(sql),
                 "SELECT p.oid, p.xmin, p.puballtables, p.pubinsert, p.pubupdate, p.pubdelete, "
                 "p.pubtruncate, %s, p.pubviaroot FROM pg_catalog.pg_publication p WHERE p.pubname = $1",
                 v15 ? "EXISTS (SELECT 1 FROM pg_catalog.pg_publication_namespace pn "
                       "WHERE pn.pnpubid = p.oid)" : "false");
        r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                strbuf_err(err, errlen, "cannot read publication \"%s\": %s", name, PQresultErrorMessage(r));
                PQclear(r);
                return -EIO;
        }
        pub.rel_oids = calloc(n ? n : 1, sizeof(*pub.rel_oids));
        pub.filtered = calloc(n ? n : 1, sizeof(*pub.filtered));
        if (!pub.rel_oids || !pub.filtered) {
                PQclear(r);
                publication_release(&pub);
                strbuf_err(err, errlen, "out of memory");
                return -ENOMEM;
        }
        if (PQntuples(r) == 0) {
                PQclear(r);
                *ret_pub = pub;
                return 0;
        }
        pub.exists = true;
        pub.oid = (uint32_t)strtoul(PQgetvalue(r, 0, 0), NULL, 10);
        snprintf(pub.xmin, sizeof(pub.xmin), "%s", PQgetvalue(r, 0, 1));
        pub.all_tables = strcmp(PQgetvalue(r, 0, 2), "t") == 0;
        pub.insert = strcmp(PQgetvalue(r, 0, 3), "t") == 0;
        pub.update = strcmp(PQgetvalue(r, 0, 4), "t") == 0;
        pub.del = strcmp(PQgetvalue(r, 0, 5), "t") == 0;
        pub.truncate = strcmp(PQgetvalue(r, 0, 6), "t") == 0;
        pub.in_schema = strcmp(PQgetvalue(r, 0, 7), "t") == 0;
        pub.via_root = strcmp(PQgetvalue(r, 0, 8), "t") == 0;
        PQclear(r);

        snprintf(oid, sizeof(oid), "%u", pub.oid);
        params[0] = oid;
        snprintf(sql, sizeof(sql),
                 "SELECT n.nspname, c.relname, pr.oid, %s FROM pg_catalog.pg_publication_rel pr "
                 "JOIN pg_catalog.pg_class c ON c.oid = pr.prrelid "
                 "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                 "WHERE pr.prpubid = $1 ORDER BY n.nspname, c.relname",
                 v15 ? "pr.prqual IS NOT NULL OR pr.prattrs IS NOT NULL" : "false");
        r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
                strbuf_err(err, errlen, "cannot read the tables of publication \"%s\": %s", name,
                       PQresultErrorMessage(r));
                PQclear(r);
                publication_release(&pub);
                return -EIO;
        }
        for (int i = 0; i < PQntuples(r); i++) {
                const char *sch = PQgetvalue(r, i, 0), *rel = PQgetvalue(r, i, 1);
                bool configured = false;

                for (size_t k = 0; k < n; k++) {
                        if (strcmp(tables[k].schema, sch) == 0 && strcmp(tables[k].table, rel) == 0) {
                                pub.rel_oids[k] = (uint32_t)strtoul(PQgetvalue(r, i, 2), NULL, 10);
                                pub.filtered[k] = strcmp(PQgetvalue(r, i, 3), "t") == 0;
                                configured = true;
                        }
                }
                if (!configured) {
                        if (pub.nextra++)
                                strbuf_append(pub.extra, sizeof(pub.extra), &o, ", ");
                        strbuf_append(pub.extra, sizeof(pub.extra), &o, "\"%s\".\"%s\"", sch, rel);
                }
        }
        PQclear(r);
        *ret_pub = pub;
        return 0;
}

int publication_judge(const struct publication *pub, const struct relay_config *conf, char *err,
                      size_t errlen, char *warn, size_t warnlen)
{
        const char *name = config_publication(conf);
        char what[1536] = "", fix[2048] = "", create[1024];
        size_t o = 0, of = 0, nmissing = 0, nfiltered = 0;

        if (warn && warnlen)
                warn[0] = '\0';
        publication_create_sql(conf, create, sizeof(create));
        if (!pub->exists) {
                strbuf_err(err, errlen, "publication \"%s\" does not exist: pgoutput sends only the rows of the "
                       "tables a publication lists, and only those written after it listed them; fix, as "
                       "the owner of the tables (or a superuser), before the slot is created: %s", name,
                       create);
                return -ENOENT;
        }
        if (pub->all_tables)
                strbuf_append(what, sizeof(what), &o, "%sit is FOR ALL TABLES, so every table's rows are decoded "
                       "and sent", o ? "; " : "");
        if (pub->in_schema)
                strbuf_append(what, sizeof(what), &o, "%sit publishes whole schemas (FOR TABLES IN SCHEMA)",
                       o ? "; " : "");
        for (size_t i = 0; i < pub->ntables && !pub->all_tables; i++)
                nmissing += pub->rel_oids[i] == 0;
        if (nmissing) {
                strbuf_append(what, sizeof(what), &o, "%sit does not list ", o ? "; " : "");
                for (size_t i = 0, k = 0; i < pub->ntables; i++)
                        if (pub->rel_oids[i] == 0)
                                strbuf_append(what, sizeof(what), &o, "%s\"%s\".\"%s\"", k++ ? ", " : "",
                                       conf->tables[i].schema, conf->tables[i].table);
        }
        for (size_t i = 0; i < pub->ntables; i++)
                nfiltered += pub->filtered[i];
        if (nfiltered) {
                strbuf_append(what, sizeof(what), &o, "%sit has a row filter or a column list on ", o ? "; " : "");
                for (size_t i = 0, k = 0; i < pub->ntables; i++)
                        if (pub->filtered[i])
                                strbuf_append(what, sizeof(what), &o, "%s\"%s\".\"%s\"", k++ ? ", " : "",
                                       conf->tables[i].schema, conf->tables[i].table);
        }
        if (pub->nextra)
                strbuf_append(what, sizeof(what), &o, "%sit also lists %s, which the relay does not publish",
                       o ? "; " : "", pub->extra);
        if (!pub->insert)
                strbuf_append(what, sizeof(what), &o, "%sit does not publish inserts", o ? "; " : "");
        /*
         * Harmless while an outbox is a plain table, but attaching it later as a
         * partition of a published parent changes nothing the relay watches
         * (the publication's row, the outbox's membership) and sends its rows
         * under the parent's name, which the relay does not publish.
         */
        if (pub->via_root)
                strbuf_append(what, sizeof(what), &o, "%sit publishes a partition's rows under its "
                              "partitioned parent's name (publish_via_partition_root), so an outbox attached "
                              "as a partition of a published table would go unread", o ? "; " : "");
        if (o == 0) {
                if (warn && (pub->update || pub->del || pub->truncate))
                        snprintf(warn, warnlen, "publication \"%s\" also publishes %s%s%s: the walsender "
                                 "decodes and sends them and the relay ignores them; fix: ALTER "
                                 "PUBLICATION \"%s\" SET (publish = 'insert');", name,
                                 pub->update ? "updates " : "", pub->del ? "deletes " : "",
                                 pub->truncate ? "truncates" : "", name);
                return 0;
        }
        if (pub->all_tables) {
                strbuf_append(fix, sizeof(fix), &of, "DROP PUBLICATION \"%s\"; %s", name, create);
        } else {
                strbuf_append(fix, sizeof(fix), &of, "ALTER PUBLICATION \"%s\" SET TABLE ", name);
                append_tables(fix, sizeof(fix), &of, conf);
                strbuf_append(fix, sizeof(fix), &of, ";");
                if (!pub->insert || pub->update || pub->del || pub->truncate || pub->via_root)
                        strbuf_append(fix, sizeof(fix), &of, " ALTER PUBLICATION \"%s\" SET (publish = "
                                      "'insert', publish_via_partition_root = false);", name);
        }
        strbuf_err(err, errlen, "publication \"%s\" is not the relay's: %s. The relay needs one that lists "
               "exactly its outbox tables and publishes their inserts whole. Rows inserted into a table "
               "while the publication did not send them are never sent: publish those by other means "
               "(outbox-relay redrive). Fix, as the owner of the tables: %s", name, what, fix);
        return -EINVAL;
}

int publication_create(PGconn *c, const struct relay_config *conf, char *err, size_t errlen)
{
        char sql[2048], msg[1024];
        const char *state;
        PGresult *r;
        int rc = 0;

        publication_create_sql(conf, sql, sizeof(sql));
        r = PQexec(c, sql);
        if (PQresultStatus(r) == PGRES_COMMAND_OK) {
                PQclear(r);
                return 0;
        }
        state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        snprintf(msg, sizeof(msg), "%s", r ? PQresultErrorMessage(r) : PQerrorMessage(c));
        rc = !state && PQstatus(c) != CONNECTION_OK ? -EIO :
             state && strcmp(state, "42710") == 0 ? -EEXIST :
             state && strcmp(state, "42501") == 0 ? -EACCES : -EINVAL;
        PQclear(r);
        for (char *p = msg; *p; p++)
                if (*p == '\n')
                        *p = ' ';
        strbuf_err(err, errlen, "cannot create publication \"%s\": %s; fix: run as the owner of the tables "
               "(or a superuser), before the slot is created: %s", config_publication(conf), msg, sql);
        return rc;
}
