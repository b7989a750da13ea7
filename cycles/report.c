/* report.c: turns one collection's garbage into a CycleReport: which objects are tensors of
 * interest (C type checks only), the reference graph restricted to the garbage (tp_traverse), the
 * cycles that hold tensors (graph.c), identical leaks grouped, a bounded drawing in DOT, the text
 * summary and fix hints. The DOT is drawn on first use or when the hook lets go of a report someone
 * kept (tgc_report_settle), and rendering to SVG/HTML (render.c) on first use. */
#include "tgc.h"

#define TGC_DRAW_BUDGET 300     /* object nodes drawn per report, summary nodes aside */
#define TGC_DRAW_GROUPS 12      /* distinct leak shapes drawn; the rest are listed only */
#define TGC_STACK_LINES 6       /* frames shown on a tensor node */
/* What keeps a picture's layout quick, whatever the garbage looks like (the render worker's
 * deadline is the backstop, renderer.h). Graphviz's time grows with edges and crossings more
 * than with nodes: a star of 600 edges in one cluster ran for minutes. */
#define TGC_DRAW_SMALL 40       /* a group this small is drawn whole, classes and chains too */
#define TGC_CHAIN_KEEP 4        /* a long chain keeps this many nodes at each end */
#define TGC_DRAW_EDGES 450      /* references drawn per report, at most (builder__emit_all) */
#define TGC_DRAW_BIG 200        /* edges (or nodes) from which the layout's effort is limited */
#define TGC_DRAW_STUBS 16       /* dashed links per group and direction to its "more" node */
/* What bounds the text and the page, whatever the garbage (each string in them is cut too). */
#define TGC_TEXT_GROUPS 40      /* leak shapes spelled out in the text; the rest summed up */
#define TGC_TEXT_PART 600       /* bytes of a shape's cycle or fix in the text */
#define TGC_TEXT_MAX 65536      /* bytes of the whole text */
#define TGC_TABLE_ROWS 200      /* leak shapes in the page's table */
#define TGC_PAGE_MAX (5u << 20) /* bytes of the page: a larger drawing is left out */

/* ------------------------------------------------------------------------------------------ */
/* torch, seen from C                                                                          */

int
tgc_torch_resolve(tgc_state *st)
{
    if (st->tensor_type != NULL) {
        return 1;
    }
    PyObject *name = PyUnicode_FromString("torch._C");
    PyObject *C = name ? PyImport_GetModule(name) : NULL;  /* new reference, NULL if absent */
    Py_XDECREF(name);
    if (C == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *tb = PyObject_GetAttrString(C, "TensorBase");
    if (tb == NULL) {
        PyErr_Clear();
        tb = PyObject_GetAttrString(C, "_TensorBase");  /* torch < 2.2 */
    }
    if (tb == NULL || !PyType_Check(tb)) {
        PyErr_Clear();
        Py_XDECREF(tb);
        Py_DECREF(C);
        return 0;  /* torch._C is still initialising */
    }
    /* Attributes of the C base class: getset descriptors and method descriptors, called
     * directly so that a subclass's Python properties never run. */
    PyObject *shape = PyObject_GetAttrString(tb, "shape");
    PyObject *dtype = PyObject_GetAttrString(tb, "dtype");
    PyObject *device = PyObject_GetAttrString(tb, "device");
    PyObject *storage = PyObject_GetAttrString(tb, "untyped_storage");
    PyObject *sparse = PyObject_GetAttrString(tb, "is_sparse");
    if (!shape || !dtype || !device || !storage || !sparse ||
        !Py_TYPE(shape)->tp_descr_get || !Py_TYPE(dtype)->tp_descr_get ||
        !Py_TYPE(device)->tp_descr_get || !Py_TYPE(sparse)->tp_descr_get) {
        PyErr_Clear();
        Py_XDECREF(shape); Py_XDECREF(dtype); Py_XDECREF(device); Py_XDECREF(storage);
        Py_XDECREF(sparse); Py_DECREF(tb); Py_DECREF(C);
        return 0;
    }
    PyObject *nosub = PyObject_GetAttrString(C, "DisableTorchFunctionSubclass");
    if (nosub == NULL) {
        PyErr_Clear();  /* older torch: subclasses with __torch_function__ may dispatch */
    }
    st->torch_disabled_tf = PyObject_GetAttrString(C, "_disabled_torch_function_impl");
    PyErr_Clear();
    st->torch_strs = PyDict_New();
    Py_DECREF(C);
    if (st->torch_strs == NULL) {
        PyErr_Clear();
    }
    /* What layout.c reads, each optional: a torch without one measures a little less. */
    static const char *const attr_names[TGC_TA_COUNT] = TGC_TA_NAMES;
    for (int i = 0; i < TGC_TA_COUNT; i++) {
        PyObject *a = PyObject_GetAttrString(tb, attr_names[i]);  /* new reference or NULL */
        if (a != NULL && i < TGC_TA_GETTERS && Py_TYPE(a)->tp_descr_get == NULL) {
            Py_CLEAR(a);
        }
        PyErr_Clear();
        Py_XSETREF(st->torch_attr[i], a);
    }
    st->tensor_type = tb;
    st->torch_get_shape = shape;
    st->torch_get_dtype = dtype;
    st->torch_get_device = device;
    st->torch_untyped_storage = storage;
    st->torch_is_sparse_getter = sparse;
    st->torch_no_subclass_dispatch = nosub;
    return 1;
}

int
tgc_is_tensor(tgc_state *st, PyObject *obj)
{
    return st->tensor_type != NULL && PyObject_TypeCheck(obj, (PyTypeObject *)st->tensor_type);
}

/* Whether reading this tensor type's properties could run a Python __torch_function__. */
static int
report__may_dispatch(tgc_state *st, PyTypeObject *tp)
{
    if ((PyObject *)tp == st->tensor_type) {
        return 0;
    }
    if (st->torch_tensor_cls == NULL) {
        /* torch.Tensor, looked up once torch has finished importing */
        PyObject *torch = PyImport_GetModule(st->str_torch);  /* new reference or NULL */
        PyObject *cls = torch ? PyObject_GetAttrString(torch, "Tensor") : NULL;
        if (cls != NULL && PyType_Check(cls)) {
            st->torch_tensor_cls = Py_NewRef(cls);
        }
        Py_XDECREF(cls);
        Py_XDECREF(torch);
        PyErr_Clear();
    }
    if ((PyObject *)tp == st->torch_tensor_cls) {
        /* torch only dispatches .shape & co. of exact torch.Tensor to a TorchFunctionMode, which
         * DisableTorchFunctionSubclass does not stop either: nothing to guard against */
        return 0;
    }
    PyObject *tf = PyObject_GetAttrString((PyObject *)tp, "__torch_function__");
    PyObject *fn = tf && PyMethod_Check(tf) ? PyMethod_GET_FUNCTION(tf) : tf;
    int disabled = fn != NULL && fn == st->torch_disabled_tf;
    Py_XDECREF(tf);
    PyErr_Clear();
    return !disabled;
}

/* A device's type and index from its str(): torch writes str(device) as the type's name, then
 * ":index" when it has one, and .type is that same name. Reading the cached str saves the
 * .type getter, which builds its str through a C++ stream on every call. Returns 0 when the
 * str has another form (the caller then asks the device). */
static int
report__parse_device(PyObject *device_s, char *type, size_t type_len, int *index)
{
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(device_s, &n);
    if (s == NULL) {
        PyErr_Clear();
        return 0;
    }
    const char *colon = memchr(s, ':', (size_t)n);
    size_t name = colon ? (size_t)(colon - s) : (size_t)n;
    if (name == 0 || name >= type_len) {
        return 0;
    }
    int idx = -1;
    if (colon != NULL) {
        const char *d = colon + 1, *end = s + n;
        if (d == end || end - d > 6 || (d[0] == '0' && end - d > 1)) {
            return 0;
        }
        for (idx = 0; d < end; d++) {
            if (*d < '0' || *d > '9') {
                return 0;
            }
            idx = idx * 10 + (*d - '0');
        }
    }
    memcpy(type, s, name);
    type[name] = '\0';
    *index = idx;
    return 1;
}

static PyObject *
report__get(PyObject *descr, PyObject *obj)
{
    return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)Py_TYPE(obj));
}

/* What a report needs of one tensor, in C form plus the dict that .tensors exposes. */
typedef struct {
    PyObject *info;        /* new reference: the dict of CycleReport.tensors */
    /* New reference: what the report's total counts once. One storage: its key (report__key);
     * several (multi): a tuple of (key or None, nbytes) pairs, None for bytes with no address. */
    PyObject *storage_key;
    /* New references to the values of info the text is made of, so that writing a tensor's line
     * looks nothing up; NULL exactly when info is. */
    PyObject *shape, *dtype_s, *device_s, *type_name;
    PyObject *stack;       /* new reference to info's "stack" when it is a str, else NULL */
    tgc_buf line;          /* "Tensor float32[4] on cpu (16 B)": made on first use (report__line) */
    char dev_type[32];
    int dev_index;
    unsigned long long nbytes;
    const char *none;      /* why it holds no bytes ("meta", layout.c), NULL when it holds some */
    int is_cuda;
    int multi;
} report_tensor;

/* A storage's key for the report's total (new reference): (device str, address), or for bytes
 * with no address (an mkldnn tensor's) (device str, 0, id of the tensor), which nothing shares.
 * device_s borrowed, may be NULL (None in the key). */
static PyObject *
report__key(PyObject *device_s, unsigned long long ptr, unsigned long long nbytes, PyObject *t)
{
    PyObject *dev = device_s ? device_s : Py_None;
    PyObject *p = PyLong_FromUnsignedLongLong(ptr);  /* new reference */
    PyObject *key = NULL;
    if (p != NULL && (ptr != 0 || nbytes == 0)) {
        key = PyTuple_Pack(2, dev, p);
    }
    else if (p != NULL) {
        PyObject *id = PyLong_FromVoidPtr(t);
        key = id ? PyTuple_Pack(3, dev, p, id) : NULL;
        Py_XDECREF(id);
    }
    Py_XDECREF(p);
    return key;
}

/* The keys of a tensor of several parts: ((key or None, nbytes), ...), new reference. */
static PyObject *
report__part_keys(const tgc_bytes *bytes)
{
    PyObject *keys = PyTuple_New(bytes->nparts);
    for (int i = 0; keys != NULL && i < bytes->nparts; i++) {
        const tgc_part *p = &bytes->parts[i];
        PyObject *key = p->ptr ? report__key(p->device_s, p->ptr, p->nbytes, NULL)
                               : Py_NewRef(Py_None);
        PyObject *nb = key ? PyLong_FromUnsignedLongLong(p->nbytes) : NULL;
        PyObject *pair = nb ? PyTuple_Pack(2, key, nb) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(nb);
        if (pair == NULL) {
            Py_CLEAR(keys);
            break;
        }
        PyTuple_SET_ITEM(keys, i, pair);  /* steals pair */
    }
    return keys;
}

/* A new dict of n entries keys[i] -> vals[i] (the keys borrowed, interned; the values new
 * references, stolen, NULL where making one failed); NULL with an exception set. Py_BuildValue
 * would make every key string again for every tensor and group. */
static PyObject *
report__dict(PyObject *const *keys, PyObject **vals, int n)
{
    PyObject *d = NULL;
    for (int i = 0; i < n; i++) {
        if (vals[i] == NULL) {
            goto done;
        }
    }
    d = tgc_compat_dict_presized(n);
    for (int i = 0; d != NULL && i < n; i++) {
        if (PyDict_SetItem(d, keys[i], vals[i]) < 0) {
            Py_CLEAR(d);
        }
    }
done:
    for (int i = 0; i < n; i++) {
        Py_XDECREF(vals[i]);
    }
    return d;
}

/* Reads tensor t of the garbage owned by the list objs into out. 0, or -1 with an exception. */
static int
report__tensor(tgc_state *st, PyObject *t, PyObject *objs, report_tensor *out)
{
    PyObject *shape = NULL, *dtype = NULL, *dtype_s = NULL, *device = NULL;
    PyObject *device_s = NULL, *dev_type = NULL, *dev_index = NULL, *type_name = NULL;
    tgc_bytes bytes;
    int measured = 0;
    memset(out, 0, sizeof(*out));

    shape = tgc_tensor_shape(st, t);
    dtype = shape ? report__get(st->torch_get_dtype, t) : NULL;
    dtype_s = dtype ? tgc_torch_str(st, dtype) : NULL;
    type_name = dtype_s ? tgc_type_name(t) : NULL;
    if (type_name == NULL) {
        goto error;
    }
    /* A wrapper subclass may answer .device through a __torch_dispatch__ that raises: its device
     * is then its first inner tensor's, once measured. */
    device = report__get(st->torch_get_device, t);
    device_s = device ? tgc_torch_str(st, device) : NULL;
    if (device_s == NULL) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
            goto error;
        }
        PyErr_Clear();
    }
    else if (!report__parse_device(device_s, out->dev_type, sizeof(out->dev_type),
                                   &out->dev_index)) {
        dev_type = PyObject_GetAttr(device, st->str_type);  /* interned names: no str made */
        dev_index = dev_type ? PyObject_GetAttr(device, st->str_index) : NULL;
        const char *dt = dev_index ? PyUnicode_AsUTF8(dev_type) : NULL;
        if (dt == NULL) {
            goto error;
        }
        snprintf(out->dev_type, sizeof(out->dev_type), "%s", dt);
        out->dev_index = dev_index == Py_None ? -1 : (int)PyLong_AsLong(dev_index);
    }
    tgc_bytes_measure(st, t, device_s ? out->dev_type : NULL, device_s, 0, objs, &bytes);
    measured = 1;
    if (device_s == NULL) {
        device_s = bytes.nparts > 0 && bytes.parts[0].device_s
                       ? Py_NewRef(bytes.parts[0].device_s) : PyUnicode_FromString("unknown");
        if (device_s == NULL) {
            goto error;
        }
        if (!report__parse_device(device_s, out->dev_type, sizeof(out->dev_type),
                                  &out->dev_index)) {
            snprintf(out->dev_type, sizeof(out->dev_type), "unknown");
            out->dev_index = -1;
        }
    }
    if (PyUnicode_Check(dtype_s) && PyUnicode_GET_LENGTH(dtype_s) > 6 &&
        PyUnicode_READ_CHAR(dtype_s, 5) == '.') {
        Py_SETREF(dtype_s, PyUnicode_Substring(dtype_s, 6, PyUnicode_GET_LENGTH(dtype_s)));
        if (dtype_s == NULL) {
            goto error;
        }
    }
    out->is_cuda = strcmp(out->dev_type, "cuda") == 0;
    out->nbytes = bytes.nbytes;
    out->none = bytes.none;
    if (bytes.nparts > 1) {
        out->multi = 1;
        out->storage_key = report__part_keys(&bytes);
    }
    else if (bytes.nparts == 1) {
        const tgc_part *p = &bytes.parts[0];
        out->storage_key = report__key(p->device_s ? p->device_s : device_s, p->ptr, p->nbytes, t);
    }
    else {
        out->storage_key = report__key(device_s, 0, 0, t);
    }
    if (out->storage_key == NULL) {
        goto error;
    }
    {
        PyObject *const keys[] = {st->keys[TGC_KEY_SHAPE], st->keys[TGC_KEY_DTYPE],
                                  st->keys[TGC_KEY_DEVICE], st->keys[TGC_KEY_NBYTES],
                                  st->keys[TGC_KEY_DATA_PTR], st->keys[TGC_KEY_STACK],
                                  st->keys[TGC_KEY_TYPE], st->keys[TGC_KEY_STORAGE]};
        PyObject *vals[] = {Py_NewRef(shape), Py_NewRef(dtype_s), Py_NewRef(device_s),
                            PyLong_FromUnsignedLongLong(bytes.nbytes),
                            PyLong_FromUnsignedLongLong(bytes.ptr), Py_NewRef(Py_None),
                            Py_NewRef(type_name), Py_NewRef(bytes.how)};
        out->info = report__dict(keys, vals, 8);
    }
    if (out->info == NULL) {
        goto error;
    }
    out->shape = shape;  /* the references move to out */
    out->dtype_s = dtype_s;
    out->device_s = device_s;
    out->type_name = type_name;
    Py_DECREF(dtype); Py_XDECREF(device); Py_XDECREF(dev_type); Py_XDECREF(dev_index);
    tgc_bytes_clear(&bytes);
    return 0;
error:
    Py_XDECREF(shape); Py_XDECREF(dtype); Py_XDECREF(dtype_s); Py_XDECREF(device);
    Py_XDECREF(device_s); Py_XDECREF(dev_type); Py_XDECREF(dev_index); Py_XDECREF(type_name);
    if (measured) {
        tgc_bytes_clear(&bytes);
    }
    Py_CLEAR(out->info);
    Py_CLEAR(out->storage_key);
    return -1;
}

/* Drops what report__tensor made (the struct stays usable: info NULL, no line). */
static void
report__tensor_clear(report_tensor *rt)
{
    Py_CLEAR(rt->info);
    Py_CLEAR(rt->storage_key);
    Py_CLEAR(rt->shape);
    Py_CLEAR(rt->dtype_s);
    Py_CLEAR(rt->device_s);
    Py_CLEAR(rt->type_name);
    Py_CLEAR(rt->stack);
    tgc_buf_free(&rt->line);
}

/* 1 when the tensor passes the observer's device filter, 0 when not, -1 with an exception. */
static int
report__wanted(const tgc_filter *f, PyObject *t, const report_tensor *rt)
{
    switch (f->kind) {
    case TGC_DEV_ANY:
        return 1;
    case TGC_DEV_TYPE:
        return strcmp(rt->dev_type, f->type) == 0 && (f->index < 0 || f->index == rt->dev_index);
    default: {
        PyObject *r = PyObject_CallOneArg(f->predicate, t);
        int ok = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        return ok;
    }
    }
}

/* Allocation stacks from torch's CUDA memory history, when it is recording. For each CUDA tensor,
 * the active block that contains its storage gives the frames. */
static void
report__stacks(report_tensor *ts, Py_ssize_t n)
{
    int any_cuda = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        any_cuda |= ts[i].info != NULL && ts[i].is_cuda;
    }
    if (!any_cuda) {
        return;
    }
    PyObject *snap = NULL, *segments = NULL;
    PyObject *C = PyImport_ImportModule("torch._C");
    PyObject *on = C ? PyObject_CallMethod(C, "_cuda_isHistoryEnabled", NULL) : NULL;
    if (on == NULL || PyObject_IsTrue(on) != 1) {
        goto done;
    }
    PyObject *mem = PyImport_ImportModule("torch.cuda.memory");
    snap = mem ? PyObject_CallMethod(mem, "_snapshot", NULL) : NULL;
    Py_XDECREF(mem);
    segments = snap && PyDict_Check(snap) ? PyDict_GetItemString(snap, "segments") : NULL;
    if (segments == NULL || !PyList_Check(segments)) {
        goto done;
    }
    for (Py_ssize_t s = 0; s < PyList_GET_SIZE(segments); s++) {
        PyObject *seg = PyList_GET_ITEM(segments, s);
        PyObject *addr_o = PyDict_Check(seg) ? PyDict_GetItemString(seg, "address") : NULL;
        PyObject *blocks = PyDict_Check(seg) ? PyDict_GetItemString(seg, "blocks") : NULL;
        if (addr_o == NULL || blocks == NULL || !PyList_Check(blocks)) {
            continue;
        }
        unsigned long long addr = PyLong_AsUnsignedLongLong(addr_o);
        for (Py_ssize_t b = 0; b < PyList_GET_SIZE(blocks) && !PyErr_Occurred(); b++) {
            PyObject *blk = PyList_GET_ITEM(blocks, b);
            PyObject *size_o = PyDict_Check(blk) ? PyDict_GetItemString(blk, "size") : NULL;
            if (size_o == NULL) {
                break;
            }
            unsigned long long size = PyLong_AsUnsignedLongLong(size_o);
            PyObject *frames = PyDict_GetItemString(blk, "frames");
            for (Py_ssize_t i = 0; frames && PyList_Check(frames) && i < n; i++) {
                if (ts[i].info == NULL || !ts[i].is_cuda) {
                    continue;
                }
                PyObject *dp = PyDict_GetItemString(ts[i].info, "data_ptr");
                unsigned long long p = dp ? PyLong_AsUnsignedLongLong(dp) : 0;
                if (p < addr || p >= addr + size || PyList_GET_SIZE(frames) == 0) {
                    continue;
                }
                tgc_buf sb = {0};
                for (Py_ssize_t k = 0; k < PyList_GET_SIZE(frames); k++) {
                    PyObject *fr = PyList_GET_ITEM(frames, k);
                    PyObject *fn = PyDict_Check(fr) ? PyDict_GetItemString(fr, "filename") : NULL;
                    PyObject *ln = PyDict_Check(fr) ? PyDict_GetItemString(fr, "line") : NULL;
                    PyObject *nm = PyDict_Check(fr) ? PyDict_GetItemString(fr, "name") : NULL;
                    if (!fn || !ln || !nm || !PyUnicode_Check(fn) || !PyUnicode_Check(nm)) {
                        continue;
                    }
                    const char *f = PyUnicode_AsUTF8(fn);
                    /* Skip C++ frames and torch's own Python: the user wants their line. */
                    if (f == NULL || f[0] == '?' || strstr(f, ".cpp") || strstr(f, ".h") ||
                        strstr(f, "/torch/") || f[0] == '\0') {
                        PyErr_Clear();
                        continue;
                    }
                    const char *func = PyUnicode_AsUTF8(nm);
                    /* file and function names cut (%.*s): they are the user's strings too */
                    tgc_buf_printf(&sb, "%.200s:%ld %.120s\n", f, PyLong_AsLong(ln), func ? func : "?");
                    PyErr_Clear();
                }
                if (sb.len > 0 && !sb.oom) {
                    PyObject *st = PyUnicode_DecodeUTF8(sb.data, (Py_ssize_t)sb.len - 1, "replace");
                    if (st != NULL) {
                        PyDict_SetItemString(ts[i].info, "stack", st);
                        Py_XSETREF(ts[i].stack, st);  /* the reference moves */
                    }
                }
                tgc_buf_free(&sb);
            }
            addr += size;
        }
    }
done:
    PyErr_Clear();  /* stacks are a bonus: a torch without this API still gets its report */
    Py_XDECREF(C);
    Py_XDECREF(on);
    Py_XDECREF(snap);
}

/* ------------------------------------------------------------------------------------------ */
/* The reference graph of the garbage                                                          */

/* Groups of identical leaks share a signature: node types, edge type pairs and tensor
 * shapes/dtypes, summed with two independent mixes so the order of discovery does not matter. */
typedef struct {
    uint32_t group;
    uint32_t nodes, edges, targets;
    uint64_t h1, h2;
    unsigned long long nbytes;
    uint32_t count;        /* on the representative: how many groups share the signature */
    unsigned long long total_bytes;
    uint32_t total_targets;
    int drawn;
} group_info;

static uint64_t
mix1(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ULL;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dULL;
    return x ^ (x >> 33);
}

static uint64_t
mix2(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int
group_cmp_sig(const void *a, const void *b)
{
    const group_info *x = a, *y = b;
#define CMP(f) if (x->f != y->f) return x->f < y->f ? -1 : 1
    CMP(nodes); CMP(edges); CMP(targets); CMP(h1); CMP(h2); CMP(group);
#undef CMP
    return 0;
}

static int
group_cmp_bytes(const void *a, const void *b)
{
    const group_info *x = a, *y = b;
    if (x->total_bytes != y->total_bytes) {
        return x->total_bytes > y->total_bytes ? -1 : 1;
    }
    return x->group < y->group ? -1 : x->group > y->group;
}

/* An emitted (drawn, folded) edge. */
typedef struct {
    uint32_t src, dst;
    PyObject *label;   /* borrowed from the names tables, or the shared "?" */
} drawn_edge;

typedef struct {
    tgc_state *st;
    PyObject *objs;                  /* borrowed: the list that owns the garbage */
    PyObject **items;
    uint32_t n;
    tgc_graph g;
    tgc_analysis a;
    uint8_t *is_target;
    report_tensor *ts;               /* per node; .info NULL for non-targets */
    uint8_t *draw;                   /* per node: drawn */
    uint32_t *owner;                 /* per node: TGC_NONE, or the node it is folded into */
    tgc_names *names;                /* per node, only for drawn nodes (else zeroed) */
    PyObject **tname;                /* per node: new reference to its short type name, made on
                                        first use (builder__tname), so drawn nodes only */
    PyObject **desc;                 /* per drawn node: new reference to tgc_describe's text, made
                                        at build: it may run a user __repr__, which must not run
                                        while the DOT is drawn, and shows the object as it was
                                        when the collector found it */
    drawn_edge *edges;
    size_t nedges, cap_edges;
    size_t edges_dropped;            /* references between drawn nodes over TGC_DRAW_EDGES */
    size_t ndrawn;                   /* object nodes drawn (not folded into an owner) */
    uint8_t *skip;                   /* per node: 1 class internals set aside, 2 in a shortened
                                        chain (both not drawn, and not linked to "more") */
    tgc_bridge *bridges;             /* shortened chains whose ends are drawn */
    size_t nbridges;
    PyObject *unknown;               /* "?" */
    tgc_ptrmap map;                  /* object address -> node */
    group_info *groups;              /* by signature; representatives carry counts */
    uint32_t ngroups;
} builder;

/* Node v's short type name (tgc_type_name), made once per node: the node label, the edges list,
 * the cycle and the hint all spell it. Borrowed, or NULL with an exception. */
static PyObject *
builder__tname(builder *b, uint32_t v)
{
    if (b->tname[v] == NULL) {
        b->tname[v] = tgc_type_name(b->items[v]);
    }
    return b->tname[v];
}

static int
builder__emit(builder *b, uint32_t s, uint32_t d, PyObject *label)
{
    if (b->nedges == b->cap_edges) {
        size_t cap = b->cap_edges ? b->cap_edges * 2 : 256;
        drawn_edge *p = PyMem_Realloc(b->edges, cap * sizeof(drawn_edge));
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->edges = p;
        b->cap_edges = cap;
    }
    b->edges[b->nedges].src = s;
    b->edges[b->nedges].dst = d;
    b->edges[b->nedges].label = label;
    b->nedges++;
    return 0;
}

/* Decides which drawn containers are folded into their owner: the owner named it as its own
 * (instance dict, closure tuple and cells, frame locals) and nothing else drawn points at it. */
static void
builder__fold(builder *b)
{
    for (uint32_t x = 0; x < b->n; x++) {
        if (!b->draw[x]) {
            continue;
        }
        tgc_names *ns = &b->names[x];
        for (int k = 0; k < ns->nfolds; k++) {
            PyObject *c_obj = ns->folds[k];
            uint32_t c = tgc_ptrmap_get(&b->map, c_obj);
            if (c == UINT32_MAX || c == x || !b->draw[c] || b->owner[c] != TGC_NONE) {
                continue;
            }
            int only_owner = 1;
            for (uint32_t e = b->g.in_off[c]; e < b->g.in_off[c + 1]; e++) {
                uint32_t r = b->g.in_src[e];
                if (!b->draw[r] || r == x) {
                    continue;
                }
                int is_fold = 0;
                for (int j = 0; j < ns->nfolds; j++) {
                    is_fold |= ns->folds[j] == b->items[r];
                }
                if (!is_fold) {
                    only_owner = 0;
                    break;
                }
            }
            if (only_owner) {
                b->owner[c] = x;
            }
        }
    }
}

/* Whether out-edge e (s -> d) is one the picture shows: both ends drawn, d not folded into its
 * owner. */
static inline int
builder__drawable(const builder *b, uint32_t s, uint32_t d)
{
    return b->draw[s] && b->draw[d] && b->owner[d] == TGC_NONE;
}

/* The references drawn. Graphviz's time grows fast with edges per node (a mesh of 61 nodes and
 * 450 edges took 4.7 s, with 180 edges 0.16 s), so at most 2.5 per drawn node (between 60 and
 * TGC_DRAW_EDGES) are drawn. Over that cap they are chosen: the references to tensors first,
 * then one reference into each drawn object (so none floats alone), then the rest in order;
 * the others are counted (edges_dropped). */
static int
builder__emit_all(builder *b)
{
    size_t nodes = 0, total = 0;
    for (uint32_t v = 0; v < b->n; v++) {
        nodes += b->draw[v] && b->owner[v] == TGC_NONE;
    }
    size_t cap = nodes * 5 / 2;
    cap = cap < 60 ? 60 : cap > TGC_DRAW_EDGES ? TGC_DRAW_EDGES : cap;
    for (uint32_t s = 0; s < b->n; s++) {
        for (uint32_t e = b->g.out_off[s]; e < b->g.out_off[s + 1]; e++) {
            total += builder__drawable(b, s, b->g.out_dst[e]);
        }
    }
    uint8_t *chosen = NULL;
    if (total > cap) {
        chosen = calloc(b->g.m ? b->g.m : 1, 1);
        uint8_t *has_in = calloc(b->n, 1);
        if (chosen == NULL || has_in == NULL) {
            free(chosen);
            free(has_in);
            PyErr_NoMemory();
            return -1;
        }
        size_t k = 0;
        for (int pass = 0; pass < 3 && k < cap; pass++) {
            for (uint32_t s = 0; s < b->n && k < cap; s++) {
                for (uint32_t e = b->g.out_off[s]; e < b->g.out_off[s + 1] && k < cap; e++) {
                    uint32_t d = b->g.out_dst[e];
                    if (chosen[e] || !builder__drawable(b, s, d) ||
                        (pass == 0 && !b->is_target[d]) || (pass == 1 && has_in[d])) {
                        continue;
                    }
                    chosen[e] = 1;
                    has_in[d] = 1;
                    k++;
                }
            }
        }
        free(has_in);
        b->edges_dropped = total - k;
    }
    for (uint32_t s = 0; s < b->n; s++) {
        if (!b->draw[s]) {
            continue;
        }
        uint32_t own = b->owner[s] != TGC_NONE ? b->owner[s] : s;
        PyObject *via = own != s ? b->items[s] : NULL;
        for (uint32_t e = b->g.out_off[s]; e < b->g.out_off[s + 1]; e++) {
            uint32_t d = b->g.out_dst[e];
            if (!builder__drawable(b, s, d)) {
                continue;  /* not drawn, or drawn as part of its owner */
            }
            PyObject *label = tgc_names_take(&b->names[own], b->items[d], via);
            if (label == NULL && via != NULL) {
                label = tgc_names_take(&b->names[s], b->items[d], NULL);
            }
            if (chosen != NULL && !chosen[e]) {
                continue;  /* its label is taken all the same: parallel edges keep theirs */
            }
            if (label == NULL) {
                label = b->unknown;
            }
            if (builder__emit(b, own, d, label) < 0) {
                free(chosen);
                return -1;
            }
        }
    }
    free(chosen);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Text: labels, a cycle per group, the fix hint                                               */

/* A shape as the text shows it: str() of the tuple in brackets, (3, 4) -> [3, 4], (4,) -> [4],
 * () -> []. Plain int dimensions, the usual case, are written directly; anything else (None for
 * a ragged dimension, a huge int) goes through str(), which gives the same for plain ints. */
static void
buf_shape(tgc_buf *o, PyObject *shape)
{
    if (!PyTuple_Check(shape)) {
        tgc_buf_puts(o, "[?]");  /* not even the number of dimensions could be read */
        return;
    }
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    int plain = 1;
    for (Py_ssize_t i = 0; i < nd && plain; i++) {
        PyObject *d = PyTuple_GET_ITEM(shape, i);
        int overflow = 0;
        plain = PyLong_CheckExact(d) && (PyLong_AsLongLongAndOverflow(d, &overflow), !overflow);
    }
    if (plain) {
        tgc_buf_puts(o, "[");
        for (Py_ssize_t i = 0; i < nd; i++) {
            if (i > 0) {
                tgc_buf_puts(o, ", ");
            }
            tgc_buf_int(o, PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i)));
        }
        tgc_buf_puts(o, "]");
        return;
    }
    PyObject *s = PyObject_Str(shape);
    if (s != NULL) {
        Py_ssize_t n;
        const char *u = PyUnicode_AsUTF8AndSize(s, &n);
        if (u != NULL && n >= 2) {
            tgc_buf_puts(o, "[");
            tgc_buf_add(o, u + 1, (size_t)(n - 2 - (n >= 3 && u[n - 2] == ',')));
            tgc_buf_puts(o, "]");
        }
        Py_DECREF(s);
    }
    PyErr_Clear();
}

/* The tensor's line, "Tensor float32[4] on cpu (16 B)", for the node label and the text alike:
 * made once, kept in rt->line. Borrowed; rt->info must be set. */
static const tgc_buf *
report__line(report_tensor *rt)
{
    tgc_buf *o = &rt->line;
    if (o->len > 0 || o->oom) {
        return o;
    }
    tgc_buf_pystr(o, rt->type_name, 0);
    tgc_buf_puts(o, " ");
    tgc_buf_pystr(o, rt->dtype_s, 0);
    buf_shape(o, rt->shape);
    tgc_buf_puts(o, " on ");
    tgc_buf_pystr(o, rt->device_s, 0);
    if (rt->none != NULL) {
        tgc_buf_printf(o, " (no storage: %s)", rt->none);
    }
    else {
        tgc_buf_puts(o, " (");
        tgc_buf_bytes(o, rt->nbytes);
        tgc_buf_puts(o, ")");
    }
    PyErr_Clear();
    return o;
}

/* "Node.other" or "<lambda> closure self": how an edge reads in prose. */
static void
buf_edge_name(tgc_buf *o, builder *b, const drawn_edge *e)
{
    PyObject *tn = builder__tname(b, e->src);
    if (tn != NULL) {
        tgc_buf_pystr(o, tn, 0);
    }
    PyErr_Clear();
    Py_ssize_t n;
    const char *l = PyUnicode_AsUTF8AndSize(e->label, &n);
    if (l == NULL) {
        PyErr_Clear();
        return;
    }
    if (l[0] != '.' && l[0] != '[') {
        tgc_buf_puts(o, " ");
    }
    tgc_buf_add(o, l, (size_t)n);
}

/* The shortest cycle, in drawn edges, through a cycle node of group `grp`. Writes edge indices
 * into path (at most cap), returns the length, 0 when none (the cycle is not fully drawn). */
static size_t
builder__cycle(builder *b, uint32_t grp, size_t *path, size_t cap)
{
    size_t *via_edge = PyMem_Malloc((b->n ? b->n : 1) * sizeof(size_t));
    uint32_t *queue = PyMem_Malloc((b->n ? b->n : 1) * sizeof(uint32_t));
    size_t len = 0;
    if (via_edge == NULL || queue == NULL) {
        goto done;
    }
    int tries = 0;
    for (uint32_t s = 0; s < b->n && len == 0 && tries < 8; s++) {
        if (!b->draw[s] || b->owner[s] != TGC_NONE || b->a.group[s] != grp ||
            !(b->a.role[s] & TGC_ROLE_CYCLE)) {
            continue;
        }
        tries++;
        for (uint32_t v = 0; v < b->n; v++) {
            via_edge[v] = SIZE_MAX;
        }
        uint32_t head = 0, tail = 0;
        queue[tail++] = s;
        size_t closing = SIZE_MAX;
        while (head < tail && closing == SIZE_MAX) {
            uint32_t v = queue[head++];
            for (size_t e = 0; e < b->nedges; e++) {
                if (b->edges[e].src != v) {
                    continue;
                }
                uint32_t w = b->edges[e].dst;
                if (w == s) {
                    closing = e;
                    break;
                }
                if (via_edge[w] == SIZE_MAX) {
                    via_edge[w] = e;
                    queue[tail++] = w;
                }
            }
        }
        if (closing == SIZE_MAX) {
            continue;
        }
        /* walk back from the closing edge to s */
        size_t rev[64];
        size_t k = 0;
        rev[k++] = closing;
        uint32_t v = b->edges[closing].src;
        while (v != s && k < 64) {
            rev[k++] = via_edge[v];
            v = b->edges[via_edge[v]].src;
        }
        for (size_t i = 0; i < k && i < cap; i++) {
            path[i] = rev[k - 1 - i];
        }
        len = k < cap ? k : cap;
    }
done:
    PyMem_Free(via_edge);
    PyMem_Free(queue);
    return len;
}

static int
label_is(PyObject *label, const char *prefix)
{
    const char *l = PyUnicode_AsUTF8(label);
    if (l == NULL) {
        PyErr_Clear();
        return 0;
    }
    return strncmp(l, prefix, strlen(prefix)) == 0;
}

/* Picks the reference most likely meant to be weak or cleared, and says how. */
static void
builder__hint(builder *b, const size_t *path, size_t len, tgc_buf *cyc, tgc_buf *hint)
{
    if (len == 0) {
        tgc_buf_puts(hint, "the cycle is too large to draw whole; look for an attribute that "
                           "points back to an owner and make it a weakref.ref");
        return;
    }
    PyObject *t0 = builder__tname(b, b->edges[path[0]].src);
    if (t0 != NULL) {
        tgc_buf_pystr(cyc, t0, 0);
    }
    for (size_t i = 0; i < len; i++) {
        const drawn_edge *e = &b->edges[path[i]];
        PyObject *tn = builder__tname(b, e->dst);
        tgc_buf_puts(cyc, " -");
        tgc_buf_pystr(cyc, e->label, 0);
        tgc_buf_puts(cyc, "-> ");
        if (tn != NULL) {
            tgc_buf_pystr(cyc, tn, 0);
        }
    }
    PyErr_Clear();
    const drawn_edge *pick = NULL;
    /* 1. a self-reference */
    for (size_t i = 0; i < len && !pick; i++) {
        if (b->edges[path[i]].src == b->edges[path[i]].dst) {
            pick = &b->edges[path[i]];
            buf_edge_name(hint, b, pick);
            tgc_buf_puts(hint, " refers to the object itself: drop that reference (del it or set "
                               "it to None) once done, or hold a weakref.ref instead");
            return;
        }
    }
    /* 2. a suspended generator or coroutine whose frame holds the object that keeps it: its
     *    finalizer (close()) would break the cycle, but only once the collector runs it */
    for (size_t i = 0; i < len; i++) {
        const drawn_edge *e = &b->edges[path[i]];
        PyObject *gen = b->items[e->src];
        if (tgc_is_generator(gen) && label_is(e->label, "local ")) {
            const drawn_edge *in = &b->edges[path[(i + len - 1) % len]];
            int agen = PyAsyncGen_CheckExact(gen);
            tgc_buf_puts(hint, PyCoro_CheckExact(gen) ? "the coroutine "
                               : agen ? "the async generator " : "the generator ");
            if (b->desc[e->src] != NULL) {
                tgc_buf_pystr(hint, b->desc[e->src], 0);
            }
            tgc_buf_puts(hint, ", stored at ");
            buf_edge_name(hint, b, in);
            tgc_buf_puts(hint, ", holds ");
            Py_ssize_t ln;
            const char *l = PyUnicode_AsUTF8AndSize(e->label, &ln);
            if (l != NULL && ln > 6) {
                tgc_buf_puts(hint, "'");
                tgc_buf_add(hint, l + 6, (size_t)(ln - 6));  /* after "local " */
                tgc_buf_puts(hint, "' ");
            }
            PyErr_Clear();
            tgc_buf_puts(hint, agen ? "in its suspended frame: await its aclose() when done "
                                      "(its finalizer breaks the cycle, but only once the "
                                      "collector runs), or do not keep it on that object"
                                    : "in its suspended frame: call its close() when done (its "
                                      "finalizer does, but only once the collector runs), or do "
                                      "not keep it on that object");
            return;
        }
    }
    /* 3. an exception's traceback kept alive: frames hold the locals that hold the owner */
    for (size_t i = 0; i < len; i++) {
        const drawn_edge *e = &b->edges[path[i]];
        if (label_is(e->label, "__traceback__") || label_is(e->label, "tb_frame") ||
            PyFrame_Check(b->items[e->src])) {
            const drawn_edge *in = &b->edges[path[(i + len - 1) % len]];
            buf_edge_name(hint, b, in);
            tgc_buf_puts(hint, " keeps an exception whose traceback holds the frames (and their "
                               "locals) that refer back to it: store the exception without its "
                               "traceback (exc.with_traceback(None)), or del it once handled");
            return;
        }
    }
    /* 4. a lambda or closure capturing its owner */
    for (size_t i = 0; i < len; i++) {
        const drawn_edge *e = &b->edges[path[i]];
        if (PyFunction_Check(b->items[e->src]) && label_is(e->label, "closure ")) {
            const drawn_edge *in = &b->edges[path[(i + len - 1) % len]];
            PyObject *q = ((PyFunctionObject *)b->items[e->src])->func_qualname;
            tgc_buf_puts(hint, "the closure ");
            if (q != NULL) {
                tgc_buf_pystr(hint, q, 0);
            }
            tgc_buf_puts(hint, " stored at ");
            buf_edge_name(hint, b, in);
            tgc_buf_puts(hint, " captures '");
            Py_ssize_t ln;
            const char *l = PyUnicode_AsUTF8AndSize(e->label, &ln);
            if (l != NULL && ln > 8) {
                tgc_buf_add(hint, l + 8, (size_t)(ln - 8));  /* after "closure " */
            }
            PyErr_Clear();
            tgc_buf_puts(hint, "': capture a weakref.ref(...) to it instead of the object, "
                               "or clear the stored callback when done");
            return;
        }
    }
    /* 5. a bound method stored on its own instance */
    for (size_t i = 0; i < len; i++) {
        const drawn_edge *e = &b->edges[path[i]];
        if (PyMethod_Check(b->items[e->src]) && label_is(e->label, "__self__")) {
            const drawn_edge *in = &b->edges[path[(i + len - 1) % len]];
            tgc_buf_puts(hint, "the bound method stored at ");
            buf_edge_name(hint, b, in);
            tgc_buf_puts(hint, " holds its __self__: store weakref.WeakMethod(obj.method) "
                               "instead, or clear it when done");
            return;
        }
    }
    /* 6. otherwise the back-reference: an attribute (containers holding their items is normal)
     * pointing at an object whose next step in the cycle is a collection, i.e. an item that
     * points back at the owner of the collection it sits in. */
    int best = -1;
    for (size_t i = 0; i < len; i++) {
        const drawn_edge *e = &b->edges[path[i]];
        int score = label_is(e->label, ".") ? 2 : label_is(e->label, "[") ? 1 : 0;
        PyObject *next = b->items[b->edges[path[(i + 1) % len]].dst];
        if (score == 2 && (PyList_Check(next) || PyDict_Check(next) || PyAnySet_Check(next) ||
                           PyTuple_Check(next))) {
            score = 3;
        }
        if (score >= best) {
            best = score;
            pick = e;
        }
    }
    buf_edge_name(hint, b, pick);
    tgc_buf_puts(hint, " closes the cycle: make it a weakref.ref (back-references to an owner "
                       "usually are) or set it to None when done");
}

/* ------------------------------------------------------------------------------------------ */
/* DOT                                                                                         */

/* s escaped for DOT into o; a string that cannot be written (no memory) is left out, with no
 * exception left behind: drawing has no caller to report to (oom shows in the buffer). */
static void
dot_str(tgc_buf *o, PyObject *s)
{
    if (tgc_buf_pystr(o, s, 'd') < 0) {
        PyErr_Clear();
    }
}

static void
dot_node(tgc_buf *o, builder *b, uint32_t v)
{
    tgc_buf_puts(o, "  n");
    tgc_buf_uint(o, v);
    tgc_buf_puts(o, " [label=\"");
    if (b->ts[v].info != NULL) {
        const tgc_buf *line = report__line(&b->ts[v]);
        tgc_buf_dot(o, line->data ? line->data : "", line->len);
        tgc_buf_dot(o, "\n", 1);
        /* Borrowed. Not read from info: that is the dict report.tensors hands out, and the DOT
         * may be drawn after the user's callback has changed it. */
        PyObject *stack = b->ts[v].stack;
        if (stack != NULL) {
            /* the first lines on the node, all of it in the tooltip */
            Py_ssize_t n;
            const char *s = PyUnicode_AsUTF8AndSize(stack, &n);
            if (s == NULL) {
                PyErr_Clear();  /* no memory: the node goes without its stack */
            }
            int lines = 0;
            for (Py_ssize_t i = 0; s && i < n && lines < TGC_STACK_LINES; lines++) {
                const char *nl = memchr(s + i, '\n', (size_t)(n - i));
                Py_ssize_t end = nl ? nl - s : n;
                tgc_buf_dot(o, s + i, (size_t)(end - i));
                tgc_buf_dot(o, "\n", 1);
                i = end + 1;
            }
            tgc_buf_puts(o, "\", tooltip=\"");
            if (s != NULL) {
                tgc_buf_dot(o, s, (size_t)n);
            }
        }
        else if (b->ts[v].is_cuda) {
            static const char msg[] = "no allocation stack: call torch.cuda.memory."
                                      "_record_memory_history()\nbefore allocating to see it here\n";
            tgc_buf_dot(o, msg, sizeof(msg) - 1);
            tgc_buf_puts(o, "\", tooltip=\"allocation stacks need torch.cuda.memory."
                            "_record_memory_history()");
        }
        else {
            tgc_buf_puts(o, "(allocation stacks are recorded for CUDA tensors only)\\l\", "
                            "tooltip=\"allocation stacks come from "
                            "torch.cuda.memory._record_memory_history()");
        }
        tgc_buf_puts(o, "\", color=\"#c62828\", fillcolor=\"#ffcdd2\", fontcolor=\"#7f0000\", "
                        "penwidth=2];\n");
        return;
    }
    PyObject *tn = builder__tname(b, v);
    PyObject *desc = b->desc[v];  /* borrowed; NULL when describing failed */
    if (tn == NULL) {
        PyErr_Clear();
    }
    if (tn != NULL) {
        dot_str(o, tn);
    }
    tgc_buf_dot(o, "\n", 1);
    if (desc != NULL && PyUnicode_GET_LENGTH(desc) > 0) {
        dot_str(o, desc);
        tgc_buf_dot(o, "\n", 1);
    }
    tgc_buf_puts(o, "\", tooltip=\"");
    if (tn != NULL) {
        dot_str(o, tn);
    }
    if (desc != NULL && PyUnicode_GET_LENGTH(desc) > 0) {
        tgc_buf_puts(o, ": ");
        dot_str(o, desc);
    }
    tgc_buf_puts(o, "\"");
    if (b->a.role[v] & TGC_ROLE_CYCLE) {
        tgc_buf_puts(o, ", color=\"#1565c0\"");
    }
    tgc_buf_puts(o, "];\n");
    PyErr_Clear();
}

/* ------------------------------------------------------------------------------------------ */

/* Draws the report's DOT from its builder: the groups chosen for drawing as clusters (what did
 * not fit as one summary node each), then the drawn edges. Runs no Python code: the user reprs
 * it shows were taken at build (builder.desc). Its one tracked allocation (a large group's type
 * counts) cannot start a collection that would: a report waits to be drawn only while the hook
 * delivers it, inside the collector's callback. Leaves no exception set: a label it cannot write
 * is left out, and running out of memory shows in dot->oom. */
static void
report__draw_dot(builder *b, const uint32_t *elided, tgc_buf *dot)
{
    tgc_buf scratch = {0};  /* a cluster's title */
    tgc_buf_reserve(dot, 2000);
    tgc_buf_puts(dot, "digraph tensorgc {\n"
                      "  graph [rankdir=LR, fontname=\"Helvetica\", fontsize=11, nodesep=0.25, "
                      "ranksep=0.45, bgcolor=\"white\"];\n"
                      "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#f7f7f7\", "
                      "color=\"#607d8b\", fontname=\"Helvetica\", fontsize=10];\n"
                      "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#455a64\"];\n");
    for (uint32_t k = 0; k < b->ngroups; k++) {
        group_info *gi = &b->groups[k];
        if (!gi->drawn) {
            continue;
        }
        tgc_buf_puts(dot, "  subgraph cluster_");
        tgc_buf_uint(dot, k);
        tgc_buf_puts(dot, " {\n    label=\"");
        tgc_buf *title = &scratch;  /* written plain, then escaped into the label */
        tgc_buf_reset(title);
        tgc_buf_puts(title, "#");
        tgc_buf_uint(title, k + 1);
        tgc_buf_puts(title, ": ");
        if (gi->count > 1) {
            tgc_buf_count(title, gi->count);
            tgc_buf_puts(title, " identical leaks, one drawn; ");
        }
        tgc_buf_count(title, gi->nodes);
        tgc_buf_puts(title, gi->count > 1 ? " objects each, " : " objects, ");
        tgc_buf_bytes(title, gi->total_bytes);
        tgc_buf_puts(title, " held");
        tgc_buf_dot(dot, title->data ? title->data : "", title->len);
        tgc_buf_puts(dot, "\"; style=\"rounded,dashed\"; color=\"#90a4ae\"; fontcolor=\"#37474f\";\n");
        for (uint32_t v = 0; v < b->n; v++) {
            if (b->draw[v] && b->owner[v] == TGC_NONE && b->a.group[v] == gi->group) {
                tgc_buf_puts(dot, "  ");
                dot_node(dot, b, v);
            }
        }
        if (elided[k] > 0) {
            /* The rest of a large group, as one node with its type counts. */
            PyObject *counts = PyDict_New();
            for (uint32_t v = 0; counts && v < b->n; v++) {
                if (b->a.group[v] != gi->group || b->draw[v] || b->skip[v] == 2) {
                    continue;
                }
                PyObject *tn = tgc_type_name(b->items[v]);
                PyObject *c = tn ? PyDict_GetItemWithError(counts, tn) : NULL;
                PyObject *c1 = tn ? PyLong_FromLong(c ? PyLong_AsLong(c) + 1 : 1) : NULL;
                if (c1 == NULL || PyDict_SetItem(counts, tn, c1) < 0) {
                    Py_CLEAR(counts);
                }
                Py_XDECREF(tn);
                Py_XDECREF(c1);
            }
            tgc_buf more = {0};
            tgc_buf_puts(&more, "\xe2\x80\xa6 ");
            tgc_buf_count(&more, elided[k]);
            tgc_buf_puts(&more, " more objects in this leak\n");
            Py_ssize_t pos = 0;
            PyObject *key, *val;
            int shown = 0;
            while (counts && PyDict_Next(counts, &pos, &key, &val) && shown < 6) {
                if (tgc_buf_pystr(&more, key, 0) < 0) {
                    PyErr_Clear();
                }
                tgc_buf_puts(&more, " \xc3\x97");
                tgc_buf_count(&more, (uint64_t)PyLong_AsLong(val));
                tgc_buf_puts(&more, "\n");
                shown++;
            }
            Py_XDECREF(counts);
            PyErr_Clear();
            tgc_buf_puts(dot, "    more");
            tgc_buf_uint(dot, k);
            tgc_buf_puts(dot, " [label=\"");
            tgc_buf_dot(dot, more.data ? more.data : "", more.len);
            tgc_buf_puts(dot, "\", style=\"rounded,dashed\", fillcolor=\"white\"];\n");
            tgc_buf_free(&more);
        }
        tgc_buf_puts(dot, "  }\n");
        if (elided[k] > 0) {
            /* Dashed links from drawn objects to the ones left out for the budget (not to class
             * internals or shortened chains, which the "more" node counts): a few show where the
             * rest hangs off; hundreds only slow the layout. */
            int outs = 0, ins = 0;
            for (uint32_t v = 0; v < b->n && (outs < TGC_DRAW_STUBS || ins < TGC_DRAW_STUBS); v++) {
                if (!b->draw[v] || b->owner[v] != TGC_NONE || b->a.group[v] != gi->group) {
                    continue;
                }
                int out = 0, in = 0;
                for (uint32_t e = b->g.out_off[v]; e < b->g.out_off[v + 1]; e++) {
                    uint32_t w = b->g.out_dst[e];
                    out |= !b->draw[w] && !b->skip[w] && b->a.group[w] == gi->group;
                }
                for (uint32_t e = b->g.in_off[v]; e < b->g.in_off[v + 1]; e++) {
                    uint32_t w = b->g.in_src[e];
                    in |= !b->draw[w] && !b->skip[w] && b->a.group[w] == gi->group;
                }
                if (out && outs < TGC_DRAW_STUBS) {
                    outs++;
                    tgc_buf_puts(dot, "  n");
                    tgc_buf_uint(dot, v);
                    tgc_buf_puts(dot, " -> more");
                    tgc_buf_uint(dot, k);
                    tgc_buf_puts(dot, " [style=dashed];\n");
                }
                if (in && ins < TGC_DRAW_STUBS) {
                    ins++;
                    tgc_buf_puts(dot, "  more");
                    tgc_buf_uint(dot, k);
                    tgc_buf_puts(dot, " -> n");
                    tgc_buf_uint(dot, v);
                    tgc_buf_puts(dot, " [style=dashed];\n");
                }
            }
        }
    }
    for (size_t i = 0; i < b->nbridges; i++) {
        const tgc_bridge *br = &b->bridges[i];
        uint32_t from = b->owner[br->from] != TGC_NONE ? b->owner[br->from] : br->from;
        uint32_t to = b->owner[br->to] != TGC_NONE ? b->owner[br->to] : br->to;
        tgc_buf_puts(dot, "  n");
        tgc_buf_uint(dot, from);
        tgc_buf_puts(dot, " -> n");
        tgc_buf_uint(dot, to);
        tgc_buf_puts(dot, " [label=\"\xe2\x80\xa6 ");
        tgc_buf_count(dot, br->count);
        tgc_buf_puts(dot, br->count == 1 ? " more object\"" : " more objects\"");
        tgc_buf_puts(dot, ", style=dashed, color=\"#90a4ae\", fontcolor=\"#546e7a\"];\n");
    }
    if (b->edges_dropped > 0) {
        tgc_buf_puts(dot, "  graph [labelloc=b, label=\"");
        tgc_buf_count(dot, b->edges_dropped);
        tgc_buf_puts(dot, " more references between the drawn objects are not drawn\"];\n");
    }
    if (b->nedges + b->nbridges > TGC_DRAW_BIG || b->ndrawn > TGC_DRAW_BIG) {
        /* A big drawing: fewer crossing-minimisation and network-simplex passes (a random mesh
         * of 300 nodes and 600 edges took over 10 s with the defaults, 1.7 s with these). */
        tgc_buf_puts(dot, "  graph [mclimit=0.2, nslimit=2, nslimit1=2];\n");
    }
    for (size_t e = 0; e < b->nedges; e++) {
        drawn_edge *de = &b->edges[e];
        tgc_buf_puts(dot, "  n");
        tgc_buf_uint(dot, de->src);
        tgc_buf_puts(dot, " -> n");
        tgc_buf_uint(dot, de->dst);
        tgc_buf_puts(dot, " [label=\"");
        dot_str(dot, de->label);
        tgc_buf_puts(dot, "\"");
        if (b->is_target[de->dst]) {
            tgc_buf_puts(dot, ", color=\"#c62828\", fontcolor=\"#c62828\"");
        }
        tgc_buf_puts(dot, "];\n");
    }
    tgc_buf_puts(dot, "}\n");
    tgc_buf_free(&scratch);
}

/* A report's DOT, not drawn yet (tgc.h's tgc_report.pending). */
struct tgc_pending {
    builder b;           /* b.objs and b.items borrow from the report's pending_objs */
    uint32_t *elided;    /* per drawn group: objects summarised, not drawn */
};

static void builder_free(builder *b);

/* Ends the wait, drawing the DOT into dot_src first when `draw`. The report's fields are
 * detached before anything else: drawing runs no Python code and freeing the builder only
 * releases strings, but this also serves tp_clear, and a re-entrant call must find nothing. */
static void
report__end_wait(tgc_report *r, int draw)
{
    tgc_pending *p = r->pending;
    PyObject *objs = r->pending_objs;  /* keeps the builder's objects alive until the end */
    r->pending = NULL;
    r->pending_objs = NULL;
    if (p != NULL) {
        if (draw) {
            tgc_buf dot = {0};
            report__draw_dot(&p->b, p->elided, &dot);
            tgc_buf_free(&r->dot_src);
            r->dot_src = dot;
        }
        builder_free(&p->b);
        PyMem_Free(p->b.items);
        free(p->elided);
        PyMem_Free(p);
    }
    Py_XDECREF(objs);
}

void
tgc_report_forget(tgc_report *r)
{
    report__end_wait(r, 0);
}

int
tgc_report_settle(PyObject *report, Py_ssize_t own)
{
    if (report == NULL || report == Py_None || ((tgc_report *)report)->pending == NULL) {
        return -1;  /* drawn already (the DOT was asked for), or no report */
    }
    int kept = Py_REFCNT(report) > own;  /* kept by someone: draw while the objects live */
    report__end_wait((tgc_report *)report, kept);
    return kept;
}

static void
builder_free(builder *b)
{
    if (b->names != NULL) {
        for (uint32_t v = 0; v < b->n; v++) {
            tgc_names_clear(&b->names[v]);
        }
    }
    if (b->ts != NULL) {
        for (uint32_t v = 0; v < b->n; v++) {
            report__tensor_clear(&b->ts[v]);
        }
    }
    for (uint32_t v = 0; v < b->n; v++) {
        if (b->tname != NULL) {
            Py_XDECREF(b->tname[v]);
        }
        if (b->desc != NULL) {
            Py_XDECREF(b->desc[v]);
        }
    }
    PyMem_Free(b->names);
    PyMem_Free(b->tname);
    PyMem_Free(b->desc);
    PyMem_Free(b->ts);
    PyMem_Free(b->edges);
    free(b->is_target);
    free(b->draw);
    free(b->skip);
    free(b->bridges);
    free(b->owner);
    free(b->groups);
    tgc_graph_free(&b->g);
    tgc_analysis_free(&b->a);
    tgc_ptrmap_free(&b->map);
    Py_XDECREF(b->unknown);
}

static PyObject *
buf_to_str(tgc_buf *o)
{
    if (o->oom) {
        return PyErr_NoMemory();
    }
    return PyUnicode_DecodeUTF8(o->data ? o->data : "", (Py_ssize_t)o->len, "replace");
}

/* The tensors of interest in objs, with their info; 0 when there are none. */
static int
builder__tensors(builder *b, const tgc_filter *f)
{
    tgc_state *st = b->st;
    int found = 0;
    PyObject *ctx = NULL, *entered = NULL;
    for (uint32_t i = 0; i < b->n; i++) {
        PyObject *op = b->items[i];
        if (!tgc_is_tensor(st, op)) {
            continue;
        }
        if (ctx == NULL && st->torch_no_subclass_dispatch != NULL &&
            report__may_dispatch(st, Py_TYPE(op))) {
            /* tensor subclasses with __torch_function__ must not run Python for .shape */
            ctx = PyObject_CallNoArgs(st->torch_no_subclass_dispatch);
            entered = ctx ? PyObject_CallMethod(ctx, "__enter__", NULL) : NULL;
            if (entered == NULL) {
                PyErr_Clear();
                Py_CLEAR(ctx);
            }
        }
        if (report__tensor(st, op, b->objs, &b->ts[i]) < 0) {
            tgc_log_exception(st, "reading a tensor's metadata");
            continue;
        }
        int want = report__wanted(f, op, &b->ts[i]);
        if (want < 0) {
            tgc_log_exception(st, "the device predicate");
        }
        if (want == 1) {
            b->is_target[i] = 1;
            found = 1;
        }
        else {
            report__tensor_clear(&b->ts[i]);
        }
    }
    if (ctx != NULL) {
        PyObject *r = PyObject_CallMethod(ctx, "__exit__", "OOO", Py_None, Py_None, Py_None);
        if (r == NULL) {
            PyErr_Clear();
        }
        Py_XDECREF(r);
        Py_DECREF(ctx);
        Py_XDECREF(entered);
    }
    return found;
}

static int
builder__graph(builder *b)
{
    uint32_t *src, *dst, m;
    if (tgc_edges(b->items, b->n, &b->map, &src, &dst, &m) < 0) {
        return -1;
    }
    int rc = -1;
    if (tgc_graph_build(&b->g, b->n, m, src, dst) == 0 && tgc_analyze(&b->g, b->is_target, &b->a) == 0) {
        rc = 0;
    }
    else {
        PyErr_NoMemory();
    }
    free(src);
    free(dst);
    return rc;
}

static int
builder__groups(builder *b)
{
    uint32_t ng = b->a.ngroups;
    b->ngroups = ng;
    b->groups = calloc(ng ? ng : 1, sizeof(group_info));
    if (b->groups == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t k = 0; k < ng; k++) {
        b->groups[k].group = k;
    }
    for (uint32_t v = 0; v < b->n; v++) {
        uint32_t k = b->a.group[v];
        if (k == TGC_NONE) {
            continue;
        }
        group_info *gi = &b->groups[k];
        uint64_t h = (uint64_t)(uintptr_t)Py_TYPE(b->items[v]);
        if (b->ts[v].info != NULL && (b->a.role[v] & TGC_ROLE_TARGET)) {
            Py_hash_t sh = PyObject_Hash(b->ts[v].shape);
            h ^= mix1((uint64_t)sh) ^ (uint64_t)b->ts[v].nbytes;
            gi->targets++;
            gi->nbytes += b->ts[v].nbytes;
        }
        gi->nodes++;
        gi->h1 += mix1(h);
        gi->h2 += mix2(h);
        for (uint32_t e = b->g.out_off[v]; e < b->g.out_off[v + 1]; e++) {
            uint32_t w = b->g.out_dst[e];
            if (b->a.group[w] != k) {
                continue;
            }
            uint64_t he = mix2((uint64_t)(uintptr_t)Py_TYPE(b->items[v])) ^
                          (uint64_t)(uintptr_t)Py_TYPE(b->items[w]) ^ (v == w ? 0x5bd1e995 : 0);
            gi->edges++;
            gi->h1 += mix1(he + 1);
            gi->h2 += mix2(he + 2);
        }
    }
    PyErr_Clear();
    /* Sort by signature, fold runs into their first member, then order by bytes. */
    qsort(b->groups, ng, sizeof(group_info), group_cmp_sig);
    uint32_t out = 0;
    for (uint32_t i = 0; i < ng;) {
        uint32_t j = i;
        group_info rep = b->groups[i];
        rep.count = 0;
        rep.total_bytes = 0;
        rep.total_targets = 0;
        while (j < ng && b->groups[j].nodes == rep.nodes && b->groups[j].edges == rep.edges &&
               b->groups[j].targets == rep.targets && b->groups[j].h1 == rep.h1 &&
               b->groups[j].h2 == rep.h2) {
            rep.count++;
            rep.total_bytes += b->groups[j].nbytes;
            rep.total_targets += b->groups[j].targets;
            j++;
        }
        b->groups[out++] = rep;
        i = j;
    }
    b->ngroups = out;
    qsort(b->groups, out, sizeof(group_info), group_cmp_bytes);
    return 0;
}

/* Appends at most max bytes of s (n bytes), cut on a UTF-8 boundary, with an ellipsis and the
 * true length when cut. */
static void
buf_add_cut(tgc_buf *o, const char *s, size_t n, size_t max)
{
    if (n <= max) {
        tgc_buf_add(o, s, n);
        return;
    }
    size_t k = max;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) {
        k--;
    }
    tgc_buf_add(o, s, k);
    tgc_buf_printf(o, "\xe2\x80\xa6 (%zu bytes)", n);
}

/* Sets class internals aside (skip[v] = 1) so that a large leak of many classes (type() in a
 * loop, dataclass or namedtuple factories) draws its instances, not each class's __dict__,
 * __mro__ and descriptors: a type object, and whatever only such objects refer to, three levels
 * down. Targets are never set aside. Groups of TGC_DRAW_SMALL nodes or fewer undo it (they are
 * drawn whole). 0, or -1 with an exception. */
static int
builder__set_aside(builder *b)
{
    for (uint32_t v = 0; v < b->n; v++) {
        b->skip[v] = b->a.group[v] != TGC_NONE && PyType_Check(b->items[v]) && !b->is_target[v];
    }
    for (int level = 0; level < 3; level++) {
        for (uint32_t v = 0; v < b->n; v++) {
            if (b->skip[v] || b->a.group[v] == TGC_NONE || b->is_target[v] ||
                b->g.in_off[v] == b->g.in_off[v + 1]) {
                continue;
            }
            int only = 1;
            for (uint32_t e = b->g.in_off[v]; e < b->g.in_off[v + 1] && only; e++) {
                only = b->skip[b->g.in_src[e]] != 0;
            }
            b->skip[v] = (uint8_t)only;
        }
    }
    return 0;
}

/* Keeps the bridges of a group whose two ends are drawn (the DOT shows them as "... N more"
 * edges). 0, or -1 when out of memory. */
static int
builder__keep_bridges(builder *b, const tgc_bridge *br, size_t nbr)
{
    for (size_t i = 0; i < nbr; i++) {
        if (!b->draw[br[i].from] || !b->draw[br[i].to]) {
            continue;
        }
        tgc_bridge *p = realloc(b->bridges, (b->nbridges + 1) * sizeof(*p));
        if (p == NULL) {
            return -1;
        }
        b->bridges = p;
        b->bridges[b->nbridges++] = br[i];
    }
    return 0;
}

PyObject *
tgc_report_build(tgc_state *st, PyObject *objs, const tgc_filter *f, int generation,
                 Py_ssize_t garbage_total)
{
    builder b;
    memset(&b, 0, sizeof(b));
    tgc_buf text = {0};
    tgc_report_row *rows = NULL;  /* the table's, one per group; its strings new references */
    tgc_buf cyc = {0}, hint = {0};  /* reused: a group's cycle and hint */
    tgc_buf spare = {0};            /* the lines of shapes past TGC_TEXT_GROUPS, not kept */
    uint32_t *best_of = NULL;       /* per group: its largest tensor (one pass, not one a group) */
    uint64_t unlisted_bytes = 0, unlisted_tensors = 0;
    PyObject *result = NULL, *tensors = NULL, *groups = NULL, *edges = NULL, *hints = NULL;
    PyObject *seen = NULL;
    uint32_t *elided = NULL;

    if (tgc_torch_resolve(st) <= 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t n0 = PyList_GET_SIZE(objs);
    if (n0 <= 0 || n0 >= (Py_ssize_t)UINT32_MAX) {
        Py_RETURN_NONE;
    }
    b.st = st;
    b.objs = objs;
    b.n = (uint32_t)n0;
    /* The list may grow while we name objects (materialised dicts): snapshot the pointers. */
    b.items = PyMem_Malloc(b.n * sizeof(PyObject *));
    b.is_target = calloc(b.n, 1);
    b.ts = PyMem_Calloc(b.n, sizeof(report_tensor));
    b.draw = calloc(b.n, 1);
    b.skip = calloc(b.n, 1);
    b.owner = malloc(b.n * sizeof(uint32_t));
    b.names = PyMem_Calloc(b.n, sizeof(tgc_names));
    b.tname = PyMem_Calloc(b.n, sizeof(PyObject *));
    b.desc = PyMem_Calloc(b.n, sizeof(PyObject *));
    b.unknown = PyUnicode_FromString("?");
    if (!b.items || !b.is_target || !b.ts || !b.draw || !b.skip || !b.owner || !b.names || !b.tname ||
        !b.desc || !b.unknown) {
        PyErr_NoMemory();
        goto error;
    }
    memcpy(b.items, PySequence_Fast_ITEMS(objs), b.n * sizeof(PyObject *));
    for (uint32_t v = 0; v < b.n; v++) {
        b.owner[v] = TGC_NONE;
    }

    if (!builder__tensors(&b, f)) {
        builder_free(&b);
        PyMem_Free(b.items);
        Py_RETURN_NONE;
    }
    if (builder__graph(&b) < 0) {
        goto error;
    }
    if (b.a.kept == 0) {
        builder_free(&b);
        PyMem_Free(b.items);
        Py_RETURN_NONE;
    }
    report__stacks(b.ts, b.n);
    if (builder__groups(&b) < 0) {
        goto error;
    }

    /* What to draw: the largest groups first, within the node budget. */
    uint32_t budget = TGC_DRAW_BUDGET;
    elided = calloc(b.ngroups ? b.ngroups : 1, sizeof(uint32_t));
    if (elided == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    if (builder__set_aside(&b) < 0) {
        goto error;
    }
    for (uint32_t k = 0; k < b.ngroups && k < TGC_DRAW_GROUPS && budget > 0; k++) {
        group_info *gi = &b.groups[k];
        long picked, aside = 0, chained = 0;
        tgc_bridge *br = NULL;
        size_t nbr = 0;
        if (gi->nodes > TGC_DRAW_SMALL) {
            for (uint32_t v = 0; v < b.n; v++) {
                aside += b.a.group[v] == gi->group && b.skip[v];
            }
            chained = tgc_chains(&b.g, &b.a, gi->group, TGC_CHAIN_KEEP, b.skip, &br, &nbr);
            if (chained < 0) {
                PyErr_NoMemory();
                goto error;
            }
            aside += chained;
        }
        else {
            for (uint32_t v = 0; v < b.n; v++) {
                if (b.a.group[v] == gi->group) {
                    b.skip[v] = 0;  /* small: drawn whole */
                }
            }
        }
        if (gi->nodes - (uint32_t)aside <= budget) {
            for (uint32_t v = 0; v < b.n; v++) {
                if (b.a.group[v] == gi->group && !b.skip[v]) {
                    b.draw[v] = 1;
                }
            }
            picked = gi->nodes - (uint32_t)aside;
        }
        else {
            picked = tgc_pick(&b.g, &b.a, gi->group, budget, b.skip, br, nbr, b.draw);
        }
        if (picked < 0 || builder__keep_bridges(&b, br, nbr) < 0) {
            free(br);
            PyErr_NoMemory();
            goto error;
        }
        free(br);
        /* The "more" node counts what is left out, less the shortened chains (their edges say). */
        elided[k] = gi->nodes - (uint32_t)picked - (uint32_t)chained;
        budget -= (uint32_t)picked;
        gi->drawn = 1;
    }
    /* Names of drawn objects, then folding and the drawn edges. */
    for (uint32_t v = 0; v < b.n; v++) {
        b.names[v].labels = &st->labels;
        if (b.draw[v] && tgc_names_collect(b.items[v], &b.names[v], objs) < 0) {
            tgc_log_exception(st, "naming references");
        }
    }
    builder__fold(&b);
    if (builder__emit_all(&b) < 0) {
        goto error;
    }
    /* The object nodes the DOT will show (drawn, not folded into an owner; draw is set in drawn
     * groups only), and what dot_node writes under their type names: the DOT itself is drawn
     * later, if at all. */
    Py_ssize_t objects_drawn = 0;
    for (uint32_t v = 0; v < b.n; v++) {
        if (!b.draw[v] || b.owner[v] != TGC_NONE) {
            continue;
        }
        objects_drawn++;
        b.ndrawn++;
        if (b.ts[v].info == NULL && (b.desc[v] = tgc_describe(b.items[v])) == NULL) {
            PyErr_Clear();
        }
    }

    /* Tensors of interest, largest first, and bytes counted once per storage. */
    tensors = PyList_New(0);
    seen = PySet_New(NULL);
    groups = PyList_New(0);
    edges = PyList_New(0);
    hints = PyList_New(0);
    if (!tensors || !seen || !groups || !edges || !hints) {
        goto error;
    }
    unsigned long long total = 0;
    uint32_t ntensors = 0;
    for (uint32_t v = 0; v < b.n; v++) {
        if (b.ts[v].info == NULL || !(b.a.role[v] & TGC_ROLE_TARGET)) {
            continue;
        }
        ntensors++;
        if (PyList_Append(tensors, b.ts[v].info) < 0) {
            goto error;
        }
        if (b.ts[v].multi) {
            /* the parts of a sparse tensor or a wrapper: each storage once, here and across */
            PyObject *parts = b.ts[v].storage_key;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(parts); i++) {
                PyObject *key = PyTuple_GET_ITEM(PyTuple_GET_ITEM(parts, i), 0);
                PyObject *nb = PyTuple_GET_ITEM(PyTuple_GET_ITEM(parts, i), 1);
                int known = key == Py_None ? 0 : PySet_Contains(seen, key);
                if (known < 0 || (known == 0 && key != Py_None && PySet_Add(seen, key) < 0)) {
                    goto error;
                }
                if (!known) {
                    total += PyLong_AsUnsignedLongLong(nb);  /* made from one: cannot fail */
                }
            }
            continue;
        }
        int known = PySet_Contains(seen, b.ts[v].storage_key);
        if (known < 0 || (known == 0 && PySet_Add(seen, b.ts[v].storage_key) < 0)) {
            goto error;
        }
        if (!known) {
            total += b.ts[v].nbytes;
        }
    }

    /* The text buffer starts at the size of a one-leak report (about 500 bytes; its DOT is twice
     * that, report__draw_dot), so the common case never regrows it. */
    tgc_buf_reserve(&text, 1000);
    rows = PyMem_Calloc(b.ngroups ? b.ngroups : 1, sizeof(tgc_report_row));
    if (rows == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (size_t e = 0; e < b.nedges; e++) {
        drawn_edge *de = &b.edges[e];
        PyObject *src_t = builder__tname(&b, de->src);
        PyObject *dst_t = src_t ? builder__tname(&b, de->dst) : NULL;
        PyObject *tup = dst_t ? PyTuple_Pack(3, src_t, de->label, dst_t) : NULL;
        if (tup == NULL || PyList_Append(edges, tup) < 0) {
            Py_XDECREF(tup);
            goto error;
        }
        Py_DECREF(tup);
    }

    best_of = malloc((b.a.ngroups ? b.a.ngroups : 1) * sizeof(uint32_t));
    if (best_of == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (uint32_t g = 0; g < b.a.ngroups; g++) {
        best_of[g] = TGC_NONE;
    }
    for (uint32_t v = 0; v < b.n; v++) {
        uint32_t g = b.a.group[v];
        if (g != TGC_NONE && b.ts[v].info && (b.a.role[v] & TGC_ROLE_TARGET) &&
            (best_of[g] == TGC_NONE || b.ts[v].nbytes > b.ts[best_of[g]].nbytes)) {
            best_of[g] = v;
        }
    }

    /* Text and groups */
    tgc_buf_puts(&text, "tensorgc: garbage collection (generation ");
    tgc_buf_int(&text, generation);
    tgc_buf_puts(&text, ") found ");
    tgc_buf_count(&text, b.a.kept);
    tgc_buf_puts(&text, " objects in reference cycles keeping ");
    tgc_buf_count(&text, ntensors);
    tgc_buf_puts(&text, ntensors == 1 ? " tensor (" : " tensors (");
    tgc_buf_bytes(&text, total);
    tgc_buf_puts(&text, ") alive until the collector ran; they are freed now.\n");
    for (uint32_t k = 0; k < b.ngroups; k++) {
        group_info *gi = &b.groups[k];
        /* the group's lines go straight into the text, up to TGC_TEXT_GROUPS shapes */
        tgc_buf *line = k < TGC_TEXT_GROUPS ? &text : &spare;
        tgc_buf_reset(&spare);
        if (k >= TGC_TEXT_GROUPS) {
            unlisted_bytes += gi->total_bytes;
            unlisted_tensors += gi->total_targets;
        }
        tgc_buf_reset(&cyc);
        tgc_buf_reset(&hint);
        size_t path[64];
        size_t len = gi->drawn ? builder__cycle(&b, gi->group, path, 64) : 0;
        if (gi->drawn) {
            builder__hint(&b, path, len, &cyc, &hint);
        }
        else {
            tgc_buf_puts(&hint, "not drawn (the page shows the largest leaks first)");
        }
        tgc_buf_puts(line, "  #");
        tgc_buf_uint(line, k + 1);
        tgc_buf_puts(line, " ");
        if (gi->count > 1) {
            tgc_buf_puts(line, "\xc3\x97");
            tgc_buf_count(line, gi->count);
            tgc_buf_puts(line, " ");
        }
        tgc_buf_puts(line, "cycle ");
        if (cyc.len > 0) {
            buf_add_cut(line, cyc.data, cyc.len, TGC_TEXT_PART);
        }
        else {
            tgc_buf_puts(line, "(too large to spell out)");
        }
        tgc_buf_puts(line, " (");
        tgc_buf_count(line, gi->nodes);
        tgc_buf_puts(line, gi->count > 1 ? " objects each) holds " : " objects) holds ");
        tgc_buf_count(line, gi->targets);
        tgc_buf_puts(line, gi->targets == 1 ? " tensor" : " tensors");
        if (gi->count > 1) {
            tgc_buf_puts(line, " each");
        }
        /* the largest tensor of the representative */
        uint32_t best = best_of[gi->group];
        if (best != TGC_NONE) {
            tgc_buf_puts(line, gi->targets > 1 ? ", largest " : ": ");
            tgc_buf_append(line, report__line(&b.ts[best]));
        }
        tgc_buf_puts(line, "; ");
        tgc_buf_bytes(line, gi->total_bytes);
        tgc_buf_puts(line, " in all\n      fix: ");
        buf_add_cut(line, hint.data ? hint.data : "", hint.len, TGC_TEXT_PART);
        tgc_buf_puts(line, "\n");
        PyObject *hint_s = buf_to_str(&hint);
        PyObject *cyc_s = hint_s ? buf_to_str(&cyc) : NULL;
        PyObject *gd = NULL;
        if (cyc_s != NULL) {
            PyObject *const keys[] = {st->keys[TGC_KEY_COUNT_], st->keys[TGC_KEY_OBJECTS],
                                      st->keys[TGC_KEY_TENSORS], st->keys[TGC_KEY_NBYTES],
                                      st->keys[TGC_KEY_HINT], st->keys[TGC_KEY_CYCLE],
                                      st->keys[TGC_KEY_DRAWN]};
            PyObject *vals[] = {PyLong_FromUnsignedLong(gi->count),
                                PyLong_FromUnsignedLong(gi->nodes),
                                PyLong_FromUnsignedLong(gi->total_targets),
                                PyLong_FromUnsignedLongLong(gi->total_bytes), Py_NewRef(hint_s),
                                Py_NewRef(cyc_s), Py_NewRef(gi->drawn ? Py_True : Py_False)};
            gd = report__dict(keys, vals, 7);
        }
        if (gd == NULL || PyList_Append(groups, gd) < 0 || PyList_Append(hints, hint_s) < 0) {
            Py_XDECREF(gd);
            Py_XDECREF(hint_s);
            Py_XDECREF(cyc_s);
            goto error;
        }
        Py_DECREF(gd);
        rows[k].count = gi->count;
        rows[k].nodes = gi->nodes;
        rows[k].tensors = gi->total_targets;
        rows[k].nbytes = gi->total_bytes;
        rows[k].cycle = cyc_s;  /* the references move to the row */
        rows[k].hint = hint_s;
    }
    if (b.ngroups > TGC_TEXT_GROUPS) {
        tgc_buf_puts(&text, "  \xe2\x80\xa6 ");
        tgc_buf_count(&text, b.ngroups - TGC_TEXT_GROUPS);
        tgc_buf_puts(&text, " more leak shapes holding ");
        tgc_buf_count(&text, unlisted_tensors);
        tgc_buf_puts(&text, unlisted_tensors == 1 ? " tensor (" : " tensors (");
        tgc_buf_bytes(&text, unlisted_bytes);
        tgc_buf_puts(&text, ") are not listed here; report.groups has every one\n");
    }
    if (text.len > TGC_TEXT_MAX - 128) {
        size_t n = TGC_TEXT_MAX - 128;
        while (n > 0 && ((unsigned char)text.data[n] & 0xC0) == 0x80) {
            n--;
        }
        text.len = n;
        text.data[n] = '\0';
        tgc_buf_puts(&text, "\n  \xe2\x80\xa6 the text is cut at 64 KiB; report.groups has every leak\n");
    }
    tgc_buf_free(&spare);
    if (text.oom) {
        PyErr_NoMemory();
        goto error;
    }

    tgc_report *r = PyObject_GC_New(tgc_report, st->report_type);
    if (r == NULL) {
        goto error;
    }
    r->text = buf_to_str(&text);
    r->dot = NULL;
    memset(&r->dot_src, 0, sizeof(r->dot_src));
    r->rows = rows;
    r->nrows = b.ngroups;
    rows = NULL;
    r->tensors = tensors;
    r->groups = groups;
    r->edges = edges;
    r->hints = hints;
    tensors = groups = edges = hints = NULL;
    r->svg = r->html = r->svg_error = NULL;
    r->nbytes = total;
    r->objects = objects_drawn;
    r->garbage = garbage_total > (Py_ssize_t)b.n ? garbage_total : (Py_ssize_t)b.n;
    r->generation = generation;
    /* The DOT waits: most reports are read for their text and freed with the garbage, never
     * drawn. The builder moves to the report, with the garbage list that keeps its objects
     * alive, until the DOT is asked for or tgc_report_settle decides (before the garbage goes). */
    r->pending = PyMem_Malloc(sizeof(tgc_pending));
    r->pending_objs = NULL;
    if (r->pending != NULL) {
        r->pending->b = b;  /* moves: the builder's arrays and references */
        r->pending->elided = elided;
        memset(&b, 0, sizeof(b));
        elided = NULL;
        r->pending_objs = Py_NewRef(objs);
    }
    else {
        report__draw_dot(&b, elided, &r->dot_src);  /* no memory to wait: draw it now */
    }
    PyObject_GC_Track((PyObject *)r);
    result = (PyObject *)r;
    if (r->text == NULL) {
        Py_CLEAR(result);
    }
error:
    builder_free(&b);
    PyMem_Free(b.items);
    free(elided);
    free(best_of);
    tgc_buf_free(&spare);
    tgc_buf_free(&text);
    tgc_report_rows_free(rows, b.ngroups);
    tgc_buf_free(&cyc);
    tgc_buf_free(&hint);
    Py_XDECREF(tensors);
    Py_XDECREF(groups);
    Py_XDECREF(edges);
    Py_XDECREF(hints);
    Py_XDECREF(seen);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* Lazy rendering                                                                              */

void
tgc_report_rows_free(tgc_report_row *rows, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; rows != NULL && k < n; k++) {
        Py_XDECREF(rows[k].cycle);
        Py_XDECREF(rows[k].hint);
    }
    PyMem_Free(rows);
}

PyObject *
tgc_report_dot(tgc_report *r)
{
    if (r->dot == NULL) {
        /* Drawing and decoding run no Python code (the reprs on the DOT were taken at build), so
         * nothing reads the report in between: one drawing, one decoding. */
        report__end_wait(r, 1);
        r->dot = buf_to_str(&r->dot_src);
        if (r->dot != NULL) {
            tgc_buf_free(&r->dot_src);
        }
    }
    return Py_XNewRef(r->dot);
}

/* The page's summary table, one row per group of leaks. 0, or -1 with an exception set. */
/* A table cell: at most TGC_TEXT_PART bytes of s, HTML-escaped (so the table stays within the
 * page's bound however the strings escape). 0, or -1 with an exception. */
static int
report__cell(tgc_buf *o, PyObject *s)
{
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL) {
        return -1;
    }
    tgc_buf cut = {0};
    buf_add_cut(&cut, u, (size_t)n, TGC_TEXT_PART);
    tgc_buf_html(o, cut.data ? cut.data : "", cut.len);
    int oom = cut.oom;
    tgc_buf_free(&cut);
    return oom ? (PyErr_NoMemory(), -1) : 0;
}

static int
report__table(tgc_buf *o, const tgc_report *r)
{
    tgc_buf_puts(o, "<table id=\"groups\">\n<tr><th>#</th><th>leaks</th><th>objects each</th>"
                    "<th>tensors</th><th>held</th><th>cycle</th><th>fix</th></tr>\n");
    for (Py_ssize_t k = 0; k < r->nrows && k < TGC_TABLE_ROWS; k++) {
        const tgc_report_row *row = &r->rows[k];
        tgc_buf_puts(o, "<tr><td class=\"num\">");
        tgc_buf_uint(o, (uint64_t)k + 1);
        tgc_buf_puts(o, "</td><td class=\"num\">");
        tgc_buf_count(o, row->count);
        tgc_buf_puts(o, "</td><td class=\"num\">");
        tgc_buf_count(o, row->nodes);
        tgc_buf_puts(o, "</td><td class=\"num\">");
        tgc_buf_count(o, row->tensors);
        tgc_buf_puts(o, "</td><td class=\"num\">");
        tgc_buf_bytes(o, row->nbytes);
        tgc_buf_puts(o, "</td><td>");
        if (report__cell(o, row->cycle) < 0) {
            return -1;
        }
        tgc_buf_puts(o, "</td><td>");
        if (report__cell(o, row->hint) < 0) {
            return -1;
        }
        tgc_buf_puts(o, "</td></tr>\n");
    }
    if (r->nrows > TGC_TABLE_ROWS) {
        tgc_buf_puts(o, "<tr><td colspan=\"7\">\xe2\x80\xa6 ");
        tgc_buf_count(o, (uint64_t)(r->nrows - TGC_TABLE_ROWS));
        tgc_buf_puts(o, " more leak shapes, smaller ones (report.groups has every one)</td></tr>\n");
    }
    tgc_buf_puts(o, "</table>\n");
    return o->oom ? (PyErr_NoMemory(), -1) : 0;
}

PyObject *
tgc_report_svg(tgc_state *st, tgc_report *r)
{
    if (r->svg != NULL) {
        return Py_NewRef(r->svg);
    }
    if (r->svg_error != NULL) {
        PyErr_SetObject(st->error_type, r->svg_error);
        return NULL;
    }
    PyObject *dot_s = tgc_report_dot(r);  /* new reference */
    if (dot_s == NULL) {
        return NULL;
    }
    Py_ssize_t n;
    const char *dot = PyUnicode_AsUTF8AndSize(dot_s, &n);  /* lives as long as dot_s */
    if (dot == NULL) {
        Py_DECREF(dot_s);
        return NULL;
    }
    char *svg = NULL, err[640] = "";
    size_t len = 0;
    int rc;
    if (st->busy) {
        /* Inside our gc callback: keep the GIL, so no other thread runs while the collector is
         * mid-collection (the worker's deadline bounds the wait). */
        rc = tgc_renderer_svg(dot, (size_t)n, &svg, &len, err, sizeof(err));
    }
    else {
        Py_BEGIN_ALLOW_THREADS  /* dot_s, ours, outlives the unlocked section */
        rc = tgc_renderer_svg(dot, (size_t)n, &svg, &len, err, sizeof(err));
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(dot_s);
    /* Another thread may have rendered the same report while the GIL was released. */
    if (rc < 0) {
        if (r->svg_error == NULL) {
            r->svg_error = PyUnicode_DecodeUTF8(err, (Py_ssize_t)strlen(err), "replace");
        }
        if (r->svg_error != NULL) {
            PyErr_SetObject(st->error_type, r->svg_error);
        }
        return NULL;
    }
    if (r->svg == NULL) {
        r->svg = PyUnicode_DecodeUTF8(svg, (Py_ssize_t)len, "replace");
    }
    free(svg);
    return Py_XNewRef(r->svg);
}

PyObject *
tgc_report_html(tgc_state *st, tgc_report *r)
{
    if (r->html != NULL) {
        return Py_NewRef(r->html);
    }
    if (r->text == NULL || r->tensors == NULL) {
        /* only reachable from a finalizer that ran while the collector cleared the report */
        PyErr_SetString(PyExc_ValueError, "this CycleReport was cleared by the collector");
        return NULL;
    }
    PyObject *svg = tgc_report_svg(st, r);
    if (svg == NULL) {
        if (!PyErr_ExceptionMatches(st->error_type)) {
            return NULL;
        }
        PyErr_Clear();  /* the page says why there is no picture */
    }
    tgc_buf title = {0}, page = {0};
    tgc_buf_puts(&title, "tensorgc: reference cycles kept ");
    tgc_buf_count(&title, (uint64_t)PyList_GET_SIZE(r->tensors));
    tgc_buf_puts(&title, PyList_GET_SIZE(r->tensors) == 1 ? " tensor (" : " tensors (");
    tgc_buf_bytes(&title, r->nbytes);
    tgc_buf_printf(&title, ") alive until gc generation %d ran", r->generation);

    tgc_buf table = {0};
    const char *text = PyUnicode_AsUTF8(r->text);
    const char *svg_s = text && svg ? PyUnicode_AsUTF8(svg) : NULL;
    const char *svg_err = text && r->svg_error ? PyUnicode_AsUTF8(r->svg_error) : NULL;
    int ok = text != NULL && (svg == NULL || svg_s != NULL) &&
             (r->svg_error == NULL || svg_err != NULL) && report__table(&table, r) == 0;
    char too_big[200];
    if (ok && svg_s != NULL && strlen(svg_s) + table.len + 6 * strlen(text) + 16384 > TGC_PAGE_MAX) {
        /* The page has a bound whatever the garbage: a drawing that would pass it is left out. */
        snprintf(too_big, sizeof(too_big), "the drawing (%zu bytes) would make the page larger "
                 "than its %u MiB bound, so it is left out; the text and table are complete",
                 strlen(svg_s), TGC_PAGE_MAX >> 20);
        svg_s = NULL;
        svg_err = too_big;
    }
    PyObject *result = NULL;
    if (ok && !title.oom) {
        tgc_page p = {title.data, text, table.data, svg_s, svg_err};
        tgc_html_page(&page, &p);
        if (r->html == NULL) {
            r->html = buf_to_str(&page);
        }
        result = Py_XNewRef(r->html);
    }
    else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    Py_XDECREF(svg);
    tgc_buf_free(&title);
    tgc_buf_free(&table);
    tgc_buf_free(&page);
    return result;
}
