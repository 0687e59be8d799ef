// SPDX-License-Identifier: Apache-2.0
/*
 * Fuzz target for the headers column (record_extract() in src/record.c).
 * Input: the text PostgreSQL would print for the column. It is wrapped in a
 * wal2json format-version 2 insert line as the "value" string, as wal2json
 * prints json and jsonb, decoded, and extracted; the result is compared with
 * a model written from record.h: a JSON object (and nothing after it but
 * white space) of at most RECORD_HEADERS_MAX string values, names of 1 to
 * RECORD_HEADER_NAME_MAX bytes, none reserved ("ce_", "outbox_relay_",
 * "content-type", any case), no "\u0000" escape; then the pairs in text order,
 * byte-exact; otherwise -EBADMSG.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "record.h"
#include "wal2json.h"

#define ERRLEN 512

/* A "\u0000" escape: a backslash, not itself escaped, then u0000. */
static bool model_nul_escape(const char *p, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                if (p[i] != '\\')
                        continue;
                if (i + 5 < n && p[i + 1] == 'u' && memcmp(p + i + 2, "0000", 4) == 0)
                        return true;
                i++;
        }
        return false;
}

static bool model_reserved(const char *name)
{
        return strncasecmp(name, "ce_", 3) == 0 || strncasecmp(name, "outbox_relay_", 13) == 0 ||
               strcasecmp(name, "content-type") == 0;
}

/* The parsed object if @text is a valid headers value, else NULL. */
static cJSON *model_headers(const char *text, size_t n)
{
        const char *end = NULL;
        cJSON *j, *it;
        int count = 0;

        if (model_nul_escape(text, n))
                return NULL;
        j = cJSON_ParseWithLengthOpts(text, n, &end, false);
        if (!j)
                return NULL;
        while (end < text + n && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
                end++;
        if (end != text + n || !cJSON_IsObject(j))
                goto bad;
        cJSON_ArrayForEach(it, j) {
                size_t len = strlen(it->string);

                if (++count > RECORD_HEADERS_MAX || len == 0 || len > RECORD_HEADER_NAME_MAX ||
                    model_reserved(it->string) || !cJSON_IsString(it))
                        goto bad;
        }
        return j;
bad:
        cJSON_Delete(j);
        return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static const char head[] =
                "{\"action\":\"I\",\"xid\":1,\"lsn\":\"0/10\",\"schema\":\"public\",\"table\":\"outbox\","
                "\"columns\":[{\"name\":\"work_id\",\"type\":\"text\",\"value\":\"w\"},"
                "{\"name\":\"kind\",\"type\":\"text\",\"value\":\"k\"},"
                "{\"name\":\"payload\",\"type\":\"jsonb\",\"value\":\"{}\"},"
                "{\"name\":\"headers\",\"type\":\"jsonb\",\"value\":";
        struct record_spec *spec = NULL;
        struct w2j_decoder *d;
        struct w2j_record rec;
        struct outbox_row row;
        char *text, *quoted, *line, err[ERRLEN];
        cJSON *s, *want;
        size_t n;
        int r;

        /* A value PostgreSQL prints holds no NUL byte. */
        if (memchr(data, '\0', size))
                return 0;
        /*
         * cJSON blocks made before the decoder exists and freed after it: the
         * allocation hooks of src/wal2json.c must already be in place (under
         * AddressSanitizer a block without their tag is a heap overflow).
         */
        text = strndup((const char *)data, size);
        FUZZ_CHECK(text != NULL);
        s = cJSON_CreateString(text);
        FUZZ_CHECK(s != NULL);
        quoted = cJSON_PrintUnformatted(s);
        FUZZ_CHECK(quoted != NULL);
        n = strlen(head) + strlen(quoted) + 4;
        line = malloc(n);
        FUZZ_CHECK(line != NULL);
        snprintf(line, n, "%s%s}]}", head, quoted);

        FUZZ_CHECK(record_spec_new("work_id", "work_id", "payload", "kind", "outbox.${kind}", &spec,
                                   err, sizeof(err)) == 0);
        FUZZ_CHECK(record_spec_set_headers_column(spec, "headers") == 0);
        d = w2j_decoder_new();
        FUZZ_CHECK(d != NULL);
        /* Text that is not UTF-8 may be refused by the decoder: nothing to extract then. */
        if (w2j_decode(d, line, strlen(line), &rec) == 0) {
                want = model_headers(text, size);
                memset(err, 0, sizeof(err));
                r = record_extract(spec, &rec, &row, err, sizeof(err));
                if (!want) {
                        FUZZ_CHECK(r == -EBADMSG);
                        FUZZ_CHECK(err[0] != '\0');
                } else {
                        const cJSON *it;
                        size_t i = 0;

                        FUZZ_CHECK(r == 0);
                        cJSON_ArrayForEach(it, want) {
                                FUZZ_CHECK(i < row.nheaders);
                                FUZZ_CHECK(strcmp(row.headers[i].name, it->string) == 0);
                                FUZZ_CHECK(row.headers[i].len == strlen(it->valuestring));
                                FUZZ_CHECK(memcmp(row.headers[i].value, it->valuestring,
                                                  row.headers[i].len) == 0);
                                i++;
                        }
                        FUZZ_CHECK(i == row.nheaders);
                }
                cJSON_Delete(want);
        }
        record_spec_free(spec);
        free(line);
        cJSON_free(quoted);
        cJSON_Delete(s);
        free(text);
        w2j_decoder_free(d);
        return 0;
}
