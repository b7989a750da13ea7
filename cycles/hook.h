/* hook.h: the contract of the collector hook, the engine of cycles/ (hook.c: the gc.callbacks
 * entry; observers.c: who listens and how they are called; split.c: which part of the garbage
 * holds tensors; free.c: freeing garbage the way the collector would). cycles/binding.c registers
 * observers through it and cycles/testing.c turns its switches; nothing else calls in.
 * Python.h comes first. Everything here needs the GIL. */
#ifndef TGC_HOOK_H
#define TGC_HOOK_H

typedef struct tgc_cycles tgc_cycles;  /* cycles.h */

/* Which tensors an observer cares about. */
enum { TGC_DEV_ANY = 0, TGC_DEV_TYPE = 1, TGC_DEV_PREDICATE = 2 };
typedef struct {
    int kind;
    char type[32];      /* TGC_DEV_TYPE: "cuda", "cpu", ... */
    int index;          /* TGC_DEV_TYPE: device index, -1 for every index */
    PyObject *predicate;  /* TGC_DEV_PREDICATE: new reference */
} tgc_filter;
void tgc_filter_clear(tgc_filter *f);

/* What an observer receives. */
enum { TGC_OBS_GARBAGE = 0, TGC_OBS_REPORT = 1, TGC_OBS_HTML = 2 };

/* A registered observer (the tensorgc.Handle heap type; cycles/binding.c makes it). */
typedef struct {
    PyObject_HEAD
    PyObject *module;     /* new reference while registered, NULL once removed: keeps `cycles`
                             (the module state's part) alive */
    tgc_cycles *cycles;   /* borrowed: where it is registered; only used while module is set */
    PyObject *callback;   /* new reference */
    int kind;             /* TGC_OBS_* */
    tgc_filter filter;
    PyObject *on_remove;  /* new reference or NULL: called once, without arguments, when the
                             handle is removed (not at interpreter exit); what it raises is
                             logged */
} tgc_handle;

/* Registers h (module: a new reference is taken) and puts the hook on gc.callbacks if it is
 * missing. 0, or -1 with an exception. */
int tgc_hook_add(tgc_cycles *c, PyObject *module, tgc_handle *h);
/* Unregisters h; harmless when repeated. The hook leaves gc.callbacks with its last observer.
 * 0, or -1 with an exception. */
int tgc_hook_remove(tgc_handle *h);
/* Unregisters every observer (at interpreter exit). 0, or -1 with an exception. */
int tgc_hook_remove_all(tgc_cycles *c);

/* The gc.callbacks entry's body: phase is gc's "start" or "stop" str, info its dict (both
 * borrowed). Never raises: trouble of ours is reported as unraisable, an observer's is logged. */
void tgc_hook_callback(tgc_cycles *c, PyObject *phase, PyObject *info);
/* The tail entry's body (c->tail): appended behind the program's callbacks of a phase, it takes
 * the hook off gc.callbacks, or delivers an observer's exception, once it is the list's last
 * entry, where the collector's walk of the list ends. Never raises. */
void tgc_hook_tail(tgc_cycles *c);

/* Lets go of an island "stop" never reported (its deferred finalizers given back first): the
 * objects are garbage again, which a later collection finds. */
void tgc_hook_drop_island(tgc_cycles *c);

/* Frees objs (a list owning one reference to each object) as the collector would. With check,
 * first redoes the collector's resurrection check and spares anything still reachable from
 * outside the list; without, every object is taken as unreachable (only valid while no Python
 * code ran since the collector's own check). Returns how many were released; never fails (out
 * of memory: nothing is cleared and the objects die or live by refcount). */
Py_ssize_t tgc_hook_free(PyObject *objs, int check);

/* The hook's switches, for tests and benchmarks (tensorgc._tensorgc_testing); the defaults are
 * what users get. Only turned between collections, with the GIL held. */
enum {
    TGC_HOOK_YOUNG_SCAN,  /* the pre-scan lets young collections that cannot hold a tensor run
                             without the detector (young.c; default: where available) */
    TGC_HOOK_SEEDED,      /* the seeded split tries before the full one (split.c; default on) */
    TGC_HOOK_ISLAND,      /* islands are proved before a young collection (young.c; default:
                             where available) */
    TGC_HOOK_CROSSCHECK,  /* quick island proofs are checked against marked ones (default off) */
    TGC_HOOK_PRESCAN_CHECK,  /* every young object the pre-scan tests is tested through
                                tp_traverse too, before a young collection (default off) */
    TGC_HOOK_SENTINEL,    /* collections run alone with a sentinel planted, which looks at their
                             garbage once the collector found it (young.h's tgc_young_plant),
                             instead of the pre-scan and islands (default: where available) */
    TGC_HOOK_RESIDENT,    /* with the sentinel, the hook leaves gc.callbacks while the resident
                             sentinel watches (young.h), and joins it only for the "stop" of a
                             collection whose garbage holds tensors (default: where the tensor
                             watch is on) */
    TGC_HOOK_NSWITCHES
};
/* Turns switch `which` on or off. 0, or -1 with RuntimeError when turning on one that needs the
 * pre-scan (TGC_HOOK_YOUNG_SCAN, TGC_HOOK_ISLAND, TGC_HOOK_PRESCAN_CHECK, TGC_HOOK_SENTINEL) where
 * it is not available. */
int tgc_hook_switch(tgc_cycles *c, int which, int on);
int tgc_hook_switched(const tgc_cycles *c, int which);
/* Whether the pre-scan passed its self-check on this interpreter (young.h). */
int tgc_hook_prescan_available(const tgc_cycles *c);

/* What the hook decided, since import (tests and benchmarks read them; only the hook writes). */
typedef struct {
    unsigned long long young_skipped, young_armed;      /* collections run alone / armed */
    unsigned long long seeded_used, seeded_fallback;    /* splits the seeded one decided / not */
    /* young collections that could hold tensors and took the island path / were armed; proofs
     * that needed the young lists marked */
    unsigned long long island_used, island_fallback, island_marked;
    /* islands with a pending finalizer, those of them reported at the start of a full
     * collection, and the finalizers the hook ran for them */
    unsigned long long island_finalized, island_early, island_finalizers;
    unsigned long long island_checked, island_mismatched;  /* crosscheck */
    /* the pre-scan's crosscheck: young objects tested both ways, and those the ways disagreed
     * on (young.h's tgc_young_crosscheck_hits) */
    unsigned long long prescan_checked, prescan_mismatched;
    /* reports whose DOT was drawn when the hook let go of them (someone kept the report), and
     * reports nobody asked for nor kept, never drawn */
    unsigned long long dots_kept, dots_skipped;
    /* reports whose lists (tensors, groups, edges, hints) were made: read, or kept */
    unsigned long long lists_made;
    /* collections a sentinel was planted for; of those, whose garbage held tensors and was
     * taken (a report at "stop"), that were armed from inside the collection (the user's debug
     * flags, or the garbage could not be walked), and whose sentinel outlived the collection */
    unsigned long long sentinel_planted, sentinel_taken, sentinel_armed, sentinel_lost;
    /* times the hook left gc.callbacks for the resident sentinel, and collections it joined
     * gc.callbacks again for, from inside (a report, or the collection armed) */
    unsigned long long resident_went, resident_joined;
} tgc_hook_counters;

/* Whether the resident sentinel watches now (the hook off gc.callbacks between collections). */
int tgc_hook_resident(const tgc_cycles *c);
/* After something outside the hook took the tensor watch's planter (tests): the hook goes back
 * to gc.callbacks while observers listen. 0, or -1 with an exception. */
int tgc_hook_resident_check(tgc_cycles *c);

#endif /* TGC_HOOK_H */
