/* lineprof.h: the contract of tensorgc's line-by-line memory profiler engine (reporter/lineprof.c),
 * plain C, no Python. Its Python side (reporter/lineprof_events.c, fed by the event sources of
 * reporter/lineprof_py.h) hands it events of the profiled code objects -- enter, a new line, leave
 * -- each with a reading of the memory counters, and reads back one folded record per (code, line).
 *
 * A reading is `nkeys` int64 counters in a fixed order. Each key folds by its kind:
 *   PEAK     the highest value seen while the line ran: the source resets its peak counter after
 *            every event, so the engine keeps a running maximum for every open line, nested
 *            callers included (tgc_lp_observe); several runs of a line keep the max;
 *   CURRENT  the value when the line ended (max over runs), and its change over the line
 *            (summed over runs: the "delta");
 *   COUNTER  a cumulative counter: its change over the line, summed over runs.
 * Open lines live on a stack of frames tagged by thread, so a profiled function called from a
 * profiled line charges its memory to that line too. Not thread-safe: the binding holds the GIL.
 * Functions return 0 (or an index), or -1 when out of memory. */
#ifndef TENSORGC_LINEPROF_H
#define TENSORGC_LINEPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TGC_LP_PEAK = 0, TGC_LP_CURRENT = 1, TGC_LP_COUNTER = 2 };

typedef struct {
    const void *code;       /* identity only, never dereferenced */
    int32_t first_line;     /* co_firstlineno, as registered (records do not depend on it) */
    uint32_t nlines, caplines;
    int32_t *lines;         /* the lines that ran, ascending: any int32 (a line table may go
                               below first_line, or jump far after it) */
    int64_t *slots;         /* per entry of lines: hits, then a[nkeys] (max), then b[nkeys] (sum) */
} tgc_lp_code;

typedef struct {
    uint32_t code;          /* index into codes */
    int32_t line;           /* the line now running */
    uint64_t thread;
    int resumed;            /* the line was already counted before a yield: fold, do not count */
    int entry;              /* a fresh call, no line run yet: `line` is the def line, which is
                               not a line of the body; the first line event takes its readings */
} tgc_lp_frame;

typedef struct {
    size_t nkeys;
    uint8_t *folds;         /* TGC_LP_* per key */
    tgc_lp_code *codes;
    uint32_t ncodes, capcodes;
    tgc_lp_frame *frames;   /* the open lines, innermost last */
    int64_t *framevals;     /* per frame: start[nkeys], then peak[nkeys] */
    uint32_t nframes, capframes;
    uint64_t lines;         /* line records folded (for the cost per line) */
} tgc_lp;

int tgc_lp_init(tgc_lp *p, size_t nkeys, const uint8_t *folds);
void tgc_lp_free(tgc_lp *p);
/* Forgets every record and open frame; the codes stay registered. */
void tgc_lp_reset(tgc_lp *p);

/* Registers a code object (its identity and first line); returns its index (the existing one
 * when already there), -1 when out of memory. */
int tgc_lp_add_code(tgc_lp *p, const void *code, int32_t first_line);
int tgc_lp_find(const tgc_lp *p, const void *code);

/* A reading taken at an event of any profiled code: raises the running peak of every open line. */
void tgc_lp_observe(tgc_lp *p, const int64_t *r);
/* Code `code` (an index) starts running `line` on `thread`: pushes a frame. `resumed`: a
 * generator or coroutine resumes on that line, whose run was counted before it yielded.
 * Otherwise `line` is the def line of a fresh call: it gets no hit of its own; what happens
 * before the first line event is charged to that line (a call that returns with no line event
 * at all is charged to the def line). */
int tgc_lp_enter(tgc_lp *p, uint32_t code, uint64_t thread, int32_t line, int resumed,
                 const int64_t *r);
/* It moves to `line`: folds the line that ended, starts the new one. A line event with no open
 * frame of that code on that thread (the profiler was enabled mid-call) opens one. */
int tgc_lp_line(tgc_lp *p, uint32_t code, uint64_t thread, int32_t line, const int64_t *r);
/* It returns, yields or unwinds: folds the last line and pops the frame (and any frame of the
 * same thread above it, whose leave was missed). Unknown frames are ignored. */
int tgc_lp_leave(tgc_lp *p, uint32_t code, uint64_t thread, const int64_t *r);
/* Drops the open frames without folding them (the profiler was disabled mid-call). */
void tgc_lp_drop_frames(tgc_lp *p);

/* The folded record of (code, line): NULL when the line never ran; else hits, a[], b[]. */
const int64_t *tgc_lp_slot(const tgc_lp *p, uint32_t code, int32_t line);

/* Process memory, the source on machines without CUDA: out[0] resident bytes now, out[1] the
 * peak resident bytes since the last successful tgc_lp_rss_reset_peak (since the process
 * started when the kernel refuses resets: the reset returns -1 then). Both return 0, or -1
 * with errno set. */
int tgc_lp_rss_read(int64_t out[2]);
int tgc_lp_rss_reset_peak(void);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_LINEPROF_H */
