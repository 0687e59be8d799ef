// SPDX-License-Identifier: Apache-2.0
/*
 * Build-time tool: copy the scdoc(5) source of a man page from stdin to
 * stdout, replacing a line "@OPTIONS@" with the options and "@PRESETS@"
 * with the presets of the option table that --help prints (config.c), so
 * that outbox-relay(1) and --help cannot drift. Not installed.
 */
#include <stdio.h>
#include <string.h>

#include "config.h"

int main(void)
{
        char line[4096];

        while (fgets(line, sizeof(line), stdin)) {
                if (strcmp(line, "@OPTIONS@\n") == 0)
                        config_man_options(stdout);
                else if (strcmp(line, "@PRESETS@\n") == 0)
                        config_man_presets(stdout);
                else
                        fputs(line, stdout);
        }
        return ferror(stdin) || fflush(stdout) != 0 ? 1 : 0;
}
