/* timeline.h: the contract of tensorgc's trace replay (allocator/timeline.c), plain C, no Python.
 *
 * Input: one device's allocator trace as events in time order -- ALLOC (addr, size), FREE (the
 * "free_completed" of addr), OOM -- plus allocations that were live before the trace began
 * (PRE: alive from the start; a FREE without an ALLOC also marks one). Output, for a picture
 * `columns` wide: the active bytes at the end of each column and their maximum within it, the
 * `detail` largest allocations as bands (their stacked offset at each column they span), and
 * everything else as one summarized band on top of them -- the "Active Memory Timeline" with
 * memory_viz's detail slider, at a cost of O(events + columns x detail). Memory is malloc'd;
 * functions return 0, or -1 when out of memory or on invalid arguments. */
#ifndef TENSORGC_TIMELINE_H
#define TENSORGC_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TGC_EV_ALLOC = 0, TGC_EV_FREE = 1, TGC_EV_OOM = 2, TGC_EV_PRE = 3 };

typedef struct {
    uint64_t addr, size;
    uint32_t index;    /* the caller's index of the event (for stacks and hover) */
    uint8_t kind;
} tgc_event;

typedef struct {
    uint32_t alloc_event;   /* index (caller's) of the ALLOC/PRE event; UINT32_MAX: unknown */
    uint32_t free_event;    /* index of the FREE event, UINT32_MAX when still alive at the end */
    uint64_t size;
    uint64_t addr;          /* its address (to match the reporter's blocks) */
    uint32_t col0, col1;    /* columns [col0, col1) in which it is drawn */
    uint64_t *offset;       /* offset[c - col0]: bytes of the bands below it, end of column c */
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
} tgc_timeline;

/* events in order; column of event i is i * columns / n (time by event count, as memory_viz) */
int tgc_timeline_build(const tgc_event *ev, size_t n, uint32_t columns, uint32_t detail,
                       tgc_timeline *out);
void tgc_timeline_free(tgc_timeline *t);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_TIMELINE_H */
