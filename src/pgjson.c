// SPDX-License-Identifier: Apache-2.0
/*
 * A validator for the grammar of PostgreSQL's json input (jsonapi.c). See
 * pgjson.h. One pass, no recursion: a bit stack of open containers.
 */
#include "pgjson.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

struct scan {
        const unsigned char *p, *end, *start;
        const char *reason;
};

static bool fail(struct scan *s, const char *reason)
{
        s->reason = reason;
        return false;
}

static void skip_ws(struct scan *s)
{
        while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
                s->p++;
}

static bool is_hex(unsigned char c)
{
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* JSON_ALPHANUMERIC_CHAR of jsonapi.c: what continues a token for its error reporting. */
static bool is_token_char(unsigned char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
               c >= 0x80;
}

static bool string(struct scan *s)
{
        s->p++;  /* the opening quote */
        while (s->p < s->end) {
                unsigned char c = *s->p;

                if (c == '"') {
                        s->p++;
                        return true;
                }
                if (c < 0x20)
                        return fail(s, "a control character in a string must be escaped");
                if (c != '\\') {
                        s->p++;
                        continue;
                }
                if (++s->p >= s->end)
                        break;
                switch (*s->p) {
                case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                        s->p++;
                        continue;
                case 'u':
                        if (s->end - s->p < 5 || !is_hex(s->p[1]) || !is_hex(s->p[2]) || !is_hex(s->p[3]) ||
                            !is_hex(s->p[4]))
                                return fail(s, "\\u must be followed by four hexadecimal digits");
                        s->p += 5;
                        continue;
                default:
                        return fail(s, "an invalid escape in a string");
                }
        }
        return fail(s, "a string without its closing quote");
}

static bool digits(struct scan *s)
{
        const unsigned char *from = s->p;

        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
                s->p++;
        return s->p > from;
}

static bool number(struct scan *s)
{
        if (*s->p == '-')
                s->p++;
        if (s->p < s->end && *s->p == '0')
                s->p++;
        else if (!(s->p < s->end && *s->p >= '1' && *s->p <= '9' && digits(s)))
                return fail(s, "a malformed number");
        if (s->p < s->end && *s->p == '.') {
                s->p++;
                if (!digits(s))
                        return fail(s, "a malformed number");
        }
        if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
                s->p++;
                if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
                        s->p++;
                if (!digits(s))
                        return fail(s, "a malformed number");
        }
        if (s->p < s->end && is_token_char(*s->p))
                return fail(s, "a malformed number");
        return true;
}

static bool literal(struct scan *s, const char *word, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (s->p + i >= s->end || s->p[i] != (unsigned char)word[i])
                        return fail(s, "an unknown word (JSON knows true, false and null)");
        s->p += n;
        if (s->p < s->end && is_token_char(*s->p))
                return fail(s, "an unknown word (JSON knows true, false and null)");
        return true;
}

/* A scalar, or the opening of a container (which the caller pushes). */
static bool scalar(struct scan *s)
{
        switch (*s->p) {
        case '"':
                return string(s);
        case 't':
                return literal(s, "true", 4);
        case 'f':
                return literal(s, "false", 5);
        case 'n':
                return literal(s, "null", 4);
        default:
                if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))
                        return number(s);
                return fail(s, "a value expected");
        }
}

int pgjson_validate(const char *text, size_t len, size_t *ret_offset, const char **ret_reason)
{
        /* Bit i: the container at depth i is an object (1) or an array (0). */
        uint8_t stack[PGJSON_MAX_DEPTH / 8 + 1];
        struct scan s = {(const unsigned char *)text, (const unsigned char *)text + len,
                         (const unsigned char *)text, NULL};
        size_t depth = 0;
        bool ok = true;

        skip_ws(&s);
        for (;;) {
                /* A value is expected here. */
                if (s.p >= s.end) {
                        ok = fail(&s, "the text ends where a value is expected");
                        break;
                }
                if (*s.p == '[' || *s.p == '{') {
                        bool obj = *s.p == '{';

                        if (depth >= PGJSON_MAX_DEPTH) {
                                ok = fail(&s, "nested deeper than the relay accepts");
                                break;
                        }
                        if (obj)
                                stack[depth / 8] |= (uint8_t)(1u << (depth % 8));
                        else
                                stack[depth / 8] &= (uint8_t)~(1u << (depth % 8));
                        depth++;
                        s.p++;
                        skip_ws(&s);
                        if (s.p < s.end && *s.p == (obj ? '}' : ']')) {
                                s.p++;
                                depth--;
                                goto after_value;
                        }
                        if (obj)
                                goto member;
                        continue;
                }
                if (!scalar(&s)) {
                        ok = false;
                        break;
                }
after_value:
                skip_ws(&s);
                if (depth == 0)
                        break;
                {
                        bool obj = stack[(depth - 1) / 8] & (1u << ((depth - 1) % 8));

                        if (s.p < s.end && *s.p == ',') {
                                s.p++;
                                skip_ws(&s);
                                if (obj)
                                        goto member;
                                continue;
                        }
                        if (s.p < s.end && *s.p == (obj ? '}' : ']')) {
                                s.p++;
                                depth--;
                                goto after_value;
                        }
                        ok = fail(&s, obj ? "',' or '}' expected" : "',' or ']' expected");
                        break;
                }
member:
                /* An object's member: "name" : value */
                if (s.p >= s.end || *s.p != '"') {
                        ok = fail(&s, "a member name in quotes expected");
                        break;
                }
                if (!string(&s)) {
                        ok = false;
                        break;
                }
                skip_ws(&s);
                if (s.p >= s.end || *s.p != ':') {
                        ok = fail(&s, "':' expected after a member name");
                        break;
                }
                s.p++;
                skip_ws(&s);
        }
        if (ok && s.p < s.end)
                ok = fail(&s, "text after the JSON value");
        if (ok)
                return 0;
        if (ret_offset)
                *ret_offset = (size_t)(s.p - s.start);
        if (ret_reason)
                *ret_reason = s.reason;
        return -EILSEQ;
}

bool pgjson_has_nul_escape(const char *text, size_t len)
{
        for (size_t i = 0; i + 1 < len; i++) {
                if (text[i] != '\\')
                        continue;
                if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0)
                        return true;
                i++;  /* past the escaped character */
        }
        return false;
}
