/* blocks.c: the caching allocator's segments and blocks in flat arrays, sorted by address, and
 * the per-device sums a report reconciles. Plain C; the contract is include/tensorgc/alloc.h. */
#include <stdlib.h>
#include <string.h>

#include "tensorgc/alloc.h"

void
tgc_alloc_init(tgc_alloc *a)
{
    memset(a, 0, sizeof(*a));
}

void
tgc_alloc_free(tgc_alloc *a)
{
    free(a->segs);
    free(a->blocks);
    memset(a, 0, sizeof(*a));
}

static int
alloc__grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) {
        return 0;
    }
    size_t n = *cap ? *cap : 32;
    do {
        if (n > SIZE_MAX / 2 / elem) {
            return -1;  /* n * elem would overflow (reachable only with a 32-bit size_t) */
        }
        n *= 2;
    } while (n < need);
    void *q = realloc(*p, n * elem);
    if (q == NULL) {
        return -1;
    }
    *p = q;
    *cap = n;
    return 0;
}

long
tgc_alloc_add_segment(tgc_alloc *a, int32_t device, uint64_t addr, uint64_t size)
{
    if (a->nseg >= UINT32_MAX ||
        alloc__grow((void **)&a->segs, &a->segcap, a->nseg + 1, sizeof(tgc_segment)) < 0) {
        return -1;
    }
    tgc_segment *s = &a->segs[a->nseg];
    s->addr = addr;
    s->size = size;
    s->device = device;
    s->nblocks = 0;
    return (long)a->nseg++;
}

int
tgc_alloc_add_block(tgc_alloc *a, uint64_t addr, uint64_t size, uint64_t requested, int state,
                    int has_frames, uint32_t ext)
{
    if (a->nseg == 0 || a->nblk >= UINT32_MAX ||
        alloc__grow((void **)&a->blocks, &a->blkcap, a->nblk + 1, sizeof(tgc_block)) < 0) {
        return -1;
    }
    tgc_segment *s = &a->segs[a->nseg - 1];
    tgc_block *b = &a->blocks[a->nblk++];
    b->addr = addr;
    b->size = size;
    b->requested = requested;
    b->device = s->device;
    b->segment = (uint32_t)(a->nseg - 1);
    b->ext = ext;
    b->state = (uint8_t)state;
    b->has_frames = (uint8_t)(has_frames != 0);
    s->nblocks++;
    return 0;
}

static int
alloc__cmp(const void *x, const void *y)
{
    const tgc_block *p = x, *q = y;
    if (p->device != q->device) {
        return p->device < q->device ? -1 : 1;
    }
    return p->addr < q->addr ? -1 : p->addr > q->addr;
}

void
tgc_alloc_sort(tgc_alloc *a)
{
    if (a->nblk > 1) {
        qsort(a->blocks, a->nblk, sizeof(tgc_block), alloc__cmp);
    }
}

long
tgc_alloc_find(const tgc_alloc *a, int32_t device, uint64_t ptr)
{
    /* The last block starting at or before (device, ptr), then check it covers ptr. */
    size_t lo = 0, hi = a->nblk;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const tgc_block *b = &a->blocks[mid];
        if (b->device < device || (b->device == device && b->addr <= ptr)) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    if (lo == 0) {
        return -1;
    }
    const tgc_block *b = &a->blocks[lo - 1];
    if (b->device != device || ptr - b->addr >= b->size) {
        return -1;
    }
    return (long)(lo - 1);
}

void
tgc_alloc_totals_for(const tgc_alloc *a, int32_t device, const uint8_t *mark,
                     tgc_alloc_totals *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < a->nseg; i++) {
        if (a->segs[i].device == device) {
            out->reserved += a->segs[i].size;
            out->nsegments++;
        }
    }
    for (size_t i = 0; i < a->nblk; i++) {
        const tgc_block *b = &a->blocks[i];
        if (b->device != device) {
            continue;
        }
        out->nblocks++;
        switch (b->state) {
        case TGC_BLOCK_ALLOCATED: {
            uint8_t m = mark ? mark[i] : 0;
            out->nallocated++;
            out->allocated += b->size;
            out->requested += b->requested;
            if (m) {
                out->seen += b->size;
                if (m >= 2) {
                    out->named += b->size;
                }
            }
            else if (b->has_frames) {
                out->stack += b->size;
            }
            else {
                out->unattributed += b->size;
            }
            break;
        }
        case TGC_BLOCK_PENDING_FREE:
            out->pending_free += b->size;
            break;
        default:
            /* torch's inactive_split_bytes: free blocks of a segment that is split, which
             * cannot be released to the driver while the rest of the segment is in use. */
            if (a->segs[b->segment].nblocks > 1) {
                out->inactive_split += b->size;
            }
            else {
                out->inactive_whole += b->size;
            }
        }
    }
}
