/* renderer.h: DOT -> SVG under a deadline, in a worker process (renderer.c is the client,
 * render_main.c the worker). Plain C, no Python.
 *
 * Why a process: Graphviz's dot layout has no time bound (some graphs of a few hundred nodes run
 * for minutes in mincross), leaks a few KB per layout (2.43), and can crash on odd input. A layout
 * inside the user's process would stall the training step for as long as it runs; a thread cannot
 * be stopped mid-layout. A worker process can be killed, and its leaks and crashes die with it.
 *
 * Contract:
 * - tgc_renderer_svg returns within timeout_s plus the time to start the worker (a few
 *   milliseconds), whatever the DOT and whatever the worker does: every wait is bounded by the
 *   deadline, and a worker that overruns it is killed (SIGKILL) and reaped; the next call starts
 *   a new one. An interrupt check, when given, is asked at least every TGC_RENDERER_POLL_MS while
 *   waiting; when it says stop, the layout is abandoned (its worker killed) within that time.
 * - The worker is ours alone and never the user's business:
 *   - it is started as a "clone child" (its exit signal is 0, not SIGCHLD): the program's own
 *     wait(), waitpid(-1) and SIGCHLD handlers never see it or reap it, and it sends no SIGCHLD;
 *     only we reap it, by its pid (at the next call, when it is replaced, and at shutdown);
 *   - our socket is known by identity (device and inode), not by number, checked before every
 *     send and receive (and at least every TGC_RENDERER_POLL_MS while waiting): a descriptor that
 *     the program closed (os.closerange) or replaced (dup2), before a layout or during one from
 *     another thread, is never used, read, written to or closed by us; the worker is then
 *     replaced (once per layout: the request goes to a fresh worker within the same budget);
 *   - its life is tied to the process, not to the thread that started it: it exits at end of
 *     input, when the socket's other end closes (the process exited, even mid-layout: a thread
 *     in the worker watches for the hang-up), after TGC_RENDERER_IDLE_S idle seconds, and when a
 *     layout overruns its budget by a second (alarm: a backstop for a parent that cannot kill it).
 *   - One worker per process at most, started on first use, retired after TGC_RENDERER_USES
 *     layouts (bounding what Graphviz's leaks can grow to). A forked child closes its parent's
 *     worker's socket at once (when it is still ours) and starts its own worker when it renders.
 * - Thread safe: one mutex serialises layouts; the budget counts from the call, so waiting for
 *   another thread's layout spends it. A fork never waits for a layout (only for a worker being
 *   started, milliseconds): the thread laying out may need the GIL that the forking thread
 *   holds. A shutdown waits for the layout in progress only: later layouts let it go first.
 *   A layout asked for by the thread whose own layout is waiting (from a signal handler that the
 *   interrupt check ran) fails at once. Settings and counters have their own lock and never wait
 *   for a layout.
 * - Bounded: requests over TGC_RENDERER_MAX_DOT and answers over TGC_RENDERER_MAX_SVG are refused;
 *   the worker runs with its address space capped at TGC_RENDERER_MAX_AS (not under
 *   AddressSanitizer, whose shadow memory needs far more address space). */
#ifndef TGC_RENDERER_H
#define TGC_RENDERER_H

#include <stddef.h>
#include <stdint.h>

#define TGC_RENDERER_USES 256
#define TGC_RENDERER_IDLE_S 30  /* the worker exits after this long without a request */
#define TGC_RENDERER_POLL_MS 40  /* the interrupt check's period while waiting */
#define TGC_RENDERER_MAX_DOT ((uint64_t)16 << 20)
#define TGC_RENDERER_MAX_SVG ((uint64_t)32 << 20)
#define TGC_RENDERER_MAX_AS ((uint64_t)4 << 30)
#define TGC_RENDERER_FD_FLOOR 256  /* our socket's number is moved to this or above when it can */

/* Wire format (same machine, native byte order): a request is the magic, then the DOT's length
 * and bytes; an answer is the magic, a status (0: SVG follows; 1: an error message follows), the
 * length and the bytes. */
#define TGC_RENDERER_MAGIC 0x54474352u  /* "TGCR" */
typedef struct {
    uint32_t magic;
    uint32_t status;  /* in a request: the budget in milliseconds (the worker's own backstop) */
    uint64_t len;
} tgc_renderer_header;

enum {
    TGC_RENDER_OK = 0,
    TGC_RENDER_FAILED = -1,
    TGC_RENDER_TIMEOUT = -2,
    TGC_RENDER_INTERRUPTED = -3,  /* the interrupt check said stop */
};

/* Asked while a render waits (for the lock, or for the worker): nonzero stops the render. Called
 * on the rendering thread, with or without renderer.c's layout lock held; a render it asks for
 * fails at once (TGC_RENDER_FAILED), a shutdown it asks for does nothing. */
typedef struct {
    int (*stop)(void *arg);
    void *arg;
} tgc_renderer_interrupt;

/* The worker executable's path (copied); until set, renders fail with a message saying so. */
int tgc_renderer_set_path(const char *path);
/* The deadline of later renders, in seconds (> 0; checked by the caller). */
void tgc_renderer_set_timeout(double seconds);
double tgc_renderer_timeout(void);
/* Lays out dot (len bytes, NUL-terminated) within the deadline. TGC_RENDER_OK with a malloc'd
 * SVG; TGC_RENDER_FAILED, TGC_RENDER_TIMEOUT or TGC_RENDER_INTERRUPTED with a message in err.
 * intr may be NULL (no interrupt check). */
int tgc_renderer_svg(const char *dot, size_t dot_len, char **svg, size_t *svg_len,
                     char *err, size_t err_len, const tgc_renderer_interrupt *intr);
/* Counters for tests: workers started, killed at the deadline or on an interrupt, retired,
 * replaced because their socket was no longer ours. */
typedef struct {
    uint64_t started, killed, retired, renders, lost, interrupted;
    long pid;  /* the worker's pid, 0 when none */
    int fd;    /* our socket's number, -1 when none */
} tgc_renderer_stats;
void tgc_renderer_get_stats(tgc_renderer_stats *out);
/* Stops the worker (at interpreter exit): waits for the layout in progress, if any, not for
 * later ones. */
void tgc_renderer_shutdown(void);

#endif /* TGC_RENDERER_H */
