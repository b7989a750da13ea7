/* detail.c: every allocation of a trace on the trace's own clock, its varint encoding, and the
 * active bytes over the trace by column, for the timeline page (contract in
 * include/tensorgc/detail.h). Plain C. */
#include <stdlib.h>
#include <string.h>

#include "tensorgc/detail.h"
#include "tensorgc/ptrmap.h"

#define NONE UINT32_MAX

typedef struct {
    tgc_detail *d;
    size_t cap;
    size_t segcap;
    size_t othercap;
    const tgc_detail_labels *lab;   /* NULL: no labels */
} dt_out;

static int
dt__grow(dt_out *o)
{
    tgc_detail *d = o->d;
    if (d->n < o->cap) {
        return 0;
    }
    size_t c = o->cap ? o->cap * 2 : 1024;
    void *p;
#define DT_GROW(field) \
    if ((p = realloc(d->field, c * sizeof(*d->field))) == NULL) { return -1; } \
    d->field = p;
    DT_GROW(a) DT_GROW(f) DT_GROW(c) DT_GROW(s) DT_GROW(x) DT_GROW(e) DT_GROW(w)
    DT_GROW(k) DT_GROW(r) DT_GROW(v)
    if (o->lab != NULL) {
        DT_GROW(label) DT_GROW(name)
    }
#undef DT_GROW
    o->cap = c;
    return 0;
}

/* A new allocation, alive to the end until its free is seen; its index, or NONE. `entry` (a
 * trace entry) or `pre` (a block of pre), the other SIZE_MAX, is where the replay wrote its
 * label. */
static uint32_t
dt__add(dt_out *o, uint64_t a, uint64_t s, uint64_t x, int64_t e, uint32_t k, uint32_t v,
        int64_t w, size_t entry, size_t pre)
{
    if (dt__grow(o) < 0) {
        return NONE;
    }
    tgc_detail *d = o->d;
    size_t j = d->n++;
    if (o->lab != NULL) {
        const tgc_detail_labels *l = o->lab;
        d->label[j] = entry != SIZE_MAX ? (l->entry_label ? l->entry_label[entry] : 0)
                                        : (l->pre_label ? l->pre_label[pre] : 0);
        d->name[j] = entry != SIZE_MAX ? (l->entry_name ? l->entry_name[entry] : 0)
                                       : (l->pre_name ? l->pre_name[pre] : 0);
    }
    d->a[j] = a;
    d->f[j] = TGC_DETAIL_ALIVE;
    d->c[j] = TGC_DETAIL_ALIVE;
    d->s[j] = s;
    d->x[j] = x;
    d->e[j] = e;
    d->w[j] = w;
    d->k[j] = k;
    d->r[j] = 0;
    d->v[j] = v;
    return (uint32_t)j;
}

static int
dt__seg(dt_out *o, int64_t start, int64_t end, uint64_t size, uint64_t addr, int64_t made,
        int64_t ended, uint32_t version)
{
    tgc_detail *d = o->d;
    if (d->nsegs == o->segcap) {
        size_t c = o->segcap ? o->segcap * 2 : 64;
        int64_t *p = realloc(d->seg, c * TGC_DETAIL_SEG_FIELDS * sizeof(int64_t));
        if (p == NULL) {
            return -1;
        }
        d->seg = p;
        o->segcap = c;
    }
    int64_t *r = &d->seg[d->nsegs++ * TGC_DETAIL_SEG_FIELDS];
    r[0] = start;
    r[1] = end;
    r[2] = (int64_t)size;
    r[3] = (int64_t)addr;
    r[4] = made;
    r[5] = ended;
    r[6] = (int64_t)version;
    return 0;
}

static int
dt__other(dt_out *o, size_t i)
{
    tgc_detail *d = o->d;
    if (d->nother == o->othercap) {
        size_t c = o->othercap ? o->othercap * 2 : 64;
        uint32_t *p = realloc(d->other, c * sizeof(uint32_t));
        if (p == NULL) {
            return -1;
        }
        d->other = p;
        o->othercap = c;
    }
    d->other[d->nother++] = (uint32_t)i;
    return 0;
}

static inline const void *
dt__key(uint64_t addr)
{
    return (const void *)(uintptr_t)(addr + 1);  /* 0 is the table's empty key */
}

/* The slot of addr, made when `make`; NONE when absent. The one address whose key would be the
 * table's empty key (2**64 - 1) keeps its slot in *top instead. */
static inline uint32_t
dt__slot(tgc_ptrmap *m, uint32_t *top, uint64_t addr, uint32_t *nslots, int make)
{
    if (addr == UINT64_MAX) {
        if (*top == NONE && make) {
            *top = (*nslots)++;
        }
        return *top;
    }
    uint32_t s = tgc_ptrmap_get(m, dt__key(addr));
    if (s == NONE && make) {
        s = tgc_ptrmap_put(m, dt__key(addr), (*nslots)++);
    }
    return s;
}

/* The dense id of the caller's stack k (0: none, or past the bound). */
static inline int
dt__dense(tgc_detail *out, uint32_t *dense, uint32_t k, uint32_t max_stacks, uint32_t *id)
{
    if (k == 0 || dense[k] == NONE) {
        *id = 0;
        return 0;
    }
    if (dense[k] == 0) {
        if (out->nused >= max_stacks) {
            dense[k] = NONE;
            *id = 0;
            return 0;
        }
        uint32_t *p = realloc(out->used, (out->nused + 1) * sizeof(uint32_t));
        if (p == NULL) {
            return -1;
        }
        out->used = p;
        out->used[out->nused++] = k;
        dense[k] = (uint32_t)out->nused;
    }
    *id = dense[k];
    return 0;
}

int
tgc_detail_build(const tgc_tcols *c, const uint64_t *pre_addr, const uint64_t *pre_size,
                 const uint32_t *pre_stack, size_t npre, int free_kind, uint32_t max_stacks,
                 const tgc_detail_labels *labels, tgc_detail *out)
{
    memset(out, 0, sizeof(*out));
    dt_out o = {out, 0, 0, 0, labels};
    size_t n = c->n, nseg_ev = 0, nslot_max = n + npre + 1;
    tgc_ptrmap map = {0}, segmap = {0};
    uint32_t *open = NULL, *pend = NULL, *vcount = NULL, *pre_v = NULL;
    uint32_t *segopen = NULL, *segv = NULL, *dense = NULL, nslots = 0, nsegslots = 0;
    uint32_t top = NONE, segtop = NONE;  /* the slots of address 2**64 - 1 (see dt__slot) */
    uint8_t *pre_kept = NULL;
    uint32_t maxk = 0;
    int rc = -1;
    int req = free_kind == TGC_TK_FREE_REQUESTED;

    if (n + npre >= (size_t)UINT32_MAX - 16) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t kd = c->kind[i];
        nseg_ev += kd >= TGC_TK_SEGMENT_ALLOC && kd <= TGC_TK_SEGMENT_UNMAP;
        if (c->stack[i] > maxk) {
            maxk = c->stack[i];
        }
    }
    for (size_t p = 0; pre_stack != NULL && p < npre; p++) {
        if (pre_stack[p] > maxk) {
            maxk = pre_stack[p];
        }
    }
    if (tgc_ptrmap_init(&map, nslot_max + 16) < 0 || tgc_ptrmap_init(&segmap, nseg_ev + 16) < 0) {
        goto done;
    }
    open = malloc(nslot_max * sizeof(uint32_t));
    pend = malloc(nslot_max * sizeof(uint32_t));
    vcount = calloc(nslot_max, sizeof(uint32_t));
    pre_v = calloc(npre + 1, sizeof(uint32_t));
    segopen = malloc((nseg_ev + 1) * sizeof(uint32_t));
    segv = calloc(nseg_ev + 1, sizeof(uint32_t));
    dense = calloc((size_t)maxk + 1, sizeof(uint32_t));
    pre_kept = calloc(npre + 1, 1);
    if (open == NULL || pend == NULL || vcount == NULL || pre_v == NULL || segopen == NULL ||
        segv == NULL || dense == NULL || pre_kept == NULL) {
        goto done;
    }
    for (size_t g = 0; g <= nseg_ev; g++) {
        segopen[g] = NONE;
    }
    /* the addresses the trace allocates get their slots first: a block alive at the end was
     * there before the trace only if its address is not among them */
    for (size_t i = 0; i < n; i++) {
        if (c->kind[i] == TGC_TK_ALLOC) {
            (void)dt__slot(&map, &top, c->addr[i], &nslots, 1);
        }
    }
    for (size_t p = 0; p < npre; p++) {
        if (dt__slot(&map, &top, pre_addr[p], &nslots, 0) == NONE) {
            pre_kept[p] = 1;
            (void)dt__slot(&map, &top, pre_addr[p], &nslots, 1);
        }
    }
    /* Pass 1: the frees that find no open allocation. Each was alive from the start: it comes
     * first, so that a[] stays in order. Its version is memory_viz's at its free. */
    for (size_t s = 0; s < nslot_max; s++) {
        open[s] = NONE;
    }
    for (size_t p = 0; p < npre; p++) {
        if (pre_kept[p]) {
            open[dt__slot(&map, &top, pre_addr[p], &nslots, 0)] = 0;
        }
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t kd = c->kind[i];
        if (kd == TGC_TK_ALLOC) {
            open[dt__slot(&map, &top, c->addr[i], &nslots, 0)] = 0;
        }
        else if (kd == free_kind) {
            uint32_t s = dt__slot(&map, &top, c->addr[i], &nslots, 1);
            if (open[s] == NONE) {
                if (dt__add(&o, 0, c->size[i], c->addr[i], -1, 0, vcount[s],
                            c->stream ? c->stream[i] : 0, i, SIZE_MAX) == NONE) {
                    goto done;
                }
            }
            open[s] = NONE;
        }
        if (kd == TGC_TK_FREE_COMPLETED) {
            vcount[dt__slot(&map, &top, c->addr[i], &nslots, 1)]++;
        }
    }
    /* a block from before the trace: every free_completed at its address came before it */
    for (size_t p = 0; p < npre; p++) {
        if (pre_kept[p]) {
            pre_v[p] = vcount[dt__slot(&map, &top, pre_addr[p], &nslots, 0)];
        }
    }
    /* Pass 2: the clock; pre-existing blocks, then the trace */
    size_t u = 0;
    for (size_t s = 0; s < nslot_max; s++) {
        open[s] = NONE;
        pend[s] = NONE;
        vcount[s] = 0;
    }
    for (size_t p = 0; p < npre; p++) {
        if (!pre_kept[p]) {
            continue;
        }
        uint32_t k;
        if (dt__dense(out, dense, pre_stack ? pre_stack[p] : 0, max_stacks, &k) < 0) {
            goto done;
        }
        uint32_t j = dt__add(&o, 0, pre_size[p], pre_addr[p], -1, k, pre_v[p], 0, SIZE_MAX, p);
        if (j == NONE) {
            goto done;
        }
        open[dt__slot(&map, &top, pre_addr[p], &nslots, 0)] = j;
    }
    out->npre = out->n;
    for (size_t i = 0; i < n; i++) {
        uint8_t kd = c->kind[i];
        uint64_t addr = c->addr[i];
        if (kd == TGC_TK_ALLOC) {
            uint32_t k, s = dt__slot(&map, &top, addr, &nslots, 0);
            if (dt__dense(out, dense, c->stack[i], max_stacks, &k) < 0) {
                goto done;
            }
            uint32_t j = dt__add(&o, (uint64_t)i, c->size[i], addr, (int64_t)i, k, vcount[s],
                                 c->stream ? c->stream[i] : 0, i, SIZE_MAX);
            if (j == NONE) {
                goto done;
            }
            open[s] = j;
        }
        else if (kd == free_kind) {
            uint32_t s = dt__slot(&map, &top, addr, &nslots, 0);
            uint32_t j = open[s];
            if (j == NONE) {
                j = (uint32_t)u++;  /* the unmatched ones, in the order pass 1 found them */
            }
            open[s] = NONE;
            out->f[j] = (uint64_t)i;
            if (dt__dense(out, dense, c->stack[i], max_stacks, &out->r[j]) < 0) {
                goto done;
            }
            if (req) {
                pend[s] = j;
            }
            else {
                vcount[s]++;
            }
        }
        else if (kd == TGC_TK_FREE_COMPLETED && req) {
            uint32_t s = dt__slot(&map, &top, addr, &nslots, 1);
            if (pend[s] != NONE) {
                out->c[pend[s]] = (uint64_t)i;
                pend[s] = NONE;
            }
            else if (dt__other(&o, i) < 0) {
                goto done;
            }
            vcount[s]++;
        }
        else {
            if (dt__other(&o, i) < 0) {
                goto done;
            }
            if (kd == TGC_TK_SEGMENT_ALLOC || kd == TGC_TK_SEGMENT_MAP) {
                uint32_t s = dt__slot(&segmap, &segtop, addr, &nsegslots, 1);
                segopen[s] = (uint32_t)out->nsegs;
                if (dt__seg(&o, (int64_t)i, -1, c->size[i], addr, (int64_t)i, -1, segv[s]) < 0) {
                    goto done;
                }
            }
            else if (kd == TGC_TK_SEGMENT_FREE || kd == TGC_TK_SEGMENT_UNMAP) {
                uint32_t s = dt__slot(&segmap, &segtop, addr, &nsegslots, 1);
                if (segopen[s] != NONE) {
                    int64_t *r = &out->seg[(size_t)segopen[s] * TGC_DETAIL_SEG_FIELDS];
                    r[1] = (int64_t)i;
                    r[5] = (int64_t)i;
                    segopen[s] = NONE;
                }
                else if (dt__seg(&o, 0, (int64_t)i, c->size[i], addr, -1, (int64_t)i,
                                 segv[s]) < 0) {  /* made before the trace */
                    goto done;
                }
                segv[s]++;
            }
        }
    }
    out->events = n;
    rc = 0;
done:
    tgc_ptrmap_free(&map);
    tgc_ptrmap_free(&segmap);
    free(open);
    free(pend);
    free(vcount);
    free(pre_v);
    free(segopen);
    free(segv);
    free(dense);
    free(pre_kept);
    if (rc < 0) {
        tgc_detail_free(out);
    }
    return rc;
}

void
tgc_detail_free(tgc_detail *d)
{
    free(d->a);
    free(d->f);
    free(d->c);
    free(d->s);
    free(d->x);
    free(d->e);
    free(d->w);
    free(d->k);
    free(d->r);
    free(d->v);
    free(d->label);
    free(d->name);
    free(d->used);
    free(d->seg);
    free(d->other);
    memset(d, 0, sizeof(*d));
}

/* LEB128: 7 bits a byte, low first, the high bit set on every byte but the last. */
static inline size_t
dt__varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static inline uint64_t
dt__zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

/* The values of allocation j (see detail.h), after allocation p (SIZE_MAX: none). */
static inline void
dt__values(const tgc_detail *d, size_t j, size_t p, uint64_t unit, uint64_t xunit,
           uint64_t v[TGC_DETAIL_STREAMS])
{
    uint64_t pa = p != SIZE_MAX ? d->a[p] : 0, px = p != SIZE_MAX ? d->x[p] : 0;
    v[0] = d->a[j] - pa;
    v[1] = d->f[j] == TGC_DETAIL_ALIVE ? 0 : d->f[j] - d->a[j] + 1;
    v[2] = d->s[j] / unit;
    v[3] = d->k[j];
    /* a two's-complement difference, divided as a signed number: exact, xunit divides both */
    v[4] = dt__zigzag((int64_t)(d->x[j] - px) / (int64_t)xunit);
    v[5] = d->c[j] == TGC_DETAIL_ALIVE || d->f[j] == TGC_DETAIL_ALIVE ? 0 : d->c[j] - d->f[j];
    v[6] = d->r[j];
    v[7] = d->v[j];
    v[8] = dt__zigzag(d->w[j]);
}

static inline size_t
dt__varlen(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

int
tgc_detail_encode(const tgc_detail *d, const uint8_t *keep, tgc_detail_enc *out)
{
    memset(out, 0, sizeof(*out));
    uint64_t unit = 512, xunit = 512, v[TGC_DETAIL_STREAMS];
    for (size_t j = 0; j < d->n; j++) {
        if (keep != NULL && !keep[j]) {
            continue;
        }
        if (d->s[j] % 512) {
            unit = 1;
        }
        if (d->x[j] % 512) {
            xunit = 1;
        }
    }
    out->unit = unit;
    out->xunit = xunit;
    size_t need[TGC_DETAIL_STREAMS] = {0};  /* a first pass sizes each stream exactly */
    for (size_t j = 0, p = SIZE_MAX; j < d->n; j++) {
        if (keep != NULL && !keep[j]) {
            continue;
        }
        dt__values(d, j, p, unit, xunit, v);
        for (int t = 0; t < TGC_DETAIL_STREAMS; t++) {
            need[t] += dt__varlen(v[t]);
        }
        p = j;
    }
    for (int t = 0; t < TGC_DETAIL_STREAMS; t++) {
        out->stream[t] = malloc(need[t] + 1);
        if (out->stream[t] == NULL) {
            tgc_detail_enc_free(out);
            return -1;
        }
    }
    for (size_t j = 0, p = SIZE_MAX; j < d->n; j++) {
        if (keep != NULL && !keep[j]) {
            continue;
        }
        dt__values(d, j, p, unit, xunit, v);
        for (int t = 0; t < TGC_DETAIL_STREAMS; t++) {
            out->len[t] += dt__varint(out->stream[t] + out->len[t], v[t]);
        }
        p = j;
    }
    return 0;
}

void
tgc_detail_enc_free(tgc_detail_enc *e)
{
    for (int t = 0; t < TGC_DETAIL_STREAMS; t++) {
        free(e->stream[t]);
    }
    memset(e, 0, sizeof(*e));
}

static int
dt__by_size_desc(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

uint8_t *
tgc_detail_largest(const tgc_detail *d, size_t max)
{
    uint8_t *keep = calloc(d->n + 1, 1);
    if (keep == NULL) {
        return NULL;
    }
    if (max >= d->n) {
        memset(keep, 1, d->n);
        return keep;
    }
    if (max == 0) {
        return keep;
    }
    uint64_t *sizes = malloc(d->n * sizeof(uint64_t));
    if (sizes == NULL) {
        free(keep);
        return NULL;
    }
    memcpy(sizes, d->s, d->n * sizeof(uint64_t));
    qsort(sizes, d->n, sizeof(uint64_t), dt__by_size_desc);
    uint64_t thr = sizes[max - 1];
    size_t above = 0;
    for (size_t j = 0; j < d->n; j++) {
        above += d->s[j] > thr;
    }
    size_t ties = max - above;  /* of the size at the bound, the earlier ones */
    for (size_t j = 0; j < d->n; j++) {
        if (d->s[j] > thr || (d->s[j] == thr && ties > 0 && ties--)) {
            keep[j] = 1;
        }
    }
    free(sizes);
    return keep;
}

int
tgc_times_encode(const int64_t *time, size_t n, uint8_t **out, size_t *len, int64_t *t0,
                 int *all)
{
    *len = 0;
    *t0 = 0;
    *all = n > 0 && time != NULL;
    *out = malloc(n * 10 + 1);
    if (*out == NULL) {
        return -1;
    }
    for (size_t i = 0; time != NULL && i < n; i++) {
        if (time[i] != INT64_MIN) {
            *t0 = time[i];
            break;
        }
    }
    int64_t prev = *t0;
    for (size_t i = 0; i < n; i++) {
        int64_t t = time == NULL || time[i] == INT64_MIN ? prev : time[i];
        if (time == NULL || time[i] == INT64_MIN) {
            *all = 0;
        }
        *len += dt__varint(*out + *len, dt__zigzag((int64_t)((uint64_t)t - (uint64_t)prev)));
        prev = t;
    }
    return 0;
}

void
tgc_series_free(tgc_series *s)
{
    free(s->max);
    free(s->at);
    free(s->bycat);
    memset(s, 0, sizeof(*s));
}

int
tgc_detail_series(const tgc_detail *d, const uint8_t *cat, uint32_t columns, tgc_series *out)
{
    memset(out, 0, sizeof(*out));
    out->peak_at = -1;
    size_t n = (size_t)d->events;
    if (columns == 0) {
        return -1;
    }
    out->columns = columns;
    out->max = calloc(columns, sizeof(uint64_t));
    out->at = malloc(columns * sizeof(int64_t));
    out->bycat = cat != NULL ? calloc((size_t)columns * 16, sizeof(uint64_t)) : NULL;
    /* the changes at each entry, by a counting sort of the allocations' two ends */
    size_t *first = calloc(n + 2, sizeof(size_t));
    uint32_t *who = malloc((2 * d->n + 1) * sizeof(uint32_t));
    if (out->max == NULL || out->at == NULL || (cat != NULL && out->bycat == NULL) ||
        first == NULL || who == NULL) {
        free(first);
        free(who);
        tgc_series_free(out);
        return -1;
    }
    for (uint32_t col = 0; col < columns; col++) {
        out->at[col] = -1;
    }
    for (size_t j = 0; j < d->n; j++) {
        if (d->a[j] < n) {
            first[d->a[j] + 1]++;
        }
        if (d->f[j] != TGC_DETAIL_ALIVE && d->f[j] < n) {
            first[d->f[j] + 1]++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        first[i + 1] += first[i];
    }
    size_t *fill = malloc((n + 1) * sizeof(size_t));
    if (fill == NULL) {
        free(first);
        free(who);
        tgc_series_free(out);
        return -1;
    }
    memcpy(fill, first, (n + 1) * sizeof(size_t));
    for (size_t j = 0; j < d->n; j++) {  /* bit 31 of who: the free end */
        if (d->a[j] < n) {
            who[fill[d->a[j]]++] = (uint32_t)j;
        }
        if (d->f[j] != TGC_DETAIL_ALIVE && d->f[j] < n) {
            who[fill[d->f[j]]++] = (uint32_t)j | 0x80000000u;
        }
    }
    free(fill);
    int64_t total = 0, bycat[16] = {0};
    uint32_t col = 0;
    size_t stop = n / columns;  /* (col + 1) * n / columns */
    for (size_t i = 0; i < n; i++) {
        for (size_t q = first[i]; q < first[i + 1]; q++) {
            uint32_t j = who[q] & 0x7fffffffu;
            int64_t s = who[q] & 0x80000000u ? -(int64_t)d->s[j] : (int64_t)d->s[j];
            total += s;
            if (cat != NULL) {
                bycat[cat[j] & 15] += s;
            }
        }
        while (i >= stop && col + 1 < columns) {
            col++;
            stop = (size_t)(((uint64_t)(col + 1) * n) / columns);
        }
        uint64_t now = total > 0 ? (uint64_t)total : 0;
        if (out->at[col] < 0 || now > out->max[col]) {
            out->max[col] = now;
            out->at[col] = (int64_t)i;
            for (int k = 0; cat != NULL && k < 16; k++) {
                out->bycat[(size_t)col * 16 + k] = bycat[k] > 0 ? (uint64_t)bycat[k] : 0;
            }
        }
        if (out->peak_at < 0 || now > out->peak) {
            out->peak = now;
            out->peak_at = (int64_t)i;
            for (int k = 0; k < 16; k++) {
                out->peak_bycat[k] = bycat[k] > 0 ? (uint64_t)bycat[k] : 0;
            }
        }
    }
    free(first);
    free(who);
    /* the largest alive at the peak, by insertion into a short sorted list */
    for (size_t j = 0; out->peak_at >= 0 && j < d->n; j++) {
        uint64_t t = (uint64_t)out->peak_at;
        if (d->a[j] > t || (d->f[j] != TGC_DETAIL_ALIVE && d->f[j] <= t)) {
            continue;
        }
        uint32_t q = out->ntop < TGC_SERIES_TOP ? out->ntop++ : TGC_SERIES_TOP;
        while (q > 0 && d->s[out->top[q - 1]] < d->s[j]) {
            if (q < TGC_SERIES_TOP) {
                out->top[q] = out->top[q - 1];
            }
            q--;
        }
        if (q < TGC_SERIES_TOP) {
            out->top[q] = (uint32_t)j;
        }
    }
    return 0;
}
