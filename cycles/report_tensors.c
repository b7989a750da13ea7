/* report_tensors.c: what the builder reads of each tensor in the garbage (contract in
 * report_build.h): its metadata through tensor/ (with subclass dispatch off where it could run),
 * the key its bytes are counted once under, whether an observer's device filter wants it, its
 * allocation stack from torch's CUDA memory history, and the line a report shows for it. */
#include "cycles.h"
#include "report_build.h"

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
report__part_keys(const tgc_tensor_bytes *bytes)
{
    PyObject *keys = PyTuple_New(bytes->nparts);
    for (int i = 0; keys != NULL && i < bytes->nparts; i++) {
        const tgc_tensor_part *p = &bytes->parts[i];
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

/* Reads tensor t of the garbage owned by the list objs into out. 0, or -1 with an exception. */
static int
report__tensor(tgc_cycles *c, PyObject *t, PyObject *objs, tgc_rtensor *out)
{
    tgc_tensor_state *tn = c->tensor;
    PyObject *shape = NULL, *dtype = NULL, *dtype_s = NULL, *device = NULL;
    PyObject *device_s = NULL, *dev_type = NULL, *dev_index = NULL, *type_name = NULL;
    tgc_tensor_bytes bytes;
    int measured = 0;
    memset(out, 0, sizeof(*out));

    shape = tgc_tensor_shape(tn, t);
    dtype = shape ? tgc_tensor_get(tn->get_dtype, t) : NULL;
    dtype_s = dtype ? tgc_tensor_str(tn, dtype) : NULL;
    type_name = dtype_s ? tgc_type_name(t) : NULL;
    if (type_name == NULL) {
        goto error;
    }
    /* A wrapper subclass may answer .device through a __torch_dispatch__ that raises: its device
     * is then its first inner tensor's, once measured. */
    device = tgc_tensor_get(tn->get_device, t);
    device_s = device ? tgc_tensor_str(tn, device) : NULL;
    if (device_s == NULL) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
            goto error;
        }
        PyErr_Clear();
    }
    else if (!report__parse_device(device_s, out->dev_type, sizeof(out->dev_type),
                                   &out->dev_index)) {
        dev_type = PyObject_GetAttr(device, tn->str_type);  /* interned names: no str made */
        dev_index = dev_type ? PyObject_GetAttr(device, tn->str_index) : NULL;
        const char *dt = dev_index ? PyUnicode_AsUTF8(dev_type) : NULL;
        if (dt == NULL) {
            goto error;
        }
        snprintf(out->dev_type, sizeof(out->dev_type), "%s", dt);
        out->dev_index = dev_index == Py_None ? -1 : (int)PyLong_AsLong(dev_index);
    }
    tgc_tensor_measure(tn, t, device_s ? out->dev_type : NULL, device_s, 0, objs, &bytes);
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
        const tgc_tensor_part *p = &bytes.parts[0];
        out->storage_key = report__key(p->device_s ? p->device_s : device_s, p->ptr, p->nbytes, t);
    }
    else {
        out->storage_key = report__key(device_s, 0, 0, t);
    }
    if (out->storage_key == NULL) {
        goto error;
    }
    {
        PyObject *const keys[] = {c->keys[TGC_KEY_SHAPE], c->keys[TGC_KEY_DTYPE],
                                  c->keys[TGC_KEY_DEVICE], c->keys[TGC_KEY_NBYTES],
                                  c->keys[TGC_KEY_DATA_PTR], c->keys[TGC_KEY_STACK],
                                  c->keys[TGC_KEY_TYPE], c->keys[TGC_KEY_STORAGE]};
        PyObject *vals[] = {Py_NewRef(shape), Py_NewRef(dtype_s), Py_NewRef(device_s),
                            PyLong_FromUnsignedLongLong(bytes.nbytes),
                            PyLong_FromUnsignedLongLong(bytes.ptr), Py_NewRef(Py_None),
                            Py_NewRef(type_name), Py_NewRef(bytes.how)};
        out->info = tgc_report_dict(keys, vals, 8);
    }
    if (out->info == NULL) {
        goto error;
    }
    out->shape = shape;  /* the references move to out */
    out->dtype_s = dtype_s;
    out->device_s = device_s;
    out->type_name = type_name;
    Py_DECREF(dtype); Py_XDECREF(device); Py_XDECREF(dev_type); Py_XDECREF(dev_index);
    tgc_tensor_bytes_clear(&bytes);
    return 0;
error:
    Py_XDECREF(shape); Py_XDECREF(dtype); Py_XDECREF(dtype_s); Py_XDECREF(device);
    Py_XDECREF(device_s); Py_XDECREF(dev_type); Py_XDECREF(dev_index); Py_XDECREF(type_name);
    if (measured) {
        tgc_tensor_bytes_clear(&bytes);
    }
    Py_CLEAR(out->info);
    Py_CLEAR(out->storage_key);
    return -1;
}

/* 1 when the tensor passes the observer's device filter, 0 when not, -1 with an exception. */
static int
report__wanted(const tgc_filter *f, PyObject *t, const tgc_rtensor *rt)
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

/* Whether a frame's file is C or C++ source (by its suffix: a directory may hold ".h"). */
static int
report__cxx_file(const char *f)
{
    static const char *const suffixes[] = {".cpp", ".cc", ".cu", ".h", ".hpp", ".c"};
    size_t n = strlen(f);
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        size_t k = strlen(suffixes[i]);
        if (n >= k && memcmp(f + n - k, suffixes[i], k) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The stack of frames (torch's list of {filename, line, name} dicts, innermost first) as the
 * report shows it, "file:line function" a line, C++ frames and torch's own Python left out; set
 * into rt (info["stack"] and rt->stack). Nothing when no frame is left. */
static void
report__set_stack(tgc_rtensor *rt, PyObject *frames)
{
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
        if (f == NULL || f[0] == '?' || f[0] == '\0' || report__cxx_file(f) ||
            strstr(f, "/torch/")) {
            PyErr_Clear();
            continue;
        }
        const char *func = PyUnicode_AsUTF8(nm);
        /* file and function names cut: they are the user's strings too. A long path keeps its
         * end, where the file's name is. */
        size_t flen = strlen(f);
        tgc_buf_printf(&sb, "%s%.200s:%ld %.120s\n", flen > 200 ? "\xe2\x80\xa6" : "",
                       flen > 200 ? f + flen - 200 : f, PyLong_AsLong(ln), func ? func : "?");
        PyErr_Clear();
    }
    if (sb.len > 0 && !sb.oom) {
        PyObject *st = PyUnicode_DecodeUTF8(sb.data, (Py_ssize_t)sb.len - 1, "replace");
        if (st != NULL) {
            PyDict_SetItemString(rt->info, "stack", st);
            Py_XSETREF(rt->stack, st);  /* the reference moves */
        }
    }
    tgc_buf_free(&sb);
}

/* The stacks from torch.cuda.memory._snapshot(): for each CUDA tensor, the active block that
 * contains its storage. Costs a snapshot of the whole allocator (every live block's stack made
 * into frames): only for a torch without the per-address question. */
static void
report__stacks_from_snapshot(tgc_rtensor *ts, Py_ssize_t n)
{
    PyObject *mem = PyImport_ImportModule("torch.cuda.memory");
    PyObject *snap = mem ? PyObject_CallMethod(mem, "_snapshot", NULL) : NULL;
    Py_XDECREF(mem);
    PyObject *segments = snap && PyDict_Check(snap) ? PyDict_GetItemString(snap, "segments") : NULL;
    if (segments == NULL || !PyList_Check(segments)) {
        Py_XDECREF(snap);
        return;
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
                if (ts[i].info == NULL || !ts[i].is_cuda || ts[i].stack != NULL) {
                    continue;
                }
                PyObject *dp = PyDict_GetItemString(ts[i].info, "data_ptr");
                unsigned long long p = dp ? PyLong_AsUnsignedLongLong(dp) : 0;
                if (p < addr || p >= addr + size || PyList_GET_SIZE(frames) == 0) {
                    continue;
                }
                report__set_stack(&ts[i], frames);
            }
            addr += size;
        }
    }
    Py_DECREF(snap);
}

void
tgc_report_stacks(tgc_rtensor *ts, Py_ssize_t n)
{
    int any_cuda = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        any_cuda |= ts[i].info != NULL && ts[i].is_cuda;
    }
    if (!any_cuda) {
        return;
    }
    PyObject *C = PyImport_ImportModule("torch._C");
    /* A collection inside a CUDA graph's capture (torch.cuda.graph) asks the allocator nothing:
     * the capture must stay valid, and the report goes without stacks. */
    PyObject *capturing = C ? PyObject_CallMethod(C, "_cuda_isCurrentStreamCapturing", NULL) : NULL;
    int in_capture = capturing != NULL && PyObject_IsTrue(capturing) == 1;
    Py_XDECREF(capturing);
    PyErr_Clear();  /* a torch without the question: no capture to protect */
    PyObject *on = C && !in_capture ? PyObject_CallMethod(C, "_cuda_isHistoryEnabled", NULL) : NULL;
    if (on == NULL || PyObject_IsTrue(on) != 1) {
        goto done;
    }
    /* Per address where torch can say (2.13 on): a question per tensor, not a snapshot of the
     * allocator, which makes every live block's stack into frames. */
    PyObject *ask = PyObject_GetAttrString(C, "_cuda_allocationTraceback");
    if (ask == NULL) {
        PyErr_Clear();
        report__stacks_from_snapshot(ts, n);
        goto done;
    }
    int missing = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ts[i].info == NULL || !ts[i].is_cuda) {
            continue;
        }
        PyObject *dp = PyDict_GetItemString(ts[i].info, "data_ptr");  /* borrowed */
        PyObject *got = dp ? PyObject_CallOneArg(ask, dp) : NULL;
        /* a list of frame dicts; a dict holding one under "frames" is read too */
        PyObject *frames = got && PyDict_Check(got) ? PyDict_GetItemString(got, "frames") : got;
        if (frames != NULL && PyList_Check(frames) && PyList_GET_SIZE(frames) > 0) {
            report__set_stack(&ts[i], frames);
        }
        missing |= ts[i].stack == NULL;
        Py_XDECREF(got);
        PyErr_Clear();
    }
    Py_DECREF(ask);
    if (missing) {
        /* an address torch could not answer for (a storage inside a larger block) */
        report__stacks_from_snapshot(ts, n);
    }
done:
    PyErr_Clear();  /* stacks are a bonus: a torch without this API still gets its report */
    Py_XDECREF(C);
    Py_XDECREF(on);
}

int
tgc_report_tensors(tgc_report_model *m, const tgc_filter *f)
{
    tgc_cycles *c = m->c;
    tgc_tensor_state *tn = c->tensor;
    int found = 0;
    tgc_tensor_nodispatch guard = {NULL, NULL};
    for (uint32_t i = 0; i < m->n; i++) {
        PyObject *op = m->items[i];
        if (!tgc_tensor_check(tn, op)) {
            continue;
        }
        if (guard.ctx == NULL && tn->no_subclass_dispatch != NULL &&
            tgc_tensor_may_dispatch(tn, Py_TYPE(op))) {
            /* tensor subclasses with __torch_function__ must not run Python for .shape */
            tgc_tensor_nodispatch_enter(tn, &guard);
        }
        if (report__tensor(c, op, m->objs, &m->ts[i]) < 0) {
            tgc_cycles_log(c, "reading a tensor's metadata");
            continue;
        }
        int want = report__wanted(f, op, &m->ts[i]);
        if (want < 0) {
            tgc_cycles_log(c, "the device predicate");
        }
        if (want == 1) {
            m->is_target[i] = 1;
            found = 1;
        }
        else {
            tgc_report_tensor_clear(&m->ts[i]);
        }
    }
    tgc_tensor_nodispatch_exit(&guard);
    return found;
}

/* A shape as the text shows it: str() of the tuple in brackets, (3, 4) -> [3, 4], (4,) -> [4],
 * () -> []. Plain int dimensions, the usual case, are written directly; anything else (None for
 * a ragged dimension, a huge int) goes through str(), which gives the same for plain ints. */
static void
report__shape(tgc_buf *o, PyObject *shape)
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

void
tgc_report_tensor_line(tgc_rtensor *rt)
{
    tgc_buf *o = &rt->line;
    if (o->len > 0 || o->oom) {
        return;
    }
    tgc_buf_pystr(o, rt->type_name, 0);
    tgc_buf_puts(o, " ");
    tgc_buf_pystr(o, rt->dtype_s, 0);
    report__shape(o, rt->shape);
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
}
