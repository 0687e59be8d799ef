// SPDX-License-Identifier: Apache-2.0
/*
 * outbox-relay's entry point: parse the command line, install the stop
 * signals, run the relay, exit with its status; or run one of the commands
 * `check` and `slot create|drop|status` and print its result. The only
 * place that exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "log.h"
#include "lsn.h"
#include "relay.h"
#include "slotcmd.h"

#ifndef RELAY_VERSION
#define RELAY_VERSION "unknown"
#endif

static volatile sig_atomic_t stop_requested;
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
        int saved = errno;

        (void)sig;
        stop_requested = 1;
        if (write(stop_pipe[1], "x", 1) < 0) {
                /* The pipe is full: a stop is already pending. */
        }
        errno = saved;
}

enum command { CMD_RELAY, CMD_CHECK, CMD_SLOT_CREATE, CMD_SLOT_DROP, CMD_SLOT_STATUS };

static int run_check(const struct relay_config *conf)
{
        struct check_report rep;
        char err[1024];
        int r = check_run(conf, &rep, err, sizeof(err));

        if (r < 0) {
                log_error("%s", r == -ENOMEM ? "out of memory" : err);
                return r == -ENOMEM ? RELAY_EXIT_RETRY : RELAY_EXIT_USAGE;
        }
        check_print(&rep, stdout);
        r = check_safe(&rep) ? RELAY_EXIT_OK : RELAY_EXIT_ENVIRONMENT;
        check_report_free(&rep);
        return r;
}

/* Exit status of a slot command's error: unreachable is worth a retry, the rest is not. */
static int slot_exit(int r)
{
        return r == -ECONNREFUSED ? RELAY_EXIT_RETRY : r == -EPERM ? RELAY_EXIT_USAGE
                                                                    : RELAY_EXIT_ENVIRONMENT;
}

static int run_slot(enum command cmd, const struct relay_config *conf)
{
        struct slotcmd_status st;
        struct slotcmd_created cr;
        char err[1024], a[LSN_STRLEN];
        int r;

        switch (cmd) {
        case CMD_SLOT_CREATE:
                r = slotcmd_create(conf, &cr, err, sizeof(err));
                if (r < 0)
                        break;
                printf("created replication slot \"%s\" with plugin wal2json in database \"%s\" at "
                       "consistent point %s\n", conf->slot, cr.database,
                       lsn_format(cr.consistent_lsn, a));
                if (cr.existing_rows > 0)
                        log_warning("the outbox already holds %s%lld rows: they were committed before "
                                    "the slot existed and will not be published; publish them by "
                                    "other means if they are still pending",
                                    cr.existing_rows > 1000000 ? "over " : "",
                                    cr.existing_rows > 1000000 ? 1000000LL
                                                               : (long long)cr.existing_rows);
                return RELAY_EXIT_OK;
        case CMD_SLOT_DROP:
                r = slotcmd_drop(conf, err, sizeof(err));
                if (r < 0)
                        break;
                printf("dropped replication slot \"%s\"\n", conf->slot);
                return RELAY_EXIT_OK;
        default:
                r = slotcmd_status(conf, &st, err, sizeof(err));
                if (r < 0)
                        break;
                slotcmd_print_status(&st, conf->format && strcmp(conf->format, "json") == 0, stdout);
                return RELAY_EXIT_OK;
        }
        log_error("%s", err);
        return slot_exit(r);
}

int main(int argc, char **argv)
{
        enum command cmd = CMD_RELAY;
        struct relay_config conf;
        struct sigaction sa;
        char err[1024];
        int code, skip = 0;

        if (argc > 1 && strcmp(argv[1], "check") == 0) {
                cmd = CMD_CHECK;
                skip = 1;
        } else if (argc > 1 && strcmp(argv[1], "slot") == 0) {
                skip = 2;
                if (argc > 2 && strcmp(argv[2], "create") == 0)
                        cmd = CMD_SLOT_CREATE;
                else if (argc > 2 && strcmp(argv[2], "drop") == 0)
                        cmd = CMD_SLOT_DROP;
                else if (argc > 2 && strcmp(argv[2], "status") == 0)
                        cmd = CMD_SLOT_STATUS;
                else {
                        fprintf(stderr, "outbox-relay: error: \"slot\" needs one of create, drop, "
                                "status; try --help\n");
                        return RELAY_EXIT_USAGE;
                }
        }
        /* The command's words stand in for the program name: config_parse() skips argv[0]. */
        if (config_parse(argc - skip, argv + skip, &conf, err, sizeof(err)) < 0) {
                fprintf(stderr, "outbox-relay: error: %s\n", err);
                return RELAY_EXIT_USAGE;
        }
        if (!conf.show_help && !conf.show_version) {
                const char *bad = NULL;

                if (conf.yes && cmd != CMD_SLOT_DROP)
                        bad = "--yes applies only to `slot drop`";
                else if (conf.format && cmd != CMD_SLOT_STATUS)
                        bad = "--format applies only to `slot status`";
                else if (conf.format && strcmp(conf.format, "text") != 0 &&
                         strcmp(conf.format, "json") != 0)
                        bad = "invalid --format: expected text or json";
                if (bad) {
                        fprintf(stderr, "outbox-relay: error: %s\n", bad);
                        config_free(&conf);
                        return RELAY_EXIT_USAGE;
                }
        }
        if (conf.show_help) {
                config_usage(stdout);
                config_free(&conf);
                return RELAY_EXIT_OK;
        }
        if (conf.show_version) {
                printf("outbox-relay %s\n", RELAY_VERSION);
                config_free(&conf);
                return RELAY_EXIT_OK;
        }
        if (cmd != CMD_RELAY) {
                /* The commands' results are their output; librdkafka's retries are noise here. */
                log_set_level(conf.verbose ? LOG_LEVEL_DEBUG :
                              cmd == CMD_CHECK ? LOG_LEVEL_ERROR : LOG_LEVEL_WARNING);
                signal(SIGPIPE, SIG_IGN);
                code = cmd == CMD_CHECK ? run_check(&conf) : run_slot(cmd, &conf);
                config_free(&conf);
                return code;
        }
        log_set_level(conf.verbose ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO);
        if (pipe2(stop_pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
                log_error("pipe: %s", strerror(errno));
                config_free(&conf);
                return RELAY_EXIT_RETRY;
        }
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);

        code = relay_run(&conf, stop_pipe[0], &stop_requested);
        config_free(&conf);
        return code;
}
