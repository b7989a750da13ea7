/* tgc.h: what the files of cycles/ share: module state, the two heap types, and the functions
 * each file offers the others. Not installed; the public C surface is include/tensorgc/. */
#ifndef TGC_H
#define TGC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "tensorgc/compat.h"
#include "tensorgc/graph.h"
#include "tensorgc/buf.h"
#include "tensorgc/ptrmap.h"
#include "young.h"
#include "renderer.h"

/* Which tensors an observer cares about. */
enum { TGC_DEV_ANY = 0, TGC_DEV_TYPE = 1, TGC_DEV_PREDICATE = 2 };
typedef struct {
    int kind;
    char type[32];      /* TGC_DEV_TYPE: "cuda", "cpu", ... */
    int index;          /* TGC_DEV_TYPE: device index, -1 for every index */
    PyObject *predicate;  /* TGC_DEV_PREDICATE: new reference */
} tgc_filter;

/* What an observer receives. */
enum { TGC_OBS_GARBAGE = 0, TGC_OBS_REPORT = 1, TGC_OBS_HTML = 2 };

typedef struct {
    PyObject_HEAD
    PyObject *module;     /* new reference while registered, NULL once removed */
    PyObject *callback;   /* new reference */
    int kind;             /* TGC_OBS_* */
    tgc_filter filter;
} tgc_handle;

/* Labels made once and reused by every report (module state; GIL): the fixed ones ("__dict__",
 * "__self__"...) found by the address of their C literal, ".name" by the attribute's name. */
#define TGC_LABELS_FIXED 32
#define TGC_LABELS_ATTRS 4096   /* a bound: the dict is emptied when it reaches this size */
typedef struct {
    struct {
        const char *literal;   /* the label's C string, compared by address */
        PyObject *label;       /* new reference */
    } fixed[TGC_LABELS_FIXED];
    int nfixed;
    PyObject *attrs;           /* new reference: dict, exact str name -> ".name"; NULL: none */
} tgc_labels;
void tgc_labels_clear(tgc_labels *l);  /* names.c */

/* One row of the page's summary table: a group of identical leaks. */
typedef struct {
    uint32_t count, nodes, tensors;
    unsigned long long nbytes;
    PyObject *cycle, *hint;  /* new references (str), shared with the group's dict */
} tgc_report_row;

typedef struct tgc_pending tgc_pending;  /* report.c */

typedef struct {
    PyObject_HEAD
    PyObject *text, *tensors, *groups, *edges, *hints;  /* new references, set at build */
    /* Made on first use: most reports are read for their text and never drawn. */
    PyObject *dot;         /* new reference, decoded from dot_src by tgc_report_dot */
    tgc_buf dot_src;       /* the DOT as drawn (UTF-8); freed once decoded */
    /* Until the DOT is drawn: what it is drawn from (report.c), which borrows the garbage's
     * objects, and the garbage list that keeps them alive (a new reference). Only while the hook
     * delivers the report: tgc_report_settle ends it before the garbage is freed. */
    tgc_pending *pending;
    PyObject *pending_objs;
    PyObject *svg, *html;  /* new references, NULL until first asked for (rendering is lazy) */
    PyObject *svg_error;   /* str when rendering failed, so the page can say why */
    tgc_report_row *rows;  /* the summary table's rows, made into HTML with the page */
    Py_ssize_t nrows;
    unsigned long long nbytes;
    Py_ssize_t objects, garbage;
    int generation;
} tgc_report;

/* Phase timing for benchmarks (bench/b1_inprocess.py). Off in every normal build: the macros
 * compile to nothing, so the hot path carries no clock reads. */
enum {
    TGC_PHASE_SCAN,       /* "start": the pre-scan of a collection that found no tensor */
    TGC_PHASE_ISLAND,     /* "start": the pre-scan plus proving an island */
    TGC_PHASE_EXACT,      /* "stop": checking that the island is still one */
    TGC_PHASE_BUILD,      /* building a CycleReport */
    TGC_PHASE_CALLBACK,   /* running an observe_cycles callback */
    TGC_PHASE_FREE,       /* clearing the garbage the detector kept */
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
#  define TGC_PHASE_END(st, phase, var) \
    ((st)->phases[phase].n++, (st)->phases[phase].ns += tgc_phase_now() - (var))
#else
#  define TGC_PHASE_BEGIN(var) ((void)0)
#  define TGC_PHASE_END(st, phase, var) ((void)0)
#endif

/* The keys of tgc_state.keys, in the order of TGC_KEY_NAMES. */
enum {
    TGC_KEY_SHAPE, TGC_KEY_DTYPE, TGC_KEY_DEVICE, TGC_KEY_NBYTES, TGC_KEY_DATA_PTR, TGC_KEY_STACK,
    TGC_KEY_TYPE, TGC_KEY_STORAGE, TGC_KEY_COUNT_, TGC_KEY_OBJECTS, TGC_KEY_TENSORS, TGC_KEY_HINT,
    TGC_KEY_CYCLE, TGC_KEY_DRAWN, TGC_KEY_COUNT
};
#define TGC_KEY_NAMES {"shape", "dtype", "device", "nbytes", "data_ptr", "stack", "type", \
                       "storage", "count", "objects", "tensors", "hint", "cycle", "drawn"}

/* TensorBase's attributes that layout.c reads, by index into tgc_state.torch_attr: getset
 * descriptors, then method descriptors. Each is optional (NULL where this torch lacks it). */
enum {
    TGC_TA_LAYOUT, TGC_TA_IS_NESTED, TGC_TA_IS_QUANTIZED, TGC_TA_IS_META, TGC_TA_PY_DISPATCH,
    TGC_TA_NBYTES, TGC_TA_GETTERS,
    TGC_TA_INDICES = TGC_TA_GETTERS, TGC_TA_VALUES_COO, TGC_TA_CROW, TGC_TA_COL, TGC_TA_CCOL,
    TGC_TA_ROW, TGC_TA_VALUES, TGC_TA_DIM, TGC_TA_SIZE, TGC_TA_NUMEL, TGC_TA_COUNT
};
#define TGC_TA_NAMES {"layout", "is_nested", "is_quantized", "is_meta", "_python_dispatch", \
                      "nbytes", "_indices", "_values", "crow_indices", "col_indices", \
                      "ccol_indices", "row_indices", "values", "dim", "size", "numel"}

/* How a tensor's bytes were counted (layout.c), by index into tgc_state.how: the "storage"
 * explanation of CycleReport.tensors and MemReporter rows. A wrapper subclass's explanation names
 * its parts and is made per tensor; TGC_HOW_WRAPPER and TGC_HOW_JAGGED stand in when it cannot
 * be. The last three count nothing. */
enum {
    TGC_HOW_STRIDED, TGC_HOW_QUANTIZED, TGC_HOW_NESTED, TGC_HOW_COO, TGC_HOW_CSR, TGC_HOW_CSC,
    TGC_HOW_BSR, TGC_HOW_BSC, TGC_HOW_MKLDNN, TGC_HOW_ESTIMATE, TGC_HOW_WRAPPER, TGC_HOW_JAGGED,
    TGC_HOW_META, TGC_HOW_EMPTY_WRAPPER, TGC_HOW_UNREADABLE, TGC_HOW_COUNT
};
#define TGC_HOW_NAMES {"strided: untyped_storage", "quantized: its integer storage", \
    "nested (strided): its buffer", "sparse_coo: indices + values", \
    "sparse_csr: crow_indices + col_indices + values", \
    "sparse_csc: ccol_indices + row_indices + values", \
    "sparse_bsr: crow_indices + col_indices + values", \
    "sparse_bsc: ccol_indices + row_indices + values", \
    "mkldnn: element_size * numel (opaque, no storage to read)", \
    "estimated: element_size * numel (storage not readable)", \
    "wrapper subclass: its inner tensors", "nested (jagged): its inner tensors", \
    "none (meta tensor)", "none (wrapper subclass without inner tensors)", \
    "none (storage not readable)"}

typedef struct {
    /* Set in module exec, released in m_clear; everything here is used with the GIL held. */
    PyTypeObject *report_type;
    PyTypeObject *handle_type;
    PyObject *gc_module;      /* new reference */
    PyObject *gc_get_debug, *gc_set_debug;  /* gc's functions, looked up once */
    PyObject *gc_callbacks;   /* the interpreter's gc.callbacks list */
    PyObject *gc_garbage;     /* the interpreter's gc.garbage list (rebinding gc.garbage does
                                 not change what the collector appends to) */
    PyObject *hook;           /* our gc.callbacks entry, a builtin bound to the module */
    PyObject *observers;      /* list of tgc_handle, registration order */
    PyObject *logger;         /* logging.getLogger("tensorgc"), made on first use */
    PyObject *error_type;     /* tensorgc.GraphvizError */

    /* torch, resolved once torch is imported (we never import it ourselves in the hook). */
    PyObject *tensor_type;    /* torch._C.TensorBase */
    PyObject *torch_get_shape, *torch_get_dtype, *torch_get_device;   /* getset descriptors */
    PyObject *torch_untyped_storage, *torch_is_sparse_getter;
    PyObject *torch_no_subclass_dispatch;  /* torch._C.DisableTorchFunctionSubclass */
    PyObject *torch_disabled_tf;  /* torch._C._disabled_torch_function_impl */
    PyObject *torch_tensor_cls;   /* torch.Tensor, once torch is imported (report.c) */
    PyObject *torch_strs;     /* dtype / device / layout object -> its str(), small cache */
    PyObject *torch_attr[TGC_TA_COUNT];  /* TGC_TA_*: TensorBase's, each NULL when absent */
    PyObject *how[TGC_HOW_COUNT];        /* TGC_HOW_*: interned in module exec */
    PyObject *str_flatten;    /* "__tensor_flatten__", interned in module exec */

    /* The reporter's tensor index (reporter/index.c), GIL-protected; index_busy guards its gc
     * callback against re-entry. */
    PyObject *index;          /* dict: tensor address -> weakref, NULL while off */
    PyObject *index_hook;     /* its gc.callbacks entry */
    int index_busy, index_stale;
    long index_freeze;        /* gc.get_freeze_count() when last checked */
    long index_promotions;    /* collections of generation >= 1 seen while on */

    /* Interned names the reporter looks up per tensor; set in module exec. */
    PyObject *str_generation, *str_torch, *str_torch_dot, *str_type, *str_index, *str_nbytes, *str_data_ptr;
    /* Interned keys of the dicts a CycleReport hands out (.tensors, .groups), indexed by
     * TGC_KEY_*: a report builds them for every tensor and group, so their keys are made once.
     * Set in module exec. */
    PyObject *keys[TGC_KEY_COUNT];
    tgc_labels labels;        /* edge labels reports reuse (names.c); GIL */

    /* Only touched inside our gc callback, which runs with the GIL held and never nests: the
     * collector refuses to start a collection while one is running, and `busy` guards the rest. */
    int armed;                /* "start" set DEBUG_SAVEALL and expects a "stop" */
    int busy;                 /* inside "stop": observers are running */
    int unhook_pending;       /* the last observer left during "stop"; a trailing copy of the
                                 hook on gc.callbacks takes the hook off */
    int user_saveall;         /* the user had DEBUG_SAVEALL on: leave their garbage alone */
    long saved_flags;         /* the user's gc debug flags, restored in "stop" */
    Py_ssize_t garbage_len;   /* len(gc.garbage) at "start" */
    PyObject *garbage;        /* gc.garbage between "start" and "stop", new reference */
    /* The young-generation pre-scan (young.c): young_ok is its self-check at module exec,
     * young_scan the switch (tensorgc._young_scan()); the counters say what "start" decided. */
    int young_ok, young_scan;
    unsigned long long young_skipped, young_armed;
    /* hook.c's seeded split (tensorgc._seeded_split()): the switch, and how often it decided or
     * handed over to the full split. */
    int seeded_on;
    unsigned long long seeded_used, seeded_fallback;
    /* Islands (young.c's tgc_young_island, tensorgc._young_island()): the switch, the island
     * "start" proved and "stop" reports (new reference, NULL otherwise), and how often a young
     * collection that could hold tensors took that path or fell back to arming. */
    int island_on;
    PyObject *island;
    unsigned long long island_used, island_fallback;
    unsigned long long island_marked;  /* proofs that took marking the young lists */
    /* islands with a member whose tp_finalize was pending, those of them reported at the start
     * of a full collection, and the finalizers the hook ran for them */
    unsigned long long island_finalized, island_early, island_finalizers;
    int island_crosscheck;  /* check quick proofs against marked ones (tests; _island_crosscheck) */
    unsigned long long island_checked, island_mismatched;
    /* Reports whose DOT was drawn when the hook let go of them (someone kept the report) or never
     * drawn (nobody asked and nobody kept it); tensorgc._report_dots(). GIL. */
    unsigned long long dots_kept, dots_skipped;
    /* Where a collection's time goes, per phase (TGC_PHASE_*), only in a build with
     * -DTGC_PHASE_TIMES (make phases; read by tensorgc._phase_times()); otherwise never written.
     * Only touched inside our gc callback. */
    struct {
        unsigned long long n, ns;
    } phases[TGC_PHASE_COUNT];

    /* The line profiler (reporter/lineprof_py.c); all protected by the GIL. */
    PyTypeObject *lp_type;
    PyObject *lp_enabled;     /* list of the enabled profilers, enabling order */
    PyObject *lp_hook;        /* _lp_thread_hook (new reference): the C tracer's argument */
} tgc_state;

/* module.c */
tgc_state *tgc_state_of(PyObject *module);

/* hook.c: the gc callback and the observers. */
PyObject *tgc_hook_callback(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
int tgc_hook_add(tgc_state *st, PyObject *module, tgc_handle *h);
int tgc_hook_remove(tgc_handle *h);
/* Frees objs (a list owning one reference to each object) as the collector would. With check,
 * first redoes the collector's resurrection check and spares anything still reachable from
 * outside the list; without, every object is taken as unreachable (only valid while no Python
 * code ran since the collector's own check). Returns how many were released; never fails (out
 * of memory: nothing is cleared and the objects die or live by refcount). */
Py_ssize_t tgc_hook_free(PyObject *objs, int check);
void tgc_log_exception(tgc_state *st, const char *what);
void tgc_filter_clear(tgc_filter *f);

/* names.c: what objects are, and what their references are called. */
typedef struct {
    PyObject *target;   /* borrowed; only compared by address */
    PyObject *via;      /* borrowed; the container the reference sits in, NULL when direct */
    PyObject *label;    /* new reference (str) */
    int used;
} tgc_name;
typedef struct {
    tgc_name *items;
    size_t n, cap;
    PyObject *folds[8];  /* borrowed; containers drawn as part of the owner (dict, closure) */
    int nfolds;
    tgc_labels *labels;  /* borrowed: reusable labels, or NULL to make every label anew */
} tgc_names;
int tgc_names_collect(PyObject *obj, tgc_names *ns, PyObject *owned);
/* Whether obj is a generator, a coroutine or an async generator (a frame of its own). */
int tgc_is_generator(PyObject *obj);
PyObject *tgc_names_take(tgc_names *ns, PyObject *target, PyObject *via);  /* borrowed or NULL */
void tgc_names_clear(tgc_names *ns);
/* Every string taken from the user's objects is cut before it reaches a label, the text or the
 * table: names and descriptions at TGC_NAME_MAX characters, anything written into a buffer at
 * TGC_PYSTR_MAX bytes (a safety net), each with an ellipsis and the true length. */
#define TGC_NAME_MAX 120
/* s (a new reference, stolen; NULL passes through) cut to limit characters: "abc… (1000 chars)".
 * New reference. */
PyObject *tgc_cut(PyObject *s, Py_ssize_t limit);
PyObject *tgc_type_name(PyObject *obj);  /* new reference */
PyObject *tgc_describe(PyObject *obj);   /* new reference: one short line, may be "" */
int tgc_buf_pystr(tgc_buf *b, PyObject *s, int how);  /* how: 0 raw, 'd' DOT, 'h' HTML */

/* edges.c: the references among a set of objects, found with tp_traverse. Fills *map (object
 * address -> index in items; the caller frees it with tgc_ptrmap_free) and malloc'd edge arrays
 * (the caller frees them). Returns 0, or -1 with MemoryError set. */
int tgc_edges(PyObject *const *items, uint32_t n, tgc_ptrmap *map,
              uint32_t **src, uint32_t **dst, uint32_t *m);

/* report.c */
int tgc_torch_resolve(tgc_state *st);   /* 1 when torch's types are known, 0 when not, -1 error */
int tgc_is_tensor(tgc_state *st, PyObject *obj);
/* objs: the garbage the report may look at (a list owning it); garbage_total: how many objects
 * the collection found in all (objs may be the tensors' part only). */
PyObject *tgc_report_build(tgc_state *st, PyObject *objs, const tgc_filter *f, int generation,
                           Py_ssize_t garbage_total);
PyObject *tgc_report_dot(tgc_report *r);                  /* new reference */
/* Before the garbage a report was built from is freed: draws the report's DOT if anyone besides
 * the caller's `own` references holds the report, else forgets what it would be drawn from. */
int tgc_report_settle(PyObject *report, Py_ssize_t own);  /* 1 drawn, 0 forgotten, -1 neither */
void tgc_report_forget(tgc_report *r);  /* drops what the DOT would be drawn from (tp_clear) */
/* Releases n rows (strings NULL where a row was never filled) and the array; NULL is fine. */
void tgc_report_rows_free(tgc_report_row *rows, Py_ssize_t n);
PyObject *tgc_report_svg(tgc_state *st, tgc_report *r);    /* new reference */
PyObject *tgc_report_html(tgc_state *st, tgc_report *r);   /* new reference */

/* page.c: the self-contained HTML page around an SVG (drawn by the worker: renderer.h). */
typedef struct {
    const char *title;
    const char *text;          /* the plain-text summary */
    const char *table_html;    /* rows already escaped */
    const char *svg;           /* Graphviz output, or NULL */
    const char *svg_error;     /* why there is no picture */
} tgc_page;
void tgc_html_page(tgc_buf *out, const tgc_page *p);

/* layout.c: what a tensor's bytes are made of, whatever its layout. Both readers (report.c and
 * reporter/walk.c) call it with subclass __torch_function__ dispatch off where it could run. */
#define TGC_PARTS_MAX 16    /* storages counted per tensor: a wrapper's inner tensors past this
                               many are left out (the explanation says so) */
#define TGC_PARTS_DEPTH 3   /* wrapper subclasses followed one inside another */
typedef struct {
    PyObject *name;      /* new reference: "values", "a.indices"...; NULL: the tensor's own */
    PyObject *tensor;    /* new reference when asked to keep it (the reporter's rows), else NULL */
    PyObject *device_s;  /* new reference: str(device) of the part, NULL when unreadable */
    unsigned long long nbytes, ptr;  /* its storage's; ptr 0: no address, never shared */
} tgc_part;
typedef struct {
    PyObject *how;       /* new reference: the explanation (a tgc_state.how entry or made) */
    const char *none;    /* why nothing is counted ("meta"), NULL when something is */
    unsigned long long nbytes;  /* the parts' distinct storages, summed */
    unsigned long long ptr;     /* the largest part's storage address, 0 when none has one */
    int nparts;
    int own;             /* the one part is the tensor's own storage, read as such */
    tgc_part parts[TGC_PARTS_MAX];
} tgc_bytes;
/* Measures t into out. dev_type and device_s (borrowed) are t's device when already read, NULL
 * when not (or unreadable). keep: hold each part's tensor. owned (borrowed, or NULL): the list
 * that owns the garbage t is in, which takes any instance dict reading a wrapper makes. Never
 * fails: what cannot be read is counted as best it can be and said so; no exception is left. */
void tgc_bytes_measure(tgc_state *st, PyObject *t, const char *dev_type, PyObject *device_s,
                       int keep, PyObject *owned, tgc_bytes *out);
void tgc_bytes_clear(tgc_bytes *b);
/* t's shape as a tuple (new reference): its sizes, None for a dimension with no single size (a
 * nested tensor's ragged one) or one that cannot be read; None instead of a tuple when not even
 * the number of dimensions can be. NULL only with MemoryError set. */
PyObject *tgc_tensor_shape(tgc_state *st, PyObject *t);
/* str(v) for a dtype / device / layout, cached in torch_strs (new reference; NULL with an
 * exception). */
PyObject *tgc_torch_str(tgc_state *st, PyObject *v);

/* reporter/walk.c: every live tensor object, and what a report needs of one. */
PyObject *tgc_walk_tensors(tgc_state *st);              /* new reference: list */
PyObject *tgc_tensor_row(tgc_state *st, PyObject *t);   /* new reference: tuple */
PyObject *tgc_tensor_rows(tgc_state *st, PyObject *tensors);  /* list in, new list out */

/* reporter/index.c: the opt-in index of live tensors. */
PyObject *tgc_index_callback(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
int tgc_index_enable(tgc_state *st);
int tgc_index_disable(tgc_state *st);
PyObject *tgc_index_tensors(tgc_state *st);  /* new reference: list */

/* reporter/lineprof_py.c: the line profiler's type and its event entry points. */
int tgc_lineprof_exec(PyObject *module, tgc_state *st);
int tgc_lineprof_traverse(tgc_state *st, visitproc visit, void *arg);
void tgc_lineprof_clear(tgc_state *st);
extern PyMethodDef tgc_lineprof_methods[];

/* allocator/binding.c: block attribution over an allocator snapshot (see alloc.h). */
PyObject *tgc_alloc_attribute(PyObject *segments, PyObject *storages);
PyObject *tgc_alloc_pickle_scan(PyObject *data);
PyObject *tgc_alloc_check_trace(PyObject *trace, Py_ssize_t start, PyObject *seen);
PyObject *tgc_alloc_segmap(PyObject *trace, PyObject *segments, int device, Py_ssize_t upto,
                           int use_free_requested);
PyObject *tgc_alloc_timeline(PyObject *trace, PyObject *pre, unsigned columns, unsigned detail,
                             int use_free_requested, PyObject *classify);

#endif /* TGC_H */
