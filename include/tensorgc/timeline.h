/* timeline.h: the contract of tensorgc's trace replay (allocator/timeline.c), plain C, no Python.
 *
 * Input: one device's allocator trace as events in time order -- ALLOC (addr, size), FREE (the
 * "free_completed" of addr), OOM -- plus allocations that were live before the trace began
 * (PRE: alive from the start; a FREE without an ALLOC also marks one). Output, for a picture
 * `columns` wide: the active bytes at the end of each column and their maximum within it, the
 * `detail` largest allocations as bands (their stacked offset at each column they span), and
 * everything else as one summarized band on top of them -- the "Active Memory Timeline" with
 * memory_viz's detail slider, at a cost of O(events + columns x detail). Memory is malloc'd;
 * functions return 0, or -1 when out of memory or on invalid arguments.
 *
 * Categories over time (optional, tgc_classify): each allocation also gets a category, from the
 * first of these rules that applies (times in the trace's clock, unix microseconds). Recorded
 * (tensorgc.categorize's marks, the reporter's names, torch's own step annotations):
 *   1. alive at the end and named (addr -> category, from the reporter): that category;
 *   2. a grad mark (addr, t) finds it alive at t (t_alloc <= t < t_free): grad;
 *   3-5. allocated inside a phase span [t0, t1] (optimizer step, forward, backward; nested
 *      spans: the innermost, i.e. latest start; equal starts in that order): freed by t1 ->
 *      temporary, else optimizer_state / activation / other -- but a forward's block that
 *      outlived the backward after it (see OUTPUT below) is an output, and one alive at the
 *      end that the reporter did not name (when it named any) holds no tensor: other;
 * inferred from the stacks (with cls->infer; the events' hints, infer.h), where none of 1-5 did
 * (but 14 comes before 3-5: a stack that made a library's workspace names it outright):
 *   8. its stack allocated it as a parameter or a buffer (Module.to, a module's __init__...);
 *   9. its stack says grad: allocated by AccumulateGrad (and not freed inside that backward),
 *      or freed by zero_grad or p.grad = None;
 *   14. its stack made a library's workspace (cuBLAS, cuBLASLt, cuDNN): workspace;
 *   10-12. allocated inside a span inferred from the stacks (tgc_infer_spans; innermost as in
 *      3-5): freed by its end -> temporary, else optimizer_state / activation / grad -- but
 *      temporary for a step's block freed before any span begins again (clip_grad_norm_'s
 *      norm the loop drops), output for a forward's OUTPUT, activation for a block a
 *      checkpoint's recompute made (TGC_HINT_RECOMPUTE, infer.h) and the backward freed after
 *      that recompute (what the forward would have saved, made again), other for a
 *      backward's block that a later zero_grad, freeing grads, left alone, and for a
 *      forward's block kept into the next forward and through a step's start (persistent: a
 *      workspace no C++ frame named, a kept loss history); alive before the trace (no start
 *      time): its own stack's phase decides, as if it outlived its span (a block's stack from
 *      the snapshot's segments), with the same two exceptions for one alive through the whole
 *      trace;
 *   15. alive before the trace without a stack of its own, freed inside an inferred backward
 *      by a backward's stack: activation (what a forward saved for it);
 *   13. made by the training loop's own code (OUTSIDE) outside every span: alive when the
 *      next forward begins, and freed in the trace or made after its first forward: input;
 *      freed before any span begins again: temporary;
 * and last:
 *   6. other.
 * Then the active bytes of each category at the end of each column and at the peak, for
 * O(events + marks log marks + allocations log spans + columns x TGC_NCAT). A rule number
 * fits 4 bits; those of 8 and up are the inferred ones (TGC_RULE_INFERRED).
 * OUTPUT: a forward's block alive after the first backward that follows that forward (before
 * the next forward begins), with a forward or a step begun after that backward (it ended: an
 * OOM inside it is no end), and freed by the end of the next forward (the loop's variable
 * rebound to the next result) or alive at the end with no forward after that backward (and
 * not made in the trace's first forward, whose survivors include what lives for the process:
 * a workspace no stack named; in a one-step trace the two look the same). A
 * backward frees what its forward saved, so what outlives it is held by the loop: the
 * model's output (logits), a loss. Kept longer, it is persistent (see 10-12). */
#ifndef TENSORGC_TIMELINE_H
#define TENSORGC_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TGC_EV_ALLOC = 0, TGC_EV_FREE = 1, TGC_EV_OOM = 2, TGC_EV_PRE = 3 };

/* Stacking order, bottom first; tgc_category_names[] spells them. OTHER stays last (a named
 * block of category OTHER or past it names nothing); a label holds the category in 4 bits, so
 * there is room for 15 (the page keeps 15 for "no category"). The codes live only in one
 * replay's results and in a page that carries the names with them: nothing persists them. */
enum {
    TGC_CAT_PARAMETER = 0, TGC_CAT_BUFFER, TGC_CAT_OPTIMIZER_STATE, TGC_CAT_GRAD,
    TGC_CAT_WORKSPACE, TGC_CAT_INPUT, TGC_CAT_OUTPUT, TGC_CAT_ACTIVATION, TGC_CAT_TEMPORARY,
    TGC_CAT_OTHER, TGC_NCAT
};
extern const char *const tgc_category_names[TGC_NCAT];

enum { TGC_PHASE_FORWARD = 0, TGC_PHASE_BACKWARD = 1, TGC_PHASE_OPTIMIZER = 2, TGC_NPHASE };

/* Times unknown (a pre-existing allocation's start) are TGC_TIME_NONE; a span still open at the
 * snapshot ends at INT64_MAX. */
#define TGC_TIME_NONE INT64_MIN

typedef struct {
    uint64_t addr, size;
    int64_t time;      /* microseconds; TGC_TIME_NONE when unknown (PRE) */
    uint32_t index;    /* the caller's index of the event (for stacks and hover) */
    uint8_t kind;
    uint8_t hint;      /* what its stack says (infer.h's TGC_HINT); 0: nothing */
} tgc_event;

typedef struct {
    int64_t t0, t1;    /* t0 <= t1 */
    uint8_t phase;     /* TGC_PHASE_* */
} tgc_span;

typedef struct {
    uint64_t addr;     /* the grad's storage address, right after it was accumulated */
    int64_t time;
} tgc_grad_mark;

typedef struct {
    uint64_t addr;
    uint8_t category;  /* TGC_CAT_*; TGC_CAT_OTHER is ignored (it names nothing) */
} tgc_named;

/* A tensor's name: the allocation alive at addr at `time` (INT64_MAX: at the end) is called
 * name (the caller's index into its names; 0 is none). Later marks win. */
typedef struct {
    uint64_t addr;
    int64_t time;
    uint32_t name;
} tgc_name_mark;

/* The classification's inputs, in any order (the engine sorts its own copies). */
typedef struct {
    const tgc_span *spans;
    size_t nspans;
    const tgc_grad_mark *grads;
    size_t ngrads;
    const tgc_named *named;
    size_t nnamed;
    int infer;                     /* apply rules 8-14 with the events' hints */
    const tgc_name_mark *names;    /* may be NULL */
    size_t nnames;
} tgc_classify;

/* An allocation's label: its category in the low 4 bits, the rule that gave it in the high 4;
 * TGC_RULE_INFERRED (bit 7) is set exactly when the rule is an inferred one (8-15). Rule 0:
 * no classification (the category is then TGC_CAT_OTHER). */
#define TGC_LABEL(category, rule) ((uint8_t)((category) | ((rule) << 4)))
#define TGC_RULE_INFERRED 0x80

typedef struct {
    uint32_t alloc_event;   /* index (caller's) of the ALLOC/PRE event; UINT32_MAX: unknown */
    uint32_t free_event;    /* index of the FREE event, UINT32_MAX when still alive at the end */
    uint64_t size;
    uint64_t addr;          /* its address (to match the reporter's blocks) */
    uint32_t col0, col1;    /* columns [col0, col1) in which it is drawn */
    uint64_t *offset;       /* offset[c - col0]: bytes of the bands below it, end of column c */
    uint8_t category;       /* TGC_CAT_*; TGC_CAT_OTHER without a classification */
    uint8_t rule;           /* the rule (1-6) that gave it; 0 without a classification */
} tgc_band;

typedef struct {
    uint32_t columns, nbands;
    uint64_t *active;       /* active bytes at the end of each column */
    uint64_t *peak;         /* the maximum within each column */
    uint64_t *small;        /* the summarized band (allocations not drawn) at each column; it
                               sits from active - small up to active */
    tgc_band *bands;
    uint64_t max_active;
    size_t nallocs;         /* allocations seen (pre-existing included) */
    /* with a classification (else NULL / zero): */
    uint64_t *cat_active;   /* cat_active[c * TGC_NCAT + k]: bytes of category k, end of column c */
    uint64_t at_peak[TGC_NCAT];  /* bytes per category when max_active was first reached */
    size_t peak_pos;        /* the event position (into ev) that reached it; SIZE_MAX: none */
    uint8_t *label;         /* per event position (n): the TGC_LABEL of the allocation its
                               ALLOC or PRE event makes, or its FREE frees when that allocation
                               began before the trace (no event of its own); 0 elsewhere */
    uint32_t *name;         /* per event position, at the same events: its name (0: none) */
    tgc_span *inferred;     /* the spans inferred from the hints (with cls->infer), merged as
                               the recorded ones, by phase then start */
    size_t ninferred;
    uint64_t rule_allocs[16];  /* allocations per rule */
} tgc_timeline;

/* events in order; column of event i is i * columns / n (time by event count, as memory_viz).
 * cls: NULL for no categories. */
int tgc_timeline_build(const tgc_event *ev, size_t n, uint32_t columns, uint32_t detail,
                       const tgc_classify *cls, tgc_timeline *out);
void tgc_timeline_free(tgc_timeline *t);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_TIMELINE_H */
