// SPDX-License-Identifier: Apache-2.0
/*
 * outbox-relay's entry point: read the configuration, set up the log,
 * install the stop and reload signals, run the relay, exit with its status;
 * or run one of the commands `check`, `slot create|drop|status` and
 * `redrive` and print its result. The only place that exits.
 */
#include <errno.h>
#include <execinfo.h>
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
#include "producer.h"
#include "redrive.h"
#include "relay.h"
#include "slotcmd.h"

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

#if defined(__SANITIZE_ADDRESS__)
#define CRASH_HANDLER 0           /* AddressSanitizer reports a crash with its own stack trace */
#else
#define CRASH_HANDLER 1
#endif

#define CRASH_FRAMES 64

/* Write @s to stderr from a signal handler. */
static void crash_write(const char *s)
{
        size_t n = strlen(s);

        while (n > 0) {
                ssize_t w = write(STDERR_FILENO, s, n);

                if (w <= 0)
                        return;
                s += w;
                n -= (size_t)w;
        }
}

/*
 * A crash (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT from an assertion in the
 * relay or in librdkafka): its stack on stderr, one frame a line as
 * "binary(function+offset) [address]" (addr2line -e outbox-relay resolves
 * the offsets of static functions), then the default action, so the process
 * still dies of the signal (and dumps core where the system is set to).
 * Only async-signal-safe calls: write(), backtrace() (its library was loaded
 * at start, in crash_handler_install()) and backtrace_symbols_fd().
 */
static void on_crash_signal(int sig)
{
        void *frames[CRASH_FRAMES];
        char num[16];
        int n = 0, i = (int)sizeof(num) - 1, v = sig;

        num[i] = '\0';
        do {
                num[--i] = (char)('0' + v % 10);
                v /= 10;
        } while (v > 0 && i > 0);
        crash_write("outbox-relay: fatal: crashed with signal ");
        crash_write(num + i);
        crash_write(sig == SIGSEGV ? " (SIGSEGV)" : sig == SIGBUS ? " (SIGBUS)" : sig == SIGILL ? " (SIGILL)" :
                    sig == SIGFPE ? " (SIGFPE)" : sig == SIGABRT ? " (SIGABRT)" : "");
        crash_write("; a restart sends again what the slot has not confirmed. Its stack, to report with "
                    "outbox-relay --version:\n");
        n = backtrace(frames, CRASH_FRAMES);
        backtrace_symbols_fd(frames, n, STDERR_FILENO);
        /* SA_RESETHAND restored the default action: raised again, it ends the process. */
        raise(sig);
}

/* on_crash_signal() for every command, before anything can crash. */
static void crash_handler_install(void)
{
        static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
        struct sigaction sa;
        void *frame;

        if (!CRASH_HANDLER)
                return;
        /* backtrace() loads libgcc_s the first time, which allocates: not in a handler. */
        (void)backtrace(&frame, 1);
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_crash_signal;
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
                sigaction(sigs[i], &sa, NULL);
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

enum command { CMD_RELAY, CMD_CHECK, CMD_SLOT_CREATE, CMD_SLOT_DROP, CMD_SLOT_STATUS, CMD_REDRIVE };

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

/* slot create --after-slot: wait for the old consumer's slot to pass the new consistent point. */
static int slot_after(const struct relay_config *conf, const struct slotcmd_created *cr)
{
        struct slotcmd_after af;
        char err[1536], a[LSN_STRLEN], b[LSN_STRLEN];
        int r;

        printf("waiting up to %lld s for slot \"%s\" to confirm past %s (--after-slot)\n",
               (long long)(conf->after_slot_timeout_ms / 1000), conf->after_slot,
               lsn_format(cr->consistent_lsn, a));
        fflush(stdout);
        r = slotcmd_wait_after(conf, cr->consistent_lsn, &af, err, sizeof(err));
        if (r < 0) {
                log_error("%s", err);
                return slot_exit(r);
        }
        printf("slot \"%s\" is confirmed up to %s, past the consistent point %s of slot \"%s\": its "
               "consumer acknowledged every row committed before that point, and the relay "
               "publishes every row committed after it. Stop the old consumer now, start the relay, "
               "then drop slot \"%s\"\n", conf->after_slot, lsn_format(af.confirmed_flush_lsn, b), a,
               conf->slot, conf->after_slot);
        if (cr->existing_rows > 0)
                printf("the %s%lld rows the outbox already holds were committed before it: the old "
                       "consumer's, not for the relay to publish\n",
                       cr->existing_rows > 1000000 ? "over " : "",
                       cr->existing_rows > 1000000 ? 1000000LL : (long long)cr->existing_rows);
        return RELAY_EXIT_OK;
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
                if (cr.publication_created)
                        printf("created publication \"%s\" of the outbox tables, inserts only\n",
                               config_publication(conf));
                printf("created replication slot \"%s\" with plugin %s%s in database \"%s\" at "
                       "consistent point %s\n", conf->slot, cr.plugin,
                       conf->failover ? " as a failover slot" : "", cr.database,
                       lsn_format(cr.consistent_lsn, a));
                if (strcmp(conf->plugin, "auto") == 0)
                        printf("output plugin %s: %s\n", cr.plugin, cr.why);
                r = relay_checkpoint_new_slot(conf, cr.consistent_lsn, false, err, sizeof(err));
                if (r < 0) {
                        log_error("%s", err);
                        return r == -EINVAL ? RELAY_EXIT_ENVIRONMENT : RELAY_EXIT_RETRY;
                }
                if (conf->after_slot)
                        return slot_after(conf, &cr);
                if (cr.existing_rows > 0)
                        log_warning("the outbox already holds %s%lld rows: they were committed before "
                                    "the slot existed and will not be published; publish them by "
                                    "other means if they are still pending",
                                    cr.existing_rows > 1000000 ? "over " : "",
                                    cr.existing_rows > 1000000 ? 1000000LL
                                                               : (long long)cr.existing_rows);
                if (cr.other_consumers[0])
                        log_warning("%s", cr.other_consumers);
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

/*
 * `redrive`: 0 only when Kafka acknowledged every selected record; before
 * publishing, a usage-like refusal is 2 and an unreachable peer 1.
 */
static int run_redrive(const struct relay_config *conf)
{
        struct redrive_result res;
        char err[2048];
        int r = redrive_run(conf, stdout, &res, err, sizeof(err));

        if (r < 0) {
                log_error("%s", err);
                switch (r) {
                case -EINVAL:
                case -E2BIG:
                case -EPERM:
                        return RELAY_EXIT_USAGE;
                case -ENOENT:
                case -EACCES:
                case -EPROTONOSUPPORT:
                        return RELAY_EXIT_ENVIRONMENT;
                default:
                        return RELAY_EXIT_RETRY;
                }
        }
        if (res.failed)
                return RELAY_EXIT_RETRY;
        if (res.refused)
                return RELAY_EXIT_DATA;
        if (res.missing)
                return RELAY_EXIT_ENVIRONMENT;
        return RELAY_EXIT_OK;
}

int main(int argc, char **argv)
{
        enum command cmd = CMD_RELAY;
        struct relay_config conf;
        struct relay_reload on_hup = {&reload_requested, reload, &conf};
        struct sigaction sa;
        char err[1024];
        int code, r, skip = 0;

        crash_handler_install();
        if (argc > 1 && strcmp(argv[1], "check") == 0) {
                cmd = CMD_CHECK;
                skip = 1;
        } else if (argc > 1 && strcmp(argv[1], "redrive") == 0) {
                cmd = CMD_REDRIVE;
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
        r = config_parse(argc - skip, argv + skip, &conf, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "outbox-relay: error: %s\n", r == -ENOMEM ? "out of memory" : err);
                return r == -ENOMEM ? RELAY_EXIT_RETRY : RELAY_EXIT_USAGE;
        }
        if (!conf.show_help && !conf.show_version) {
                const char *bad = NULL;
                char why[512];

                if (conf.yes && cmd != CMD_SLOT_DROP && cmd != CMD_REDRIVE)
                        bad = "--yes applies only to `slot drop` and `redrive`";
                else if (redrive_usage_error(&conf, cmd == CMD_REDRIVE, why, sizeof(why)))
                        bad = why;
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
                printf("outbox-relay %s\nlibrdkafka %s\n", RELAY_VERSION, producer_library_version());
                config_free(&conf);
                return RELAY_EXIT_OK;
        }
        if (cmd != CMD_RELAY) {
                /* The commands' results are their output; librdkafka's retries are noise here. */
                set_log_style(&conf);
                if (strcmp(conf.log_level, "debug") != 0)
                        log_set_level(cmd == CMD_CHECK ? LOG_LEVEL_ERROR : LOG_LEVEL_WARNING);
                signal(SIGPIPE, SIG_IGN);
                code = cmd == CMD_CHECK ? run_check(&conf) : cmd == CMD_REDRIVE ? run_redrive(&conf) :
                       run_slot(cmd, &conf);
                config_free(&conf);
                return code;
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
