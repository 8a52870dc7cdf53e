/*
 * The `reload:` section, and the check of a new configuration file in a child process before a
 * reload loads it (SIGHUP and POST /reload both go through mg_config_reload_checked).
 *
 * Why a child. A reload must leave the running configuration serving whatever the file holds,
 * out of memory included. The YAML reader bounds what a document may expand to (routes.h), but
 * a file within those bounds may still need much memory to compile (thousands of long regexes,
 * each JIT-compiled), and the loader, like the rest of the gateway, treats a failed allocation
 * as fatal: making every allocation of the route compiler recoverable would not help anyway
 * where the kernel overcommits and its OOM killer, not malloc, says no. So the reloading thread
 * reads the file once, writes those bytes to an anonymous file, and runs the binary itself on
 * them (`/proc/self/exe --check --stdin`) under RLIMIT_AS = reload.memory_limit, with the
 * highest OOM score (the kernel kills it first) and reload.timeout to finish. Errors, a crash,
 * an allocation failing under the limit, a hang: each ends that process, and the reload is
 * refused with what it printed or how it ended. Only after it exits 0 does the gateway load the
 * same bytes itself (not the file again, which may have changed meanwhile), which takes what the
 * check took: less than the limit.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "gateway/config/internal.h"

extern char **environ;

/* What the parent keeps of the child's stderr: its errors, one per line. The rest is read and
 * dropped, so that a child with a million errors cannot fill the parent's memory. */
#define MG_CHECK_MAX_OUTPUT (64 << 10)

static const char *const reload_keys[] = {"memory_limit", "timeout", NULL};

void mg__config_parse_reload(mg_config_loader_t *cl, const mg_node_t *root)
{
    const mg_node_t *reload = mg_node_get(root, "reload"), *node;
    uint64_t bytes;

    if (reload == NULL || mg_node_expect(reload, MG_NODE_MAPPING, cl->errs) != 0)
        return;
    mg_node_check_keys(reload, reload_keys, cl->errs);
    if ((node = mg_node_get(reload, "memory_limit")) != NULL && mg_node_to_size(node, &bytes, cl->errs) == 0) {
        if (bytes < MG_RELOAD_MIN_MEMORY)
            mg_errors_add(cl->errs, node,
                          "reload.memory_limit must be at least 64MiB (the process that checks a file needs that much)");
        else
            cl->conf->reload.memory_limit = bytes;
    }
    mg__config_read_duration(cl, reload, "timeout", 1, &cl->conf->reload.timeout_ms);
}

/* ---------------------------------------------------------------------------------------
 * The child's side: `matchgate --check --stdin [--memory-limit BYTES] -c FILE`
 */

/* Under AddressSanitizer the process reserves terabytes of address space for its shadow at
 * start: an address-space limit would only break it. Such builds check without one. */
#if defined(__SANITIZE_ADDRESS__)
#define MG_CAN_LIMIT_MEMORY 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MG_CAN_LIMIT_MEMORY 0
#endif
#endif
#ifndef MG_CAN_LIMIT_MEMORY
#define MG_CAN_LIMIT_MEMORY 1
#endif

/* The kernel's OOM killer takes the process with the highest score first: this one. */
static void volunteer_for_oom_killer(void)
{
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);

    if (fd >= 0) {
        if (write(fd, "1000", 4) != 4) {
            /* best effort: the address-space limit is the bound that matters */
        }
        close(fd);
    }
}

int mg_config_limit_memory(uint64_t bytes)
{
    struct rlimit limit = {bytes, bytes};

    volunteer_for_oom_killer();
    if (!MG_CAN_LIMIT_MEMORY || bytes == 0)
        return 0;
    return setrlimit(RLIMIT_AS, &limit);
}

/* ---------------------------------------------------------------------------------------
 * The parent's side
 */

typedef struct check_run {
    const mg_config_t *running;
    pid_t pid;
    int out;         /* read end of the child's stderr */
    uint64_t due_ms; /* CLOCK_MONOTONIC deadline */
    char output[MG_CHECK_MAX_OUTPUT + 1];
    size_t len;
    int timed_out;
} check_run_t;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* An anonymous file holding `text`, positioned at its start: the child's stdin. -1 on failure. */
static int text_file(const char *text, size_t len)
{
    int fd = memfd_create("matchgate-reload", MFD_CLOEXEC);

    for (size_t done = 0; fd >= 0 && done < len;) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)n;
    }
    if (fd >= 0 && lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* stdin the text, stdout nowhere, stderr the pipe, nothing else inherited (the listening sockets
 * stay the gateway's); no blocked signals (the gateway's threads block SIGHUP, SIGTERM and
 * SIGINT) and SIGPIPE no longer ignored. 0 or an errno value. */
static int spawn_child(check_run_t *run, int input, int err_pipe)
{
    char limit[32], *argv[] = {"matchgate", "--check", "--stdin", "--memory-limit", limit, "-c", run->running->file, NULL};
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    int ret;

    snprintf(limit, sizeof(limit), "%llu", (unsigned long long)run->running->reload.memory_limit);
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, input, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, err_pipe, 2);
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    ret = posix_spawn(&run->pid, "/proc/self/exe", &actions, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
    return ret;
}

/* Reads the child's stderr until it closes or the deadline passes (then timed_out). */
static void collect_output(check_run_t *run)
{
    char drop[4096];

    for (;;) {
        uint64_t now = now_ms();
        if (now >= run->due_ms) {
            run->timed_out = 1;
            return;
        }
        struct pollfd pfd = {.fd = run->out, .events = POLLIN};
        uint64_t wait = run->due_ms - now;
        if (poll(&pfd, 1, wait > 1000 ? 1000 : (int)wait) <= 0)
            continue; /* EINTR, or a second gone: look at the clock again */
        size_t room = MG_CHECK_MAX_OUTPUT - run->len;
        ssize_t n = room != 0 ? read(run->out, run->output + run->len, room) : read(run->out, drop, sizeof(drop));
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return;
        if (n > 0 && room != 0)
            run->len += (size_t)n;
    }
}

/* The child's exit status; a child past the deadline is killed first. */
static int reap(check_run_t *run)
{
    int status = 0;

    if (run->timed_out)
        kill(run->pid, SIGKILL);
    for (;;) {
        pid_t got = waitpid(run->pid, &status, run->timed_out ? 0 : WNOHANG);
        if (got == run->pid || (got < 0 && errno != EINTR))
            return status;
        if (got == 0 && now_ms() >= run->due_ms) {
            run->timed_out = 1;
            kill(run->pid, SIGKILL);
        } else if (got == 0) {
            struct timespec pause = {0, 5 * 1000000};
            nanosleep(&pause, NULL);
        }
    }
}

/* The child's refusal: every error line it printed (warnings are left for the file that loads). */
static size_t report_lines(check_run_t *run, mg_errors_t *errs)
{
    size_t reported = 0;
    int oom = 0;

    run->output[run->len] = '\0';
    for (char *line = run->output, *end; *line != '\0'; line = end) {
        end = line + strcspn(line, "\n");
        if (*end == '\n')
            *end++ = '\0';
        if (*line != '\0' && strstr(line, ": warning: ") == NULL) {
            mg_errors_add(errs, NULL, "%s", line);
            reported++;
            oom |= strstr(line, ": out of memory") != NULL;
        }
    }
    if (run->len == MG_CHECK_MAX_OUTPUT)
        mg_errors_add(errs, NULL, "%s: more errors not shown (run matchgate --check on it)", run->running->file);
    if (oom) /* the loader's own message does not know the limit it met */
        mg_errors_add(errs, NULL, "%s: the check of the new file ran out of memory within reload.memory_limit (%llu MiB)",
                      run->running->file, (unsigned long long)(run->running->reload.memory_limit >> 20));
    return reported;
}

static void report(check_run_t *run, int status, mg_errors_t *errs)
{
    const char *file = run->running->file;
    const mg_reload_conf_t *rc = &run->running->reload;

    if (run->timed_out)
        mg_errors_add(errs, NULL, "%s: the check of the new file did not finish within reload.timeout (%llu ms)", file,
                      (unsigned long long)rc->timeout_ms);
    else if (WIFSIGNALED(status))
        mg_errors_add(errs, NULL,
                      "%s: the check of the new file ended with signal %d (SIG%s): out of memory under reload.memory_limit "
                      "(%llu MiB), or a crash",
                      file, WTERMSIG(status), sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?",
                      (unsigned long long)(rc->memory_limit >> 20));
    else if (WEXITSTATUS(status) != 1 || report_lines(run, errs) == 0)
        mg_errors_add(errs, NULL, "%s: the check of the new file failed (exit status %d)", file, WEXITSTATUS(status));
}

int mg__config_check_in_child(const mg_config_t *running, const char *text, size_t len, mg_errors_t *errs)
{
    check_run_t *run = calloc(1, sizeof(*run));
    int input = -1, pipe_fds[2] = {-1, -1}, ret = -1, err;

    if (run == NULL || (input = text_file(text, len)) < 0 || pipe2(pipe_fds, O_CLOEXEC) != 0) {
        mg_errors_add(errs, NULL, "%s: cannot check the new file: %s", running->file, run ? strerror(errno) : "out of memory");
        goto Exit;
    }
    run->running = running;
    run->out = pipe_fds[0];
    run->due_ms = now_ms() + running->reload.timeout_ms;
    if ((err = spawn_child(run, input, pipe_fds[1])) != 0) {
        mg_errors_add(errs, NULL, "%s: cannot run the check of the new file: %s", running->file, strerror(err));
        goto Exit;
    }
    close(pipe_fds[1]);
    pipe_fds[1] = -1;
    collect_output(run);
    int status = reap(run);
    if (!run->timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        ret = 0;
    else
        report(run, status, errs);
Exit:
    if (input >= 0)
        close(input);
    for (int i = 0; i < 2; i++)
        if (pipe_fds[i] >= 0)
            close(pipe_fds[i]);
    free(run);
    return ret;
}
