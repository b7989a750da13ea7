/* renderer.c: the client side of the render worker (contract in renderer.h). Starts the worker
 * with posix_spawn (safe in a multi-threaded process, unlike fork), talks to it over a socket
 * pair, and kills it when a layout overruns its deadline. No Python here. */
#include "renderer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The worker's state, protected by renderer__lock (held for a whole layout). */
static pthread_mutex_t renderer__lock = PTHREAD_MUTEX_INITIALIZER;
static char *renderer__path;        /* malloc'd; NULL until set */
static pid_t renderer__pid;         /* 0: no worker */
static int renderer__pidfd = -1;    /* a pidfd for the worker where the kernel has them: a kill
                                       can never reach another process that got its pid */
static int renderer__fd = -1;       /* our end of the socket pair */
static unsigned renderer__uses;     /* layouts by the current worker */
/* Settings and counters, protected by renderer__small, never held across a layout: reading
 * them must not wait for one (the callers hold the GIL). */
static pthread_mutex_t renderer__small = PTHREAD_MUTEX_INITIALIZER;
static double renderer__timeout = 2.0;
static tgc_renderer_stats renderer__stats;
static pthread_once_t renderer__atfork_once = PTHREAD_ONCE_INIT;

#define STAT(field) do { pthread_mutex_lock(&renderer__small); renderer__stats.field++; \
                         pthread_mutex_unlock(&renderer__small); } while (0)

/* A fork while another thread renders would hand the child a lock held forever: fork waits for
 * the render in progress (at most its deadline) instead. The child forgets its parent's worker
 * at once: it closes its copy of the socket (so the worker sees end of input when the parent
 * goes, and the descriptor's number is not closed later under whatever the child opened there)
 * and starts its own worker when it first renders. */
static void
renderer__before_fork(void)
{
    pthread_mutex_lock(&renderer__lock);
    pthread_mutex_lock(&renderer__small);
}

static void
renderer__after_fork_parent(void)
{
    pthread_mutex_unlock(&renderer__small);
    pthread_mutex_unlock(&renderer__lock);
}

static void
renderer__after_fork_child(void)
{
    if (renderer__fd >= 0) {
        close(renderer__fd);
    }
    if (renderer__pidfd >= 0) {
        close(renderer__pidfd);
    }
    renderer__fd = renderer__pidfd = -1;
    renderer__pid = 0;
    renderer__uses = 0;
    renderer__stats.pid = 0;
    pthread_mutex_unlock(&renderer__small);
    pthread_mutex_unlock(&renderer__lock);
}

static void
renderer__register_atfork(void)
{
    (void)pthread_atfork(renderer__before_fork, renderer__after_fork_parent,
                         renderer__after_fork_child);
}

static void
renderer__kill(void)
{
#if defined(SYS_pidfd_send_signal)
    if (renderer__pidfd >= 0 && syscall(SYS_pidfd_send_signal, renderer__pidfd, SIGKILL, NULL, 0) == 0) {
        return;
    }
#endif
    kill(renderer__pid, SIGKILL);
}

static void
renderer__forget(void)
{
    if (renderer__fd >= 0) {
        close(renderer__fd);
    }
    if (renderer__pidfd >= 0) {
        close(renderer__pidfd);
    }
    renderer__fd = renderer__pidfd = -1;
    renderer__pid = 0;
    renderer__uses = 0;
    pthread_mutex_lock(&renderer__small);
    renderer__stats.pid = 0;
    pthread_mutex_unlock(&renderer__small);
}

static double
renderer__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Stops the worker: killed (SIGKILL cannot be caught, so the wait is short) and reaped. ECHILD,
 * when the user's SIGCHLD handling reaped it already, is fine. Lock held. */
static void
renderer__drop(void)
{
    if (renderer__pid > 0) {
        renderer__kill();
        while (waitpid(renderer__pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    renderer__forget();
}

/* Starts a worker; 0, or -1 with a message. Lock held. */
static int
renderer__spawn(char *err, size_t err_len)
{
    int sv[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, dflt;
    int rc;

    if (renderer__path == NULL) {
        snprintf(err, err_len, "the render worker's path is not set");
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, err_len, "could not make the render worker's socket: %s", strerror(errno));
        goto fail_socket;
    }
    if ((rc = posix_spawn_file_actions_init(&fa)) != 0) {
        goto fail_actions;
    }
    if ((rc = posix_spawnattr_init(&attr)) != 0) {
        goto fail_attr;
    }
    /* The worker's stdin and stdout are its end of the socket; stderr goes nowhere (Graphviz's
     * warnings are not the user's); every other descriptor is closed by SOCK_CLOEXEC/O_CLOEXEC or
     * by the worker itself at start. */
    sigemptyset(&none);
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGPIPE);  /* Python ignores SIGPIPE, and an ignored signal survives exec */
    sigaddset(&dflt, SIGTERM);
    sigaddset(&dflt, SIGALRM);  /* the worker's own backstop (render_main.c) */
    if ((rc = posix_spawn_file_actions_adddup2(&fa, sv[1], 0)) != 0 ||
        (rc = posix_spawn_file_actions_adddup2(&fa, sv[1], 1)) != 0 ||
        (rc = posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0)) != 0 ||
        (rc = posix_spawnattr_setsigmask(&attr, &none)) != 0 ||
        (rc = posix_spawnattr_setsigdefault(&attr, &dflt)) != 0 ||
        (rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)) != 0) {
        goto fail_setup;
    }
    char ppid[24];
    snprintf(ppid, sizeof(ppid), "%ld", (long)getpid());
    char *argv[] = {renderer__path, ppid, NULL};
    pid_t pid;
    if ((rc = posix_spawn(&pid, renderer__path, &fa, &attr, argv, environ)) != 0) {
        snprintf(err, err_len, "could not start the render worker %s: %s", renderer__path,
                 strerror(rc));
        rc = 0;  /* the message is written */
        goto fail_setup;
    }
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    close(sv[1]);
    (void)fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    renderer__fd = sv[0];
    renderer__pid = pid;
    renderer__uses = 0;
#if defined(SYS_pidfd_open)
    renderer__pidfd = (int)syscall(SYS_pidfd_open, pid, 0);  /* -1 where the kernel is older */
    if (renderer__pidfd >= 0) {
        (void)fcntl(renderer__pidfd, F_SETFD, FD_CLOEXEC);
    }
#endif
    pthread_mutex_lock(&renderer__small);
    renderer__stats.started++;
    renderer__stats.pid = pid;
    pthread_mutex_unlock(&renderer__small);
    return 0;

fail_setup:
    posix_spawnattr_destroy(&attr);
fail_attr:
    posix_spawn_file_actions_destroy(&fa);
fail_actions:
    if (rc != 0) {
        snprintf(err, err_len, "could not start the render worker: %s", strerror(rc));
    }
    close(sv[0]);
    close(sv[1]);
fail_socket:
    return -1;
}

/* Waits until fd is ready for events or the deadline passes: 1 ready, 0 timed out, -1 error. */
static int
renderer__wait(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - renderer__now();
        if (left <= 0) {
            return 0;
        }
        struct pollfd p = {fd, events, 0};
        int ms = left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
        int n = poll(&p, 1, ms);
        if (n > 0) {
            return 1;
        }
        if (n < 0 && errno != EINTR) {
            return -1;
        }
    }
}

/* Sends or receives exactly n bytes before the deadline: 0, 1 timed out, -1 broken (errno). */
static int
renderer__io(int fd, void *p, size_t n, int sending, double deadline)
{
    char *c = p;
    while (n > 0) {
        ssize_t k = sending ? send(fd, c, n, MSG_NOSIGNAL) : recv(fd, c, n, 0);
        if (k > 0) {
            c += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0) {
            errno = EPIPE;  /* the worker closed its end: it died */
            return -1;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            return -1;
        }
        int w = renderer__wait(fd, sending ? POLLOUT : POLLIN, deadline);
        if (w <= 0) {
            return w == 0 ? 1 : -1;
        }
    }
    return 0;
}

/* Why the worker stopped answering, for the message: reaps it. Lock held. */
static void
renderer__died(char *err, size_t err_len)
{
    int status = 0;
    pid_t pid = renderer__pid, got;
    /* It closed its socket, so it is exiting or gone; make sure, and reap it. */
    while ((got = pid > 0 ? waitpid(pid, &status, WNOHANG) : -1) < 0 && errno == EINTR) {
    }
    if (got == 0) {
        renderer__kill();
        while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
        }
    }
    renderer__forget();
    if (got == pid && WIFSIGNALED(status)) {
        snprintf(err, err_len, "the render worker died of signal %d while drawing this graph",
                 WTERMSIG(status));
    }
    else if (got == pid && WIFEXITED(status)) {
        snprintf(err, err_len, "the render worker exited with status %d while drawing this graph",
                 WEXITSTATUS(status));
    }
    else {
        snprintf(err, err_len, "the render worker stopped answering");
    }
}

int
tgc_renderer_set_path(const char *path)
{
    char *copy = strdup(path);
    if (copy == NULL) {
        return -1;
    }
    pthread_mutex_lock(&renderer__lock);
    free(renderer__path);
    renderer__path = copy;
    pthread_mutex_unlock(&renderer__lock);
    return 0;
}

void
tgc_renderer_set_timeout(double seconds)
{
    pthread_mutex_lock(&renderer__small);
    renderer__timeout = seconds;
    pthread_mutex_unlock(&renderer__small);
}

double
tgc_renderer_timeout(void)
{
    pthread_mutex_lock(&renderer__small);
    double t = renderer__timeout;
    pthread_mutex_unlock(&renderer__small);
    return t;
}

/* Takes renderer__lock by the deadline: 0, or 1 when another layout held it all that time. */
static int
renderer__lock_by(double deadline)
{
    double left = deadline - renderer__now();
    struct timespec abs;
    clock_gettime(CLOCK_REALTIME, &abs);
    if (left < 0) {
        left = 0;
    }
    abs.tv_sec += (time_t)left;
    abs.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
    if (abs.tv_nsec >= 1000000000L) {
        abs.tv_sec++;
        abs.tv_nsec -= 1000000000L;
    }
    int rc;
    while ((rc = pthread_mutex_timedlock(&renderer__lock, &abs)) == EINTR) {
    }
    return rc == 0 ? 0 : 1;
}

int
tgc_renderer_svg(const char *dot, size_t dot_len, char **svg, size_t *svg_len,
                 char *err, size_t err_len)
{
    int rc = TGC_RENDER_FAILED;
    char *out = NULL;
    *svg = NULL;
    *svg_len = 0;
    if (dot_len > TGC_RENDERER_MAX_DOT) {
        snprintf(err, err_len, "the graph (%zu bytes) is over the render worker's limit", dot_len);
        return TGC_RENDER_FAILED;
    }
    pthread_once(&renderer__atfork_once, renderer__register_atfork);
    double timeout = tgc_renderer_timeout();
    /* The budget counts from the call: waiting for another thread's layout spends it too. */
    double deadline = renderer__now() + timeout;
    if (renderer__lock_by(deadline) != 0) {
        snprintf(err, err_len, "the layout took longer than its %.3g s budget and was stopped "
                 "(other layouts held the render worker all that time)", timeout);
        return TGC_RENDER_TIMEOUT;
    }
    if (renderer__pid > 0 && renderer__uses >= TGC_RENDERER_USES) {
        renderer__drop();  /* retired: what Graphviz leaked goes with it */
        STAT(retired);
    }
    if (renderer__pid > 0) {
        /* A worker that exited while idle (it does after TGC_RENDERER_IDLE_S, or someone killed
         * it) is reaped and replaced before it is asked. */
        pid_t got;
        while ((got = waitpid(renderer__pid, NULL, WNOHANG)) < 0 && errno == EINTR) {
        }
        if (got == renderer__pid || (got < 0 && errno == ECHILD)) {
            renderer__forget();
        }
    }
    tgc_renderer_header h;
    int io;
    for (int attempt = 0;; attempt++) {
        if (renderer__pid == 0 && renderer__spawn(err, err_len) < 0) {
            goto done;
        }
        /* A worker that served earlier layouts may have exited since without our noticing yet:
         * if it fails before answering, one fresh worker gets the request. */
        int idle_before = renderer__uses > 0;
        renderer__uses++;
        STAT(renders);
        double ms = timeout * 1000.0 + 0.5;
        h = (tgc_renderer_header){TGC_RENDERER_MAGIC, ms > 4e9 ? 4000000000u : (uint32_t)ms,
                                  (uint64_t)dot_len};
        io = renderer__io(renderer__fd, &h, sizeof(h), 1, deadline);
        if (io == 0) {
            io = renderer__io(renderer__fd, (void *)dot, dot_len, 1, deadline);
        }
        if (io == 0) {
            io = renderer__io(renderer__fd, &h, sizeof(h), 0, deadline);
        }
        if (io < 0 && idle_before && attempt == 0) {
            renderer__died(err, err_len);
            continue;
        }
        break;
    }
    if (io == 0 && (h.magic != TGC_RENDERER_MAGIC || h.status > 1 || h.len > TGC_RENDERER_MAX_SVG)) {
        renderer__drop();
        snprintf(err, err_len, "the render worker's answer was malformed or too large");
        goto done;
    }
    if (io == 0) {
        out = malloc(h.len + 1);
        if (out == NULL) {
            renderer__drop();
            snprintf(err, err_len, "out of memory for the render worker's answer");
            goto done;
        }
        io = renderer__io(renderer__fd, out, h.len, 0, deadline);
    }
    if (io == 1) {
        renderer__drop();
        STAT(killed);
        snprintf(err, err_len, "the layout took longer than its %.3g s budget and was stopped",
                 timeout);
        rc = TGC_RENDER_TIMEOUT;
        goto done;
    }
    if (io < 0) {
        renderer__died(err, err_len);
        goto done;
    }
    out[h.len] = '\0';
    if (renderer__now() > deadline) {
        /* The answer came, but after the deadline (the deadline is checked whenever we wait; a
         * caller descheduled past it finds the answer waiting). Over budget is over budget: the
         * same answer whatever the machine's load. The worker is idle and kept. */
        snprintf(err, err_len, "the layout took longer than its %.3g s budget and was stopped",
                 timeout);
        rc = TGC_RENDER_TIMEOUT;
        goto done;
    }
    if (h.status != 0) {
        snprintf(err, err_len, "%s", out);
        goto done;
    }
    *svg = out;
    *svg_len = h.len;
    out = NULL;
    rc = TGC_RENDER_OK;
done:
    pthread_mutex_unlock(&renderer__lock);
    free(out);
    return rc;
}

void
tgc_renderer_get_stats(tgc_renderer_stats *s)
{
    pthread_mutex_lock(&renderer__small);
    *s = renderer__stats;
    pthread_mutex_unlock(&renderer__small);
}

void
tgc_renderer_shutdown(void)
{
    pthread_mutex_lock(&renderer__lock);
    renderer__drop();
    pthread_mutex_unlock(&renderer__lock);
}
