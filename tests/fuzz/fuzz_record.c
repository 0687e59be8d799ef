// SPDX-License-Identifier: Apache-2.0
/*
 * Fuzz target for the outbox row extraction (src/record.c), behind the
 * wal2json decoder. Input: an optional first line that does not start with
 * '{', the --topic template (else "outbox.${kind}"), then wal2json lines.
 * The template is compiled for two column sets, every line that decodes is
 * extracted with both, NULL payloads refused and then allowed, and each
 * result is compared with a model written from record.h: which error, or
 * which columns and topic.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "record.h"
#include "wal2json.h"

#define ERRLEN 128

struct model_seg {
        const char *text;  /* literal, or column name */
        size_t len;
        bool column;
};

struct model {
        const char *names[4];       /* id, key, payload, type */
        const char **tnames;        /* template columns, first appearance, no repeats */
        size_t ntnames;
        struct model_seg *segs;
        size_t nsegs;
};

static bool tname_known(const struct model *m, const char *s, size_t len)
{
        for (size_t i = 0; i < m->ntnames; i++)
                if (strlen(m->tnames[i]) == len && memcmp(m->tnames[i], s, len) == 0)
                        return true;
        return false;
}

/* The template rule of record.h: each "${" opens a non-empty name closed by the next '}'. */
static int model_template(struct model *m, const char *t)
{
        size_t i = 0, lit = 0, n = strlen(t);

        m->tnames = calloc(n + 1, sizeof(*m->tnames));
        m->segs = calloc(n + 1, sizeof(*m->segs));
        FUZZ_CHECK(m->tnames && m->segs);
        while (t[i]) {
                const char *name = t + i + 2, *close;
                size_t len;

                if (t[i] != '$' || t[i + 1] != '{') {
                        i++;
                        continue;
                }
                close = strchr(name, '}');
                if (!close || close == name)
                        return -EINVAL;
                len = (size_t)(close - name);
                if (i > lit)
                        m->segs[m->nsegs++] = (struct model_seg){t + lit, i - lit, false};
                m->segs[m->nsegs++] = (struct model_seg){name, len, true};
                if (!tname_known(m, name, len))
                        m->tnames[m->ntnames++] = strndup(name, len);
                i = lit = (size_t)(close - t) + 1;
        }
        if (i > lit)
                m->segs[m->nsegs++] = (struct model_seg){t + lit, i - lit, false};
        return 0;
}

static void model_free(struct model *m)
{
        for (size_t i = 0; i < m->ntnames; i++)
                free((char *)m->tnames[i]);
        free(m->tnames);
        free(m->segs);
}

static const struct w2j_column *lookup_column(const struct w2j_record *rec, const char *name,
                                              size_t len)
{
        for (size_t i = 0; i < rec->ncolumns; i++) {
                const char *n = rec->columns[i].name;

                if (strlen(n) == len && memcmp(n, name, len) == 0)
                        return &rec->columns[i];
        }
        return NULL;
}

static const struct w2j_value *lookup(const struct w2j_record *rec, const char *name, size_t len)
{
        const struct w2j_column *c = lookup_column(rec, name, len);

        return c ? &c->value : NULL;
}

/*
 * A second reading of PostgreSQL's json grammar (jsonapi.c), recursive where
 * src/pgjson.c is iterative, so the two check each other: RFC 8259 values,
 * whitespace of space, tab, CR, LF; any four hex digits after \u (json keeps
 * lone surrogates and \u0000); bytes below 0x20 escaped in strings; a number
 * or word ends at a byte that is not alphanumeric; at most 6400 levels.
 */
struct jm {
        const unsigned char *p, *end;
};

static bool jm_value(struct jm *m, int depth);

static void jm_ws(struct jm *m)
{
        while (m->p < m->end && (*m->p == ' ' || *m->p == '\t' || *m->p == '\n' || *m->p == '\r'))
                m->p++;
}

static bool jm_alnum(unsigned char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
               c >= 0x80;
}

static bool jm_string(struct jm *m)
{
        if (m->p >= m->end || *m->p != '"')
                return false;
        for (m->p++; m->p < m->end; m->p++) {
                if (*m->p == '"') {
                        m->p++;
                        return true;
                }
                if (*m->p < 0x20)
                        return false;
                if (*m->p == '\\') {
                        if (++m->p >= m->end)
                                return false;
                        if (*m->p == 'u') {
                                for (int i = 0; i < 4; i++)
                                        if (++m->p >= m->end || !isxdigit(*m->p))
                                                return false;
                        } else if (!strchr("\"\\/bfnrt", *m->p) || !*m->p) {
                                return false;
                        }
                }
        }
        return false;
}

static size_t jm_digits(struct jm *m)
{
        size_t n = 0;

        while (m->p < m->end && isdigit(*m->p)) {
                m->p++;
                n++;
        }
        return n;
}

static bool jm_number(struct jm *m)
{
        if (*m->p == '-')
                m->p++;
        if (m->p < m->end && *m->p == '0')
                m->p++;
        else if (!(m->p < m->end && *m->p != '0' && jm_digits(m)))
                return false;
        if (m->p < m->end && *m->p == '.') {
                m->p++;
                if (!jm_digits(m))
                        return false;
        }
        if (m->p < m->end && (*m->p == 'e' || *m->p == 'E')) {
                m->p++;
                if (m->p < m->end && (*m->p == '+' || *m->p == '-'))
                        m->p++;
                if (!jm_digits(m))
                        return false;
        }
        return !(m->p < m->end && jm_alnum(*m->p));
}

/* Leaves m->p where it was unless @w is there as a whole word: the caller tries the next word. */
static bool jm_word(struct jm *m, const char *w)
{
        size_t n = strlen(w);

        if ((size_t)(m->end - m->p) < n || memcmp(m->p, w, n) != 0)
                return false;
        if ((size_t)(m->end - m->p) > n && jm_alnum(m->p[n]))
                return false;
        m->p += n;
        return true;
}

static bool jm_value(struct jm *m, int depth)
{
        jm_ws(m);
        if (m->p >= m->end)
                return false;
        if (*m->p == '[' || *m->p == '{') {
                bool obj = *m->p == '{';

                if (depth >= 6400)
                        return false;
                m->p++;
                jm_ws(m);
                if (m->p < m->end && *m->p == (obj ? '}' : ']')) {
                        m->p++;
                        return true;
                }
                for (;;) {
                        if (obj) {
                                jm_ws(m);
                                if (!jm_string(m))
                                        return false;
                                jm_ws(m);
                                if (m->p >= m->end || *m->p != ':')
                                        return false;
                                m->p++;
                        }
                        if (!jm_value(m, depth + 1))
                                return false;
                        jm_ws(m);
                        if (m->p < m->end && *m->p == ',') {
                                m->p++;
                                continue;
                        }
                        if (m->p < m->end && *m->p == (obj ? '}' : ']')) {
                                m->p++;
                                return true;
                        }
                        return false;
                }
        }
        if (*m->p == '"')
                return jm_string(m);
        if (*m->p == '-' || isdigit(*m->p))
                return jm_number(m);
        return jm_word(m, "true") || jm_word(m, "false") || jm_word(m, "null");
}

/* record.h: a payload not of type json or jsonb must be what PostgreSQL's json type accepts. */
static bool payload_ok(const struct w2j_column *c)
{
        struct jm m;

        if (c->value.is_null || c->typeoid == 114 || c->typeoid == 3802 ||
            (c->type && (strcmp(c->type, "json") == 0 || strcmp(c->type, "jsonb") == 0)))
                return true;
        /* Only now: a NULL value has no text, and NULL + 0 is undefined. */
        m = (struct jm){(const unsigned char *)c->value.ptr,
                        (const unsigned char *)c->value.ptr + c->value.len};
        if (!jm_value(&m, 0))
                return false;
        jm_ws(&m);
        return m.p == m.end;
}

static bool topic_char(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
}

/*
 * What record_extract() must return, and the topic it must render into
 * @topic: *ret_len is its length whenever the template could be rendered
 * (also a name Kafka refuses, unless too long), else SIZE_MAX. The row's own
 * problems (ID, key, payload) are reported before the topic's.
 */
static int model_extract(const struct model *m, const struct w2j_record *rec, bool allow_null,
                         char *topic, size_t *ret_len)
{
        const struct w2j_value *id, *key, *payload;
        size_t o = 0;
        int trc = 0;

        *ret_len = SIZE_MAX;
        for (int i = 0; i < 4; i++)
                if (i != 3 && !lookup(rec, m->names[i], strlen(m->names[i])))
                        return -ENOENT;
        for (size_t i = 0; i < m->ntnames; i++)
                if (!lookup(rec, m->tnames[i], strlen(m->tnames[i])))
                        return -ENOENT;
        for (size_t s = 0; s < m->nsegs && trc == 0; s++) {
                const char *text = m->segs[s].text;
                size_t len = m->segs[s].len;

                if (m->segs[s].column) {
                        const struct w2j_value *v = lookup(rec, text, len);

                        if (v->is_null) {
                                trc = -EINVAL;
                                break;
                        }
                        text = v->ptr;
                        len = v->len;
                }
                if (o + len > RECORD_TOPIC_MAX) {
                        trc = -EDOM;
                        break;
                }
                memcpy(topic + o, text, len);
                o += len;
        }
        if (trc == 0) {
                *ret_len = o;
                for (size_t i = 0; i < o; i++)
                        if (!topic_char(topic[i]))
                                trc = -EDOM;
                if (o == 0 || (o == 1 && topic[0] == '.') ||
                    (o == 2 && topic[0] == '.' && topic[1] == '.'))
                        trc = -EDOM;
        }
        id = lookup(rec, m->names[0], strlen(m->names[0]));
        key = lookup(rec, m->names[1], strlen(m->names[1]));
        payload = lookup(rec, m->names[2], strlen(m->names[2]));
        if (id->is_null || id->len == 0 || key->is_null || key->len == 0 ||
            (payload->is_null && !allow_null))
                return -EINVAL;
        if (!payload_ok(lookup_column(rec, m->names[2], strlen(m->names[2]))))
                return -EILSEQ;
        return trc;
}

static void check_extract(struct record_spec *spec, const struct model *m,
                          const struct w2j_record *rec, bool allow_null)
{
        char want_topic[RECORD_TOPIC_MAX + 1];
        size_t want_len = SIZE_MAX;
        int want = model_extract(m, rec, allow_null, want_topic, &want_len);
        char *err = malloc(ERRLEN);
        struct outbox_row row;
        int r;

        FUZZ_CHECK(err != NULL);
        memset(err, 0, ERRLEN);
        record_spec_allow_null_payload(spec, allow_null);
        r = record_extract(spec, rec, &row, err, ERRLEN);
        FUZZ_CHECK(r == want);
        /* Found columns are reported on failure too (the dead-letter topic uses them). */
        FUZZ_CHECK(row.id == lookup(rec, m->names[0], strlen(m->names[0])));
        FUZZ_CHECK(row.key == lookup(rec, m->names[1], strlen(m->names[1])));
        FUZZ_CHECK(row.payload == lookup(rec, m->names[2], strlen(m->names[2])));
        FUZZ_CHECK(row.type == lookup(rec, m->names[3], strlen(m->names[3])));
        if (r < 0) {
                FUZZ_CHECK(err[0] != '\0' && memchr(err, '\0', ERRLEN) != NULL);
                if (want_len != SIZE_MAX) {
                        FUZZ_CHECK(row.topic != NULL && row.topic_len == want_len &&
                                   memcmp(row.topic, want_topic, want_len) == 0);
                } else {
                        FUZZ_CHECK(row.topic == NULL && row.topic_len == 0);
                }
                free(err);
                return;
        }
        FUZZ_CHECK(row.topic_len == want_len && strlen(row.topic) == want_len);
        FUZZ_CHECK(memcmp(row.topic, want_topic, want_len) == 0);
        free(err);
}

struct column_set {
        const char *id, *key, *payload, *type;
};

/* The relay's defaults (key = ID column), and a set with every column distinct. */
static const struct column_set column_sets[] = {
        {"work_id", "work_id", "payload", "kind"},
        {"work_id", "order_id", "payload", "ce_type"},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *p = (const char *)data, *end = p + size;
        struct record_spec *specs[2] = {NULL, NULL};
        struct model models[2];
        struct w2j_decoder *d;
        char *template;

        /* The template line is a C string for record_spec_new(): it ends at a NUL too. */
        if (size > 0 && p[0] != '{') {
                const char *nl = memchr(p, '\n', size);
                size_t n = nl ? (size_t)(nl - p) : size;

                template = strndup(p, n);
                p += nl ? n + 1 : n;
        } else {
                template = strdup("outbox.${kind}");
        }
        FUZZ_CHECK(template != NULL);
        for (int i = 0; i < 2; i++) {
                const struct column_set *c = &column_sets[i];
                char *err = malloc(ERRLEN);
                int want, r;

                FUZZ_CHECK(err != NULL);
                memset(err, 0, ERRLEN);
                memset(&models[i], 0, sizeof(models[i]));
                models[i].names[0] = c->id;
                models[i].names[1] = c->key;
                models[i].names[2] = c->payload;
                models[i].names[3] = c->type;
                want = model_template(&models[i], template);
                r = record_spec_new(c->id, c->key, c->payload, c->type, template, &specs[i], err,
                                    ERRLEN);
                FUZZ_CHECK(r == want);
                if (r < 0) {
                        FUZZ_CHECK(err[0] != '\0' && memchr(err, '\0', ERRLEN) != NULL);
                        specs[i] = NULL;
                } else {
                        const char *const *names;
                        size_t n;

                        record_spec_template_columns(specs[i], &names, &n);
                        FUZZ_CHECK(n == models[i].ntnames);
                        for (size_t k = 0; k < n; k++)
                                FUZZ_CHECK(strcmp(names[k], models[i].tnames[k]) == 0);
                }
                free(err);
        }
        d = w2j_decoder_new();
        FUZZ_CHECK(d != NULL);
        while (p < end && (specs[0] || specs[1])) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
                struct w2j_record rec;

                if (w2j_decode(d, p, n, &rec) == 0) {
                        for (int i = 0; i < 2; i++) {
                                if (specs[i]) {
                                        check_extract(specs[i], &models[i], &rec, false);
                                        check_extract(specs[i], &models[i], &rec, true);
                                }
                        }
                }
                if (!nl)
                        break;
                p = nl + 1;
        }
        w2j_decoder_free(d);
        for (int i = 0; i < 2; i++) {
                record_spec_free(specs[i]);
                model_free(&models[i]);
        }
        free(template);
        return 0;
}
