/* render_main.c: the render worker, the executable tensorgc/_tgc_render (protocol and contract in
 * renderer.h). Reads DOT requests on stdin, answers with SVG or an error on stdout, one at a time,
 * until end of input, until it has been idle TGC_RENDERER_IDLE_S seconds, or until its parent dies.
 * Runs Graphviz (render.c) so that the user's process never does: its parent kills it when a
 * layout overruns. argv[1] is the parent's pid. Not part of the extension module. */
#include "render.h"
#include "renderer.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
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

int
main(int argc, char **argv)
{
    /* Dies with its parent, even mid-layout: the parent's deadline cannot stop us once the
     * parent is gone. (The signal comes when the thread that started us ends, too: the parent
     * then starts another worker.) */
#ifdef __linux__
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    if (argc > 1 && (long)getppid() != strtol(argv[1], NULL, 10)) {
        return 0;  /* the parent died before the line above took effect */
    }
    /* Descriptors the parent left open without close-on-exec are not ours to hold. */
    long maxfd = sysconf(_SC_OPEN_MAX);
    for (long fd = 3; fd < (maxfd > 0 && maxfd < 65536 ? maxfd : 65536); fd++) {
        close((int)fd);
    }
    /* A Ctrl-C meant for the job is not ours; the parent's exit ends us through end of input. */
    signal(SIGINT, SIG_IGN);
    struct rlimit as = {TGC_RENDERER_MAX_AS, TGC_RENDERER_MAX_AS};
    (void)setrlimit(RLIMIT_AS, &as);  /* a runaway layout fails here, not in the machine's swap */
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
            rc = tgc_render_svg(dot, (size_t)h.len, &svg, &len, err, sizeof(err));
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
