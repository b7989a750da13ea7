/* renderer.c: the client side of the render worker (contract in renderer.h). Starts the worker
 * as a clone child that only we can wait for, talks to it over a socket pair known by identity,
 * and kills it when a layout overruns its deadline or is interrupted. No Python here. */
#include "renderer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef __WALL
#define __WALL 0x40000000
#endif

extern char **environ;

/* The worker's state. renderer__lock is held for a whole layout (its holder may wait for the
 * GIL: the main thread's interrupt check takes it back). The fields a forked child reads
 * (renderer__path, renderer__fd, _dev, _ino, _pid, _adopted) are also written under
 * renderer__fds, which is held only while they change and while a worker is started (never for
 * a layout, never while waiting for anything but the kernel): a fork takes renderer__fds alone,
 * so it never waits for a layout, whose thread may be waiting for the GIL that the forking
 * thread holds (os.fork keeps it). */
static pthread_mutex_t renderer__lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t renderer__fds = PTHREAD_MUTEX_INITIALIZER;
static char *renderer__path;        /* malloc'd; NULL until set */
static pid_t renderer__pid;         /* 0: no worker */
static int renderer__adopted;       /* the worker is our own child (renderer.h): we reap it */
static int renderer__fd = -1;       /* our end of the socket pair, valid while renderer__ours() */
static dev_t renderer__dev;         /* ... and its identity, from fstat at spawn */
static ino_t renderer__ino;
static unsigned renderer__uses;     /* layouts by the current worker */
/* The thread holding renderer__lock (0: none), so that a layout asked for by the thread that
 * holds it (a signal handler that renders, or a collection inside one, run by the interrupt
 * check) fails at once instead of waiting for itself. Atomic: read without the lock. */
static pthread_t renderer__owner;
/* Shutdowns waiting for renderer__lock: new layouts let them go first (a mutex is not fair: a
 * thread that renders in a loop would starve a shutdown, and the interpreter's exit with it). */
static int renderer__closing;
/* Adopted workers stopped whose exit we could not see within a short wait (a process in
 * uninterruptible sleep): reaped at later calls. */
#define RENDERER_ORPHANS 8
static pid_t renderer__orphans[RENDERER_ORPHANS];
/* Settings and counters, protected by renderer__small, never held across a layout: reading
 * them must not wait for one (the callers hold the GIL). */
static pthread_mutex_t renderer__small = PTHREAD_MUTEX_INITIALIZER;
static double renderer__timeout = 2.0;
static tgc_renderer_stats renderer__stats = {.fd = -1};
static pthread_once_t renderer__atfork_once = PTHREAD_ONCE_INIT;

#define STAT(field) do { pthread_mutex_lock(&renderer__small); renderer__stats.field++; \
                         pthread_mutex_unlock(&renderer__small); } while (0)

static double
renderer__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void
renderer__sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* Whether renderer__fd still is the socket we made: the program may have closed its number
 * (os.closerange) and opened something else there, or dup2'd over it. Async-signal-safe. */
static int
renderer__ours(void)
{
    struct stat st;
    return renderer__fd >= 0 && fstat(renderer__fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
           st.st_dev == renderer__dev && st.st_ino == renderer__ino;
}

/* Whether the worker still holds its end of our socket (waiting up to wait_ms for it to let go):
 * it is alive, and its pid is its own. Only the worker holds that end: it is close-on-exec here,
 * and closed by us right after the worker started. */
static int
renderer__peer_alive(int wait_ms)
{
    if (!renderer__ours()) {
        return 0;
    }
    struct pollfd p = {renderer__fd, POLLRDHUP, 0};
    double until = renderer__now() + wait_ms / 1000.0;
    for (;;) {
        int left = (int)((until - renderer__now()) * 1000.0);
        int n = poll(&p, 1, left > 0 ? left : 0);
        if (n > 0) {
            return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
        }
        if (n == 0) {
            return 1;
        }
        if (errno != EINTR) {
            return 1;  /* cannot tell: as if alive (a kill then reaches a live worker) */
        }
    }
}

/* Closes our socket if the number is still ours; leaves the program's descriptor alone.
 * renderer__fds held (or in a forked child). */
static void
renderer__close_fd(void)
{
    if (renderer__ours()) {
        close(renderer__fd);
    }
    renderer__fd = -1;
}

static void
renderer__publish(void)
{
    pthread_mutex_lock(&renderer__small);
    renderer__stats.pid = renderer__pid;
    renderer__stats.fd = renderer__fd;
    pthread_mutex_unlock(&renderer__small);
}

/* A fork waits only for a worker being started (renderer__fds: the socket pair made and handed
 * over, milliseconds), never for a layout in progress: the thread laying out may be the main
 * thread, whose interrupt check takes back the GIL that the forking thread holds through
 * os.fork, while the fork would wait for its layout lock (a deadlock, found with a thread that
 * forks while the main thread draws). The child forgets its parent's worker at once: it closes
 * its copy of the socket (so the worker sees end of input when the parent goes, and the
 * descriptor's number is not closed later under whatever the child opened there) and starts its
 * own worker when it first renders. The layout lock, which a thread that does not exist in the
 * child may have held, starts afresh there. The worker is not the child's: it is neither killed
 * nor waited for here. */
static void
renderer__before_fork(void)
{
    pthread_mutex_lock(&renderer__fds);
    pthread_mutex_lock(&renderer__small);
}

static void
renderer__after_fork_parent(void)
{
    pthread_mutex_unlock(&renderer__small);
    pthread_mutex_unlock(&renderer__fds);
}

static void
renderer__after_fork_child(void)
{
    static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    renderer__close_fd();
    renderer__fd = -1;
    renderer__pid = 0;
    renderer__adopted = 0;
    renderer__uses = 0;
    memset(renderer__orphans, 0, sizeof(renderer__orphans));
    memcpy(&renderer__lock, &fresh, sizeof(fresh));
    memset(&renderer__owner, 0, sizeof(renderer__owner));
    renderer__closing = 0;
    renderer__stats.pid = 0;
    renderer__stats.fd = -1;
    pthread_mutex_unlock(&renderer__small);
    pthread_mutex_unlock(&renderer__fds);
}

static void
renderer__register_atfork(void)
{
    (void)pthread_atfork(renderer__before_fork, renderer__after_fork_parent,
                         renderer__after_fork_child);
}

/* Waits up to wait_s for our child pid to exit and reaps it: 1 reaped (status in *status), 0
 * still there, -1 not ours to wait for (someone else reaped it). Lock held. */
static int
renderer__reap(pid_t pid, double wait_s, int *status)
{
    double until = renderer__now() + wait_s;
    for (;;) {
        int st = 0;
        pid_t got = waitpid(pid, &st, WNOHANG | __WALL);
        if (got == pid) {
            if (status != NULL) {
                *status = st;
            }
            return 1;
        }
        if (got < 0 && errno != EINTR) {
            return -1;
        }
        if (got == 0 && renderer__now() >= until) {
            return 0;
        }
        if (got == 0) {
            renderer__sleep_ms(2);
        }
    }
}

static void
renderer__reap_orphans(void)
{
    for (int i = 0; i < RENDERER_ORPHANS; i++) {
        if (renderer__orphans[i] != 0 && renderer__reap(renderer__orphans[i], 0.0, NULL) != 0) {
            renderer__orphans[i] = 0;
        }
    }
}

/* An adopted worker that is exiting: reaped within wait_s (1, with its status), else kept among
 * the orphans for later calls (0). */
static int
renderer__reap_adopted(pid_t pid, double wait_s, int *status)
{
    int got = renderer__reap(pid, wait_s, status);
    if (got == 0) {
        for (int i = 0; i < RENDERER_ORPHANS; i++) {
            if (renderer__orphans[i] == 0) {
                renderer__orphans[i] = pid;
                return 0;
            }
        }
        got = renderer__reap(pid, 1e9, status);  /* eight stuck already: do not lose track */
    }
    return got;
}

/* Forgets the worker: our socket closed (when still ours: the worker then sees end of input and
 * exits; a number the program took over is left alone), and an adopted worker reaped within
 * wait_s (renderer__reap_adopted's answer, with its status; 0 when not adopted). Lock held. */
static int
renderer__forget(double wait_s, int *status)
{
    pthread_mutex_lock(&renderer__fds);
    pid_t pid = renderer__pid;
    int adopted = renderer__adopted;
    renderer__close_fd();
    renderer__pid = 0;
    renderer__adopted = 0;
    pthread_mutex_unlock(&renderer__fds);
    renderer__uses = 0;
    renderer__publish();
    return adopted && pid > 0 ? renderer__reap_adopted(pid, wait_s, status) : 0;
}

/* Stops the worker now: killed while it still holds its end of our socket (so the pid is its
 * own), and waited for until it lets go of it (SIGKILL cannot be caught: a short wait). */
static void
renderer__kill(void)
{
    if (renderer__pid > 0 && renderer__peer_alive(0)) {
        kill(renderer__pid, SIGKILL);
        (void)renderer__peer_alive(1000);
    }
}

static void
renderer__drop(void)
{
    renderer__kill();
    (void)renderer__forget(1.0, NULL);
}

/* The program closed our socket or put another file at its number (os.closerange, dup2), before
 * a layout or during one (from another thread): that number is the program's now, never read,
 * written or closed by us again. The worker sees end of input (or will, when its last copy
 * goes) and exits; it is not killed (without its socket, its pid is not known to be its own).
 * Lock held. */
static void
renderer__lost(void)
{
    (void)renderer__forget(0.0, NULL);
    STAT(lost);
}

/* ------------------------------------------------------------------------------------------ */
/* Starting the worker                                                                          */

/* The worker is started through a middle process, so that it is nobody's child here:
 *   we --clone(CLONE_VM|CLONE_VFORK, exit signal 0)--> middle --clone(CLONE_VM|CLONE_VFORK)-->
 *   worker, execve; middle _exit()s.
 * The middle never calls execve, so it stays a "clone child" (exec would reset its exit signal
 * to SIGCHLD): the program's wait() and SIGCHLD never see it; we reap it at once with __WALL.
 * The worker, orphaned when the middle exits, becomes init's child (or a child subreaper's:
 * renderer__adopted). Both run on our memory while our thread is suspended (CLONE_VFORK), like
 * posix_spawn's child: no allocation, no locks; errno is our thread's (restored after). */
typedef struct {
    const char *path;
    char **argv;
    int sock;            /* the worker's end, >= 3 so that dup2 to 0 and 1 always copies it */
    char *worker_stack;  /* the top of the worker's stack */
    volatile int failed; /* execve's errno, written by the worker when exec returns */
    volatile int clone_failed;  /* the middle's clone errno */
    volatile pid_t worker;      /* written by the middle */
} renderer__spawn_args;

/* Every signal back to its default, except SIGINT: a Ctrl-C meant for the job is not the
 * worker's (the job's exit ends it through end of input). */
__attribute__((no_sanitize_address)) static int
renderer__worker_start(void *p)
{
    renderer__spawn_args *a = p;
    struct sigaction dfl, ign;
    memset(&dfl, 0, sizeof(dfl));
    memset(&ign, 0, sizeof(ign));
    dfl.sa_handler = SIG_DFL;
    ign.sa_handler = SIG_IGN;
    for (int s = 1; s < NSIG; s++) {
        if (s != SIGKILL && s != SIGSTOP) {
            (void)sigaction(s, s == SIGINT ? &ign : &dfl, NULL);  /* glibc's own: EINVAL */
        }
    }
    if (dup2(a->sock, 0) < 0 || dup2(a->sock, 1) < 0) {
        a->failed = errno;
        _exit(127);
    }
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0 && null != 2) {
        (void)dup2(null, 2);
        close(null);
    }
    sigset_t none;
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    execve(a->path, a->argv, environ);
    a->failed = errno != 0 ? errno : ENOEXEC;
    _exit(127);
}

__attribute__((no_sanitize_address)) static int
renderer__middle(void *p)
{
    renderer__spawn_args *a = p;
    pid_t pid = clone(renderer__worker_start, a->worker_stack, CLONE_VM | CLONE_VFORK | SIGCHLD, a);
    if (pid < 0) {
        a->clone_failed = errno;
        _exit(1);
    }
    a->worker = pid;
    if (a->failed != 0) {
        (void)waitpid(pid, NULL, 0);  /* it exited at once: nobody else's zombie */
        _exit(1);
    }
    _exit(0);
}

/* A descriptor moved to TGC_RENDERER_FD_FLOOR or above (close-on-exec) where the limit allows,
 * else to 3 or above: out of the way of the small numbers programs pick themselves. */
static int
renderer__move_up(int fd)
{
    int floor = TGC_RENDERER_FD_FLOOR;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)floor * 2) {
        floor = 3;
    }
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (moved < 0 && floor != 3) {
        moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    }
    if (moved < 0) {
        return fd;  /* keep the number it has */
    }
    close(fd);
    return moved;
}

/* Whether orphans of ours become our children: PID 1 of a container, or a child subreaper. */
static int
renderer__we_reap_orphans(void)
{
    int sub = 0;
    return getpid() == 1 || (prctl(PR_GET_CHILD_SUBREAPER, &sub) == 0 && sub != 0);
}

#define RENDERER_STACK (128 << 10)  /* each of the two */

/* Starts a worker; 0, or -1 with a message. Lock held. */
static int
renderer__spawn(char *err, size_t err_len)
{
    int sv[2] = {-1, -1};
    char *stacks = MAP_FAILED;
    sigset_t all, saved;

    /* Held until the worker is recorded: a fork meanwhile would hand its child copies of both
     * ends, unrecorded (the worker's end kept open, our end never closed there). */
    pthread_mutex_lock(&renderer__fds);
    if (renderer__path == NULL) {
        pthread_mutex_unlock(&renderer__fds);
        snprintf(err, err_len, "the render worker's path is not set");
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, err_len, "could not make the render worker's socket: %s", strerror(errno));
        goto fail_socket;
    }
    sv[0] = renderer__move_up(sv[0]);
    sv[1] = renderer__move_up(sv[1]);
    if (sv[1] < 3) {  /* dup2 onto its own number would keep close-on-exec */
        snprintf(err, err_len, "could not make the render worker's socket: no descriptor above 2");
        goto fail_stack;
    }
    stacks = mmap(NULL, 2 * RENDERER_STACK, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stacks == MAP_FAILED) {
        snprintf(err, err_len, "could not start the render worker: %s", strerror(errno));
        goto fail_stack;
    }
    char *argv[] = {renderer__path, NULL};
    renderer__spawn_args args = {renderer__path, argv, sv[1], stacks + 2 * RENDERER_STACK, 0, 0, 0};
    int adopted = renderer__we_reap_orphans();
    /* No handler of ours or the program's may run in the children while they share our memory. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    int saved_errno = errno;
    pid_t middle = clone(renderer__middle, stacks + RENDERER_STACK, CLONE_VM | CLONE_VFORK, &args);
    int middle_errno = errno;
    if (middle > 0) {
        /* It has exited (CLONE_VFORK returns then, as it never calls execve): reap it. */
        while (waitpid(middle, NULL, __WALL) < 0 && errno == EINTR) {
        }
    }
    errno = saved_errno;
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    munmap(stacks, 2 * RENDERER_STACK);
    close(sv[1]);
    sv[1] = -1;
    if (middle < 0 || args.clone_failed != 0) {
        snprintf(err, err_len, "could not start the render worker: %s",
                 strerror(middle < 0 ? middle_errno : args.clone_failed));
        goto fail_clone;
    }
    if (args.failed != 0) {
        snprintf(err, err_len, "could not start the render worker %s: %s", renderer__path,
                 strerror(args.failed));
        goto fail_clone;
    }
    struct stat st;
    if (fstat(sv[0], &st) < 0) {
        snprintf(err, err_len, "could not start the render worker: %s", strerror(errno));
        goto fail_clone;  /* closing our end ends the worker */
    }
    (void)fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    renderer__fd = sv[0];
    renderer__dev = st.st_dev;
    renderer__ino = st.st_ino;
    renderer__pid = args.worker;
    renderer__adopted = adopted;
    pthread_mutex_unlock(&renderer__fds);
    renderer__uses = 0;
    pthread_mutex_lock(&renderer__small);
    renderer__stats.started++;
    pthread_mutex_unlock(&renderer__small);
    renderer__publish();
    return 0;

fail_clone:
fail_stack:
    close(sv[0]);
    if (sv[1] >= 0) {
        close(sv[1]);
    }
fail_socket:
    pthread_mutex_unlock(&renderer__fds);
    return -1;
}

/* Waits until fd is ready for events, the deadline passes or the interrupt check says stop:
 * 1 ready, 0 timed out, -1 error, -2 interrupted. Wakes at least every TGC_RENDERER_POLL_MS
 * (1 then, as ready): the caller checks that fd is still ours before using it, so that a socket
 * the program put at its number meanwhile is noticed within that time, not at the deadline. */
static int
renderer__wait(int fd, short events, double deadline, const tgc_renderer_interrupt *intr)
{
    for (;;) {
        double left = deadline - renderer__now();
        if (left <= 0) {
            return 0;
        }
        if (intr != NULL && intr->stop(intr->arg)) {
            return -2;
        }
        struct pollfd p = {fd, events, 0};
        int ms = left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
        int capped = ms > TGC_RENDERER_POLL_MS;
        if (capped) {
            ms = TGC_RENDERER_POLL_MS;
        }
        int n = poll(&p, 1, ms);
        if (n > 0 || (n == 0 && capped && !renderer__ours())) {
            return 1;
        }
        if (n < 0 && errno != EINTR) {
            return -1;
        }
    }
}

/* Sends or receives exactly n bytes before the deadline: 0, 1 timed out, -1 broken (errno),
 * -2 interrupted, -3 lost (the number is no longer our socket: renderer__lost). Never blocks:
 * MSG_DONTWAIT whatever the descriptor's flags. The socket's identity is checked before every
 * send and receive, not only before the layout: another thread of the program may close the
 * number or dup2 its own socket over it mid-layout, and we would then read the program's data
 * (found: our 16-byte header taken from the program's socket) or write ours into it. */
static int
renderer__io(int fd, void *p, size_t n, int sending, double deadline,
             const tgc_renderer_interrupt *intr)
{
    char *c = p;
    while (n > 0) {
        if (!renderer__ours()) {
            return -3;
        }
        ssize_t k = sending ? send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(fd, c, n, MSG_DONTWAIT);
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
        int w = renderer__wait(fd, sending ? POLLOUT : POLLIN, deadline, intr);
        if (w <= 0) {
            return w == 0 ? 1 : w == -2 ? -2 : -1;
        }
    }
    return 0;
}

/* Why the worker stopped answering, for the message: it closed its socket, so it is gone or
 * exiting (a crash inside Graphviz is answered by the worker itself, render_main.c). Lock held. */
static void
renderer__died(char *err, size_t err_len)
{
    int status = 0;
    int got = renderer__forget(1.0, &status);
    if (got == 1 && WIFSIGNALED(status)) {
        snprintf(err, err_len, "the render worker died of signal %d while drawing this graph",
                 WTERMSIG(status));
    }
    else if (got == 1 && WIFEXITED(status)) {
        snprintf(err, err_len, "the render worker exited with status %d while drawing this graph",
                 WEXITSTATUS(status));
    }
    else {
        snprintf(err, err_len, "the render worker died while drawing this graph (killed from "
                 "outside, or out of memory)");
    }
}

int
tgc_renderer_set_path(const char *path)
{
    char *copy = strdup(path);
    if (copy == NULL) {
        return -1;
    }
    pthread_mutex_lock(&renderer__fds);  /* what spawn reads; never waits for a layout */
    free(renderer__path);
    renderer__path = copy;
    pthread_mutex_unlock(&renderer__fds);
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

static int
renderer__mine(void)
{
    pthread_t owner;
    __atomic_load(&renderer__owner, &owner, __ATOMIC_ACQUIRE);
    return owner != 0 && pthread_equal(owner, pthread_self());
}

/* renderer__lock taken (on) or about to be given back (off): renderer__owner says by whom. */
static void
renderer__hold(int on)
{
    pthread_t owner = on ? pthread_self() : 0;
    __atomic_store(&renderer__owner, &owner, __ATOMIC_RELEASE);
}

/* Takes renderer__lock by the deadline: 0, 1 when another layout held it all that time, 2 when
 * the interrupt check said stop first, 3 when this thread holds it already (a layout asked for
 * from inside the interrupt check: a signal handler). */
static int
renderer__lock_by(double deadline, const tgc_renderer_interrupt *intr)
{
    if (renderer__mine()) {
        return 3;
    }
    double next_check = renderer__now() + TGC_RENDERER_POLL_MS / 1000.0;
    for (;;) {
        if (__atomic_load_n(&renderer__closing, __ATOMIC_ACQUIRE) > 0) {
            /* a shutdown waits for the lock: it goes first */
            double now = renderer__now();
            if (now >= deadline) {
                return 1;
            }
            if (intr != NULL && now >= next_check) {
                next_check = now + TGC_RENDERER_POLL_MS / 1000.0;
                if (intr->stop(intr->arg)) {
                    return 2;
                }
            }
            renderer__sleep_ms(1);
            continue;
        }
        double left = deadline - renderer__now();
        if (left < 0) {
            left = 0;
        }
        if (intr != NULL && left > TGC_RENDERER_POLL_MS / 1000.0) {
            left = TGC_RENDERER_POLL_MS / 1000.0;
        }
        struct timespec abs;
        clock_gettime(CLOCK_REALTIME, &abs);
        abs.tv_sec += (time_t)left;
        abs.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
        if (abs.tv_nsec >= 1000000000L) {
            abs.tv_sec++;
            abs.tv_nsec -= 1000000000L;
        }
        int rc;
        while ((rc = pthread_mutex_timedlock(&renderer__lock, &abs)) == EINTR) {
        }
        if (rc == 0 && __atomic_load_n(&renderer__closing, __ATOMIC_ACQUIRE) > 0) {
            pthread_mutex_unlock(&renderer__lock);  /* taken as a shutdown came: it goes first */
            continue;
        }
        if (rc == 0) {
            renderer__hold(1);
            return 0;
        }
        if (renderer__now() >= deadline) {
            return 1;
        }
        if (intr != NULL && intr->stop(intr->arg)) {
            return 2;
        }
    }
}

/* Before a request: the worker we have is still usable, or forgotten. Lock held. */
static void
renderer__check_worker(void)
{
    renderer__reap_orphans();
    if (renderer__pid == 0) {
        return;
    }
    if (!renderer__ours()) {
        renderer__lost();  /* the program closed or replaced our socket */
        return;
    }
    if (renderer__uses >= TGC_RENDERER_USES) {
        renderer__drop();  /* retired: what Graphviz leaked goes with it */
        STAT(retired);
        return;
    }
    /* A worker that exited while idle (it does after TGC_RENDERER_IDLE_S, or someone killed it)
     * is replaced before it is asked. */
    if (!renderer__peer_alive(0)) {
        (void)renderer__forget(0.0, NULL);
    }
}

int
tgc_renderer_svg(const char *dot, size_t dot_len, char **svg, size_t *svg_len,
                 char *err, size_t err_len, const tgc_renderer_interrupt *intr)
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
    int locked = renderer__lock_by(deadline, intr);
    if (locked == 3) {
        snprintf(err, err_len, "a layout was asked for while this thread's own layout waits (from "
                 "a signal handler, or a collection inside one); not drawn");
        return TGC_RENDER_FAILED;
    }
    if (locked == 2) {
        snprintf(err, err_len, "the layout was interrupted");
        return TGC_RENDER_INTERRUPTED;
    }
    if (locked != 0) {
        snprintf(err, err_len, "the layout took longer than its %.3g s budget and was stopped "
                 "(other layouts held the render worker all that time)", timeout);
        return TGC_RENDER_TIMEOUT;
    }
    renderer__check_worker();
    tgc_renderer_header h;
    int io;
    for (int attempt = 0;; attempt++) {
        if (renderer__pid == 0 && renderer__spawn(err, err_len) < 0) {
            goto done;
        }
        /* A worker that served earlier layouts may have exited since without our noticing yet:
         * if it fails before answering, one fresh worker gets the request. So does a request
         * whose socket the program took over meanwhile (renderer__lost). */
        int idle_before = renderer__uses > 0;
        renderer__uses++;
        STAT(renders);
        double ms = timeout * 1000.0 + 0.5;
        h = (tgc_renderer_header){TGC_RENDERER_MAGIC, ms > 4e9 ? 4000000000u : (uint32_t)ms,
                                  (uint64_t)dot_len};
        io = renderer__io(renderer__fd, &h, sizeof(h), 1, deadline, intr);
        if (io == 0) {
            io = renderer__io(renderer__fd, (void *)dot, dot_len, 1, deadline, intr);
        }
        if (io == 0) {
            io = renderer__io(renderer__fd, &h, sizeof(h), 0, deadline, intr);
        }
        int answered = io == 0;
        if (io == 0 && (h.magic != TGC_RENDERER_MAGIC || h.status > 1 ||
                        h.len > TGC_RENDERER_MAX_SVG)) {
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
            io = renderer__io(renderer__fd, out, h.len, 0, deadline, intr);
        }
        if (io == -3) {
            renderer__lost();
            free(out);
            out = NULL;
            if (attempt == 0) {
                continue;
            }
            snprintf(err, err_len, "the program closed the render worker's socket while it drew "
                     "this graph (os.closerange or dup2 from another thread)");
            goto done;
        }
        if (io == -1 && idle_before && attempt == 0 && !answered) {
            renderer__died(err, err_len);
            continue;
        }
        break;
    }
    if (io == -2) {
        renderer__drop();  /* mid-layout: the worker's answer would arrive in the next request */
        STAT(interrupted);
        snprintf(err, err_len, "the layout was interrupted");
        rc = TGC_RENDER_INTERRUPTED;
        goto done;
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
    renderer__hold(0);
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
    if (renderer__mine()) {
        return;  /* asked from inside this thread's own layout (a signal handler): not now */
    }
    __atomic_add_fetch(&renderer__closing, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&renderer__lock);
    __atomic_sub_fetch(&renderer__closing, 1, __ATOMIC_ACQ_REL);
    renderer__hold(1);
    renderer__drop();
    for (int i = 0; i < RENDERER_ORPHANS; i++) {
        if (renderer__orphans[i] != 0) {
            (void)renderer__reap(renderer__orphans[i], 1.0, NULL);
            renderer__orphans[i] = 0;
        }
    }
    renderer__hold(0);
    pthread_mutex_unlock(&renderer__lock);
}
