/* compat.h: every Python- and Graphviz-version #if of tensorgc lives here.
 * Other files call the tgc_compat_* names and never test PY_VERSION_HEX themselves. */
#ifndef TENSORGC_COMPAT_H
#define TENSORGC_COMPAT_H

#ifdef Py_PYTHON_H  /* the Python half: only for files that include Python.h first */

#include <frameobject.h>

/* Interpreter shutdown: public from 3.13, underscored before. */
#if PY_VERSION_HEX >= 0x030D0000
#  define tgc_compat_is_finalizing() Py_IsFinalizing()
#else
#  define tgc_compat_is_finalizing() _Py_IsFinalizing()
#endif

/* Free-threaded builds: the detector edits gc.garbage in place and reads objects' reference
 * counts without per-object locks, which only the GIL makes safe. setup.py says so first. */
#ifdef Py_GIL_DISABLED
#  error "tensorgc does not support free-threaded CPython builds (Py_GIL_DISABLED)"
#endif

/* PyObject_CallOneArg / PyObject_CallNoArgs are 3.9+; the package needs 3.9. */
#if PY_VERSION_HEX < 0x03090000
#  error "tensorgc needs Python 3.9 or newer"
#endif

/* Py_NewRef is 3.10+. */
#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *tgc_compat_newref(PyObject *o) { Py_INCREF(o); return o; }
#  define Py_NewRef(o) tgc_compat_newref((PyObject *)(o))
#  define Py_XNewRef(o) ((o) ? tgc_compat_newref((PyObject *)(o)) : NULL)
#endif

/* Py_ALWAYS_INLINE is 3.11+ (it expands to nothing in debug builds there). The pre-scan's per-object
 * test relies on it: at -O2 (the usual CFLAGS of distributions' Pythons) GCC keeps that test out
 * of line, a call for every young object. */
#ifndef Py_ALWAYS_INLINE
#  if defined(__GNUC__) || defined(__clang__)
#    define Py_ALWAYS_INLINE __attribute__((always_inline))
#  else
#    define Py_ALWAYS_INLINE
#  endif
#endif
/* Kept out of line, where a rare path would otherwise grow a hot loop (3.12 has Py_NO_INLINE). */
#if defined(__GNUC__) || defined(__clang__)
#  define TGC_NOINLINE __attribute__((noinline))
#else
#  define TGC_NOINLINE
#endif

/* The frame's local variables as a mapping (new reference), or NULL with an exception.
 * 3.13 returns a write-through proxy that holds no strong references of its own. 3.11 and 3.12
 * materialise frame->f_locals, a dict that the frame keeps: the caller must account for it
 * (graph/names.c adds it to the set it owns), which is why *owned_by_frame says so. */
static inline PyObject *
tgc_compat_frame_locals(PyFrameObject *frame, int *owned_by_frame)
{
#if PY_VERSION_HEX >= 0x030D0000
    *owned_by_frame = 0;
    return PyFrame_GetLocals(frame);
#elif PY_VERSION_HEX >= 0x030B0000
    *owned_by_frame = 1;
    return PyFrame_GetLocals(frame);
#else
    *owned_by_frame = 1;
    if (PyFrame_FastToLocalsWithError(frame) < 0) {
        return NULL;
    }
    return Py_XNewRef(frame->f_locals);
#endif
}

/* The instance __dict__ (new reference), made if the instance keeps its attributes inline (3.11+
 * managed dicts); NULL without an exception when the type has none. A dict made here is owned by
 * the instance: callers that count references must add it to the set they account for. */
static inline PyObject *
tgc_compat_instance_dict(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
#if PY_VERSION_HEX >= 0x030B0000
    if (tp->tp_dictoffset == 0 && !(tp->tp_flags & Py_TPFLAGS_MANAGED_DICT)) {
        return NULL;
    }
#else
    if (tp->tp_dictoffset == 0) {
        return NULL;
    }
#endif
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (d == NULL) {
        PyErr_Clear();
    }
    return d;
}

/* The line profiler listens through sys.monitoring (3.12+: only the profiled code objects raise
 * events) and through a C trace function before that (every frame of the traced threads). */
#if PY_VERSION_HEX >= 0x030C0000
#  define TGC_HAVE_SYS_MONITORING 1
#else
#  define TGC_HAVE_SYS_MONITORING 0
#endif

/* Whether a frame's "call" trace event is a generator resuming (it ran before), for the C
 * trace function of 3.10/3.11 (3.12+ has sys.monitoring's PY_RESUME). 3.11: a generator's
 * first call stops at its first RESUME instruction, after the prefix (cells, RETURN_GENERATOR). */
static inline int
tgc_compat_frame_resumed(PyFrameObject *frame)
{
#if PY_VERSION_HEX >= 0x030C0000
    (void)frame;
    return 0;
#elif PY_VERSION_HEX >= 0x030B0000
    PyCodeObject *code = PyFrame_GetCode(frame);  /* new reference */
    int resumed = 0;
    if (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) {
        PyObject *bc = PyCode_GetCode(code);      /* new reference (cached by the code) */
        if (bc != NULL) {
            const unsigned char *ops = (const unsigned char *)PyBytes_AS_STRING(bc);
            Py_ssize_t n = PyBytes_GET_SIZE(bc), first = 0;
            while (first + 1 < n && ops[first] != 151) {  /* 3.11's RESUME (opcode.h would
                                                            * bring every opcode's macro) */
                first += 2;
            }
            resumed = PyFrame_GetLasti(frame) > first;
            Py_DECREF(bc);
        }
        PyErr_Clear();
    }
    Py_DECREF(code);
    return resumed;
#else
    return frame->f_lasti >= 0;
#endif
}

/* A profile function that fails a "call" event: 3.10's eval loop leaves the new frame at once
 * (Python/ceval.c: goto exit_eval_frame) without adding it to the traceback, so the function
 * that raised adds it; 3.11+ add it themselves. */
#if PY_VERSION_HEX < 0x030B0000
#  define TGC_PROFILE_CALL_ERROR_ADDS_FRAME 1
#else
#  define TGC_PROFILE_CALL_ERROR_ADDS_FRAME 0
#endif

/* PyUnstable_GC_VisitObjects walks every tracked object without building a list (3.12+);
 * before that the reporter asks gc.get_objects(). */
#if PY_VERSION_HEX >= 0x030C0000
#  define TGC_HAVE_GC_VISIT 1
#else
#  define TGC_HAVE_GC_VISIT 0
#endif

/* The interpreters whose internals tensorgc reads (the collector's generation lists in
 * cycles/young.c, a frame's slots in graph/frames.c), decided here at build time:
 * TGC_INTERNALS_KNOWN is 1 when compiled against CPython 3.10-3.13 with the GIL. Everything that
 * reads internals is compiled only where it is 1, and runs only where common/internals.c also
 * agrees at run time (the interpreter that loaded the module is the one the build was compiled
 * for, and the environment does not ask for the portable path). 3.14's collector is incremental
 * (a young generation, and an old space collected in increments: docs/api.md); whatever comes
 * after it is unknown until read. -DTGC_ASSUME_UNKNOWN_INTERPRETER builds as for such an
 * interpreter: no internal header is included, and the module runs on the public gc API only
 * (tests/test_portable.py). TGC_INTERNALS_WHY says why not, for the import-time message. */
#if defined(TGC_ASSUME_UNKNOWN_INTERPRETER)
#  define TGC_INTERNALS_KNOWN 0
#  define TGC_INTERNALS_WHY "built with TGC_ASSUME_UNKNOWN_INTERPRETER, as for an interpreter " \
                            "whose collector tensorgc does not know"
#elif PY_VERSION_HEX >= 0x030E0000
#  define TGC_INTERNALS_KNOWN 0
#  define TGC_INTERNALS_WHY "CPython 3.14 and later collect incrementally (a young generation, " \
                            "and an old space in increments), not in the generations this " \
                            "build reads (3.10-3.13)"
#elif PY_VERSION_HEX < 0x030A0000
#  define TGC_INTERNALS_KNOWN 0
#  define TGC_INTERNALS_WHY "CPython before 3.10: its collector's layout was not checked"
#elif !defined(__has_include)
#  define TGC_INTERNALS_KNOWN 0
#  define TGC_INTERNALS_WHY "the compiler cannot tell whether the interpreter's internal " \
                            "headers exist (no __has_include)"
#elif !__has_include("internal/pycore_interp.h")
#  define TGC_INTERNALS_KNOWN 0
#  define TGC_INTERNALS_WHY "the interpreter's internal headers are not installed"
#else
#  define TGC_INTERNALS_KNOWN 1
#  define TGC_INTERNALS_WHY ""
#endif

/* The reporter's tensor index relies on the generational collector's promotion rule (objects
 * reach the oldest generation only through collections of generation >= 1): where the
 * internals are known (3.10-3.13), and at run time where common/internals.c agrees. */
#define TGC_HAVE_GEN_INDEX TGC_INTERNALS_KNOWN

/* cycles/young.c reads the collector's generation lists (cycles/gclists.h, Py_BUILD_CORE) to
 * skip DEBUG_SAVEALL for young collections that cannot hold a tensor, to prove islands and to
 * lend owners() a visited mark. The lists of 3.10-3.13 share one layout (checked again at run
 * time); elsewhere the detector arms every collection. */
#define TGC_HAVE_YOUNG_SCAN TGC_INTERNALS_KNOWN

/* What an instance of a class with a managed dict (3.11+) holds of its attributes, read in
 * place where its tp_traverse (subtype_traverse) visits them: returns the inline values (*n of
 * them, NULL for an attribute not set; NULL and 0 when there are none), and sets *dictslot to
 * where the __dict__ pointer lives (NULL when tp_traverse would not visit it; the pointer there
 * may be NULL). For cycles/young.c only (Py_BUILD_CORE, internal headers). The layouts: 3.11
 * keeps a values pointer at word -4 and the dict at word -3, and visits both; 3.12 keeps one
 * tagged word at -3 (low bit set: values) and visits what it holds; 3.13 keeps the values after
 * the object (Py_TPFLAGS_INLINE_VALUES; `capacity` of them, while `valid`) and the dict at word
 * -3, which it visits only when the values are not valid. */
#if defined(Py_BUILD_CORE) && TGC_INTERNALS_KNOWN && PY_VERSION_HEX >= 0x030B0000
/* 3.13's pycore_object.h has inline functions that leave a parameter unused */
#  if defined(__GNUC__)
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Wunused-parameter"
#  endif
#  include "internal/pycore_object.h"
#  include "internal/pycore_dict.h"
#  if defined(__GNUC__)
#    pragma GCC diagnostic pop
#  endif
#  define TGC_HAVE_MANAGED_ATTRS 1
static inline PyObject **
tgc_compat_managed_attrs(PyObject *op, Py_ssize_t *n, PyObject ***dictslot)
{
    PyTypeObject *tp = Py_TYPE(op);
#  if PY_VERSION_HEX >= 0x030D0000
    if (tp->tp_flags & Py_TPFLAGS_INLINE_VALUES) {
        PyDictValues *v = _PyObject_InlineValues(op);
        if (v->valid) {
            *n = v->capacity;
            *dictslot = NULL;
            return v->values;
        }
    }
    *n = 0;
    *dictslot = (PyObject **)&_PyObject_ManagedDictPointer(op)->dict;
    return NULL;
#  elif PY_VERSION_HEX >= 0x030C0000
    PyDictOrValues *dorv = _PyObject_DictOrValuesPointer(op);
    if (_PyDictOrValues_IsValues(*dorv)) {
        *n = ((PyHeapTypeObject *)tp)->ht_cached_keys->dk_nentries;
        *dictslot = NULL;
        return _PyDictOrValues_GetValues(*dorv)->values;
    }
    *n = 0;
    *dictslot = &dorv->dict;
    return NULL;
#  else
    PyDictValues *v = *_PyObject_ValuesPointer(op);
    *n = v != NULL ? ((PyHeapTypeObject *)tp)->ht_cached_keys->dk_nentries : 0;
    *dictslot = _PyObject_ManagedDictPointer(op);
    return v != NULL ? v->values : NULL;
#  endif
}
#else
#  define TGC_HAVE_MANAGED_ATTRS 0
#endif

/* A function's references as its tp_traverse (func_traverse) visits them, read in place: every
 * object field of PyFunctionObject (cpython/funcobject.h) but func_weakreflist, which splits
 * them into two runs of neighbouring fields: func_globals to func_dict, and func_module to the
 * last one, func_annotations (3.11) or func_typeparams (3.12, 3.13). Where the layout was not
 * checked, TGC_FUNC_RUNS is 0 and functions go through tp_traverse. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#  define TGC_FUNC_RUNS 1
#  define TGC_FUNC_RUN1 offsetof(PyFunctionObject, func_globals)
#  define TGC_FUNC_RUN1_N ((offsetof(PyFunctionObject, func_dict) - TGC_FUNC_RUN1) / \
                           sizeof(PyObject *) + 1)
#  define TGC_FUNC_RUN2 offsetof(PyFunctionObject, func_module)
#  if PY_VERSION_HEX >= 0x030C0000
#    define TGC_FUNC_RUN2_LAST offsetof(PyFunctionObject, func_typeparams)
#  else
#    define TGC_FUNC_RUN2_LAST offsetof(PyFunctionObject, func_annotations)
#  endif
#  define TGC_FUNC_RUN2_N ((TGC_FUNC_RUN2_LAST - TGC_FUNC_RUN2) / sizeof(PyObject *) + 1)
/* Of those, the three that may hold any object, and so a tensor: __doc__ and __module__ (any
 * value may be assigned) and __builtins__ (taken unchecked from the globals' "__builtins__" when
 * the function is made: anything but a module is kept as it is). Every other one is a code
 * object, a str, a tuple, a dict or NULL, which its setter (Python's and the C API's) enforces. */
#  define TGC_FUNC_ANY1 offsetof(PyFunctionObject, func_doc)
#  define TGC_FUNC_ANY2 offsetof(PyFunctionObject, func_module)
#  define TGC_FUNC_ANY3 offsetof(PyFunctionObject, func_builtins)
#else
#  define TGC_FUNC_RUNS 0
#endif

/* graph/frames.c reads a frame's local slots so that the owner-chain search never
 * materialises frame.f_locals, a dict the frame keeps (the same one locals() returned, which
 * reading it would update) on 3.10-3.12. TGC_FRAME_SLOTS says which layout: 2, the
 * _PyInterpreterFrame of 3.11 and 3.12 (internal headers, Py_BUILD_CORE); 1, 3.10's
 * PyFrameObject, whose f_localsplus holds the locals, then the cells and free variables (public
 * cpython/frameobject.h); 0, none (3.13+ need it not: frame.f_locals is a proxy). */
#if TGC_INTERNALS_KNOWN && PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000 && \
    __has_include("internal/pycore_frame.h")
#  define TGC_FRAME_SLOTS 2
#elif TGC_INTERNALS_KNOWN && PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030B0000
#  define TGC_FRAME_SLOTS 1
#else
#  define TGC_FRAME_SLOTS 0
#endif

/* structmember.h's T_OBJECT_EX became Py_T_OBJECT_EX (Python.h) in 3.12. */
#if PY_VERSION_HEX >= 0x030C0000
#  define TGC_T_OBJECT_EX Py_T_OBJECT_EX
#else
#  define TGC_T_OBJECT_EX T_OBJECT_EX
#endif

/* A weak reference's target as a new reference, NULL when dead (PyWeakref_GetObject is
 * deprecated from 3.13, where PyWeakref_GetRef replaces it). Never leaves an exception set. */
static inline PyObject *
tgc_compat_weakref_target(PyObject *ref)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o = NULL;
    if (PyWeakref_GetRef(ref, &o) <= 0) {
        PyErr_Clear();
        return NULL;
    }
    return o;
#else
    PyObject *o = PyWeakref_GetObject(ref);  /* borrowed */
    if (o == NULL || o == Py_None) {
        PyErr_Clear();
        return NULL;
    }
    return Py_NewRef(o);
#endif
}

#if PY_VERSION_HEX >= 0x030B0000
#  define TGC_TPFLAGS_MANAGED_DICT Py_TPFLAGS_MANAGED_DICT
#else
#  define TGC_TPFLAGS_MANAGED_DICT 0
#endif

/* An instance's __dict__ where it is already an object of its own that the instance's
 * tp_traverse reports (borrowed), else NULL; never makes one. Every instance dict on 3.10; from
 * 3.11 a managed dict is left out (reading it could make it: tp_traverse then reports the
 * attributes themselves). Not a class's, a module's or a function's: names.c names those
 * through their dict. */
static inline PyObject *
tgc_compat_existing_dict(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (tp->tp_dictoffset == 0 || (tp->tp_flags & TGC_TPFLAGS_MANAGED_DICT) ||
        PyType_Check(obj) || PyModule_Check(obj) || PyFunction_Check(obj)) {
        return NULL;
    }
    PyObject **p = _PyObject_GetDictPtr(obj);
    return p != NULL && *p != NULL && PyDict_Check(*p) ? *p : NULL;
}

/* A dict with room for n entries without resizing: a report builds one per tensor and group.
 * _PyDict_NewPresized left the public headers in 3.13. */
#if PY_VERSION_HEX < 0x030D0000
#  define tgc_compat_dict_presized(n) _PyDict_NewPresized(n)
#else
#  define tgc_compat_dict_presized(n) ((void)(n), PyDict_New())
#endif

/* A thread's state dict (borrowed, NULL when never made: where threading.local keeps the
 * thread's values) and its id; both are fields of PyThreadState on every supported version, and
 * PyThreadState_GetDict only reads the calling thread's. */
static inline PyObject *
tgc_compat_thread_dict(PyThreadState *ts)
{
    return ts->dict;
}

static inline unsigned long
tgc_compat_thread_id(PyThreadState *ts)
{
    return ts->thread_id;
}

#endif /* Py_PYTHON_H */

/* The Graphviz half. gvRenderData's length argument became size_t in Graphviz 13. */
#ifdef TGC_GRAPHVIZ_MAJOR
#  if TGC_GRAPHVIZ_MAJOR >= 13
typedef size_t tgc_gv_len_t;
#  else
typedef unsigned int tgc_gv_len_t;
#  endif
#endif

#endif /* TENSORGC_COMPAT_H */
