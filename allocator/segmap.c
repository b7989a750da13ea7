/* segmap.c: the allocator's segments and allocations at any event of a trace (see segmap.h):
 * rewind from the snapshot's final state to the start, then replay to the event asked for. Two
 * address-keyed tables (segments, allocations) with overwrite and delete. Plain C. */
#include <stdlib.h>
#include <string.h>

#include "tensorgc/segmap.h"

/* Open addressing, address + 1 as key (0 = empty), tombstones on delete. */
typedef struct {
    uint64_t *keys;
    tgc_sm_item *vals;
    size_t mask, used;
} sm_table;

#define SM_TOMB UINT64_MAX

static int
sm_init(sm_table *t, size_t n)
{
    size_t cap = 64;
    while (cap < n * 2 + 16) {
        cap <<= 1;
    }
    t->keys = calloc(cap, sizeof(uint64_t));
    t->vals = malloc(cap * sizeof(tgc_sm_item));
    t->mask = cap - 1;
    t->used = 0;
    return t->keys && t->vals ? 0 : -1;
}

static void
sm_free(sm_table *t)
{
    free(t->keys);
    free(t->vals);
}

static size_t
sm_hash(uint64_t k, size_t mask)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k & mask;
}

/* The slot holding key, or SIZE_MAX. */
static size_t
sm_find(const sm_table *t, uint64_t addr)
{
    uint64_t k = addr + 1;
    for (size_t i = sm_hash(k, t->mask), probes = 0; probes <= t->mask;
         i = (i + 1) & t->mask, probes++) {
        if (t->keys[i] == 0) {
            return SIZE_MAX;
        }
        if (t->keys[i] == k) {
            return i;
        }
    }
    return SIZE_MAX;
}

/* Inserts or overwrites. The table is sized for every key the trace can insert (tombstones
 * included), so it never fills. */
static void
sm_set(sm_table *t, const tgc_sm_item *it)
{
    uint64_t k = it->addr + 1;
    size_t tomb = SIZE_MAX;
    for (size_t i = sm_hash(k, t->mask);; i = (i + 1) & t->mask) {
        if (t->keys[i] == k) {
            t->vals[i] = *it;
            return;
        }
        if (t->keys[i] == SM_TOMB && tomb == SIZE_MAX) {
            tomb = i;
        }
        if (t->keys[i] == 0) {
            size_t at = tomb != SIZE_MAX ? tomb : i;
            if (at == i) {
                t->used++;
            }
            t->keys[at] = k;
            t->vals[at] = *it;
            return;
        }
    }
}

static void
sm_del(sm_table *t, uint64_t addr)
{
    size_t i = sm_find(t, addr);
    if (i != SIZE_MAX) {
        t->keys[i] = SM_TOMB;
    }
}

static int
sm_cmp(const void *x, const void *y)
{
    const tgc_sm_item *a = x, *b = y;
    if (a->kind != b->kind) {
        return a->kind < b->kind ? -1 : 1;
    }
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* Applies ev forwards (undo = 0) or backwards (undo = 1). */
static void
sm_apply(sm_table *segs, sm_table *allocs, const tgc_sm_event *e, int undo)
{
    tgc_sm_item it = {e->addr, e->size, e->index, 0};
    int adds = e->action == TGC_SM_ALLOC || e->action == TGC_SM_SEG_ADD;
    sm_table *t = e->action == TGC_SM_ALLOC || e->action == TGC_SM_FREE ? allocs : segs;
    it.kind = t == allocs ? TGC_SM_ALLOCATION : TGC_SM_SEGMENT;
    if (undo) {
        adds = !adds;
        it.event = UINT32_MAX;  /* rewound into existence: made before what we can see */
    }
    if (adds) {
        sm_set(t, &it);
    }
    else {
        sm_del(t, e->addr);
    }
}

int
tgc_segmap_at(const tgc_sm_event *ev, size_t n, const tgc_sm_item *final, size_t nfinal,
              size_t upto, tgc_sm_item **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    if (upto > n) {
        return -1;
    }
    sm_table segs = {0}, allocs = {0};
    int rc = -1;
    if (sm_init(&segs, n + nfinal) < 0 || sm_init(&allocs, n + nfinal) < 0) {
        goto done;
    }
    for (size_t i = 0; i < nfinal; i++) {
        sm_set(final[i].kind == TGC_SM_SEGMENT ? &segs : &allocs, &final[i]);
    }
    for (size_t i = n; i-- > 0;) {
        sm_apply(&segs, &allocs, &ev[i], 1);
    }
    for (size_t i = 0; i < upto; i++) {
        sm_apply(&segs, &allocs, &ev[i], 0);
    }
    size_t count = 0;
    for (size_t i = 0; i <= segs.mask; i++) {
        count += segs.keys[i] != 0 && segs.keys[i] != SM_TOMB;
    }
    for (size_t i = 0; i <= allocs.mask; i++) {
        count += allocs.keys[i] != 0 && allocs.keys[i] != SM_TOMB;
    }
    tgc_sm_item *items = malloc((count ? count : 1) * sizeof(tgc_sm_item));
    if (items == NULL) {
        goto done;
    }
    size_t k = 0;
    const sm_table *tabs[2] = {&segs, &allocs};
    for (int j = 0; j < 2; j++) {
        for (size_t i = 0; i <= tabs[j]->mask; i++) {
            if (tabs[j]->keys[i] != 0 && tabs[j]->keys[i] != SM_TOMB) {
                items[k++] = tabs[j]->vals[i];
            }
        }
    }
    qsort(items, k, sizeof(tgc_sm_item), sm_cmp);
    *out = items;
    *nout = k;
    rc = 0;
done:
    sm_free(&segs);
    sm_free(&allocs);
    return rc;
}
