/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Calendar arithmetic shared by the parsers of timestamps: wal2json's commit
 * times (wal2json.c) and redrive's --since/--until (redrive.c). Pure.
 */
#ifndef RELAY_CIVIL_H
#define RELAY_CIVIL_H

#include <stdint.h>

/*
 * civil_days() - days from 1970-01-01 to @y-@m-@d (@m 1 to 12, @d 1 to 31,
 * not checked) of the proleptic Gregorian calendar, negative before it.
 * Howard Hinnant's days_from_civil ("chrono-Compatible Low-Level Date
 * Algorithms"), exact for every int64_t year the arithmetic does not overflow.
 */
static inline int64_t civil_days(int64_t y, int m, int d)
{
        int64_t era, yoe, doy, doe;

        y -= m <= 2;
        era = (y >= 0 ? y : y - 399) / 400;
        yoe = y - era * 400;
        doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
        doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + doe - 719468;
}

#endif
