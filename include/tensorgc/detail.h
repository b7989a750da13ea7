/* detail.h: the contract of the timeline page's data (allocator/detail.c), plain C, no Python:
 * every allocation of one device's trace on the trace's own clock, and its compact encoding.
 *
 * Input: the trace as columns, one element per trace entry (the shape a list of entry dicts is
 * read into, and the shape the streaming loader produces): its kind (TGC_TK_*), address (any,
 * 2**64 - 1 included), size, time, stack id (0: none) and, optionally, CUDA stream. Plus the
 * blocks alive at the end of the trace (pre_addr/pre_size, pre_stack optional), of which those
 * whose address the trace never allocates were there before it began.
 *
 * The clock is the trace position: entry i happens at i, and an allocation made at entry a and
 * freed at entry f is alive at every t with a <= t < f (the state "after entry t"). Allocations
 * from before the trace -- a free of an address with no open allocation, and the pre-existing
 * blocks -- come first, alive from 0; `npre` counts them.
 *
 * Output, in allocation order (a[] never decreases): a (allocated at), f (freed at, by the
 * chosen free action; TGC_DETAIL_ALIVE: alive at the end), c (with free_kind ==
 * TGC_TK_FREE_REQUESTED: the free_completed that completed that free, else TGC_DETAIL_ALIVE), s
 * (bytes), x (address), e (trace entry of the allocation; -1: before the trace), k and r (dense
 * stack ids of the allocation's and of its free's entry: 1..nused in order of first use, 0 for
 * none or past max_stacks; used[k - 1] is the caller's stack id), v (memory_viz's version: how
 * many free_completed entries at that address came before the allocation, so that
 * "b<hex address>_<v>" names it as memory_viz does), w (the allocation entry's stream, 0
 * without a stream column). The segments the trace makes, frees, maps or unmaps, in order of
 * first sight: start, end (TGC_DETAIL_ALIVE: alive at the end), size, address, the entries that
 * made and ended it (-1: none), and memory_viz's segment version ("s<hex>_<v>": segment frees
 * and unmaps at that address before it); a segment freed but not made in the trace starts at 0.
 * The entries no allocation accounts for (OOMs, segment events, other actions, a free_completed
 * that completes no free), as trace positions in `other`. With labels (tgc_detail_labels,
 * optional), each allocation also gets a label byte and a name index, read where the replay
 * (timeline.c) wrote them: at its alloc entry, at its free entry when it began before the
 * trace, or at its block of pre.
 * Cost O(n + npre) time, about 105 bytes per allocation plus 16 per entry for the address table.
 *
 * Encoding (tgc_detail_encode): nine streams of LEB128 varints, one value per allocation --
 * A: a[j] - a[j-1] (a[-1] = 0); D: f[j] - a[j] + 1, or 0 alive at the end; S: s[j] / unit;
 * K: k[j]; X: zigzag((x[j] - x[j-1]) / xunit) (x[-1] = 0, two's complement differences);
 * C: c[j] - f[j], or 0 without one; R: r[j]; V: v[j]; W: zigzag(w[j]). unit / xunit: 512 when
 * every size / address is a multiple of it (the caching allocator rounds to that), else 1.
 * tgc_times_encode: zigzag(t[i] - t[i-1]) per entry (t[-1] = the first known time; an entry
 * without a time takes the one before it). Functions return 0, or -1 when out of memory. */
#ifndef TENSORGC_DETAIL_H
#define TENSORGC_DETAIL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A trace entry's kind, from its action. */
enum {
    TGC_TK_OTHER = 0, TGC_TK_ALLOC, TGC_TK_FREE_REQUESTED, TGC_TK_FREE_COMPLETED, TGC_TK_OOM,
    TGC_TK_SEGMENT_ALLOC, TGC_TK_SEGMENT_FREE, TGC_TK_SEGMENT_MAP, TGC_TK_SEGMENT_UNMAP, TGC_NTK
};

/* One device's trace, column by column; every array holds n elements (time and stream may be
 * NULL). */
typedef struct {
    size_t n;
    const uint8_t *kind;
    const uint64_t *addr, *size;
    const int64_t *time;     /* INT64_MIN: absent */
    const uint32_t *stack;   /* the caller's stack id; 0: no frames */
    const int64_t *stream;   /* NULL: no stream column */
} tgc_tcols;

#define TGC_DETAIL_ALIVE UINT64_MAX

/* The replay's per-allocation labels (timeline.h's TGC_LABEL) and name indices, by trace entry
 * (n each) and by block of pre (npre each); NULL arrays read as 0. */
typedef struct {
    const uint8_t *entry_label, *pre_label;
    const uint32_t *entry_name, *pre_name;
} tgc_detail_labels;
#define TGC_DETAIL_STREAMS 9
#define TGC_DETAIL_SEG_FIELDS 7
#define TGC_SERIES_TOP 8

typedef struct {
    size_t n;                       /* allocations */
    size_t npre;                    /* the first npre are from before the trace */
    uint64_t *a, *f, *c, *s, *x;
    int64_t *e, *w;
    uint32_t *k, *r, *v;
    uint8_t *label;                 /* with labels, else NULL */
    uint32_t *name;                 /* with labels, else NULL */
    uint32_t *used;                 /* used[k - 1]: the caller's stack id */
    size_t nused;
    uint64_t events;                /* the clock's length: the trace's */
    size_t nsegs;
    int64_t *seg;                   /* nsegs rows of (start, end or -1, size, addr, made by, ended
                                     * by, version); sizes and addresses as two's complement */
    size_t nother;
    uint32_t *other;                /* trace positions, in order */
} tgc_detail;

typedef struct {
    uint8_t *stream[TGC_DETAIL_STREAMS];  /* A, D, S, K, X, C, R, V, W */
    size_t len[TGC_DETAIL_STREAMS];
    uint64_t unit, xunit;
} tgc_detail_enc;

/* free_kind: TGC_TK_FREE_REQUESTED or TGC_TK_FREE_COMPLETED, the action that frees. pre_stack:
 * NULL, or the caller's stack id of each pre-existing block. labels: NULL, or the replay's
 * labels (out->label and out->name are then filled). */
int tgc_detail_build(const tgc_tcols *c, const uint64_t *pre_addr, const uint64_t *pre_size,
                     const uint32_t *pre_stack, size_t npre, int free_kind, uint32_t max_stacks,
                     const tgc_detail_labels *labels, tgc_detail *out);
void tgc_detail_free(tgc_detail *d);
/* keep: NULL (every allocation), or one byte per allocation, nonzero for those encoded. */
int tgc_detail_encode(const tgc_detail *d, const uint8_t *keep, tgc_detail_enc *out);
void tgc_detail_enc_free(tgc_detail_enc *e);
/* The largest `max` allocations (ties: the earlier first) as a keep mask (malloc'd), or NULL
 * when out of memory. */
uint8_t *tgc_detail_largest(const tgc_detail *d, size_t max);
/* The time column as varints (see above) into *out (malloc'd, *len bytes); *t0: the first
 * known time (0 when none is); *all: whether every entry has one. */
int tgc_times_encode(const int64_t *time, size_t n, uint8_t **out, size_t *len, int64_t *t0,
                     int *all);

/* The active bytes over the trace in `columns` columns of entries [col * n / columns, (col + 1)
 * * n / columns): per column, the most bytes alive after any of its entries (max), the first
 * entry that reaches it (at), and the bytes alive then; with cat (one byte per allocation, the
 * category in its low four bits), also those bytes per category (bycat[col * 16 + cat]); and
 * the TGC_SERIES_TOP largest allocations alive at the whole trace's peak. */
typedef struct {
    uint32_t columns;
    uint64_t *max;
    int64_t *at;
    uint64_t *bycat;                /* NULL without cat */
    uint64_t peak;                  /* the most over the whole trace */
    int64_t peak_at;                /* its first entry; -1: before the trace (nothing) */
    uint64_t peak_bycat[16];        /* per category then */
    uint32_t top[TGC_SERIES_TOP];   /* the largest allocations alive then, largest first */
    uint32_t ntop;
} tgc_series;

int tgc_detail_series(const tgc_detail *d, const uint8_t *cat, uint32_t columns,
                      tgc_series *out);
void tgc_series_free(tgc_series *s);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_DETAIL_H */
