// SPDX-License-Identifier: Apache-2.0
/*
 * Outbox row -> Kafka record parts, and the --topic template. Pure: no I/O.
 */
#include "record.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { COL_ID, COL_KEY, COL_PAYLOAD, COL_TYPE, COL_FIXED };

struct segment {
        char *literal;  /* text, or NULL for a column reference */
        size_t len;
        size_t column;  /* index into names[] */
};

struct record_spec {
        char **names;           /* COL_FIXED fixed columns, then template columns */
        size_t nnames;
        struct segment *segs;
        size_t nsegs;
        const struct w2j_value **found; /* per name, scratch */
        const char **found_type;        /* per name, scratch */
        bool allow_null_payload;
        char topic[RECORD_TOPIC_MAX + 2];
};

struct record_spec *record_spec_free(struct record_spec *spec)
{
        if (!spec)
                return NULL;
        for (size_t i = 0; i < spec->nnames; i++)
                free(spec->names[i]);
        for (size_t i = 0; i < spec->nsegs; i++)
                free(spec->segs[i].literal);
        free(spec->names);
        free(spec->segs);
        free(spec->found);
        free(spec->found_type);
        free(spec);
        return NULL;
}

static int add_name(struct record_spec *s, const char *name, size_t len, size_t *ret_idx)
{
        char **nn;

        for (size_t i = COL_FIXED; i < s->nnames; i++) {
                if (strlen(s->names[i]) == len && memcmp(s->names[i], name, len) == 0) {
                        *ret_idx = i;
                        return 0;
                }
        }
        nn = realloc(s->names, (s->nnames + 1) * sizeof(*nn));
        if (!nn)
                return -ENOMEM;
        s->names = nn;
        nn[s->nnames] = strndup(name, len);
        if (!nn[s->nnames])
                return -ENOMEM;
        *ret_idx = s->nnames++;
        return 0;
}

static int add_seg(struct record_spec *s, const char *lit, size_t len, size_t column)
{
        struct segment *ns = realloc(s->segs, (s->nsegs + 1) * sizeof(*ns));

        if (!ns)
                return -ENOMEM;
        s->segs = ns;
        ns[s->nsegs] = (struct segment){NULL, len, column};
        if (lit) {
                ns[s->nsegs].literal = strndup(lit, len);
                if (!ns[s->nsegs].literal)
                        return -ENOMEM;
        }
        s->nsegs++;
        return 0;
}

int record_spec_new(const char *id_column, const char *key_column, const char *payload_column,
                    const char *type_column, const char *template, struct record_spec **ret_spec,
                    char *err, size_t errlen)
{
        struct record_spec *s = calloc(1, sizeof(*s));
        const char *fixed[COL_FIXED] = {id_column, key_column, payload_column, type_column};
        const char *p = template, *lit = template;
        int r = -ENOMEM;

        if (!s)
                return -ENOMEM;
        s->names = calloc(COL_FIXED, sizeof(*s->names));
        if (!s->names)
                goto fail;
        s->nnames = COL_FIXED;
        for (int i = 0; i < COL_FIXED; i++)
                if (!(s->names[i] = strdup(fixed[i])))
                        goto fail;
        while (*p) {
                const char *end;
                size_t idx;

                if (p[0] != '$' || p[1] != '{') {
                        p++;
                        continue;
                }
                end = strchr(p + 2, '}');
                if (!end || end == p + 2) {
                        snprintf(err, errlen,
                                 "invalid --topic \"%s\": \"${\" must be followed by a column "
                                 "name and \"}\", e.g. outbox.${kind}", template);
                        r = -EINVAL;
                        goto fail;
                }
                if (p > lit && add_seg(s, lit, (size_t)(p - lit), 0) < 0)
                        goto fail;
                if (add_name(s, p + 2, (size_t)(end - p - 2), &idx) < 0 || add_seg(s, NULL, 0, idx) < 0)
                        goto fail;
                p = lit = end + 1;
        }
        if (p > lit && add_seg(s, lit, (size_t)(p - lit), 0) < 0)
                goto fail;
        s->found = calloc(s->nnames, sizeof(*s->found));
        s->found_type = calloc(s->nnames, sizeof(*s->found_type));
        if (!s->found || !s->found_type)
                goto fail;
        *ret_spec = s;
        return 0;
fail:
        record_spec_free(s);
        return r;
}

void record_spec_allow_null_payload(struct record_spec *spec, bool allow)
{
        spec->allow_null_payload = allow;
}

/* json and jsonb text was checked by PostgreSQL on input; other types were not. */
static bool is_json_type(const char *type)
{
        return strcmp(type, "jsonb") == 0 || strcmp(type, "json") == 0;
}

void record_spec_template_columns(const struct record_spec *spec, const char *const **ret_names,
                                  size_t *ret_n)
{
        *ret_names = (const char *const *)spec->names + COL_FIXED;
        *ret_n = spec->nnames - COL_FIXED;
}

static bool valid_topic_char(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
}

/*
 * Render the topic template into spec->topic. Returns 0, -EINVAL for a NULL
 * template column, -EDOM for a name Kafka refuses; sets *ret_len when the
 * text was rendered (also when refused for its characters), else SIZE_MAX.
 */
static int render_topic(struct record_spec *spec, const struct w2j_value **f, size_t *ret_len,
                        char *err, size_t errlen)
{
        size_t o = 0;

        *ret_len = SIZE_MAX;
        for (size_t s = 0; s < spec->nsegs; s++) {
                const struct segment *g = &spec->segs[s];
                const char *text = g->literal;
                size_t len = g->len;

                if (!text) {
                        if (f[g->column]->is_null) {
                                snprintf(err, errlen, "the topic template column \"%s\" is NULL",
                                         spec->names[g->column]);
                                return -EINVAL;
                        }
                        text = f[g->column]->ptr;
                        len = f[g->column]->len;
                }
                if (o + len > RECORD_TOPIC_MAX) {
                        snprintf(err, errlen, "the topic rendered from the template is longer "
                                 "than Kafka's %d bytes", RECORD_TOPIC_MAX);
                        return -EDOM;
                }
                memcpy(spec->topic + o, text, len);
                o += len;
        }
        spec->topic[o] = '\0';
        *ret_len = o;
        for (size_t i = 0; i < o; i++) {
                if (!valid_topic_char(spec->topic[i])) {
                        snprintf(err, errlen, "the topic \"%.*s\" is not a valid Kafka topic name "
                                 "(only letters, digits, '.', '_' and '-' are allowed)",
                                 (int)(o > 300 ? 300 : o), spec->topic);
                        return -EDOM;
                }
        }
        if (o == 0 || (o == 1 && spec->topic[0] == '.') ||
            (o == 2 && spec->topic[0] == '.' && spec->topic[1] == '.')) {
                snprintf(err, errlen, "the topic \"%s\" is not a valid Kafka topic name", spec->topic);
                return -EDOM;
        }
        return 0;
}

int record_extract(struct record_spec *spec, const struct w2j_record *rec, struct outbox_row *ret_row,
                   char *err, size_t errlen)
{
        const struct w2j_value **f = spec->found;
        char terr[512];
        size_t tlen;
        int trc;

        memset(f, 0, spec->nnames * sizeof(*f));
        for (size_t c = 0; c < rec->ncolumns; c++)
                for (size_t i = 0; i < spec->nnames; i++)
                        if (!f[i] && strcmp(rec->columns[c].name, spec->names[i]) == 0) {
                                f[i] = &rec->columns[c].value;
                                spec->found_type[i] = rec->columns[c].type;
                        }
        /* What was found is reported on failure too, for the dead-letter topic. */
        *ret_row = (struct outbox_row){f[COL_ID], f[COL_KEY], f[COL_PAYLOAD], f[COL_TYPE], NULL, 0};
        for (size_t i = 0; i < spec->nnames; i++) {
                if (!f[i] && i != COL_TYPE) {
                        snprintf(err, errlen, "the row has no column \"%s\"", spec->names[i]);
                        return -ENOENT;
                }
        }
        /* The topic first, so that a row refused for another reason still names it. */
        trc = render_topic(spec, f, &tlen, terr, sizeof(terr));
        if (tlen != SIZE_MAX) {
                ret_row->topic = spec->topic;
                ret_row->topic_len = tlen;
        }
        if (f[COL_ID]->is_null || f[COL_ID]->len == 0) {
                snprintf(err, errlen, "the work ID column \"%s\" is %s", spec->names[COL_ID],
                         f[COL_ID]->is_null ? "NULL" : "empty");
                return -EINVAL;
        }
        if (f[COL_KEY]->is_null || f[COL_KEY]->len == 0) {
                snprintf(err, errlen, "the key column \"%s\" is %s", spec->names[COL_KEY],
                         f[COL_KEY]->is_null ? "NULL" : "empty");
                return -EINVAL;
        }
        if (f[COL_PAYLOAD]->is_null && !spec->allow_null_payload) {
                snprintf(err, errlen, "the payload column \"%s\" is NULL (publish NULL payloads as "
                         "tombstones with --null-payload=tombstone)", spec->names[COL_PAYLOAD]);
                return -EINVAL;
        }
        if (!f[COL_PAYLOAD]->is_null && !is_json_type(spec->found_type[COL_PAYLOAD])) {
                const char *end = NULL, *stop = f[COL_PAYLOAD]->ptr + f[COL_PAYLOAD]->len;
                cJSON *j = cJSON_ParseWithLengthOpts(f[COL_PAYLOAD]->ptr, f[COL_PAYLOAD]->len, &end,
                                                     false);

                while (j && end && end < stop && (*end == ' ' || *end == '\t' || *end == '\n' ||
                                                  *end == '\r'))
                        end++;
                if (!j || end != stop) {
                        cJSON_Delete(j);
                        snprintf(err, errlen, "the payload column \"%s\" of type %s does not hold "
                                 "valid JSON (records are sent as application/json); store JSON, or "
                                 "make the column json or jsonb so that PostgreSQL checks it",
                                 spec->names[COL_PAYLOAD], spec->found_type[COL_PAYLOAD]);
                        return -EILSEQ;
                }
                cJSON_Delete(j);
        }
        if (trc < 0)
                snprintf(err, errlen, "%s", terr);
        return trc;
}

int record_render_topic(struct record_spec *spec, const char *const *values, const char **ret_topic,
                        char *err, size_t errlen)
{
        size_t nt = spec->nnames - COL_FIXED, len;
        struct w2j_value *v = calloc(nt ? nt : 1, sizeof(*v));
        int r;

        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < nt; i++) {
                v[i] = (struct w2j_value){values[i], values[i] ? strlen(values[i]) : 0, !values[i],
                                          false};
                spec->found[COL_FIXED + i] = &v[i];
        }
        r = render_topic(spec, spec->found, &len, err, errlen);
        if (len != SIZE_MAX)
                *ret_topic = spec->topic;
        for (size_t i = 0; i < nt; i++)
                spec->found[COL_FIXED + i] = NULL;
        free(v);
        return r;
}
