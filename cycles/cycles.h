/* cycles.h: what the files of cycles/ share: the cycles part of the module state (struct
 * tgc_cycles, made by cycles/binding.c at module exec), the keys of a report's dicts, the phase
 * timers, and the contracts of its units (hook.h, report.h, young.h, watch.h) and of the
 * reference-graph engine they use (graph/: include/tensorgc/graph.h, edges.h, names.h). Private
 * to cycles/: reporter/ and allocator/ never include it; module.c sees only binding.h. */
#ifndef TGC_CYCLES_H
#define TGC_CYCLES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/buf.h"
#include "tensorgc/compat.h"
#include "tensorgc/edges.h"
#include "tensorgc/graph.h"
#include "tensorgc/log.h"
#include "tensorgc/names.h"
#include "tensorgc/owners.h"
#include "tensorgc/ptrmap.h"
#include "tensorgc/tensor.h"
#include "hook.h"
#include "renderer.h"
#include "report.h"
#include "young.h"
#include "watch.h"

/* Phase timing for benchmarks (bench/b1_inprocess.py). Off in every normal build: the macros
 * compile to nothing, so the hot path carries no clock reads. */
enum {
    TGC_PHASE_SCAN,       /* "start": the pre-scan of a collection that found no tensor */
    TGC_PHASE_ISLAND,     /* "start": the pre-scan plus proving an island */
    TGC_PHASE_EXACT,      /* "stop": checking that the island is still one */
    TGC_PHASE_BUILD,      /* building a CycleReport */
    TGC_PHASE_CALLBACK,   /* running an observe_cycles callback */
    TGC_PHASE_FREE,       /* clearing the garbage the detector kept */
    TGC_PHASE_PLANT,      /* "start": deciding, and planting the sentinel */
    TGC_PHASE_WALK,       /* the sentinel's finalizer: its walk of the garbage */
    TGC_PHASE_UPROOT,     /* "stop": taking the sentinel out */
    TGC_PHASE_COUNT
};
#ifdef TGC_PHASE_TIMES
#  include <time.h>
static inline unsigned long long
tgc_phase_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
#  define TGC_PHASE_BEGIN(var) unsigned long long var = tgc_phase_now()
#  define TGC_PHASE_END(c, phase, var) \
    ((c)->phases[phase].n++, (c)->phases[phase].ns += tgc_phase_now() - (var))
#else
#  define TGC_PHASE_BEGIN(var) ((void)0)
#  define TGC_PHASE_END(c, phase, var) ((void)0)
#endif

/* The keys of tgc_cycles.keys, in the order of TGC_KEY_NAMES. */
enum {
    TGC_KEY_SHAPE, TGC_KEY_DTYPE, TGC_KEY_DEVICE, TGC_KEY_NBYTES, TGC_KEY_DATA_PTR, TGC_KEY_STACK,
    TGC_KEY_TYPE, TGC_KEY_STORAGE, TGC_KEY_COUNT_, TGC_KEY_OBJECTS, TGC_KEY_TENSORS, TGC_KEY_HINT,
    TGC_KEY_CYCLE, TGC_KEY_DRAWN, TGC_KEY_SIGNATURE, TGC_KEY_COUNT
};
#define TGC_KEY_NAMES {"shape", "dtype", "device", "nbytes", "data_ptr", "stack", "type", \
                       "storage", "count", "objects", "tensors", "hint", "cycle", "drawn", \
                       "signature"}

struct tgc_cycles {
    tgc_tensor_state *tensor;  /* borrowed: the module state's tensor part (module.c) */

    /* Set in module exec (binding.c), released in m_clear; everything here is used with the GIL
     * held. */
    PyTypeObject *report_type;
    PyTypeObject *handle_type;
    PyObject *error_type;     /* tensorgc.GraphvizError */
    PyObject *gc_get_debug, *gc_set_debug;  /* gc's functions, looked up once */
    PyObject *gc_callbacks;   /* the interpreter's gc.callbacks list */
    PyObject *gc_garbage;     /* the interpreter's gc.garbage list (rebinding gc.garbage does
                                 not change what the collector appends to) */
    PyObject *hook;           /* our gc.callbacks entry, a builtin bound to the module */
    PyObject *tail;           /* the entry the hook appends behind the program's callbacks, to
                                 leave gc.callbacks or deliver an exception after them */
    PyObject *observers;      /* list of tgc_handle, registration order */
    PyObject *logger;         /* logging.getLogger("tensorgc"), made on first use */
    /* set_observer_errors: 0 logs what an observer raises (the default), 1 raises it in the
     * program at its next Python call after the collection, in the thread that collected. */
    int raise_errors;
    /* The first exception an observer raised during this callback while raise_errors is on (a
     * new reference, its traceback attached), handed to tgc_deliver once the callback ends;
     * NULL otherwise. Later ones in the same callback are logged. */
    PyObject *deferred;
    int deliver_trailing;     /* the tail entry delivers `deferred` after the other callbacks
                                 of this phase ran */
    PyObject *str_generation;
    /* Interned keys of the dicts a CycleReport hands out (.tensors, .groups), indexed by
     * TGC_KEY_*: a report builds them for every tensor and group, so their keys are made once. */
    PyObject *keys[TGC_KEY_COUNT];
    tgc_labels labels;        /* edge labels reports reuse (graph/names.c) */

    /* Only touched inside our gc callback, which runs with the GIL held and never nests: the
     * collector refuses to start a collection while one is running, and `busy` guards the rest. */
    int armed;                /* "start" set DEBUG_SAVEALL and expects a "stop" */
    int busy;                 /* inside "stop": observers are running */
    int unhook_pending;       /* the last observer left during a collection; the tail entry
                                 takes the hook off gc.callbacks */
    int resident;             /* the resident sentinel watches the collections (young.h): the
                                 hook is off gc.callbacks, but for the "stop" of a collection
                                 whose garbage the pair took or armed (hook.c) */
    int user_saveall;         /* the user had DEBUG_SAVEALL on: leave their garbage alone */
    int interrupted;          /* a Ctrl-C stopped a layout, or interrupted Python code, during
                                 this callback: given back to the program (PyErr_SetInterrupt)
                                 when the callback ends (tgc_cycles_log, tgc_keep_interrupt) */
    long saved_flags;         /* the user's gc debug flags, restored in "stop" */
    Py_ssize_t garbage_len;   /* len(gc.garbage) at "start" */
    PyObject *garbage;        /* gc.garbage between "start" and "stop", new reference */
    PyObject *island;         /* the island "start" proved, or the sentinel took, and "stop"
                                 reports (new reference), NULL otherwise (young.c's
                                 tgc_young_island, tgc_young_plant) */
    PyObject *island_deferred;  /* the island's members whose finalizers the sentinel deferred
                                   (new reference; tgc_young_undefer before anything else), or
                                   NULL */
    int young_ok;             /* the pre-scan's self-check at module exec (young.h) */
    const char *young_why;    /* ... and why not when it failed (static; "" when it passed) */
    /* The switches (hook.h's TGC_HOOK_*; turned through tgc_hook_switch, between collections). */
    int young_scan, seeded_on, island_on, island_crosscheck, prescan_crosscheck, sentinel_on,
        resident_on;
    tgc_hook_counters counters;  /* written by the hook only (GIL); hook.h */
    /* Where a collection's time goes, per phase (TGC_PHASE_*), only in a build with
     * -DTGC_PHASE_TIMES (make phases); otherwise never written. Only touched inside our gc
     * callback. */
    struct {
        unsigned long long n, ns;
    } phases[TGC_PHASE_COUNT];
};

/* The cycles part's logging (common/log.c): the pending exception logged on c->logger, a
 * KeyboardInterrupt held in c->interrupted while inside our gc callback (hook.c gives it back
 * when the callback ends), given back at once otherwise. Never raises. */
static inline void
tgc_cycles_log(tgc_cycles *c, const char *what)
{
    tgc_log_exception(&c->logger, c->busy ? &c->interrupted : NULL, what);
}
/* When the pending exception is a KeyboardInterrupt, clears it and gives the interrupt back to
 * the program, as tgc_cycles_log does: 1; else 0. */
static inline int
tgc_keep_interrupt(tgc_cycles *c)
{
    return tgc_log_keep_interrupt(c->busy ? &c->interrupted : NULL);
}
/* An observer's failure (the pending exception): kept for tgc_deliver when raise_errors is on
 * and we are inside our gc callback, logged (tgc_cycles_log) otherwise; never raises. */
void tgc_observer_failed(tgc_cycles *c, const char *what);
/* Hands `deferred` to the program: the first Python event of this thread after the collection
 * (a call, a return) raises it there, as torch's observers' exceptions do (observers.c). Called
 * at the end of our gc callback, outside any other callback; never raises. */
void tgc_deliver(tgc_cycles *c);

#endif /* TGC_CYCLES_H */
