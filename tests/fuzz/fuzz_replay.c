// SPDX-License-Identifier: Apache-2.0
/*
 * A main() for a fuzz target without libFuzzer: it feeds the target saved
 * inputs, so that the seeds and every crash ever found run as unit tests in
 * any build (meson, gcc, sanitizers or not), and it converts between the two
 * forms inputs are kept in. Knows nothing of what the target tests.
 *
 *   fuzz_replay_T PATH...              run target T on every input under PATH
 *   fuzz_replay_T --write-raw DIR PATH...  write those inputs to DIR as raw files
 *   fuzz_replay_T --print FILE...      print raw files as regression text
 *
 * Inputs: a directory (its files, recursively, in name order); a .jsonl file
 * (each line, without its '\n', is an input: the captured wal2json lines); a
 * .txt file in regression form; any other file, raw.
 *
 * Regression form, as run.sh prints a crash and as tests/fuzz/regressions/
 * and tests/fuzz/corpus/ keep inputs, readable and diffable even when binary:
 *
 *   # target: wal2json
 *   # free text: what broke, where, why
 *   "00000000"
 *   "\377more bytes\n"
 *
 * '#' lines are comments, and one of them names the target; a .txt of another
 * target is skipped, one of an unknown target is an error. The rest are C
 * string literals, concatenated; escapes as in C (\n \t \r \\ \" \' \? \a \b
 * \f \v, one to three octal digits, \x and hex digits).
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#ifndef FUZZ_TARGET
#error "FUZZ_TARGET must name the target, e.g. -DFUZZ_TARGET=\"wal2json\""
#endif

static const char *const known_targets[] = {"wal2json", "replmsg", "record", "ledger", "headers",
                                              "envelope", "pgoutput"};

static const char *raw_dir;  /* --write-raw: where inputs go instead of the target */
static unsigned long ninputs, nskipped;

struct bytes {
        unsigned char *p;
        size_t len, cap;
};

static void die(const char *path, const char *what)
{
        fprintf(stderr, "fuzz_replay: %s: %s\n", path, what);
        exit(2);
}

static void push(struct bytes *b, unsigned char c)
{
        if (b->len == b->cap) {
                b->cap = b->cap ? b->cap * 2 : 256;
                b->p = realloc(b->p, b->cap);
                if (!b->p)
                        die("(memory)", "out of memory");
        }
        b->p[b->len++] = c;
}

static struct bytes read_file(const char *path)
{
        struct bytes b = {0};
        FILE *f = fopen(path, "rb");
        int c;

        if (!f)
                die(path, strerror(errno));
        while ((c = getc(f)) != EOF)
                push(&b, (unsigned char)c);
        if (ferror(f))
                die(path, "read error");
        fclose(f);
        return b;
}

static void run_one(const char *path, unsigned long line, const unsigned char *p, size_t len)
{
        if (raw_dir) {
                char name[4096];
                const char *base = strrchr(path, '/');
                FILE *f;

                snprintf(name, sizeof(name), "%s/%s-%lu", raw_dir, base ? base + 1 : path, line);
                f = fopen(name, "wb");
                if (!f || fwrite(p, 1, len, f) != len || fclose(f) != 0)
                        die(name, "cannot write");
        } else {
                /* An exact-size heap copy, as libFuzzer passes, so overreads are seen. */
                uint8_t *copy = malloc(len);

                if (!copy && len)
                        die(path, "out of memory");
                memcpy(copy, p, len);
                if (line)
                        printf("%s:%lu (%zu bytes)\n", path, line, len);
                else
                        printf("%s (%zu bytes)\n", path, len);
                fflush(stdout);
                LLVMFuzzerTestOneInput(copy, len);
                free(copy);
        }
        ninputs++;
}

static int hexdigit(int c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

/* Parse regression form; returns false if the file is for another target. */
static bool parse_text(const char *path, const struct bytes *in, struct bytes *out)
{
        const unsigned char *p = in->p, *end = in->p + in->len;
        const char *target = NULL;
        size_t target_len = 0;

        while (p < end) {
                if (*p == '#') {
                        const unsigned char *eol = memchr(p, '\n', (size_t)(end - p));
                        static const char tag[] = "# target:";

                        if (!eol)
                                eol = end;
                        if ((size_t)(eol - p) > strlen(tag) && memcmp(p, tag, strlen(tag)) == 0) {
                                const unsigned char *s = p + sizeof(tag) - 1, *e = eol;

                                while (s < e && *s == ' ')
                                        s++;
                                while (e > s && (e[-1] == ' ' || e[-1] == '\r'))
                                        e--;
                                target = (const char *)s;
                                target_len = (size_t)(e - s);
                        }
                        p = eol;
                        continue;
                }
                if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
                        p++;
                        continue;
                }
                if (*p != '"')
                        die(path, "expected '#' comment or \"string literal\"");
                for (p++; p < end && *p != '"'; p++) {
                        int v, d, n;

                        if (*p == '\n')
                                die(path, "newline inside a string literal");
                        if (*p != '\\') {
                                push(out, *p);
                                continue;
                        }
                        if (++p >= end)
                                die(path, "unterminated escape");
                        switch (*p) {
                        case 'n': push(out, '\n'); break;
                        case 't': push(out, '\t'); break;
                        case 'r': push(out, '\r'); break;
                        case 'a': push(out, '\a'); break;
                        case 'b': push(out, '\b'); break;
                        case 'f': push(out, '\f'); break;
                        case 'v': push(out, '\v'); break;
                        case '\\': case '"': case '\'': case '?': push(out, *p); break;
                        case 'x':
                                v = n = 0;
                                for (; p + 1 < end && (d = hexdigit(p[1])) >= 0; p++, n++)
                                        v = v * 16 + d;
                                if (n == 0 || v > 0xff)
                                        die(path, "bad \\x escape");
                                push(out, (unsigned char)v);
                                break;
                        default:
                                if (*p < '0' || *p > '7')
                                        die(path, "unknown escape");
                                v = n = 0;
                                for (; n < 3 && p < end && *p >= '0' && *p <= '7'; p++, n++)
                                        v = v * 8 + (*p - '0');
                                p--;
                                if (v > 0xff)
                                        die(path, "octal escape above \\377");
                                push(out, (unsigned char)v);
                                break;
                        }
                }
                if (p >= end)
                        die(path, "unterminated string literal");
                p++;
        }
        if (!target)
                die(path, "no \"# target: NAME\" line");
        for (size_t i = 0; i < sizeof(known_targets) / sizeof(known_targets[0]); i++) {
                if (strlen(known_targets[i]) == target_len &&
                    memcmp(known_targets[i], target, target_len) == 0)
                        return target_len == strlen(FUZZ_TARGET) &&
                               memcmp(target, FUZZ_TARGET, target_len) == 0;
        }
        die(path, "\"# target:\" names no known fuzz target");
        return false;
}

static bool ends_with(const char *s, const char *suffix)
{
        size_t n = strlen(s), m = strlen(suffix);

        return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void replay_path(const char *path);

static void replay_dir(const char *path)
{
        struct dirent **ents;
        int n = scandir(path, &ents, NULL, alphasort);

        if (n < 0)
                die(path, strerror(errno));
        for (int i = 0; i < n; i++) {
                if (ents[i]->d_name[0] != '.') {
                        char sub[4096];

                        snprintf(sub, sizeof(sub), "%s/%s", path, ents[i]->d_name);
                        replay_path(sub);
                }
                free(ents[i]);
        }
        free(ents);
}

static void replay_path(const char *path)
{
        struct stat st;
        struct bytes in;

        if (stat(path, &st) < 0)
                die(path, strerror(errno));
        if (S_ISDIR(st.st_mode)) {
                replay_dir(path);
                return;
        }
        if (ends_with(path, ".md"))
                return;  /* notes kept beside the inputs */
        in = read_file(path);
        if (ends_with(path, ".txt")) {
                struct bytes out = {0};

                if (parse_text(path, &in, &out))
                        run_one(path, 0, out.p, out.len);
                else
                        nskipped++;
                free(out.p);
        } else if (ends_with(path, ".jsonl")) {
                const unsigned char *p = in.p, *end = in.p + in.len;
                unsigned long line = 1;

                while (p < end) {
                        const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
                        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

                        run_one(path, line++, p, n);
                        if (!nl)
                                break;
                        p = nl + 1;
                }
        } else {
                run_one(path, 0, in.p, in.len);
        }
        free(in.p);
}

/* Print @b as C string literals, one line of output per input line or 64 bytes. */
static void print_literal(const struct bytes *b)
{
        size_t col = 0;
        bool open = false;

        for (size_t i = 0; i < b->len; i++) {
                unsigned char c = b->p[i];

                if (!open) {
                        putchar('"');
                        open = true;
                        col = 0;
                }
                if (c == '"' || c == '\\') {
                        printf("\\%c", c);
                } else if (c == '\n') {
                        printf("\\n");
                } else if (c == '\t') {
                        printf("\\t");
                } else if (c == '?' && i > 0 && b->p[i - 1] == '?') {
                        printf("\\?");  /* no trigraphs under -std=c11 */
                } else if (c >= 0x20 && c < 0x7f) {
                        putchar(c);
                } else {
                        printf("\\%03o", c);  /* three digits: never swallows a following digit */
                }
                if (++col >= 64 || c == '\n') {
                        printf("\"\n");
                        open = false;
                }
        }
        if (open)
                printf("\"\n");
        else if (b->len == 0)
                printf("\"\"\n");
}

int main(int argc, char **argv)
{
        int i = 1;

        if (argc > 1 && strcmp(argv[1], "--print") == 0) {
                for (i = 2; i < argc; i++) {
                        struct bytes b = read_file(argv[i]);

                        printf("# target: %s\n# %s (%zu bytes)\n", FUZZ_TARGET, argv[i], b.len);
                        print_literal(&b);
                        free(b.p);
                }
                return 0;
        }
        if (argc > 2 && strcmp(argv[1], "--write-raw") == 0) {
                raw_dir = argv[2];
                i = 3;
        }
        if (i >= argc) {
                fprintf(stderr, "usage: %s [--write-raw DIR] PATH... | --print FILE...\n", argv[0]);
                return 2;
        }
        for (; i < argc; i++)
                replay_path(argv[i]);
        printf("%s: %lu inputs %s, %lu regression files of other targets skipped\n", FUZZ_TARGET,
               ninputs, raw_dir ? "written" : "passed", nskipped);
        /* Nothing replayed means a wrong path: a test that cannot fail. */
        return ninputs > 0 ? 0 : 1;
}
