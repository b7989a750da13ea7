/* timeline.c: replays an allocator trace into the Active Memory Timeline (see timeline.h):
 * pairs allocations with their frees through an address table, keeps the `detail` largest as
 * bands, and sweeps the columns once to stack them. Plain C. */
#include <stdlib.h>
#include <string.h>

#include "ptrmap.h"
#include "tensorgc/timeline.h"

typedef struct {
    uint64_t addr, size;
    uint32_t alloc_event, free_event;
    size_t start, end;     /* event positions: alive in [start, end) */
    uint32_t band;         /* index into bands, UINT32_MAX when summarized */
} tl_alloc;

static int
tl__by_size_desc(const void *x, const void *y)
{
    const tl_alloc *const *a = x, *const *b = y;
    if ((*a)->size != (*b)->size) {
        return (*a)->size > (*b)->size ? -1 : 1;
    }
    /* equal sizes (common: the allocator rounds): the longer-lived first, since a band shorter
     * than a column is not drawn at all */
    size_t la = (*a)->end - (*a)->start, lb = (*b)->end - (*b)->start;
    if (la != lb) {
        return la > lb ? -1 : 1;
    }
    return (*a)->start < (*b)->start ? -1 : (*a)->start > (*b)->start;
}

static int
tl__by_position(const void *x, const void *y)
{
    const tl_alloc *const *a = x, *const *b = y;
    return *a < *b ? -1 : *a > *b;
}

/* The first column c with floor((c + 1) n / columns) > x, i.e. whose end is past event x. */
static uint32_t
tl__first_col_past(size_t x, size_t n, uint32_t columns)
{
    uint64_t c1 = ((uint64_t)(x + 1) * columns + n - 1) / n;  /* ceil((x + 1) columns / n) */
    return c1 == 0 ? 0 : (uint32_t)(c1 - 1 < columns ? c1 - 1 : columns);
}

void
tgc_timeline_free(tgc_timeline *t)
{
    if (t->bands != NULL) {
        for (uint32_t i = 0; i < t->nbands; i++) {
            free(t->bands[i].offset);
        }
    }
    free(t->bands);
    free(t->active);
    free(t->peak);
    free(t->small);
    memset(t, 0, sizeof(*t));
}

int
tgc_timeline_build(const tgc_event *ev, size_t n, uint32_t columns, uint32_t detail,
                   tgc_timeline *out)
{
    memset(out, 0, sizeof(*out));
    if (columns == 0 || n >= UINT32_MAX) {
        return -1;
    }
    tl_alloc *al = NULL, **order = NULL;
    size_t nal = 0, cap = 0;
    uint32_t *slot_of = NULL;       /* address table values: index into al of the live alloc */
    tgc_ptrmap map = {0};
    int64_t *delta = NULL;          /* per event: change of active bytes */
    int rc = -1;

    /* Pass 1: pair ALLOC/FREE by address. Pre-existing allocations start at event 0. */
    if (tgc_ptrmap_init(&map, n + 16) < 0) {
        goto done;
    }
    slot_of = malloc((n + 1) * sizeof(uint32_t));
    delta = calloc(n + 1, sizeof(int64_t));
    if (slot_of == NULL || delta == NULL) {
        goto done;
    }
    size_t nslots = 0;
    for (size_t i = 0; i < n; i++) {
        const tgc_event *e = &ev[i];
        if (e->kind == TGC_EV_OOM) {
            continue;
        }
        if (nal == cap) {
            size_t c = cap ? cap * 2 : 1024;
            tl_alloc *p = realloc(al, c * sizeof(tl_alloc));
            if (p == NULL) {
                goto done;
            }
            al = p;
            cap = c;
        }
        /* the table maps an address to a slot; slots point at the live allocation there
         * (addresses are reused after frees, so a slot is rebound on each ALLOC) */
        const void *key = (const void *)(uintptr_t)(e->addr + 1);  /* 0 is the empty key */
        uint32_t s = tgc_ptrmap_get(&map, key);
        if (e->kind == TGC_EV_ALLOC || e->kind == TGC_EV_PRE) {
            if (s == UINT32_MAX) {
                s = tgc_ptrmap_put(&map, key, (uint32_t)nslots++);
            }
            tl_alloc *a = &al[nal];
            a->addr = e->addr;
            a->size = e->size;
            a->alloc_event = e->index;
            a->free_event = UINT32_MAX;
            a->start = e->kind == TGC_EV_PRE ? 0 : i;
            a->end = n;
            a->band = UINT32_MAX;
            slot_of[s] = (uint32_t)nal++;
            delta[a->start] += (int64_t)a->size;
        }
        else {  /* FREE */
            uint32_t k = s != UINT32_MAX ? slot_of[s] : UINT32_MAX;
            if (k == UINT32_MAX || al[k].end != n) {
                /* freed without an ALLOC in the trace: it was alive from the start */
                tl_alloc *a = &al[nal];
                a->addr = e->addr;
                a->size = e->size;
                a->alloc_event = UINT32_MAX;
                a->start = 0;
                k = (uint32_t)nal++;
                a->band = UINT32_MAX;
                delta[0] += (int64_t)a->size;
            }
            al[k].end = i;
            al[k].free_event = e->index;
            delta[i] -= (int64_t)al[k].size;
            if (s != UINT32_MAX) {
                slot_of[s] = UINT32_MAX;
            }
        }
    }
    out->nallocs = nal;

    /* Pass 2: the `detail` largest become bands, stacked in allocation order. */
    uint32_t nb = detail < nal ? detail : (uint32_t)nal;
    order = malloc((nal ? nal : 1) * sizeof(tl_alloc *));
    if (order == NULL) {
        goto done;
    }
    for (size_t i = 0; i < nal; i++) {
        order[i] = &al[i];
    }
    qsort(order, nal, sizeof(tl_alloc *), tl__by_size_desc);
    out->columns = columns;
    out->nbands = nb;
    out->active = calloc(columns, sizeof(uint64_t));
    out->peak = calloc(columns, sizeof(uint64_t));
    out->small = calloc(columns, sizeof(uint64_t));
    out->bands = calloc(nb ? nb : 1, sizeof(tgc_band));
    if (!out->active || !out->peak || !out->small || !out->bands) {
        goto done;
    }
    /* bands in stacking order: allocation order (al is in event order, so pointer order) */
    qsort(order, nb, sizeof(tl_alloc *), tl__by_position);
    size_t nn = n ? n : 1;
    for (uint32_t b = 0; b < nb; b++) {
        tl_alloc *a = order[b];
        tgc_band *band = &out->bands[b];
        a->band = b;
        band->alloc_event = a->alloc_event;
        band->addr = a->addr;
        band->free_event = a->free_event;
        band->size = a->size;
        /* drawn in column c iff alive at its end: start < stop(c) <= end, with
         * stop(c) = floor((c + 1) n / columns), the events done by the end of column c */
        band->col0 = tl__first_col_past(a->start, nn, columns);
        band->col1 = a->end >= n ? columns : tl__first_col_past(a->end, nn, columns);
        if (band->col1 < band->col0) {
            band->col1 = band->col0;
        }
        band->offset = calloc(band->col1 > band->col0 ? band->col1 - band->col0 : 1,
                              sizeof(uint64_t));
        if (band->offset == NULL) {
            goto done;
        }
    }

    /* Pass 3: sweep. At the end of each column: active bytes, the summarized rest, and each
     * drawn band's offset = the drawn bands stacked below it. */
    int64_t active = 0;
    size_t i = 0;
    for (uint32_t c = 0; c < columns; c++) {
        size_t stop = (size_t)(((uint64_t)(c + 1) * n) / columns);
        uint64_t peak = (uint64_t)(active > 0 ? active : 0);
        for (; i < stop; i++) {
            active += delta[i];
            if (active > 0 && (uint64_t)active > peak) {
                peak = (uint64_t)active;
            }
        }
        uint64_t act = (uint64_t)(active > 0 ? active : 0), drawn = 0;
        for (uint32_t b = 0; b < nb; b++) {
            if (c >= out->bands[b].col0 && c < out->bands[b].col1) {
                drawn += out->bands[b].size;
            }
        }
        out->active[c] = act;
        out->peak[c] = peak;
        out->small[c] = drawn <= act ? act - drawn : 0;
        if (peak > out->max_active) {
            out->max_active = peak;
        }
        uint64_t below = 0;  /* bands at the bottom, the summarized rest on top of them: a
                                * band only moves when a band under it comes or goes */
        for (uint32_t b = 0; b < nb; b++) {
            tgc_band *band = &out->bands[b];
            if (c >= band->col0 && c < band->col1) {
                band->offset[c - band->col0] = below;
                below += band->size;
            }
        }
    }
    rc = 0;
done:
    if (rc < 0) {
        tgc_timeline_free(out);
    }
    tgc_ptrmap_free(&map);
    free(slot_of);
    free(delta);
    free(al);
    free(order);
    return rc;
}
