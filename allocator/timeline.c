/* timeline.c: replays an allocator trace into the Active Memory Timeline (see timeline.h):
 * pairs allocations with their frees through an address table, keeps the `detail` largest as
 * bands, and sweeps the columns once to stack them; optionally classifies each allocation (grad
 * marks are matched during the pairing, while the table holds the allocations alive at their
 * time) and sums the active bytes per category in the same sweep. Plain C. */
#include <stdlib.h>
#include <string.h>

#include "tensorgc/ptrmap.h"
#include "tensorgc/timeline.h"

const char *const tgc_category_names[TGC_NCAT] = {
    "parameter", "buffer", "optimizer_state", "grad", "activation", "temporary", "other",
};

typedef struct {
    uint64_t addr, size;
    int64_t t0, t1;        /* alloc and free times: TGC_TIME_NONE before the trace, INT64_MAX
                              alive at the end */
    uint32_t alloc_event, free_event;
    size_t start, end;     /* event positions: alive in [start, end) */
    uint32_t band;         /* index into bands, UINT32_MAX when summarized */
    uint8_t pre;           /* alive from the start without an event of its own at `start` */
    uint8_t grad;          /* a grad mark found it alive */
    uint8_t category, rule;
} tl_alloc;

/* One phase's spans, merged where they overlap, sorted by start. */
typedef struct {
    tgc_span *v;
    size_t n;
} tl_phase;

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

static int
tl__span_by_phase_start(const void *x, const void *y)
{
    const tgc_span *a = x, *b = y;
    if (a->phase != b->phase) {
        return a->phase < b->phase ? -1 : 1;
    }
    return a->t0 < b->t0 ? -1 : a->t0 > b->t0;
}

static int
tl__grad_by_time(const void *x, const void *y)
{
    const tgc_grad_mark *a = x, *b = y;
    return a->time < b->time ? -1 : a->time > b->time;
}

/* Sorts a copy of the spans by (phase, start) and merges the overlapping ones of each phase in
 * place: a duplicate (the optimizer's own hook and torch's annotation of the same step) or a
 * nested span of the same phase then counts once. *buf is the caller's to free. */
static int
tl__phases(const tgc_classify *cls, tgc_span **buf, tl_phase ph[TGC_NPHASE])
{
    memset(ph, 0, TGC_NPHASE * sizeof(tl_phase));
    *buf = malloc((cls->nspans ? cls->nspans : 1) * sizeof(tgc_span));
    if (*buf == NULL) {
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < cls->nspans; i++) {
        if (cls->spans[i].phase < TGC_NPHASE && cls->spans[i].t0 <= cls->spans[i].t1) {
            (*buf)[n++] = cls->spans[i];
        }
    }
    qsort(*buf, n, sizeof(tgc_span), tl__span_by_phase_start);
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        tgc_span *last = out ? &(*buf)[out - 1] : NULL;
        if (last != NULL && last->phase == (*buf)[i].phase && (*buf)[i].t0 <= last->t1) {
            if ((*buf)[i].t1 > last->t1) {
                last->t1 = (*buf)[i].t1;
            }
            continue;
        }
        (*buf)[out++] = (*buf)[i];
    }
    for (size_t i = 0; i < out; i++) {
        tl_phase *p = &ph[(*buf)[i].phase];
        if (p->v == NULL) {
            p->v = &(*buf)[i];
        }
        p->n++;
    }
    return 0;
}

/* The merged span of one phase that holds time t, or NULL. */
static const tgc_span *
tl__span_at(const tl_phase *p, int64_t t)
{
    size_t lo = 0, hi = p->n;  /* the first span starting after t is at lo */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->v[mid].t0 <= t) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    return lo > 0 && t <= p->v[lo - 1].t1 ? &p->v[lo - 1] : NULL;
}

/* Rules 3-6 of timeline.h for an allocation that is neither named nor a grad. `named_end`: the
 * reporter named the blocks alive at the end, so one of them it did not name holds no tensor it
 * could see (a cuBLAS workspace made in the first forward): not an activation. */
static void
tl__by_span(tl_alloc *a, const tl_phase ph[TGC_NPHASE], int named_end)
{
    static const uint8_t order[3] = {TGC_PHASE_OPTIMIZER, TGC_PHASE_FORWARD, TGC_PHASE_BACKWARD};
    static const uint8_t kept[TGC_NPHASE] = {TGC_CAT_ACTIVATION, TGC_CAT_OTHER,
                                             TGC_CAT_OPTIMIZER_STATE};
    static const uint8_t rule[TGC_NPHASE] = {4, 5, 3};
    const tgc_span *best = NULL;
    uint8_t phase = 0;
    if (a->t0 != TGC_TIME_NONE) {
        /* the innermost span: the latest start (an LBFGS closure's forward inside its step) */
        for (int j = 0; j < 3; j++) {
            const tgc_span *s = tl__span_at(&ph[order[j]], a->t0);
            if (s != NULL && (best == NULL || s->t0 > best->t0)) {
                best = s;
                phase = order[j];
            }
        }
    }
    if (best == NULL) {
        a->category = TGC_CAT_OTHER;
        a->rule = 6;
        return;
    }
    /* alive at the end is never "freed by t1", even in a span still open at the snapshot */
    int freed = a->t1 != INT64_MAX && a->t1 <= best->t1;
    a->category = freed ? TGC_CAT_TEMPORARY : kept[phase];
    if (a->category == TGC_CAT_ACTIVATION && a->t1 == INT64_MAX && named_end) {
        a->category = TGC_CAT_OTHER;
    }
    a->rule = rule[phase];
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
    free(t->cat_active);
    memset(t, 0, sizeof(*t));
}

/* Applies a grad mark: the allocation alive at its address now (the table holds exactly the
 * allocations made and not yet freed by the events before the mark's time). */
static void
tl__mark_grad(const tgc_ptrmap *map, const uint32_t *slot_of, tl_alloc *al, uint64_t addr)
{
    if (addr == UINT64_MAX) {
        return;  /* addr + 1 would be the empty key */
    }
    uint32_t s = tgc_ptrmap_get(map, (const void *)(uintptr_t)(addr + 1));
    if (s != UINT32_MAX && slot_of[s] != UINT32_MAX) {
        al[slot_of[s]].grad = 1;
    }
}

int
tgc_timeline_build(const tgc_event *ev, size_t n, uint32_t columns, uint32_t detail,
                   const tgc_classify *cls, tgc_timeline *out)
{
    memset(out, 0, sizeof(*out));
    out->peak_pos = SIZE_MAX;
    if (columns == 0 || n >= UINT32_MAX) {
        return -1;
    }
    tl_alloc *al = NULL, **order = NULL;
    size_t nal = 0, cap = 0;
    uint32_t *slot_of = NULL;       /* address table values: index into al of the live alloc */
    tgc_ptrmap map = {0};
    int64_t *delta = NULL;          /* per event: change of active bytes */
    uint32_t *who = NULL;           /* with categories, per event: the allocation it makes or
                                       frees (UINT32_MAX: none, or a PRE counted at 0) */
    tgc_grad_mark *grads = NULL;    /* cls->grads sorted by time */
    tgc_span *spans = NULL;         /* the merged spans, owned by phases */
    tl_phase phases[TGC_NPHASE] = {{NULL, 0}};
    size_t g = 0, ng = cls != NULL ? cls->ngrads : 0;
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
    if (cls != NULL) {
        who = malloc((n + 1) * sizeof(uint32_t));
        grads = malloc((ng ? ng : 1) * sizeof(tgc_grad_mark));
        if (who == NULL || grads == NULL || tl__phases(cls, &spans, phases) < 0) {
            goto done;
        }
        if (ng) {
            memcpy(grads, cls->grads, ng * sizeof(tgc_grad_mark));
        }
        qsort(grads, ng, sizeof(tgc_grad_mark), tl__grad_by_time);
    }
    size_t nslots = 0;
    for (size_t i = 0; i < n; i++) {
        const tgc_event *e = &ev[i];
        if (who != NULL) {
            who[i] = UINT32_MAX;
        }
        if (e->kind == TGC_EV_OOM) {
            continue;
        }
        /* grad marks made before this event: the events up to their time are in the table */
        while (g < ng && grads[g].time < e->time) {
            tl__mark_grad(&map, slot_of, al, grads[g++].addr);
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
            memset(a, 0, sizeof(*a));
            a->addr = e->addr;
            a->size = e->size;
            a->alloc_event = e->index;
            a->free_event = UINT32_MAX;
            a->pre = e->kind == TGC_EV_PRE;
            a->start = a->pre ? 0 : i;
            a->t0 = a->pre ? TGC_TIME_NONE : e->time;
            a->t1 = INT64_MAX;
            a->end = n;
            a->band = UINT32_MAX;
            if (who != NULL && !a->pre) {
                who[i] = (uint32_t)nal;
            }
            slot_of[s] = (uint32_t)nal++;
            delta[a->start] += (int64_t)a->size;
        }
        else {  /* FREE */
            uint32_t k = s != UINT32_MAX ? slot_of[s] : UINT32_MAX;
            if (k == UINT32_MAX || al[k].end != n) {
                /* freed without an ALLOC in the trace: it was alive from the start */
                tl_alloc *a = &al[nal];
                memset(a, 0, sizeof(*a));
                a->addr = e->addr;
                a->size = e->size;
                a->alloc_event = UINT32_MAX;
                a->start = 0;
                a->pre = 1;
                a->t0 = TGC_TIME_NONE;
                k = (uint32_t)nal++;
                a->band = UINT32_MAX;
                delta[0] += (int64_t)a->size;
            }
            al[k].end = i;
            al[k].t1 = e->time;
            al[k].free_event = e->index;
            delta[i] -= (int64_t)al[k].size;
            if (who != NULL) {
                who[i] = k;
            }
            if (s != UINT32_MAX) {
                slot_of[s] = UINT32_MAX;
            }
        }
    }
    while (g < ng) {  /* marks after the last event: against the final state */
        tl__mark_grad(&map, slot_of, al, grads[g++].addr);
    }
    out->nallocs = nal;

    /* Categories: rule 1 (named, alive at the end) through the table's final state, then the
     * others in order. */
    if (cls != NULL) {
        for (size_t i = 0; i < cls->nnamed; i++) {
            const tgc_named *nm = &cls->named[i];
            if (nm->category >= TGC_CAT_OTHER || nm->addr == UINT64_MAX) {
                continue;
            }
            uint32_t s = tgc_ptrmap_get(&map, (const void *)(uintptr_t)(nm->addr + 1));
            if (s != UINT32_MAX && slot_of[s] != UINT32_MAX) {
                al[slot_of[s]].category = nm->category;
                al[slot_of[s]].rule = 1;
            }
        }
        for (size_t k = 0; k < nal; k++) {
            if (al[k].rule == 1) {
                continue;
            }
            if (al[k].grad) {
                al[k].category = TGC_CAT_GRAD;
                al[k].rule = 2;
                continue;
            }
            tl__by_span(&al[k], phases, cls->nnamed > 0);
        }
    }
    else {
        for (size_t k = 0; k < nal; k++) {
            al[k].category = TGC_CAT_OTHER;
        }
    }

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
    if (cls != NULL) {
        out->cat_active = calloc((size_t)columns * TGC_NCAT, sizeof(uint64_t));
        if (out->cat_active == NULL) {
            goto done;
        }
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
        band->category = a->category;
        band->rule = a->rule;
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

    /* Pass 3: sweep. At the end of each column: active bytes (per category too), the
     * summarized rest, and each drawn band's offset = the drawn bands stacked below it. */
    int64_t active = 0, cat_now[TGC_NCAT] = {0};
    uint64_t best = 0;
    size_t i = 0;
    for (uint32_t c = 0; c < columns; c++) {
        size_t stop = (size_t)(((uint64_t)(c + 1) * n) / columns);
        uint64_t peak = (uint64_t)(active > 0 ? active : 0);
        for (; i < stop; i++) {
            active += delta[i];
            if (who != NULL) {
                if (i == 0) {  /* those alive from the start, as delta[0] counts them */
                    for (size_t k = 0; k < nal; k++) {
                        if (al[k].pre) {
                            cat_now[al[k].category] += (int64_t)al[k].size;
                        }
                    }
                }
                uint32_t k = who[i];
                if (k != UINT32_MAX) {
                    cat_now[al[k].category] += ev[i].kind == TGC_EV_FREE ? -(int64_t)al[k].size
                                                                        : (int64_t)al[k].size;
                }
            }
            if (active > 0 && (uint64_t)active > best) {
                best = (uint64_t)active;
                out->peak_pos = i;
                if (who != NULL) {
                    for (int k = 0; k < TGC_NCAT; k++) {
                        out->at_peak[k] = (uint64_t)(cat_now[k] > 0 ? cat_now[k] : 0);
                    }
                }
            }
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
        if (out->cat_active != NULL) {
            for (int k = 0; k < TGC_NCAT; k++) {
                out->cat_active[(size_t)c * TGC_NCAT + k] =
                    (uint64_t)(cat_now[k] > 0 ? cat_now[k] : 0);
            }
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
    free(who);
    free(grads);
    free(spans);
    free(al);
    free(order);
    return rc;
}
