/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the fuzz targets share: the libFuzzer entry point, which run.sh links
 * with libFuzzer's main and meson links with fuzz_replay.c's, and the check
 * that turns a violated property into a crash. A target knows nothing of the
 * driver that calls it, and must not keep state from one input to the next,
 * so that every crash reproduces from its input alone.
 */
#ifndef RELAY_FUZZ_H
#define RELAY_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * LLVMFuzzerTestOneInput() - run one input of @size bytes. @data is a heap
 * copy of exactly @size bytes, not NUL-terminated, so that AddressSanitizer
 * reports a read one byte past it. Returns 0; a violated property aborts.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * FUZZ_CHECK() - abort with the file, line and condition if @cond is false.
 * abort() is what libFuzzer, AddressSanitizer and meson all see as a crash;
 * an assert() would vanish under NDEBUG.
 */
#define FUZZ_CHECK(cond)                                                                     \
        do {                                                                                 \
                if (!(cond)) {                                                               \
                        fprintf(stderr, "%s:%d: fuzz property violated: %s\n", __FILE__,     \
                                __LINE__, #cond);                                            \
                        abort();                                                             \
                }                                                                            \
        } while (0)

#endif
