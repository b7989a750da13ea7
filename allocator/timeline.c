/* timeline.c: replays an allocator trace into the Active Memory Timeline (see timeline.h):
 * pairs allocations with their frees through an address table, keeps the `detail` largest as
 * bands, and sweeps the columns once to stack them; optionally classifies each allocation (grad
 * and name marks are matched during the pairing, while the table holds the allocations alive at
 * their time; the stacks' hints give the inferred rules, infer.c the inferred spans) and sums
 * the active bytes per category in the same sweep. Plain C. */
#include <stdlib.h>
#include <string.h>

#include "tensorgc/infer.h"
#include "tensorgc/ptrmap.h"
#include "tensorgc/timeline.h"

const char *const tgc_category_names[TGC_NCAT] = {
    "parameter", "buffer", "optimizer_state", "grad", "workspace", "input", "output", "activation",
    "temporary", "other",
};

typedef struct {
    uint64_t addr, size;
    int64_t t0, t1;        /* alloc and free times: TGC_TIME_NONE before the trace, INT64_MAX
                              alive at the end */
    uint32_t alloc_event, free_event;
    size_t start, end;     /* event positions: alive in [start, end) */
    size_t pos;            /* the event that makes it (ALLOC, PRE), or frees it when it began
                              before the trace without a PRE event */
    uint32_t band;         /* index into bands, UINT32_MAX when summarized */
    uint32_t name;         /* a name mark's, 0: none */
    uint8_t pre;           /* alive from the start without an event of its own at `start` */
    uint8_t grad;          /* a grad mark found it alive */
    uint8_t ahint, fhint;  /* the hints of the stacks that allocated and freed it */
    uint8_t rc_kept;       /* made by a checkpoint's recompute, freed after that recompute */
    uint32_t rc_run;       /* the run of recompute events that made it (0: none) */
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

static int
tl__i64_cmp(const void *x, const void *y)
{
    const int64_t *a = x, *b = y;
    return *a < *b ? -1 : *a > *b;
}

static int
tl__name_by_time(const void *x, const void *y)
{
    const tgc_name_mark *a = x, *b = y;
    return a->time < b->time ? -1 : a->time > b->time;
}

/* Sorts a copy of the spans by (phase, start) and merges the overlapping ones of each phase in
 * place: a duplicate (the optimizer's own hook and torch's annotation of the same step) or a
 * nested span of the same phase then counts once. *buf is the caller's to free. */
static int
tl__phases(const tgc_span *spans, size_t nspans, tgc_span **buf, size_t *nbuf,
           tl_phase ph[TGC_NPHASE])
{
    memset(ph, 0, TGC_NPHASE * sizeof(tl_phase));
    *nbuf = 0;
    *buf = malloc((nspans ? nspans : 1) * sizeof(tgc_span));
    if (*buf == NULL) {
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < nspans; i++) {
        if (spans[i].phase < TGC_NPHASE && spans[i].t0 <= spans[i].t1) {
            (*buf)[n++] = spans[i];
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
    *nbuf = out;
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

/* The first span of p starting after t, or NULL. */
static const tgc_span *
tl__next_span(const tl_phase *p, int64_t t)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->v[mid].t0 <= t) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    return lo < p->n ? &p->v[lo] : NULL;
}

/* The start of the first span of p starting after t; INT64_MAX: none. */
static int64_t
tl__next_start(const tl_phase *p, int64_t t)
{
    const tgc_span *s = tl__next_span(p, t);
    return s != NULL ? s->t0 : INT64_MAX;
}

/* OUTPUT of timeline.h: a forward's block (allocated in fw, alive after it) that outlived the
 * backward after that forward -- a backward frees what its forward saved, so the loop holds it
 * -- until the next result replaced it (freed by the end of the next forward) or to the end
 * (no forward after; fw not the trace's first forward). That backward must have ended: a
 * forward or a step (in ph, or in rph's steps: torch's annotations) begins after it; after an
 * OOM inside a backward nothing does. */
static int
tl__output(const tl_alloc *a, const tgc_span *fw, const tl_phase ph[TGC_NPHASE],
           const tl_phase *rph)
{
    const tgc_span *bw = tl__next_span(&ph[TGC_PHASE_BACKWARD], fw->t1);
    if (bw == NULL || a->t1 <= bw->t1 ||
        bw->t0 >= tl__next_start(&ph[TGC_PHASE_FORWARD], fw->t1)) {
        return 0;
    }
    const tgc_span *next = tl__next_span(&ph[TGC_PHASE_FORWARD], bw->t1);
    int64_t step = tl__next_start(&ph[TGC_PHASE_OPTIMIZER], bw->t1);
    if (rph != NULL) {
        int64_t r = tl__next_start(&rph[TGC_PHASE_OPTIMIZER], bw->t1);
        step = r < step ? r : step;
    }
    if (next == NULL) {
        /* alive at the end: not from the trace's first forward, whose survivors include what
         * lives for the process (a workspace no stack named) */
        return step != INT64_MAX &&
               (a->t1 != INT64_MAX || ph[TGC_PHASE_FORWARD].v[0].t0 < fw->t0);
    }
    return a->t1 <= next->t1;
}

/* What the inferred rules read besides the allocation: the inferred and the recorded spans,
 * and the times of the frees whose stacks say grad (zero_grad's), sorted. */
typedef struct {
    const tl_phase *iph, *rph;
    const int64_t *gfree;
    size_t ngfree;
} tl_infer_ctx;

/* Whether a grad's free (zero_grad) came in (t0, t1). */
static int
tl__grad_freed_within(const tl_infer_ctx *x, int64_t t0, int64_t t1)
{
    size_t lo = 0, hi = x->ngfree;  /* the first free after t0 is at lo */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->gfree[mid] <= t0) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    return lo < x->ngfree && x->gfree[lo] < t1;
}

/* The start of the first span of any phase, inferred or recorded, after t; INT64_MAX: none. */
static int64_t
tl__next_any(const tl_infer_ctx *x, int64_t t)
{
    int64_t first = INT64_MAX;
    for (int ph = 0; ph < TGC_NPHASE; ph++) {
        int64_t i = tl__next_start(&x->iph[ph], t), r = tl__next_start(&x->rph[ph], t);
        first = i < first ? i : first;
        first = r < first ? r : first;
    }
    return first;
}

/* Rules 3-5 (recorded spans) or 10-12 (inferred: x not NULL) of timeline.h: the innermost span
 * holding the allocation's start decides; 0 when none does. `named_end`: the reporter named the
 * blocks alive at the end, so a recorded forward's block alive then that it did not name holds
 * no tensor it could see (a cuBLAS workspace made in the first forward): not an activation. */
static int
tl__by_span(tl_alloc *a, const tl_phase ph[TGC_NPHASE], int named_end, const tl_infer_ctx *x)
{
    int inferred = x != NULL;
    static const uint8_t order[3] = {TGC_PHASE_OPTIMIZER, TGC_PHASE_FORWARD, TGC_PHASE_BACKWARD};
    static const uint8_t kept[2][TGC_NPHASE] = {
        {TGC_CAT_ACTIVATION, TGC_CAT_OTHER, TGC_CAT_OPTIMIZER_STATE},
        /* inferred: what outlives a backward is its grads (no grad marks tell them apart) */
        {TGC_CAT_ACTIVATION, TGC_CAT_GRAD, TGC_CAT_OPTIMIZER_STATE}};
    static const uint8_t rule[2][TGC_NPHASE] = {{4, 5, 3}, {11, 12, 10}};
    const tgc_span *best = NULL;
    uint8_t phase = 0;
    if (a->t0 == TGC_TIME_NONE) {
        return 0;
    }
    /* the innermost span: the latest start (an LBFGS closure's forward inside its step) */
    for (int j = 0; j < 3; j++) {
        const tgc_span *s = tl__span_at(&ph[order[j]], a->t0);
        if (s != NULL && (best == NULL || s->t0 > best->t0)) {
            best = s;
            phase = order[j];
        }
    }
    if (best == NULL) {
        return 0;
    }
    /* alive at the end is never "freed by t1", even in a span still open at the snapshot */
    int freed = a->t1 != INT64_MAX && a->t1 <= best->t1;
    a->category = freed ? TGC_CAT_TEMPORARY : kept[inferred][phase];
    a->rule = rule[inferred][phase];
    if (a->category == TGC_CAT_ACTIVATION && tl__output(a, best, ph, inferred ? x->rph : NULL)) {
        a->category = TGC_CAT_OUTPUT;
        return 1;
    }
    if (!inferred && a->category == TGC_CAT_ACTIVATION && a->t1 == INT64_MAX && named_end) {
        a->category = TGC_CAT_OTHER;
    }
    /* a step's result the loop dropped before anything else ran (clip_grad_norm_'s norm):
     * states live on through the next phases */
    if (inferred && phase == TGC_PHASE_OPTIMIZER && a->category == TGC_CAT_OPTIMIZER_STATE &&
        a->t1 != INT64_MAX && a->t1 < tl__next_any(x, best->t1)) {
        a->category = TGC_CAT_TEMPORARY;
    }
    /* made by a checkpoint's recompute and used after it (the block's backward freed it): what
     * the forward would have saved, made again */
    if (inferred && phase == TGC_PHASE_BACKWARD && a->category == TGC_CAT_TEMPORARY &&
        a->rc_kept) {
        a->category = TGC_CAT_ACTIVATION;
    }
    /* outlived its backward, but a zero_grad that freed grads after it did not free it (the
     * engine thread's cuBLAS workspace, seen without C++ frames): no grad */
    if (inferred && a->category == TGC_CAT_GRAD &&
        tl__grad_freed_within(x, best->t1, a->t1)) {
        a->category = TGC_CAT_OTHER;
    }
    /* kept into the next forward and through a step's start: no activation of this forward
     * (the forward thread's cuBLAS workspace, seen without C++ frames; a kept loss history) */
    if (inferred && a->category == TGC_CAT_ACTIVATION &&
        tl__next_start(&x->iph[TGC_PHASE_FORWARD], best->t1) < a->t1) {
        int64_t step = tl__next_start(&x->iph[TGC_PHASE_OPTIMIZER], a->t0);
        int64_t rstep = tl__next_start(&x->rph[TGC_PHASE_OPTIMIZER], a->t0);
        if ((rstep < step ? rstep : step) < a->t1) {
            a->category = TGC_CAT_OTHER;
        }
    }
    return 1;
}

/* Rules 8-15 of timeline.h, from the stacks' hints and the inferred spans (x->iph; x->rph: the
 * recorded ones, whose forwards an input batch may feed too); 0 when none applies. */
static int
tl__infer(tl_alloc *a, const tl_infer_ctx *x)
{
    const tl_phase *iph = x->iph, *rph = x->rph;
    uint8_t ak = TGC_HINT_KIND(a->ahint), fk = TGC_HINT_KIND(a->fhint);
    uint8_t ap = TGC_HINT_PHASE(a->ahint);
    if (ak == TGC_HK_PARAM || ak == TGC_HK_BUFFER) {
        a->category = ak == TGC_HK_PARAM ? TGC_CAT_PARAMETER : TGC_CAT_BUFFER;
        a->rule = 8;
        return 1;
    }
    if (ak == TGC_HK_GRAD || fk == TGC_HK_UNGRAD) {
        /* AccumulateGrad's sum freed inside its backward was a step of it (the span rule says
         * temporary); freed by zero_grad, or kept, it was the grad */
        const tgc_span *bw = a->t0 != TGC_TIME_NONE && fk != TGC_HK_UNGRAD
                             ? tl__span_at(&iph[TGC_PHASE_BACKWARD], a->t0) : NULL;
        if (bw == NULL || a->t1 > bw->t1) {
            a->category = TGC_CAT_GRAD;
            a->rule = 9;
            return 1;
        }
    }
    if (ak == TGC_HK_WORKSPACE) {
        a->category = TGC_CAT_WORKSPACE;
        a->rule = 14;
        return 1;
    }
    if (a->t0 == TGC_TIME_NONE) {
        /* made before the trace, alive at its start: its own stack's phase, outlived */
        static const uint8_t by_phase[][2] = {
            [TGC_HP_OPTIMIZER] = {TGC_CAT_OPTIMIZER_STATE, 10},
            [TGC_HP_FORWARD] = {TGC_CAT_ACTIVATION, 11},
            [TGC_HP_BACKWARD] = {TGC_CAT_GRAD, 12}, [TGC_HP_FRAMELESS] = {TGC_CAT_GRAD, 12}};
        if (ap < sizeof(by_phase) / sizeof(by_phase[0]) && by_phase[ap][1] != 0) {
            a->category = by_phase[ap][0];
            a->rule = by_phase[ap][1];
            /* alive through the whole trace: through its forwards and steps it is no
             * activation, through zero_grad's frees of the grads no grad (as in tl__by_span) */
            if (a->t1 == INT64_MAX &&
                ((a->category == TGC_CAT_ACTIVATION && iph[TGC_PHASE_FORWARD].n > 0 &&
                  iph[TGC_PHASE_OPTIMIZER].n + rph[TGC_PHASE_OPTIMIZER].n > 0) ||
                 (a->category == TGC_CAT_GRAD && x->ngfree > 0))) {
                a->category = TGC_CAT_OTHER;
            }
            return 1;
        }
        /* no stack of its own, freed by a backward: what a forward saved for it */
        uint8_t fp = TGC_HINT_PHASE(a->fhint);
        if (ap == TGC_HP_UNKNOWN && (fp == TGC_HP_BACKWARD || fp == TGC_HP_FRAMELESS) &&
            a->t1 != INT64_MAX && tl__span_at(&iph[TGC_PHASE_BACKWARD], a->t1) != NULL) {
            a->category = TGC_CAT_ACTIVATION;
            a->rule = 15;
            return 1;
        }
        return 0;
    }
    if (tl__by_span(a, iph, 0, x)) {
        return 1;
    }
    if (ap == TGC_HP_OUTSIDE) {
        int64_t next = tl__next_start(&iph[TGC_PHASE_FORWARD], a->t0);
        int64_t rnext = tl__next_start(&rph[TGC_PHASE_FORWARD], a->t0);
        int64_t first = INT64_MAX;
        if (rnext < next) {
            next = rnext;
        }
        for (int k = 0; k < 2; k++) {
            const tl_phase *p = k ? &rph[TGC_PHASE_FORWARD] : &iph[TGC_PHASE_FORWARD];
            if (p->n > 0 && p->v[0].t0 < first) {
                first = p->v[0].t0;
            }
        }
        /* alive into the forward that follows; one alive at the end must be made after the
         * first forward (a tensor made at setup and kept is no batch) */
        if (next != INT64_MAX && a->t1 > next && (a->t1 != INT64_MAX || a->t0 > first)) {
            a->category = TGC_CAT_INPUT;
            a->rule = 13;
            return 1;
        }
        /* made and freed by the loop's code before any phase began again (a metric) */
        if (a->t1 != INT64_MAX && a->t1 < tl__next_any(x, a->t0)) {
            a->category = TGC_CAT_TEMPORARY;
            a->rule = 13;
            return 1;
        }
    }
    return 0;
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
    free(t->label);
    free(t->name);
    free(t->inferred);
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

/* Applies a name mark the same way. */
static void
tl__mark_name(const tgc_ptrmap *map, const uint32_t *slot_of, tl_alloc *al,
              const tgc_name_mark *m)
{
    if (m->addr == UINT64_MAX) {
        return;
    }
    uint32_t s = tgc_ptrmap_get(map, (const void *)(uintptr_t)(m->addr + 1));
    if (s != UINT32_MAX && slot_of[s] != UINT32_MAX) {
        al[slot_of[s]].name = m->name;
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
    tgc_name_mark *names = NULL;    /* cls->names sorted by time */
    tgc_span *spans = NULL;         /* the merged spans, owned by phases */
    tgc_span *found = NULL;         /* the spans inferred from the hints, before merging */
    int64_t *gfree = NULL;          /* times of the frees of grads (zero_grad's), sorted */
    size_t ngfree = 0;
    tl_phase phases[TGC_NPHASE] = {{NULL, 0}}, iphases[TGC_NPHASE] = {{NULL, 0}};
    size_t g = 0, ng = cls != NULL ? cls->ngrads : 0, nspans = 0, nfound = 0;
    size_t m = 0, nnm = cls != NULL && cls->names != NULL ? cls->nnames : 0;
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
        names = malloc((nnm ? nnm : 1) * sizeof(tgc_name_mark));
        if (who == NULL || grads == NULL || names == NULL ||
            tl__phases(cls->spans, cls->nspans, &spans, &nspans, phases) < 0) {
            goto done;
        }
        if (ng) {
            memcpy(grads, cls->grads, ng * sizeof(tgc_grad_mark));
        }
        qsort(grads, ng, sizeof(tgc_grad_mark), tl__grad_by_time);
        if (nnm) {
            memcpy(names, cls->names, nnm * sizeof(tgc_name_mark));
        }
        qsort(names, nnm, sizeof(tgc_name_mark), tl__name_by_time);
        if (cls->infer) {
            tgc_span *merged = NULL;
            size_t nmerged = 0;
            if (tgc_infer_spans(ev, n, &found, &nfound) < 0 ||
                tl__phases(found, nfound, &merged, &nmerged, iphases) < 0) {
                goto done;
            }
            out->inferred = merged;  /* iphases point into it; the caller sees it too */
            out->ninferred = nmerged;
        }
    }
    size_t nslots = 0;
    uint32_t rc_run = 0;            /* runs of consecutive recompute events, numbered from 1 */
    int rc_prev = 0, in_rc = 0;
    for (size_t i = 0; i < n; i++) {
        const tgc_event *e = &ev[i];
        if (who != NULL) {
            who[i] = UINT32_MAX;
        }
        if (e->kind == TGC_EV_OOM) {
            continue;
        }
        if (e->kind != TGC_EV_PRE) {
            in_rc = (e->hint & TGC_HINT_RECOMPUTE) != 0;
            rc_run += in_rc && !rc_prev;
            rc_prev = in_rc;
        }
        /* grad and name marks made before this event: the events up to their time are in
         * the table */
        while (g < ng && grads[g].time < e->time) {
            tl__mark_grad(&map, slot_of, al, grads[g++].addr);
        }
        while (m < nnm && names[m].time < e->time) {
            tl__mark_name(&map, slot_of, al, &names[m++]);
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
            a->pos = i;
            a->ahint = e->hint;
            a->rc_run = e->kind == TGC_EV_ALLOC && in_rc ? rc_run : 0;
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
                a->pos = i;
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
            al[k].fhint = e->hint;
            al[k].rc_kept = al[k].rc_run != 0 && !(in_rc && al[k].rc_run == rc_run);
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
    while (m < nnm) {
        tl__mark_name(&map, slot_of, al, &names[m++]);
    }
    out->nallocs = nal;

    /* Categories: rule 1 (named, alive at the end) through the table's final state, then the
     * others in order. */
    if (cls != NULL && cls->infer) {
        gfree = malloc((n + 1) * sizeof(int64_t));
        if (gfree == NULL) {
            goto done;
        }
        for (size_t i = 0; i < n; i++) {
            if (ev[i].kind == TGC_EV_FREE && TGC_HINT_KIND(ev[i].hint) == TGC_HK_UNGRAD &&
                ev[i].time != TGC_TIME_NONE) {
                gfree[ngfree++] = ev[i].time;
            }
        }
        qsort(gfree, ngfree, sizeof(int64_t), tl__i64_cmp);
    }
    tl_infer_ctx ictx = {iphases, phases, gfree, ngfree};
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
            /* a stack that made a library's workspace says what the block is: before the
             * recorded spans, which would call the first forward's cuBLAS workspace other */
            if (cls->infer && TGC_HINT_KIND(al[k].ahint) == TGC_HK_WORKSPACE) {
                al[k].category = TGC_CAT_WORKSPACE;
                al[k].rule = 14;
                continue;
            }
            if (tl__by_span(&al[k], phases, cls->nnamed > 0, NULL) ||
                (cls->infer && tl__infer(&al[k], &ictx))) {
                continue;
            }
            al[k].category = TGC_CAT_OTHER;
            al[k].rule = 6;
        }
        /* each allocation's label and name, at the event that makes it (or frees it, when it
         * has none of its own) */
        out->label = calloc(n + 1, 1);
        out->name = calloc(n + 1, sizeof(uint32_t));
        if (out->label == NULL || out->name == NULL) {
            goto done;
        }
        for (size_t k = 0; k < nal; k++) {
            out->label[al[k].pos] = TGC_LABEL(al[k].category, al[k].rule);
            out->name[al[k].pos] = al[k].name;
            out->rule_allocs[al[k].rule & 15]++;
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
    free(names);
    free(spans);
    free(found);
    free(gfree);
    free(al);
    free(order);
    return rc;
}
