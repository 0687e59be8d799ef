// SPDX-License-Identifier: Apache-2.0
/*
 * outbox-relay's entry point: parse the command line, install the stop
 * signals, run the relay, exit with its status. The only place that exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "relay.h"

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

int main(int argc, char **argv)
{
        struct relay_config conf;
        struct sigaction sa;
        char err[1024];
        int code;

        if (config_parse(argc, argv, &conf, err, sizeof(err)) < 0) {
                fprintf(stderr, "outbox-relay: error: %s\n", err);
                return RELAY_EXIT_USAGE;
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
