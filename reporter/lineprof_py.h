/* lineprof_py.h: what the Python side of the line profiler shares. The engine (lineprof.c,
 * contract in include/tensorgc/lineprof.h) folds readings; around it:
 *   lineprof_events.c      one event of a profiled code object: every enabled profiler takes a
 *                          reading of its memory source and folds it;
 *   lineprof_monitoring.c  the event source on 3.12+: sys.monitoring callbacks, registered by
 *                          tensorgc/lineprof/__init__.py for the profiled code objects only;
 *   lineprof_trace.c       the event source on 3.10/3.11: a C trace function, per thread;
 *   binding.c              the _LineProfiler heap type (code objects, memory source, records).
 * Python.h comes first. Everything here runs with the GIL held. */
#ifndef TGC_LINEPROF_PY_H
#define TGC_LINEPROF_PY_H

#include "tensorgc/lineprof.h"

enum { LP_SRC_RSS = 1, LP_SRC_CUDA = 2 };
enum { LP_EV_ENTER = 0, LP_EV_LINE = 1, LP_EV_LEAVE = 2, LP_EV_RESUME = 3 };
#define LP_MAX_KEYS 4096  /* a sanity bound on memory_stats()' size */

/* One profiler (tensorgc._tensorgc._LineProfiler). */
typedef struct {
    PyObject_HEAD
    tgc_lp engine;          /* usable once keys != NULL */
    PyObject *codes;        /* list of the registered code objects (new reference): keeps alive
                               the identities the engine compares */
    PyObject *keys;         /* tuple of str, the layout of a reading; NULL before the first */
    PyObject *stats_fn;     /* CUDA: torch._C._cuda_memoryStats (new reference) */
    PyObject *reset_fn;     /* CUDA: torch._C._cuda_resetPeakMemoryStats (new reference) */
    PyObject *device_obj;   /* CUDA: the device index as an int (new reference) */
    int64_t *reading;       /* the latest reading, LP_MAX_KEYS values */
    int source, device;
    int enabled;            /* in tgc_lineprof.enabled */
    int rss_resettable;     /* the kernel accepted a peak reset (RSS source) */
    int read_ok;            /* the reading of the current event succeeded */
    Py_ssize_t errors;      /* failed readings; the first is reported as unraisable */
} tgc_lineprof_object;

/* The line profiler's part of the reporter's state (reporter.h); made at module exec
 * (binding.c), GIL. */
typedef struct {
    PyTypeObject *type;     /* _LineProfiler */
    PyObject *enabled;      /* list of the enabled profilers, enabling order */
    PyObject *hook;         /* _lp_thread_hook (new reference): the C tracer's argument */
    PyObject *saved_key;    /* interned key of a thread's replaced tracer (new reference) */
} tgc_lineprof;

/* lineprof_events.c */
/* Whether an enabled profiler watches code. */
int tgc_lineprof_interested(tgc_lineprof *lp, PyObject *code);
/* One event (LP_EV_*) of code on `line`. Never raises: a failed reading is reported once as
 * unraisable and the program goes on; an exception being raised in the program stays set. */
void tgc_lineprof_dispatch(tgc_lineprof *lp, int ev, PyObject *code, int line);
/* p's first reading: sets up its engine for the reading's layout (kept when the layout is the
 * same, rebuilt when it changed) and resets the source's peak. 0, or -1 with an exception. */
int tgc_lineprof_start(tgc_lineprof_object *p);

/* lineprof_monitoring.c: _lp_start, _lp_resume, _lp_line, _lp_leave (module functions). */
extern PyMethodDef tgc_lineprof_monitoring_methods[];

/* lineprof_trace.c: _lp_settrace (a module function), and _lp_thread_hook, made here. */
extern PyMethodDef tgc_lineprof_trace_methods[];
/* Makes lp->hook (bound to the module) and adds it as _lp_thread_hook. 0, or -1. */
int tgc_lineprof_trace_exec(PyObject *module, tgc_lineprof *lp);

#endif /* TGC_LINEPROF_PY_H */
