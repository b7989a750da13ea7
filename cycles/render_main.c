/* render_main.c: the render worker, the executable tensorgc/_tgc_render (protocol and contract in
 * renderer.h). Reads DOT requests on stdin, answers with SVG or an error on stdout, one at a time,
 * until end of input, until it has been idle TGC_RENDERER_IDLE_S seconds, or until its parent's
 * process is gone (a thread watches the socket for the hang-up, even mid-layout). Runs Graphviz
 * (render.c) so that the user's process never does: its parent kills it when a layout overruns.
 * argv[1] is the parent's pid. Not part of the extension module. */
#include "render.h"
#include "renderer.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* AddressSanitizer maps terabytes of shadow memory: an address-space cap would stop every layout. */
#if defined(__SANITIZE_ADDRESS__)
#define RENDER_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RENDER_UNDER_ASAN 1
#endif
#endif

static int
io_all(int fd, void *p, size_t n, int writing)
{
    char *c = p;
    while (n > 0) {
        ssize_t k = writing ? write(fd, c, n) : read(fd, c, n);
        if (k > 0) {
            c += k;
            n -= (size_t)k;
        }
        else if (k < 0 && errno == EINTR) {
            continue;
        }
        else {
            return -1;  /* end of input or a broken socket: the parent is gone or done */
        }
    }
    return 0;
}

static int
answer(uint32_t status, const char *data, size_t len)
{
    tgc_renderer_header h = {TGC_RENDERER_MAGIC, status, (uint64_t)len};
    return io_all(1, &h, sizeof(h), 1) == 0 && io_all(1, (void *)data, len, 1) == 0 ? 0 : -1;
}

/* Dies with its parent's process, even mid-layout: the parent's deadline cannot stop us once
 * the parent is gone. The socket's other end closes when the last copy in the parent's process
 * goes (its exit, or our retirement), not when the thread that started us ends, as
 * PR_SET_PDEATHSIG would. Only the hang-up is asked for: a request arriving does not wake us. */
static void *
watch_parent(void *unused)
{
    (void)unused;
    for (;;) {
        struct pollfd p = {0, POLLRDHUP, 0};
        int n = poll(&p, 1, -1);
        if (n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
            _exit(0);
        }
    }
    return NULL;
}

/* Set while a layout runs (between reading a request and answering it). */
static volatile sig_atomic_t in_layout;

#ifndef RENDER_UNDER_ASAN  /* AddressSanitizer reports these itself */
/* Graphviz crashed on this graph: we are not our parent's child (renderer.c), so it cannot read
 * our exit status; answer with what happened instead, then die of the same signal. Only
 * async-signal-safe calls. */
static void
crashed(int sig)
{
    if (in_layout) {
        char msg[96] = "the render worker crashed inside Graphviz (signal ";
        size_t n = strlen(msg);
        if (sig >= 10) {
            msg[n++] = (char)('0' + sig / 10);
        }
        msg[n++] = (char)('0' + sig % 10);
        memcpy(msg + n, ") while drawing this graph", 27);
        n += 26;
        tgc_renderer_header h = {TGC_RENDERER_MAGIC, 1, (uint64_t)n};
        (void)!write(1, &h, sizeof(h));
        (void)!write(1, msg, n);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}
#endif

int
main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
#ifndef RENDER_UNDER_ASAN  /* AddressSanitizer reports these itself */
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++) {
        signal(fatal[i], crashed);
    }
#endif
    /* Descriptors the parent left open without close-on-exec are not ours to hold (a pipe's
     * write end held here keeps its reader from seeing end of input). All of them: a loop up to
     * the soft limit missed those above it (opened before the program lowered its limit) and
     * those above 65536. */
    int closed = -1;
#ifdef SYS_close_range
    closed = (int)syscall(SYS_close_range, 3u, ~0u, 0u);
#endif
    if (closed != 0) {  /* a kernel before 5.9 */
        long maxfd = sysconf(_SC_OPEN_MAX);
        for (long fd = 3; fd < (maxfd > 0 && maxfd < 65536 ? maxfd : 65536); fd++) {
            close((int)fd);
        }
    }
    /* A Ctrl-C meant for the job is not ours; the parent's exit ends us through end of input. */
    signal(SIGINT, SIG_IGN);
#ifndef RENDER_UNDER_ASAN
    struct rlimit as = {TGC_RENDERER_MAX_AS, TGC_RENDERER_MAX_AS};
    (void)setrlimit(RLIMIT_AS, &as);  /* a runaway layout fails here, not in the machine's swap */
#endif
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, watch_parent, NULL) != 0) {
        return 4;  /* no way to notice the parent's exit mid-layout: do not start one */
    }
    (void)pthread_detach(watcher);
    struct rlimit core = {0, 0};
    (void)setrlimit(RLIMIT_CORE, &core);

    for (;;) {
        /* Idle too long: exit, so that a parent waiting for all its children is not held up
         * forever (it starts another worker when it next draws). */
        struct pollfd p = {0, POLLIN, 0};
        int ready;
        while ((ready = poll(&p, 1, TGC_RENDERER_IDLE_S * 1000)) < 0 && errno == EINTR) {
        }
        if (ready == 0) {
            return 0;
        }
        tgc_renderer_header h;
        if (io_all(0, &h, sizeof(h), 0) < 0) {
            return 0;
        }
        if (h.magic != TGC_RENDERER_MAGIC || h.len > TGC_RENDERER_MAX_DOT) {
            return 2;  /* not our parent talking: stop */
        }
        char *dot = malloc(h.len + 1);
        if (dot == NULL) {
            return 3;
        }
        if (io_all(0, dot, h.len, 0) < 0) {
            free(dot);
            return 0;
        }
        dot[h.len] = '\0';
        char *svg = NULL, err[640] = "";
        size_t len = 0;
        int rc;
        if (strlen(dot) != h.len) {
            snprintf(err, sizeof(err), "the graph contains a NUL character");
            rc = -1;
        }
        else {
            /* A backstop for the parent's deadline: a second past it, SIGALRM ends us. */
            alarm((unsigned)(h.status / 1000) + 2);
            in_layout = 1;
            rc = tgc_render_svg(dot, (size_t)h.len, &svg, &len, err, sizeof(err));
            in_layout = 0;
            alarm(0);
        }
        free(dot);
        int sent = rc == 0 ? answer(0, svg, len) : answer(1, err, strlen(err));
        free(svg);
        if (sent < 0) {
            return 0;
        }
    }
}
