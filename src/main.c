// SPDX-License-Identifier: Apache-2.0
/*
 * outbox-relay's entry point: read the configuration, set up the log,
 * install the stop and reload signals, run the relay, exit with its status.
 * The only place that exits.
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

static volatile sig_atomic_t stop_requested, reload_requested;
static int stop_pipe[2] = {-1, -1};

/* The command line, read again with the file on SIGHUP. */
static int saved_argc;
static char **saved_argv;

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

static void on_reload_signal(int sig)
{
        int saved = errno;

        (void)sig;
        reload_requested = 1;
        if (write(stop_pipe[1], "h", 1) < 0) {
                /* The pipe is full: the relay will wake up anyway. */
        }
        errno = saved;
}

/* Level and format of @conf; config_parse() accepted only known names. */
static void set_log_style(const struct relay_config *conf)
{
        enum log_level level = LOG_LEVEL_INFO;

        log_level_parse(conf->log_level, &level);
        log_set_level(level);
        log_set_format(strcmp(conf->log_format, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT);
}

static void report_change(void *ctx, const char *name, const char *old_value, const char *new_value,
                          bool reloaded)
{
        (void)ctx;
        if (reloaded)
                log_info("reloaded %s: %s (was %s)", name, new_value, old_value);
        else
                log_warning("setting \"%s\" changed: it takes effect only after a restart", name);
}

static bool same_path(const char *a, const char *b)
{
        return a == b || (a && b && strcmp(a, b) == 0);
}

/* SIGHUP, on the main thread: reopen the log, then reload what can change safely. */
static void reload(void *ctx)
{
        struct relay_config *conf = ctx, next;
        const char *old_file = conf->log_file;
        char err[1024];
        int r;

        /* First the file the log already goes to: after a rotation, a new one at the same path. */
        if (conf->log_file && (r = log_open(conf->log_file)) < 0)
                log_error("cannot reopen log file \"%s\": %s", conf->log_file, strerror(-r));
        log_info("SIGHUP: reloading the configuration%s", conf->log_file ? " (log file reopened)" : "");
        if (config_parse(saved_argc, saved_argv, &next, err, sizeof(err)) < 0) {
                log_error("cannot reload the configuration, keeping the current settings: %s", err);
                return;
        }
        /*
         * Open a new log file before taking it: config_reload() frees the old
         * path once no setting points to it, so it cannot be put back after.
         */
        if (!same_path(next.log_file, old_file) && (r = log_open(next.log_file)) < 0) {
                log_error("cannot open log file \"%s\": %s; logging goes on to \"%s\"",
                          next.log_file ? next.log_file : "stderr", strerror(-r),
                          old_file ? old_file : "stderr");
                next.log_file = old_file;
        }
        if (config_reload(conf, &next, report_change, NULL) < 0) {
                log_error("cannot reload the configuration: out of memory");
                return;
        }
        set_log_style(conf);
}

int main(int argc, char **argv)
{
        struct relay_config conf;
        struct relay_reload on_hup = {&reload_requested, reload, &conf};
        struct sigaction sa;
        char err[1024];
        int code, r;

        r = config_parse(argc, argv, &conf, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "outbox-relay: error: %s\n", r == -ENOMEM ? "out of memory" : err);
                return r == -ENOMEM ? RELAY_EXIT_RETRY : RELAY_EXIT_USAGE;
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
        saved_argc = argc;
        saved_argv = argv;
        set_log_style(&conf);
        if (conf.log_file && (r = log_open(conf.log_file)) < 0) {
                log_error("cannot open log file \"%s\": %s", conf.log_file, strerror(-r));
                config_free(&conf);
                return RELAY_EXIT_USAGE;
        }
        for (size_t i = 0; i < conf.nnotes; i++)
                log_warning("%s", conf.notes[i]);
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
        sa.sa_handler = on_reload_signal;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGHUP, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);

        code = relay_run(&conf, stop_pipe[0], &stop_requested, &on_hup);
        config_free(&conf);
        return code;
}
