/* timeline.h: the contract of tensorgc's trace replay (allocator/timeline.c), plain C, no Python.
 *
 * Input: one device's allocator trace as events in time order -- ALLOC (addr, size), FREE (the
 * "free_completed" of addr), OOM -- plus allocations that were live before the trace began
 * (PRE: alive from the start; a FREE without an ALLOC also marks one). Output, for a picture
 * `columns` wide: the active bytes at the end of each column and their maximum within it, the
 * `detail` largest allocations as bands (their stacked offset at each column they span), and
 * everything else as one summarized band on top of them -- the "Active Memory Timeline" with
 * memory_viz's detail slider, at a cost of O(events + columns x detail). Memory is malloc'd;
 * functions return 0, or -1 when out of memory or on invalid arguments.
 *
 * Categories over time (optional, tgc_classify): each allocation also gets a category, from the
 * first of these rules that applies (times in the trace's clock, unix microseconds):
 *   1. alive at the end and named (addr -> category, from the reporter): that category;
 *   2. a grad mark (addr, t) finds it alive at t (t_alloc <= t < t_free): grad;
 *   3-5. allocated inside a phase span [t0, t1] (optimizer step, forward, backward; nested
 *      spans: the innermost, i.e. latest start; equal starts in that order): freed by t1 ->
 *      temporary, else optimizer_state / activation / other -- but a forward's block alive at
 *      the end that the reporter did not name (when it named any) holds no tensor: other;
 *   6. other.
 * Then the active bytes of each category at the end of each column and at the peak, for
 * O(events + marks log marks + allocations log spans + columns x TGC_NCAT). */
#ifndef TENSORGC_TIMELINE_H
#define TENSORGC_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TGC_EV_ALLOC = 0, TGC_EV_FREE = 1, TGC_EV_OOM = 2, TGC_EV_PRE = 3 };

/* Stacking order, bottom first; tgc_category_names[] spells them. */
enum {
    TGC_CAT_PARAMETER = 0, TGC_CAT_BUFFER, TGC_CAT_OPTIMIZER_STATE, TGC_CAT_GRAD,
    TGC_CAT_ACTIVATION, TGC_CAT_TEMPORARY, TGC_CAT_OTHER, TGC_NCAT
};
extern const char *const tgc_category_names[TGC_NCAT];

enum { TGC_PHASE_FORWARD = 0, TGC_PHASE_BACKWARD = 1, TGC_PHASE_OPTIMIZER = 2, TGC_NPHASE };

/* Times unknown (a pre-existing allocation's start) are TGC_TIME_NONE; a span still open at the
 * snapshot ends at INT64_MAX. */
#define TGC_TIME_NONE INT64_MIN

typedef struct {
    uint64_t addr, size;
    int64_t time;      /* microseconds; TGC_TIME_NONE when unknown (PRE) */
    uint32_t index;    /* the caller's index of the event (for stacks and hover) */
    uint8_t kind;
} tgc_event;

typedef struct {
    int64_t t0, t1;    /* t0 <= t1 */
    uint8_t phase;     /* TGC_PHASE_* */
} tgc_span;

typedef struct {
    uint64_t addr;     /* the grad's storage address, right after it was accumulated */
    int64_t time;
} tgc_grad_mark;

typedef struct {
    uint64_t addr;
    uint8_t category;  /* TGC_CAT_*; TGC_CAT_OTHER is ignored (it names nothing) */
} tgc_named;

/* The classification's inputs, in any order (the engine sorts its own copies). */
typedef struct {
    const tgc_span *spans;
    size_t nspans;
    const tgc_grad_mark *grads;
    size_t ngrads;
    const tgc_named *named;
    size_t nnamed;
} tgc_classify;

typedef struct {
    uint32_t alloc_event;   /* index (caller's) of the ALLOC/PRE event; UINT32_MAX: unknown */
    uint32_t free_event;    /* index of the FREE event, UINT32_MAX when still alive at the end */
    uint64_t size;
    uint64_t addr;          /* its address (to match the reporter's blocks) */
    uint32_t col0, col1;    /* columns [col0, col1) in which it is drawn */
    uint64_t *offset;       /* offset[c - col0]: bytes of the bands below it, end of column c */
    uint8_t category;       /* TGC_CAT_*; TGC_CAT_OTHER without a classification */
    uint8_t rule;           /* the rule (1-6) that gave it; 0 without a classification */
} tgc_band;

typedef struct {
    uint32_t columns, nbands;
    uint64_t *active;       /* active bytes at the end of each column */
    uint64_t *peak;         /* the maximum within each column */
    uint64_t *small;        /* the summarized band (allocations not drawn) at each column; it
                               sits from active - small up to active */
    tgc_band *bands;
    uint64_t max_active;
    size_t nallocs;         /* allocations seen (pre-existing included) */
    /* with a classification (else NULL / zero): */
    uint64_t *cat_active;   /* cat_active[c * TGC_NCAT + k]: bytes of category k, end of column c */
    uint64_t at_peak[TGC_NCAT];  /* bytes per category when max_active was first reached */
    size_t peak_pos;        /* the event position (into ev) that reached it; SIZE_MAX: none */
} tgc_timeline;

/* events in order; column of event i is i * columns / n (time by event count, as memory_viz).
 * cls: NULL for no categories. */
int tgc_timeline_build(const tgc_event *ev, size_t n, uint32_t columns, uint32_t detail,
                       const tgc_classify *cls, tgc_timeline *out);
void tgc_timeline_free(tgc_timeline *t);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_TIMELINE_H */
