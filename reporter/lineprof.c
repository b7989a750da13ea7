/* lineprof.c: the line profiler's engine (contract in include/tensorgc/lineprof.h): folds the
 * memory readings taken at the events of profiled code into one record per (code, line), and
 * reads process memory for machines without CUDA. Plain C; the events come from
 * lineprof_events.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tensorgc/lineprof.h"

#define LP_SLOT(p, c, i) ((c)->slots + (size_t)(i) * (1 + 2 * (p)->nkeys))

int
tgc_lp_init(tgc_lp *p, size_t nkeys, const uint8_t *folds)
{
    memset(p, 0, sizeof(*p));
    p->nkeys = nkeys;
    p->folds = malloc(nkeys ? nkeys : 1);
    if (p->folds == NULL) {
        return -1;
    }
    memcpy(p->folds, folds, nkeys);
    return 0;
}

void
tgc_lp_free(tgc_lp *p)
{
    for (uint32_t i = 0; i < p->ncodes; i++) {
        free(p->codes[i].lines);
        free(p->codes[i].slots);
    }
    free(p->codes);
    free(p->frames);
    free(p->framevals);
    free(p->folds);
    memset(p, 0, sizeof(*p));
}

void
tgc_lp_reset(tgc_lp *p)
{
    for (uint32_t i = 0; i < p->ncodes; i++) {
        free(p->codes[i].lines);
        free(p->codes[i].slots);
        p->codes[i].lines = NULL;
        p->codes[i].slots = NULL;
        p->codes[i].nlines = p->codes[i].caplines = 0;
    }
    p->nframes = 0;
    p->lines = 0;
}

int
tgc_lp_find(const tgc_lp *p, const void *code)
{
    /* a linear scan: a profiler watches a handful of functions */
    for (uint32_t i = 0; i < p->ncodes; i++) {
        if (p->codes[i].code == code) {
            return (int)i;
        }
    }
    return -1;
}

int
tgc_lp_add_code(tgc_lp *p, const void *code, int32_t first_line)
{
    int i = tgc_lp_find(p, code);
    if (i >= 0) {
        return i;
    }
    if (p->ncodes == p->capcodes) {
        uint32_t cap = p->capcodes ? p->capcodes * 2 : 8;
        tgc_lp_code *c = realloc(p->codes, cap * sizeof(*c));
        if (c == NULL) {
            return -1;
        }
        p->codes = c;
        p->capcodes = cap;
    }
    tgc_lp_code *c = &p->codes[p->ncodes];
    c->code = code;
    c->first_line = first_line;
    c->nlines = c->caplines = 0;
    c->lines = NULL;
    c->slots = NULL;
    return (int)p->ncodes++;
}

/* Where `line` is, or would go, in c->lines (a binary search: a function has few lines). */
static uint32_t
lp__line_index(const tgc_lp_code *c, int32_t line)
{
    uint32_t lo = 0, hi = c->nlines;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c->lines[mid] < line) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    return lo;
}

/* The record of (code, line), made (zeroed) the first time the line runs; NULL when out of
 * memory. Records are kept per line that ran, not in a table from the first line on: a line
 * table may go below co_firstlineno, or jump far after it. */
static int64_t *
lp__slot(tgc_lp *p, tgc_lp_code *c, int32_t line)
{
    size_t per = 1 + 2 * p->nkeys;
    uint32_t i = lp__line_index(c, line);
    if (i < c->nlines && c->lines[i] == line) {
        return LP_SLOT(p, c, i);
    }
    if (c->nlines == c->caplines) {
        if (c->caplines > UINT32_MAX / 2) {
            return NULL;
        }
        uint32_t cap = c->caplines ? c->caplines * 2 : 16;
        int32_t *l = realloc(c->lines, (size_t)cap * sizeof(int32_t));
        if (l == NULL) {
            return NULL;
        }
        c->lines = l;  /* larger and consistent: caplines still says the smaller size */
        int64_t *s = realloc(c->slots, (size_t)cap * per * sizeof(int64_t));
        if (s == NULL) {
            return NULL;
        }
        c->slots = s;
        c->caplines = cap;
    }
    /* insert at i, keeping the lines in order */
    memmove(c->lines + i + 1, c->lines + i, (size_t)(c->nlines - i) * sizeof(int32_t));
    memmove(LP_SLOT(p, c, i + 1), LP_SLOT(p, c, i), (size_t)(c->nlines - i) * per * sizeof(int64_t));
    c->lines[i] = line;
    memset(LP_SLOT(p, c, i), 0, per * sizeof(int64_t));
    c->nlines++;
    return LP_SLOT(p, c, i);
}

const int64_t *
tgc_lp_slot(const tgc_lp *p, uint32_t code, int32_t line)
{
    const tgc_lp_code *c = &p->codes[code];
    uint32_t i = lp__line_index(c, line);
    if (i == c->nlines || c->lines[i] != line) {
        return NULL;
    }
    const int64_t *s = LP_SLOT(p, c, i);
    return s[0] ? s : NULL;
}

void
tgc_lp_observe(tgc_lp *p, const int64_t *r)
{
    size_t nk = p->nkeys;
    for (uint32_t f = 0; f < p->nframes; f++) {
        int64_t *peak = p->framevals + (size_t)f * 2 * nk + nk;
        for (size_t k = 0; k < nk; k++) {
            if (r[k] > peak[k]) {
                peak[k] = r[k];
            }
        }
    }
}

/* Starts frame f's line at reading r. The running peak starts at the line's first reading:
 * the source's peak counter was reset at the last event, so r's peaks are the previous line's. */
static void
lp__start_line(tgc_lp *p, uint32_t f, int32_t line, const int64_t *r)
{
    size_t nk = p->nkeys;
    int64_t *start = p->framevals + (size_t)f * 2 * nk, *peak = start + nk;
    memcpy(start, r, nk * sizeof(int64_t));
    for (size_t k = 0; k < nk; k++) {
        peak[k] = INT64_MIN;
    }
    p->frames[f].line = line;
}

/* Folds frame f's running line, ended at reading r, into its record. */
static void
lp__fold(tgc_lp *p, uint32_t f, const int64_t *r)
{
    size_t nk = p->nkeys;
    tgc_lp_frame *fr = &p->frames[f];
    int64_t *s = lp__slot(p, &p->codes[fr->code], fr->line);
    if (s == NULL) {
        return;  /* out of memory: the record is lost, the profile goes on */
    }
    const int64_t *start = p->framevals + (size_t)f * 2 * nk, *peak = start + nk;
    int first = s[0] == 0;
    int64_t *a = s + 1, *b = s + 1 + nk;
    if (first || !fr->resumed) {
        s[0]++;
    }
    fr->resumed = 0;
    p->lines++;
    for (size_t k = 0; k < nk; k++) {
        int64_t v;
        switch (p->folds[k]) {
        case TGC_LP_PEAK:
            v = peak[k] > r[k] ? peak[k] : r[k];
            break;
        case TGC_LP_CURRENT:
            v = r[k];
            break;
        default:
            v = r[k] - start[k];
            break;
        }
        if (first || v > a[k]) {
            a[k] = v;
        }
        b[k] += r[k] - start[k];
    }
}

static int
lp__push(tgc_lp *p, uint32_t code, uint64_t thread, int32_t line, int resumed, int entry,
         const int64_t *r)
{
    if (p->nframes == p->capframes) {
        uint32_t cap = p->capframes ? p->capframes * 2 : 16;
        tgc_lp_frame *fr = realloc(p->frames, cap * sizeof(*fr));
        if (fr == NULL) {
            return -1;
        }
        p->frames = fr;
        int64_t *v = realloc(p->framevals, (size_t)cap * 2 * p->nkeys * sizeof(int64_t) + 1);
        if (v == NULL) {
            return -1;
        }
        p->framevals = v;
        p->capframes = cap;
    }
    uint32_t f = p->nframes++;
    p->frames[f].code = code;
    p->frames[f].thread = thread;
    lp__start_line(p, f, line, r);
    p->frames[f].resumed = resumed;
    p->frames[f].entry = entry;
    return 0;
}

int
tgc_lp_enter(tgc_lp *p, uint32_t code, uint64_t thread, int32_t line, int resumed,
             const int64_t *r)
{
    return lp__push(p, code, thread, line, resumed, !resumed, r);
}

/* The innermost open frame of `thread` running `code`, or -1. */
static int64_t
lp__find_frame(const tgc_lp *p, uint32_t code, uint64_t thread)
{
    for (uint32_t f = p->nframes; f-- > 0;) {
        if (p->frames[f].thread == thread && p->frames[f].code == code) {
            return f;
        }
    }
    return -1;
}

/* Removes frame f and the frames of its thread above it (their leave was missed: the events
 * were off, or the profiler was enabled inside them), folding each at reading r. */
static void
lp__pop(tgc_lp *p, uint32_t f, const int64_t *r)
{
    size_t nk = p->nkeys;
    uint64_t thread = p->frames[f].thread;
    uint32_t w = f;
    for (uint32_t i = f; i < p->nframes; i++) {
        if (p->frames[i].thread == thread) {
            lp__fold(p, i, r);
            continue;
        }
        /* another thread's frame: keep it, packed down */
        p->frames[w] = p->frames[i];
        memmove(p->framevals + (size_t)w * 2 * nk, p->framevals + (size_t)i * 2 * nk,
                2 * nk * sizeof(int64_t));
        w++;
    }
    p->nframes = w;
}

int
tgc_lp_line(tgc_lp *p, uint32_t code, uint64_t thread, int32_t line, const int64_t *r)
{
    int64_t f = lp__find_frame(p, code, thread);
    if (f < 0) {
        return lp__push(p, code, thread, line, 0, 0, r);
    }
    /* frames of this thread above f missed their leave: close them first */
    for (uint32_t i = (uint32_t)f + 1; i < p->nframes; i++) {
        if (p->frames[i].thread == thread) {
            lp__pop(p, i, r);
            break;
        }
    }
    if (p->frames[f].entry) {
        /* the call's first line: it takes the readings since the call, the def line none */
        p->frames[f].entry = 0;
        p->frames[f].line = line;
        return 0;
    }
    lp__fold(p, (uint32_t)f, r);
    lp__start_line(p, (uint32_t)f, line, r);
    return 0;
}

int
tgc_lp_leave(tgc_lp *p, uint32_t code, uint64_t thread, const int64_t *r)
{
    int64_t f = lp__find_frame(p, code, thread);
    if (f >= 0) {
        lp__pop(p, (uint32_t)f, r);
    }
    return 0;
}

void
tgc_lp_drop_frames(tgc_lp *p)
{
    p->nframes = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Process memory                                                                              */

/* The open /proc/self/statm and the process that opened it: /proc/self is resolved at open,
 * so a forked child must open its own. Only touched with the GIL held (the binding's callers). */
static int lp_statm_fd = -1;
static pid_t lp_statm_pid;
static long lp_page_size;

int
tgc_lp_rss_read(int64_t out[2])
{
    pid_t pid = getpid();
    if (lp_statm_fd >= 0 && lp_statm_pid != pid) {
        close(lp_statm_fd);  /* inherited through fork: the parent's numbers */
        lp_statm_fd = -1;
    }
    if (lp_statm_fd < 0) {
        lp_statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
        lp_statm_pid = pid;
        lp_page_size = sysconf(_SC_PAGESIZE);
        if (lp_statm_fd < 0) {
            return -1;
        }
    }
    char buf[128];
    ssize_t n = pread(lp_statm_fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0) {
        if (n == 0) {
            errno = EIO;
        }
        return -1;
    }
    buf[n] = '\0';
    /* "size resident shared ...", in pages */
    char *end;
    (void)strtoll(buf, &end, 10);
    long long resident = strtoll(end, NULL, 10);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0) {
        return -1;
    }
    out[0] = (int64_t)resident * lp_page_size;
    out[1] = (int64_t)ru.ru_maxrss * 1024;  /* KiB on Linux */
    if (out[1] < out[0]) {
        out[1] = out[0];  /* the high-water mark is only updated lazily by the kernel */
    }
    return 0;
}

int
tgc_lp_rss_reset_peak(void)
{
    /* "5" resets the mm's resident high-water mark (Linux 4.0+), which getrusage reports */
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ssize_t n = write(fd, "5", 1);
    int saved = errno;
    close(fd);
    errno = saved;
    return n == 1 ? 0 : -1;
}
