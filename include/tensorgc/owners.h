/* owners.h: the contract of graph/owners.c, which answers "why is it still alive" for objects that
 * are not in a reference cycle: the shortest chain of references from a root (a module, a thread's
 * frame, any object the caller names) to each of a set of targets, found in one breadth-first
 * pass over what the roots reach. The pass follows tp_traverse, so it crosses containers the
 * collector does not track (an untracked tuple or dict) as well as tracked ones.
 *
 * When some target is not reached from the roots, a second pass looks at the tracked objects the
 * first did not reach ("dark"): each one's references from other dark objects are subtracted
 * from its refcount, as the collector does; a dark object with references left over is held by
 * something no Python object shows (C code, an extension's global, a thread's state), and the
 * search goes on from those; then from the rest of them, which are garbage: unreachable, waiting
 * for the collector (the cycle detector's domain), so a target found from one is garbage. A
 * target found by neither is held by something the collector does not track.
 *
 * Both passes run no Python code and allocate no Python object (tp_traverse and C memory only),
 * so the heap cannot change under them; the caller holds the GIL. Every reference passed in is
 * borrowed, and the result holds borrowed references: the caller keeps them alive (increfs what
 * it keeps) before it runs Python code. Memory: 16 bytes per object visited (plus about 24 for
 * each one a visited mark cannot carry: all of them without one), and max_objects bounds the
 * visits. Errors: MemoryError only. The one user is graph/binding.c
 * (tensorgc/reporter/owner_chains.py's _owner_search: MemReporter's owners, growth(), the pytest
 * plugin). Python.h comes first. */
#ifndef TENSORGC_OWNERS_H
#define TENSORGC_OWNERS_H

#include <stdint.h>

#define TGC_OWNERS_NONE UINT32_MAX
/* In aux[] of a root: set for a root of the second pass, whose aux holds its unexplained
 * references; clear for one of the caller's roots, whose aux holds its index in roots. */
#define TGC_OWNERS_DARK 0x80000000u
/* In aux[] of a root: set for an unreached object whose references all come from other
 * unreached objects (garbage: a reference cycle, or what one holds); aux holds nothing else. */
#define TGC_OWNERS_GARBAGE 0x40000000u

typedef struct {
    /* Every object visited, in the order found (borrowed references). */
    PyObject **objs;
    uint32_t *parent;     /* index into objs of the object that led here; NONE for a root */
    uint32_t *aux;        /* for a root: see TGC_OWNERS_DARK; unused otherwise */
    uint32_t n, cap;
    /* Per target, in the caller's order. */
    uint32_t ntargets;
    uint32_t *found;      /* index into objs, or NONE: not reached */
    uint32_t *referrers;  /* distinct visited objects that refer to the target */
    uint32_t *last;       /* the last referrer counted (so one referrer counts once) */
    uint32_t unfound;     /* targets not reached yet */
    uint32_t first_dark;  /* objs[first_dark:] were found by the second pass */
    int truncated;        /* max_objects reached: some targets may be unreached for that reason */
    int dark_pass;        /* whether the second pass ran */
    int stopped;          /* stop_when_found ended the pass early: referrers are partial */
} tgc_owners;

/* A visited mark a search may borrow instead of keeping every gc object it visits in a map of its
 * own: one bit of a gc object's header that is clear on every object outside the search (the
 * cycle detector lends the collector's "being collected" bit where it checked the layout:
 * cycles/young.c). usable() is asked once per search; while it said 1, the search sets the mark
 * on the gc objects it visits (test_and_set), reads it (test), and clears every mark it set
 * (clear) before it returns, with no Python code run in between. */
typedef struct {
    int (*usable)(void);
    int (*test_and_set)(PyObject *op);  /* the mark before; sets it */
    int (*test)(PyObject *op);
    void (*clear)(PyObject *op);
} tgc_heapmark;

/* Searches from roots (n_roots borrowed references) for targets (borrowed); the last n_late roots
 * are searched from only when some target is not reached from the others, after everything those
 * reach (the caller's own frame: it names a holder only of what nothing else holds), and a
 * reference from what only they reach is not counted for a target found before. exclude (borrowed)
 * are the caller's own containers: never visited, never roots, and their references are subtracted
 * in the second pass (once for an object listed twice); the last n_twice of them are snapshots of
 * the caller's running frames' locals, whose values the frame holds once more, so theirs are
 * subtracted twice. tracked: every object the collector tracks (borrowed; NULL to skip the second
 * pass), each holding tracked_extra references from the caller's list of them. mark: a visited
 * mark to borrow (borrowed), or NULL to keep every visited object in the map. stop_when_found:
 * end the pass as soon as every target is found (each chain is still the shortest, but
 * referrers counts only the referrers visited by then, and `stopped` is set). Returns 0, or -1
 * with MemoryError set; either way tgc_owners_free releases the result. */
int tgc_owners_search(tgc_owners *o, const tgc_heapmark *mark,
                      PyObject *const *roots, uint32_t n_roots, uint32_t n_late,
                      PyObject *const *targets, uint32_t n_targets,
                      PyObject *const *exclude, uint32_t n_exclude, uint32_t n_twice,
                      PyObject *const *tracked, size_t n_tracked, Py_ssize_t tracked_extra,
                      uint32_t max_objects, int stop_when_found);
void tgc_owners_free(tgc_owners *o);

#endif /* TENSORGC_OWNERS_H */
