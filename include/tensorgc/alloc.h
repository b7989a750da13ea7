/* alloc.h: the contract of tensorgc's allocator engine (allocator/blocks.c), plain C, no Python.
 *
 * The caching allocator's state (segments and their blocks, as torch.cuda.memory._snapshot()
 * lists them) is loaded into flat arrays, sorted by (device, address), so that a storage's data
 * pointer finds its block by binary search. The engine then sums, per device, what the footer of
 * a report reconciles: reserved >= allocated >= named, and the split and rounding losses.
 * Memory is malloc'd; functions return 0, or -1 when out of memory (nothing to free then). */
#ifndef TENSORGC_ALLOC_H
#define TENSORGC_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    TGC_BLOCK_INACTIVE = 0,        /* cached, free for reuse */
    TGC_BLOCK_ALLOCATED = 1,       /* "active_allocated": counted by memory_allocated() */
    TGC_BLOCK_PENDING_FREE = 2     /* "active_pending_free": freed, waiting for a stream event */
};

typedef struct {
    uint64_t addr, size, requested;
    int32_t device;
    uint32_t segment;       /* index into tgc_alloc.segs */
    uint32_t ext;           /* the caller's index (position in its own lists), kept through sort */
    uint8_t state;
    uint8_t has_frames;     /* an allocation stack was recorded */
} tgc_block;

typedef struct {
    uint64_t addr, size;
    int32_t device;
    uint32_t nblocks;       /* blocks in this segment */
} tgc_segment;

typedef struct {
    tgc_segment *segs;
    tgc_block *blocks;
    size_t nseg, nblk, segcap, blkcap;
} tgc_alloc;

/* Per-device sums, in bytes. */
typedef struct {
    uint64_t reserved;          /* all segments */
    uint64_t allocated;         /* ALLOCATED blocks: equals torch.cuda.memory_allocated() */
    uint64_t requested;         /* what the allocated blocks were asked for */
    uint64_t pending_free;      /* PENDING_FREE blocks */
    uint64_t inactive_split;    /* INACTIVE blocks in segments that are split (fragmentation) */
    uint64_t inactive_whole;    /* INACTIVE blocks that are a whole segment (releasable cache) */
    uint64_t named;             /* ALLOCATED blocks marked as holding a named storage */
    uint64_t seen;              /* ALLOCATED blocks marked as holding any storage we found */
    uint64_t stack;             /* ALLOCATED blocks not seen but with an allocation stack */
    uint64_t unattributed;      /* ALLOCATED blocks neither seen nor with a stack */
    uint32_t nsegments, nblocks, nallocated;
} tgc_alloc_totals;

void tgc_alloc_init(tgc_alloc *a);
void tgc_alloc_free(tgc_alloc *a);
/* Appends a segment; returns its index, or -1 when out of memory. */
long tgc_alloc_add_segment(tgc_alloc *a, int32_t device, uint64_t addr, uint64_t size);
/* Appends a block of the last segment added. */
int tgc_alloc_add_block(tgc_alloc *a, uint64_t addr, uint64_t size, uint64_t requested,
                        int state, int has_frames, uint32_t ext);
/* Sorts the blocks by (device, address). Call once, after loading. */
void tgc_alloc_sort(tgc_alloc *a);
/* Index (into a->blocks, after sorting) of the block holding byte ptr on device, -1 if none. */
long tgc_alloc_find(const tgc_alloc *a, int32_t device, uint64_t ptr);
/* Sums for one device. mark[i] (per sorted block, may be NULL): 1 seen, 2 seen and named. */
void tgc_alloc_totals_for(const tgc_alloc *a, int32_t device, const uint8_t *mark,
                          tgc_alloc_totals *out);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_ALLOC_H */
