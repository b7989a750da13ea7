/* tensor.h: the contract of tensor/, tensorgc's one view of torch from C: resolving torch's types
 * (torch.py is never imported by us: a tensor can only exist once torch is), telling tensors from
 * other objects, and reading a tensor's metadata and storage through TensorBase's own C
 * descriptors, so no subclass property, __getattr__ or deprecation warning runs. cycles/ (reports)
 * and reporter/ (MemReporter, the index) both read tensors through it; it knows neither.
 *
 * tensor/torch.c resolves torch and reads metadata; tensor/layout.c counts a tensor's bytes
 * whatever its layout. Everything here needs the GIL. Python.h comes first. */
#ifndef TENSORGC_TENSOR_H
#define TENSORGC_TENSOR_H

/* TensorBase's attributes that layout.c reads, by index into tgc_tensor_state.attr: getset
 * descriptors, then method descriptors. Each is optional (NULL where this torch lacks it). */
enum {
    TGC_TA_LAYOUT, TGC_TA_IS_NESTED, TGC_TA_IS_QUANTIZED, TGC_TA_IS_META, TGC_TA_PY_DISPATCH,
    TGC_TA_NBYTES, TGC_TA_GETTERS,
    TGC_TA_INDICES = TGC_TA_GETTERS, TGC_TA_VALUES_COO, TGC_TA_CROW, TGC_TA_COL, TGC_TA_CCOL,
    TGC_TA_ROW, TGC_TA_VALUES, TGC_TA_DIM, TGC_TA_SIZE, TGC_TA_NUMEL, TGC_TA_COUNT
};

/* How a tensor's bytes were counted (layout.c), by index into tgc_tensor_state.how: the "storage"
 * explanation of CycleReport.tensors and MemReporter rows. A wrapper subclass's explanation names
 * its parts and is made per tensor; TGC_HOW_WRAPPER and TGC_HOW_JAGGED stand in when it cannot
 * be. The last three count nothing. */
enum {
    TGC_HOW_STRIDED, TGC_HOW_QUANTIZED, TGC_HOW_NESTED, TGC_HOW_COO, TGC_HOW_CSR, TGC_HOW_CSC,
    TGC_HOW_BSR, TGC_HOW_BSC, TGC_HOW_MKLDNN, TGC_HOW_ESTIMATE, TGC_HOW_WRAPPER, TGC_HOW_JAGGED,
    TGC_HOW_META, TGC_HOW_EMPTY_WRAPPER, TGC_HOW_UNREADABLE, TGC_HOW_COUNT
};

/* What the unit knows of torch. One per module state (the module's tensor part), shared by the
 * subsystems that read tensors; every field is used with the GIL held. */
typedef struct {
    /* Set by tgc_tensor_resolve once torch._C is importable, NULL before; new references. */
    PyObject *type;                   /* torch._C.TensorBase */
    PyObject *get_shape, *get_dtype, *get_device, *get_is_sparse;  /* getset descriptors */
    PyObject *untyped_storage;        /* method descriptor */
    PyObject *no_subclass_dispatch;   /* torch._C.DisableTorchFunctionSubclass, NULL if absent */
    PyObject *disabled_tf;            /* torch._C._disabled_torch_function_impl */
    PyObject *attr[TGC_TA_COUNT];     /* TGC_TA_*: TensorBase's, each NULL when absent */
    PyObject *strs;                   /* dtype / device / layout object -> its str(), small cache */
    PyObject *tensor_cls;             /* torch.Tensor, looked up once torch finished importing */
    /* Interned in tgc_tensor_init; new references. */
    PyObject *how[TGC_HOW_COUNT];     /* TGC_HOW_* */
    PyObject *str_torch, *str_torch_dot, *str_type, *str_index, *str_nbytes, *str_data_ptr;
    PyObject *str_flatten;            /* "__tensor_flatten__" */
    PyObject *str_device;             /* "device" */
} tgc_tensor_state;

/* Interns the fixed strings (module exec). 0, or -1 with an exception. */
int tgc_tensor_init(tgc_tensor_state *tn);
int tgc_tensor_traverse(tgc_tensor_state *tn, visitproc visit, void *arg);
void tgc_tensor_clear(tgc_tensor_state *tn);

/* 1 when torch's types are known (resolved now or earlier), 0 when torch._C is not imported or
 * still initialising; never imports torch, never leaves an exception set. */
int tgc_tensor_resolve(tgc_tensor_state *tn);

/* Whether obj is a tensor: an instance of TensorBase, by C type check (no isinstance, no
 * __class__). 0 before tgc_tensor_resolve succeeded. Inline: the hook asks it per object. */
static inline int
tgc_tensor_check(const tgc_tensor_state *tn, PyObject *obj)
{
    return tn->type != NULL && PyObject_TypeCheck(obj, (PyTypeObject *)tn->type);
}

/* Whether o is an instance of `tensor` (borrowed), remembering types that were not: the last
 * four, compared in turn (walks meet the same few types over and over), and behind them a small
 * table indexed by a hash of the type's address, for walks that meet more types than four (a
 * function alone references a dict, strs, a code object, tuples), which would otherwise walk an
 * MRO for most references. Zero it before a walk and do not keep it past one (its type pointers
 * are kept alive only by the objects being walked). */
#define TGC_TYPECACHE_BITS 4
typedef struct {
    PyTypeObject *plain[4];
    unsigned next;
    PyTypeObject *more[1 << TGC_TYPECACHE_BITS];
} tgc_tensor_typecache;

static inline int
tgc_tensor_typecache_check(tgc_tensor_typecache *c, PyTypeObject *tensor, PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    if (tp == c->plain[0] || tp == c->plain[1] || tp == c->plain[2] || tp == c->plain[3]) {
        return 0;
    }
    /* Fibonacci hashing: the top bits of the product mix every bit of the address */
    unsigned slot = (unsigned)(((uint64_t)(uintptr_t)tp * 0x9E3779B97F4A7C15ull) >>
                               (64 - TGC_TYPECACHE_BITS));
    if (c->more[slot] != tp) {
        if (PyType_IsSubtype(tp, tensor)) {
            return 1;
        }
        c->more[slot] = tp;
    }
    c->plain[c->next++ & 3] = tp;
    return 0;
}

/* A descriptor of TensorBase read on obj, bypassing obj's type's attribute lookup (new
 * reference, or NULL with an exception). */
static inline PyObject *
tgc_tensor_get(PyObject *descr, PyObject *obj)
{
    return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)Py_TYPE(obj));
}

/* str(v) for a dtype / device / layout, cached (new reference; NULL with an exception). */
PyObject *tgc_tensor_str(tgc_tensor_state *tn, PyObject *v);

/* t's shape as a tuple (new reference): its sizes, None for a dimension with no single size (a
 * nested tensor's ragged one) or one that cannot be read; None instead of a tuple when not even
 * the number of dimensions can be. NULL only with MemoryError set. Needs a resolved tn. */
PyObject *tgc_tensor_shape(tgc_tensor_state *tn, PyObject *t);

/* Subclass __torch_function__ dispatch switched off around reads of tensors' properties
 * (DisableTorchFunctionSubclass, where torch has it), so a subclass's Python code does not run
 * for .shape and friends. */
typedef struct {
    PyObject *ctx, *entered;  /* new references while on; NULL when off */
} tgc_tensor_nodispatch;
/* Whether reading properties of a tensor of type tp could run a Python __torch_function__. */
int tgc_tensor_may_dispatch(tgc_tensor_state *tn, PyTypeObject *tp);
/* Switches dispatch off into *g (zeroed first; left off, with no exception, where torch cannot). */
void tgc_tensor_nodispatch_enter(tgc_tensor_state *tn, tgc_tensor_nodispatch *g);
/* Switches it back on; a pending exception survives. */
void tgc_tensor_nodispatch_exit(tgc_tensor_nodispatch *g);

/* What a tensor's bytes are made of, whatever its layout (layout.c): one storage of its own
 * (strided, quantized, strided nested), the index and value tensors of a sparse one, an mkldnn
 * tensor's size (opaque), the inner tensors of a wrapper subclass, or nothing (meta). Readers
 * call it with subclass dispatch off where it could run. */
#define TGC_PARTS_MAX 16    /* storages counted per tensor: a wrapper's inner tensors past this
                               many are left out (the explanation says so) */
#define TGC_PARTS_DEPTH 3   /* wrapper subclasses followed one inside another */
typedef struct {
    PyObject *name;      /* new reference: "values", "a.indices"...; NULL: the tensor's own */
    PyObject *tensor;    /* new reference when asked to keep it (the reporter's rows), else NULL */
    PyObject *device_s;  /* new reference: str(device) of the part, NULL when unreadable */
    unsigned long long nbytes, ptr;  /* its storage's; ptr 0: no address, never shared */
} tgc_tensor_part;
typedef struct {
    PyObject *how;       /* new reference: the explanation (a tgc_tensor_state.how entry or made) */
    const char *none;    /* why nothing is counted ("meta"), NULL when something is */
    unsigned long long nbytes;  /* the parts' distinct storages, summed */
    unsigned long long ptr;     /* the largest part's storage address, 0 when none has one */
    int nparts;
    int own;             /* the one part is the tensor's own storage, read as such */
    tgc_tensor_part parts[TGC_PARTS_MAX];
} tgc_tensor_bytes;
/* Measures t into out. dev_type and device_s (borrowed) are t's device when already read, NULL
 * when not (or unreadable). keep: hold each part's tensor. owned (borrowed, or NULL): the list
 * that owns the garbage t is in, which takes any instance dict reading a wrapper makes. Never
 * fails: what cannot be read is counted as best it can be and said so; no exception is left.
 * Needs a resolved tn. */
void tgc_tensor_measure(tgc_tensor_state *tn, PyObject *t, const char *dev_type,
                        PyObject *device_s, int keep, PyObject *owned, tgc_tensor_bytes *out);
void tgc_tensor_bytes_clear(tgc_tensor_bytes *b);

#endif /* TENSORGC_TENSOR_H */
