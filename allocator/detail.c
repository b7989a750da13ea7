/* detail.c: every allocation of a trace on the replay's clock, and its varint encoding, for the
 * timeline page's detail view (contract in include/tensorgc/detail.h). Plain C. */
#include <stdlib.h>
#include <string.h>

#include "tensorgc/detail.h"
#include "tensorgc/ptrmap.h"

#define NONE UINT32_MAX

typedef struct {
    tgc_detail *d;
    size_t cap;
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
    DT_GROW(a) DT_GROW(f) DT_GROW(s) DT_GROW(x) DT_GROW(e) DT_GROW(k)
    if (o->lab != NULL) {
        DT_GROW(label) DT_GROW(name)
    }
#undef DT_GROW
    o->cap = c;
    return 0;
}

/* Appends an allocation; `entry` (a trace entry) or `pre` (a block of pre), the other SIZE_MAX,
 * is where the replay wrote its label. */
static int
dt__add(dt_out *o, uint64_t a, uint64_t s, uint64_t x, int64_t e, uint32_t k, size_t entry,
        size_t pre)
{
    if (dt__grow(o) < 0) {
        return -1;
    }
    tgc_detail *d = o->d;
    if (o->lab != NULL) {
        const tgc_detail_labels *l = o->lab;
        d->label[d->n] = entry != SIZE_MAX ? (l->entry_label ? l->entry_label[entry] : 0)
                                           : (l->pre_label ? l->pre_label[pre] : 0);
        d->name[d->n] = entry != SIZE_MAX ? (l->entry_name ? l->entry_name[entry] : 0)
                                          : (l->pre_name ? l->pre_name[pre] : 0);
    }
    d->a[d->n] = a;
    d->f[d->n] = TGC_DETAIL_ALIVE;
    d->s[d->n] = s;
    d->x[d->n] = x;
    d->e[d->n] = e;
    d->k[d->n] = k;
    d->n++;
    return 0;
}

static int
dt__seg(tgc_detail *d, size_t *cap, uint64_t start, uint64_t end, uint64_t size, uint64_t addr)
{
    if (d->nsegs == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        uint64_t *p = realloc(d->seg, c * 4 * sizeof(uint64_t));
        if (p == NULL) {
            return -1;
        }
        d->seg = p;
        *cap = c;
    }
    uint64_t *r = &d->seg[d->nsegs++ * 4];
    r[0] = start;
    r[1] = end;
    r[2] = size;
    r[3] = addr;
    return 0;
}

static inline const void *
dt__key(uint64_t addr)
{
    return (const void *)(uintptr_t)(addr + 1);  /* 0 is the table's empty key */
}

/* The open allocation's slot of addr, made when `make`; NONE when absent. The one address whose
 * key would be the table's empty key (2**64 - 1) keeps its slot in *top instead. */
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

int
tgc_detail_build(const tgc_tcols *c, const uint64_t *pre_addr, const uint64_t *pre_size,
                 size_t npre, int free_kind, uint32_t max_stacks,
                 const tgc_detail_labels *labels, tgc_detail *out)
{
    memset(out, 0, sizeof(*out));
    dt_out o = {out, 0, labels};
    size_t n = c->n, segcap = 0, nseg_ev = 0;
    tgc_ptrmap map = {0}, segmap = {0};
    uint32_t *open = NULL, *segopen = NULL, *dense = NULL, nslots = 0, nsegslots = 0;
    uint32_t top = NONE, segtop = NONE;  /* the slots of address 2**64 - 1 (see dt__slot) */
    uint8_t *pre_kept = NULL;
    uint32_t maxk = 0;
    int rc = -1;

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
    if (tgc_ptrmap_init(&map, n + npre + 16) < 0 || tgc_ptrmap_init(&segmap, nseg_ev + 16) < 0) {
        goto done;
    }
    open = malloc((n + npre + 1) * sizeof(uint32_t));
    segopen = malloc((nseg_ev + 1) * sizeof(uint32_t));
    dense = calloc((size_t)maxk + 1, sizeof(uint32_t));
    pre_kept = calloc(npre + 1, 1);
    if (open == NULL || segopen == NULL || dense == NULL || pre_kept == NULL) {
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
     * first, at event 0, so that a[] stays in order. */
    for (size_t s = 0; s < n + npre + 1; s++) {  /* every slot, those made later too */
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
                if (dt__add(&o, 0, c->size[i], c->addr[i], -1, 0, i, SIZE_MAX) < 0) {
                    goto done;
                }
            }
            open[s] = NONE;
        }
    }
    /* Pass 2: the clock; pre-existing blocks, then the trace */
    size_t u = 0;
    uint64_t clock = 0;
    for (size_t s = 0; s < n + npre + 1; s++) {  /* every slot, those made later too */
        open[s] = NONE;
    }
    for (size_t p = 0; p < npre; p++) {
        if (!pre_kept[p]) {
            continue;
        }
        open[dt__slot(&map, &top, pre_addr[p], &nslots, 0)] = (uint32_t)out->n;
        if (dt__add(&o, clock++, pre_size[p], pre_addr[p], -1, 0, SIZE_MAX, p) < 0) {
            goto done;
        }
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t kd = c->kind[i];
        uint64_t addr = c->addr[i];
        if (kd == TGC_TK_ALLOC) {
            uint32_t k = c->stack[i];
            if (k != 0 && dense[k] == 0) {
                if (out->nused < max_stacks) {
                    uint32_t *p = realloc(out->used, (out->nused + 1) * sizeof(uint32_t));
                    if (p == NULL) {
                        goto done;
                    }
                    out->used = p;
                    out->used[out->nused++] = k;
                    dense[k] = (uint32_t)out->nused;
                }
                else {
                    dense[k] = NONE;  /* past the bound: no stack */
                }
            }
            open[dt__slot(&map, &top, addr, &nslots, 0)] = (uint32_t)out->n;
            if (dt__add(&o, clock++, c->size[i], addr, (int64_t)i,
                        k == 0 || dense[k] == NONE ? 0 : dense[k], i, SIZE_MAX) < 0) {
                goto done;
            }
        }
        else if (kd == free_kind) {
            uint32_t s = dt__slot(&map, &top, addr, &nslots, 0);
            if (open[s] == NONE) {
                out->f[u++] = clock;  /* the unmatched ones, in the order pass 1 found them */
            }
            else {
                out->f[open[s]] = clock;
                open[s] = NONE;
            }
            clock++;
        }
        else if (kd == TGC_TK_OOM) {
            clock++;
        }
        else if (kd == TGC_TK_SEGMENT_ALLOC || kd == TGC_TK_SEGMENT_MAP) {
            uint32_t s = dt__slot(&segmap, &segtop, addr, &nsegslots, 1);
            segopen[s] = (uint32_t)out->nsegs;
            if (dt__seg(out, &segcap, clock, TGC_DETAIL_ALIVE, c->size[i], addr) < 0) {
                goto done;
            }
        }
        else if (kd == TGC_TK_SEGMENT_FREE || kd == TGC_TK_SEGMENT_UNMAP) {
            uint32_t s = dt__slot(&segmap, &segtop, addr, &nsegslots, 1);
            if (s != NONE && segopen[s] != NONE) {
                out->seg[(size_t)segopen[s] * 4 + 1] = clock;
                segopen[s] = NONE;
            }
            else if (dt__seg(out, &segcap, 0, clock, c->size[i], addr) < 0) {  /* made before */
                goto done;
            }
        }
    }
    out->events = clock;
    rc = 0;
done:
    tgc_ptrmap_free(&map);
    tgc_ptrmap_free(&segmap);
    free(open);
    free(segopen);
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
    free(d->s);
    free(d->x);
    free(d->e);
    free(d->k);
    free(d->label);
    free(d->name);
    free(d->used);
    free(d->seg);
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

/* The six values of allocation j (see detail.h), from the previous one's a, e and x. */
static inline void
dt__values(const tgc_detail *d, size_t j, uint64_t unit, uint64_t xunit, uint64_t v[6])
{
    uint64_t pa = j ? d->a[j - 1] : 0, px = j ? d->x[j - 1] : 0;
    int64_t pe = j ? d->e[j - 1] : -1;
    v[0] = d->a[j] - pa;
    v[1] = d->f[j] == TGC_DETAIL_ALIVE ? 0 : d->f[j] - d->a[j] + 1;
    v[2] = d->s[j] / unit;
    v[3] = dt__zigzag((int64_t)((uint64_t)d->e[j] - (uint64_t)pe));
    v[4] = d->k[j];
    /* a two's-complement difference, divided as a signed number: exact, xunit divides both */
    v[5] = dt__zigzag((int64_t)(d->x[j] - px) / (int64_t)xunit);
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
tgc_detail_encode(const tgc_detail *d, tgc_detail_enc *out)
{
    memset(out, 0, sizeof(*out));
    uint64_t unit = 512, xunit = 512, v[6];
    for (size_t j = 0; j < d->n; j++) {
        if (d->s[j] % 512) {
            unit = 1;
        }
        if (d->x[j] % 512) {
            xunit = 1;
        }
    }
    out->unit = unit;
    out->xunit = xunit;
    size_t need[6] = {0};  /* a first pass sizes each stream exactly */
    for (size_t j = 0; j < d->n; j++) {
        dt__values(d, j, unit, xunit, v);
        for (int t = 0; t < 6; t++) {
            need[t] += dt__varlen(v[t]);
        }
    }
    for (int t = 0; t < 6; t++) {
        out->stream[t] = malloc(need[t] + 1);
        if (out->stream[t] == NULL) {
            tgc_detail_enc_free(out);
            return -1;
        }
    }
    for (size_t j = 0; j < d->n; j++) {
        dt__values(d, j, unit, xunit, v);
        for (int t = 0; t < 6; t++) {
            out->len[t] += dt__varint(out->stream[t] + out->len[t], v[t]);
        }
    }
    return 0;
}

void
tgc_detail_enc_free(tgc_detail_enc *e)
{
    for (int t = 0; t < 6; t++) {
        free(e->stream[t]);
    }
    memset(e, 0, sizeof(*e));
}
