/* renderer.h: DOT -> SVG under a deadline, in a worker process (renderer.c is the client,
 * render_main.c the worker). Plain C, no Python.
 *
 * Why a process: Graphviz's dot layout has no time bound (some graphs of a few hundred nodes run
 * for minutes in mincross), leaks a few KB per layout (2.43), and can crash on odd input. A layout
 * inside the user's process would stall the training step for as long as it runs; a thread cannot
 * be stopped mid-layout. A worker process can be killed, and its leaks and crashes die with it.
 *
 * Contract:
 * - tgc_renderer_svg returns within timeout_s plus the time to start the worker (posix_spawn, a
 *   few milliseconds), whatever the DOT: a worker that overruns is killed (SIGKILL) and reaped,
 *   and the next call starts a new one.
 * - One worker per process at most, started on first use, retired after TGC_RENDERER_USES layouts
 *   (bounding what Graphviz's leaks can grow to) and at shutdown; it exits by itself after
 *   TGC_RENDERER_IDLE_S idle seconds (so code that waits for all its children is held up that
 *   long at most), when its parent dies (PR_SET_PDEATHSIG, and end of input), and when a layout
 *   overruns the budget by a second (alarm: a backstop for a parent that cannot kill it). A forked
 *   child closes its parent's worker's socket at once and starts its own worker when it renders.
 * - Thread safe: one mutex serialises layouts; the budget counts from the call, so waiting for
 *   another thread's layout spends it (a fork waits for the layout in progress). Settings and
 *   counters have their own lock and never wait for a layout.
 * - Bounded: requests over TGC_RENDERER_MAX_DOT and answers over TGC_RENDERER_MAX_SVG are refused;
 *   the worker runs with its address space capped at TGC_RENDERER_MAX_AS. */
#ifndef TGC_RENDERER_H
#define TGC_RENDERER_H

#include <stddef.h>
#include <stdint.h>

#define TGC_RENDERER_USES 256
#define TGC_RENDERER_IDLE_S 30  /* the worker exits after this long without a request */
#define TGC_RENDERER_MAX_DOT ((uint64_t)16 << 20)
#define TGC_RENDERER_MAX_SVG ((uint64_t)32 << 20)
#define TGC_RENDERER_MAX_AS ((uint64_t)4 << 30)

/* Wire format (same machine, native byte order): a request is the magic, then the DOT's length
 * and bytes; an answer is the magic, a status (0: SVG follows; 1: an error message follows), the
 * length and the bytes. */
#define TGC_RENDERER_MAGIC 0x54474352u  /* "TGCR" */
typedef struct {
    uint32_t magic;
    uint32_t status;  /* in a request: the budget in milliseconds (the worker's own backstop) */
    uint64_t len;
} tgc_renderer_header;

enum { TGC_RENDER_OK = 0, TGC_RENDER_FAILED = -1, TGC_RENDER_TIMEOUT = -2 };

/* The worker executable's path (copied); until set, renders fail with a message saying so. */
int tgc_renderer_set_path(const char *path);
/* The deadline of later renders, in seconds (> 0; checked by the caller). */
void tgc_renderer_set_timeout(double seconds);
double tgc_renderer_timeout(void);
/* Lays out dot (len bytes, NUL-terminated) within the deadline. TGC_RENDER_OK with a malloc'd
 * SVG; TGC_RENDER_FAILED or TGC_RENDER_TIMEOUT with a message in err. */
int tgc_renderer_svg(const char *dot, size_t dot_len, char **svg, size_t *svg_len,
                     char *err, size_t err_len);
/* Counters for tests: workers started, killed at the deadline, retired. */
typedef struct {
    uint64_t started, killed, retired, renders;
    long pid;  /* the worker's pid, 0 when none */
} tgc_renderer_stats;
void tgc_renderer_get_stats(tgc_renderer_stats *out);
/* Stops the worker (at interpreter exit). */
void tgc_renderer_shutdown(void);

#endif /* TGC_RENDERER_H */
