// SPDX-License-Identifier: Apache-2.0
/*
 * decode_bench: the CPU the relay's two decoders take per record, on the
 * same transactions recorded from PostgreSQL 15 twice (tests/data/, made by
 * tests/unit/capture_pgoutput.py): wal2json format-version 2 lines through
 * w2j_decode(), and pgoutput protocol version 1 frames through pgo_decode(),
 * pgo_next() and relay_pgo_record() (the record wal2json would have given).
 * Prints nanoseconds of CPU (CLOCK_PROCESS_CPUTIME_ID) per record of each,
 * and their ratio, measured in the same run; no server, no broker.
 *
 *   build/tests/bench/decode_bench [SECONDS] [DATA_DIR]
 *
 * SECONDS (default 1) is the CPU time each decoder runs for, at least;
 * DATA_DIR defaults to the tests/data of the source tree it was built from.
 * Exit status 0, or 1 if a recording is missing or does not decode.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pgoutput.h"
#include "recorded.h"
#include "relay_pgoutput.h"
#include "wal2json.h"

#define W2J_FILE "pgoutput-v1-wal2json.jsonl"
#define PGO_FILE "pgoutput-v1.stream"
#define MAX_FRAMES 4096

static const char *data_dir = DECODE_BENCH_DATA_DIR;

static char *slurp(const char *name, size_t *ret_len)
{
        char path[1024];
        char *buf;

        snprintf(path, sizeof(path), "%s/%s", data_dir, name);
        buf = recorded_slurp(path, ret_len);
        if (!buf)
                fprintf(stderr, "decode_bench: cannot read %s\n", path);
        return buf;
}

static double cpu_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One pass over the wal2json lines. Returns the records decoded, or -1. */
static long w2j_pass(struct w2j_decoder *d, const char *text, size_t len)
{
        long n = 0;

        for (const char *line = text; line < text + len;) {
                const char *nl = memchr(line, '\n', (size_t)(text + len - line));
                struct w2j_record r;

                if (!nl)
                        nl = text + len;
                if (nl > line) {
                        if (w2j_decode(d, line, (size_t)(nl - line), &r) < 0)
                                return -1;
                        n++;
                }
                line = nl + 1;
        }
        return n;
}

/* One pass over the pgoutput frames, from a fresh session. Returns the records made, or -1. */
static long pgo_pass(struct pgo_decoder *d, struct relay_pgo *rp, const struct recorded_frame *frames,
                     size_t nframes)
{
        long n = 0;

        pgo_reset(d);
        for (size_t i = 0; i < nframes; i++) {
                struct pgo_event ev;
                struct w2j_record r;
                int rc = pgo_decode(d, frames[i].data, frames[i].len, frames[i].lsn);

                if (rc < 0)
                        return -1;
                while ((rc = pgo_next(d, &ev)) > 0) {
                        if (relay_pgo_record(&ev, rp, &r) < 0)
                                return -1;
                        n++;
                }
                if (rc < 0)
                        return -1;
        }
        return n;
}

int main(int argc, char **argv)
{
        static struct recorded_frame frames[MAX_FRAMES];
        double seconds = argc > 1 ? atof(argv[1]) : 1.0;
        size_t wlen = 0, plen = 0, nframes, used;
        char *wtext, *ptext;
        struct w2j_decoder *wd;
        struct pgo_decoder *pd;
        struct relay_pgo rp = {0};
        long wrec = 0, prec = 0, passes, wpasses, ppasses;
        double t0, w_ns, p_ns;

        if (argc > 2)
                data_dir = argv[2];
        if (seconds <= 0)
                seconds = 1.0;
        wtext = slurp(W2J_FILE, &wlen);
        ptext = slurp(PGO_FILE, &plen);
        if (!wtext || !ptext)
                return 1;
        nframes = recorded_frames(ptext, plen, frames, MAX_FRAMES, &used);
        wd = w2j_decoder_new();
        pd = pgo_decoder_new(PGO_TXN_MEMORY_DEFAULT);
        if (!wd || !pd || used != plen) {
                fprintf(stderr, "decode_bench: out of memory, or %s is not whole\n", PGO_FILE);
                return 1;
        }

        t0 = cpu_s();
        for (passes = 0; passes < 10 || cpu_s() - t0 < seconds; passes++) {
                long n = w2j_pass(wd, wtext, wlen);

                if (n < 0) {
                        fprintf(stderr, "decode_bench: %s does not decode\n", W2J_FILE);
                        return 1;
                }
                wrec += n;
        }
        w_ns = (cpu_s() - t0) * 1e9 / (double)wrec;
        wpasses = passes;

        t0 = cpu_s();
        for (passes = 0; passes < 10 || cpu_s() - t0 < seconds; passes++) {
                long n = pgo_pass(pd, &rp, frames, nframes);

                if (n < 0) {
                        fprintf(stderr, "decode_bench: %s does not decode: %s\n", PGO_FILE, pgo_error(pd));
                        return 1;
                }
                prec += n;
        }
        p_ns = (cpu_s() - t0) * 1e9 / (double)prec;
        ppasses = passes;

        printf("decoders, CPU per record on the same recorded transactions (%s, %s):\n", W2J_FILE, PGO_FILE);
        printf("  %-52s %8.0f ns/record  (%ld records a pass)\n", "wal2json: w2j_decode()", w_ns,
               wrec / wpasses);
        printf("  %-52s %8.0f ns/record  (%ld records a pass)\n",
               "pgoutput: pgo_decode(), pgo_next(), relay_pgo_record()", p_ns, prec / ppasses);
        printf("  %-52s %8.2f\n", "pgoutput / wal2json", p_ns / w_ns);
        free(wtext);
        free(ptext);
        relay_pgo_free(&rp);
        w2j_decoder_free(wd);
        pgo_decoder_free(pd);
        return 0;
}
