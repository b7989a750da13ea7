/* segmap.h: the contract of tensorgc's segment-map reconstruction (allocator/segmap.c), plain C.
 *
 * The allocator's segments and live allocations at any point of a trace, from the final state a
 * snapshot holds (its segments and active blocks) and the trace: rewind every event to reach the
 * state before the trace, then replay forward to the event asked for, remembering which event
 * made each allocation (for its stack). Segment events: segment_alloc/segment_map add,
 * segment_free/segment_unmap remove; allocation events: alloc adds, free_requested removes.
 * O(events) time and memory. Functions return 0, or -1 when out of memory / invalid arguments. */
#ifndef TENSORGC_SEGMAP_H
#define TENSORGC_SEGMAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TGC_SM_ALLOC = 0, TGC_SM_FREE = 1, TGC_SM_SEG_ADD = 2, TGC_SM_SEG_DEL = 3 };
enum { TGC_SM_SEGMENT = 0, TGC_SM_ALLOCATION = 1 };

typedef struct {
    uint64_t addr, size;
    uint32_t event;   /* the caller's index of the event that made it; UINT32_MAX: before */
    uint8_t kind;     /* TGC_SM_SEGMENT or TGC_SM_ALLOCATION */
} tgc_sm_item;

typedef struct {
    uint64_t addr, size;
    uint32_t index;   /* the caller's index of the event */
    uint8_t action;   /* TGC_SM_* action */
} tgc_sm_event;

/* State after events[0..upto) (upto <= n), from the final state `final` (after all n events).
 * *out is malloc'd (the caller frees it), sorted by (kind, addr). */
int tgc_segmap_at(const tgc_sm_event *ev, size_t n, const tgc_sm_item *final, size_t nfinal,
                  size_t upto, tgc_sm_item **out, size_t *nout);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_SEGMAP_H */
