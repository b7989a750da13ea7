/* young.h: the contract of young.c, the pre-scan of the generations a collection is about to
 * examine and the sentinel that looks at its garbage from inside it, and the visited mark it
 * lends the owner-chain search (heapmark.c). Where an object's references lie is shapes.h's.
 * Python.h, tensorgc/tensor.h and tensorgc/owners.h come first. Everything here needs the GIL,
 * runs no Python code and never leaves an exception set. */
#ifndef TGC_YOUNG_H
#define TGC_YOUNG_H

#include "shapes.h"

/* 1 when the pre-scan may run: the build reads the collector's lists (compat.h's
 * TGC_HAVE_YOUNG_SCAN), common/internals.c agrees at run time, and the running interpreter's
 * lists have the layout gclists.h describes (every head a consistent ring end, a fresh object
 * generation 0's tail). 0 otherwise, with *why set to a static string saying why. Call at module
 * exec, outside any collection; until it returned 1 nothing here reads the lists. */
int tgc_young_selfcheck(const char **why);
/* tgc_young_selfcheck's verdict: 1 once it passed, 0 before it ran or when it failed. */
int tgc_young_layout_ok(void);

/* Whether garbage found by a collection of `generation` that starts now could hold a tensor:
 * 1 when generations 0..generation contain an instance of `tensor` (borrowed; NULL: torch is not
 * imported, so 0) or an object whose tp_traverse reaches one, and for a full collection
 * (generation 2), which would mean walking the whole heap. Only valid before the collection
 * starts (gc.callbacks' "start" phase) and only after tgc_young_selfcheck() returned 1. */
int tgc_young_may_hold(PyTypeObject *tensor, int generation);

/* tgc_young_may_hold, carried one step further when the answer is yes: whether the tensors in
 * generations 0..generation (and the objects referencing one) lie in an island, a set of young
 * objects closed under references whose every reference comes from inside the set. Such a set is
 * unreachable before the collection runs, and no other garbage points into it, so it is all the
 * garbage of this collection that holds those tensors. The answer comes without marking the young
 * lists when it can (a few members, none old, no young class); *info says how it came (NULL: not
 * wanted). With crosscheck, an answer that came without marking is checked against the marked
 * proof, which must agree on the verdict, the members and their order (for tests).
 *   TGC_YOUNG_NONE:   nothing could hold a tensor (tgc_young_may_hold's 0).
 *   TGC_YOUNG_ISLAND: *island is a new list of the island's members (one more reference each).
 *                     Its members need nothing of what the collector does before clearing
 *                     garbage but run their pending tp_finalize (the caller's to do): no
 *                     legacy finalizer, no weak references, no type objects.
 *   TGC_YOUNG_ARM:    anything else (a live or older tensor, garbage pointing in, more than
 *                     TGC_ISLAND_MAX objects, no memory): the caller arms the full path.
 * Same preconditions as tgc_young_may_hold; never leaves an exception set. */
enum { TGC_YOUNG_NONE = 0, TGC_YOUNG_ARM = 1, TGC_YOUNG_ISLAND = 2 };
#define TGC_ISLAND_MAX 1024
typedef struct {
    int marked;    /* the proof took marking the young lists */
    int checked;   /* crosscheck ran the marked proof after the quick one */
    int mismatch;  /* ... and the two disagreed */
} tgc_island_info;
int tgc_young_island(PyTypeObject *tensor, int generation, int crosscheck, PyObject **island,
                     tgc_island_info *info);

/* The sentinel: instead of walking what a collection is about to examine, let the collector find
 * the garbage and look at that alone. At "start", tgc_young_plant puts a pair of objects that only
 * hold each other at the front of the list a collection of `generation` examines (generation 0's
 * objects are appended to it), so that the collector takes them for the first of its garbage.
 * When it finalizes garbage (after clearing weak references, before any other finalizer) the
 * first one walks the rest of the garbage as tgc_young_may_hold walks the young lists, with
 * `tensor` (borrowed); when some of it is a tensor or references one it calls
 * catch(arg, island, deferred) with island a new list of all the rest of the garbage (one more
 * reference each: it survives the collection, and its members end up in the next generation)
 * and deferred a new list of the members whose tp_finalize had not run yet, marked as run so
 * that the collector passes them by: the caller hands them to tgc_young_undefer before anything
 * else, before it runs them. With island NULL (deferred NULL too) the garbage could not be
 * walked (no memory, or the lists were not as expected): the caller arms the collection
 * (DEBUG_SAVEALL) now, which still saves all of it. catch may run Python code; the walk itself
 * runs none. Returns 0 when planted, -1 when not (no exception set): the pre-scan's self-check
 * failed, a pair is still planted, `tensor` is NULL, the user's gc debug flags would show the pair
 * (DEBUG_COLLECTABLE prints every collectable object, DEBUG_STATS counts each generation's
 * objects), or no memory. Only in the "start" phase. */
typedef void (*tgc_young_catch)(void *arg, PyObject *island, PyObject *deferred);
int tgc_young_plant(int generation, PyTypeObject *tensor, tgc_young_catch catch, void *arg);
/* At "stop": breaks up the planted pair, which outlives the collection (its finalizer keeps it,
 * so that the collector counts the program's garbage alone: gc.collect()'s result and
 * gc.get_stats() are what they would be without us). 1 when the collection never finalized it
 * (a later "start" callback froze it or took a reference to it: its garbage went unseen), 0
 * otherwise. */
int tgc_young_uproot(void);
/* Whether a pair is planted: from tgc_young_plant until tgc_young_uproot. */
int tgc_young_planted(void);
/* The resident sentinel: the same pair and walk, with no gc.callbacks entry. A spare pair waits,
 * untracked; the tensor watch's planter (watch.h) links it at the front of the list being
 * collected the first time a collection follows a reference to a tensor, from inside that
 * collection's first pass (subtract_refs), where the collector keeps the list singly linked and
 * an object's gc_refs in _gc_prev: the pair goes in with gc_refs 0 and the "being collected"
 * bit, which is what that pass computes for two objects that hold only each other. The first
 * reference a collection follows to a tensor is always met in that pass, which follows every
 * reference of every object it examines (the later passes follow a subset), and a collection is
 * told apart from the next by the collector's count of collections, which it advances at the
 * end: one pair at most per collection, never planted outside that pass (no list is then marked
 * as being collected) nor after it. A collection that meets no tensor runs with nothing of
 * ours: no callback, no pair.
 *
 * The pair's finalizer walks the garbage and calls catch (as tgc_young_plant says), keeps the
 * pair, so that it outlives the collection and is not counted as collected, breaks up the one
 * kept before, and makes the next spare. Its walk starts where
 * the planted one's cannot: beside the tensor the collection followed the reference to when it
 * planted the pair (the pair holds it until the walk, so that a weakref callback the collector
 * runs first cannot free it), when that tensor is garbage; young garbage is made together, so
 * what holds it mostly lies beside it, and the walk stops once the tensor watch's count of
 * references to tensors is accounted for (a live young object referencing a tensor, which no
 * garbage explains, means testing all of it). Otherwise it walks from the ends, as the planted
 * one. The cost of holding the tensor: when it is a live one and a weakref callback drops its last
 * other reference, it is freed at the end of the pair's finalizer, not in that callback (its own
 * weakref callbacks and __del__ run there); a garbage one is given back before the walk.
 * When no spare can be made, it calls lost(arg) instead of leaving the next collection unseen:
 * the caller goes back to gc.callbacks. catch and lost run inside the collection (a finalizer's
 * context): they may run Python code, and add to gc.callbacks, which the collector only reads
 * after the finalizers ran.
 *
 * tgc_young_resident_start: 0 when resident (the watch is on, the planter is ours, a spare
 * exists), -1 otherwise (no exception set: the self-check failed, torch unknown, the watch off
 * or another copy's planter, no memory). tgc_young_resident_stop takes the planter off and frees
 * the spare; a pair already planted in a collection under way still finalizes (catch then sees
 * the caller's state). Between collections, with the GIL. */
typedef void (*tgc_young_lost)(void *arg);
/* tick(arg) runs at the end of every resident pair's finalizer, after catch: a point inside the
 * collection where the collector walks no list the program can change (gc.callbacks included). */
int tgc_young_resident_start(PyTypeObject *tensor, tgc_young_catch catch, tgc_young_lost lost,
                             tgc_young_lost tick, void *arg);
void tgc_young_resident_stop(void);
/* Whether the resident sentinel is on (tgc_young_resident_start, and the watch kept its
 * planter). */
int tgc_young_resident(void);
/* Whether a collection is running: 1 or 0, -1 where the collector's state cannot be read. */
int tgc_young_collecting(void);
/* Resident pairs planted, and spares that could not be made (tests). */
unsigned long long tgc_young_resident_planted(unsigned long long *missed);
#ifdef TGC_PHASE_TIMES
/* The sentinel's walks since the last call (phase timers, make phases): adds their count and
 * nanoseconds to *n and *ns, and starts counting again. */
void tgc_young_walk_times(unsigned long long *n, unsigned long long *ns);
#endif
/* Walks the sentinel skipped because the collector followed no reference to a tensor (watch.h),
 * and (*cut) walks it stopped once the hits accounted for every such reference (tests). */
unsigned long long tgc_young_unwalked(unsigned long long *cut);
/* Walks that started beside the tensor the collection planted the resident pair for (its hint,
 * when garbage) instead of at the ends of the garbage (tests). */
unsigned long long tgc_young_near(void);
/* Clears the "finalizer ran" mark the sentinel set on each object of `deferred` (a list). */
void tgc_young_undefer(PyObject *deferred);

/* Whether an island tgc_young_island returned is still one after the collection ran: every
 * member's references still come from members, plus the one the list holds, and every member is
 * still tgc_young_plain. Python code that ran meanwhile (finalizers, weakref callbacks) could only
 * have reached it through gc.get_objects() and the like. */
int tgc_young_island_exact(PyObject *list);

/* Whether op needs nothing of what the collector does to garbage before clearing it except its
 * pending tp_finalize, if any: no legacy finalizer (tp_del), no weak references to it, not a
 * type. */
int tgc_young_plain(PyObject *op);



/* For tests (the pre-scan crosscheck): tests every object of generations 0..generation both as
 * the pre-scan does (its fast paths) and through tp_traverse, and returns how many objects the
 * two disagreed on (whether it is a tensor or references one); *tested says how many objects it
 * tested. 0 with *tested 0 where the pre-scan is not available. Same preconditions as
 * tgc_young_may_hold. */
Py_ssize_t tgc_young_crosscheck_hits(PyTypeObject *tensor, int generation, Py_ssize_t *tested);

/* A visited mark for one pass over the heap (the owner-chain search, graph/owners.c, borrows it:
 * binding.c hands it to module.c, which lends it): the collector's "being collected" bit of a
 * gc object's header, which is clear on every object outside a collection. Only while no Python
 * code runs and no collection can start, and every mark set must be cleared before the pass
 * returns. Its usable() is 0 unless tgc_young_selfcheck returned 1, and during a collection (the
 * collector owns the bit then): callers keep their own visited set. op must be a gc object. */
extern const tgc_heapmark tgc_young_mark;

#endif
