/* detail.h: the contract of the timeline page's detail data (allocator/detail.c), plain C, no
 * Python: every allocation of one device's trace on the replay's clock, and its compact encoding.
 *
 * Input: the trace as columns, one element per trace entry (the shape a list of entry dicts is
 * read into, and the shape the streaming loader produces): its kind (TGC_TK_*), address (any,
 * 2**64 - 1 included), size,
 * time and stack id (0: none). Plus the blocks alive at the end of the trace (pre_addr/pre_size),
 * of which those whose address the trace never allocates were there before it began.
 *
 * The clock is timeline.h's: the pre-existing blocks first, one event each, then one event per
 * ALLOC, FREE (the chosen free action) and OOM entry. A free of an address with no open
 * allocation was alive from the start (event 0, no event of its own), as the replay counts it.
 *
 * Output, in allocation order (a[] never decreases): a (allocated at), f (freed at;
 * TGC_DETAIL_ALIVE: alive at the end), s (bytes), x (address), e (trace entry; -1: before the
 * trace), k (a dense stack id: 1..nused in order of first use, 0 for none or past max_stacks;
 * used[k - 1] is the caller's stack id); the segments made, freed, mapped or unmapped by the
 * trace (start, end or TGC_DETAIL_ALIVE, size, address; freed ones not made in it start at 0).
 * With labels (tgc_detail_labels, optional), each allocation also gets a label byte and a name
 * index, read where the replay (timeline.c) wrote them: at its alloc entry, at its free entry
 * when it began before the trace, or at its block of pre.
 * Cost O(n + npre) time, 61 bytes per allocation plus 16 per entry for the address table.
 *
 * Encoding (tgc_detail_encode): six streams of LEB128 varints, n values each -- A: a[j] - a[j-1]
 * (a[-1] = 0); D: f[j] - a[j] + 1, or 0 alive at the end; S: s[j] / unit; E: zigzag(e[j] -
 * e[j-1]) (e[-1] = -1); K: k[j]; X: zigzag((x[j] - x[j-1]) / xunit) (x[-1] = 0, two's
 * complement differences). unit / xunit: 512 when every size / address is a multiple of it (the
 * caching allocator rounds to that), else 1. Functions return 0, or -1 when out of memory. */
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

/* One device's trace, column by column; every array holds n elements (time may be NULL). */
typedef struct {
    size_t n;
    const uint8_t *kind;
    const uint64_t *addr, *size;
    const int64_t *time;     /* INT64_MIN: absent */
    const uint32_t *stack;   /* the caller's stack id; 0: no frames */
} tgc_tcols;

#define TGC_DETAIL_ALIVE UINT64_MAX

/* The replay's per-allocation labels (timeline.h's TGC_LABEL) and name indices, by trace entry
 * (n each) and by block of pre (npre each); NULL arrays read as 0. */
typedef struct {
    const uint8_t *entry_label, *pre_label;
    const uint32_t *entry_name, *pre_name;
} tgc_detail_labels;

typedef struct {
    size_t n;                       /* allocations */
    uint64_t *a, *f, *s, *x;
    int64_t *e;
    uint32_t *k;
    uint8_t *label;                 /* with labels, else NULL */
    uint32_t *name;                 /* with labels, else NULL */
    uint32_t *used;                 /* used[k - 1]: the caller's stack id */
    size_t nused;
    uint64_t events;                /* the clock's length */
    size_t nsegs;
    uint64_t *seg;                  /* nsegs rows of (start, end, size, addr) */
} tgc_detail;

typedef struct {
    uint8_t *stream[6];             /* A, D, S, E, K, X */
    size_t len[6];
    uint64_t unit, xunit;
} tgc_detail_enc;

/* free_kind: TGC_TK_FREE_REQUESTED or TGC_TK_FREE_COMPLETED, the action that frees. labels:
 * NULL, or the replay's labels (out->label and out->name are then filled). */
int tgc_detail_build(const tgc_tcols *c, const uint64_t *pre_addr, const uint64_t *pre_size,
                     size_t npre, int free_kind, uint32_t max_stacks,
                     const tgc_detail_labels *labels, tgc_detail *out);
void tgc_detail_free(tgc_detail *d);
int tgc_detail_encode(const tgc_detail *d, tgc_detail_enc *out);
void tgc_detail_enc_free(tgc_detail_enc *e);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_DETAIL_H */
