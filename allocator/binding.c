/* binding.c: the Python binding of allocator/: block attribution over a snapshot, the Active
 * Memory Timeline and the segment map of a trace, the field check of an untrusted trace and the
 * opcode pre-scan of an untrusted pickle, its streaming load, and the device's own view (driver,
 * NVML). It only parses arguments: reading snapshots and traces into the engines is snapshot.c's
 * and trace.c's, the streaming loader's Python objects pickstream_py.c's (convert.h), the engines
 * are plain C (include/tensorgc/alloc.h, timeline.h, segmap.h, pickscan.h, pickstream.h,
 * device.h). The allocator keeps no state. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/device.h"
#include "tensorgc/pickscan.h"
#include "binding.h"
#include "convert.h"

PyDoc_STRVAR(alloc_attribute_doc,
"_alloc_attribute($module, segments, storages, /)\n--\n\n"
"Maps storages (device, data_ptr, named) to the allocator blocks of a snapshot's segments: "
"(per_storage, totals, unseen).");

static PyObject *
alloc_attribute(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_alloc_attribute() takes (segments, storages)");
        return NULL;
    }
    return tgc_alloc_attribute(args[0], args[1]);
}

PyDoc_STRVAR(timeline_doc,
"_timeline($module, cols, pre, columns, detail, use_free_requested, classify=None, /)\n--\n\n"
"Replays one device's allocator trace (its columns, from _trace_columns) into the Active Memory Timeline (allocator/timeline.c), a\n"
"dict; classify=(spans, grads, named) also gives each allocation a category.");

static PyObject *
timeline(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *trace, *pre, *classify = Py_None;
    unsigned int columns, detail;
    int use_req;
    if (!PyArg_ParseTuple(args, "O!O!IIp|O:_timeline", &PyTuple_Type, &trace, &PyList_Type, &pre,
                          &columns, &detail, &use_req, &classify)) {
        return NULL;
    }
    return tgc_alloc_timeline(trace, pre, columns, detail, use_req, classify);
}

PyDoc_STRVAR(trace_columns_doc,
"_trace_columns($module, trace, /)\n--\n\n"
"One device's trace (a list of entry dicts) as columns (allocator/columns.c): (kind, addr, size,\n"
"time, stack, stacks, bad_time, bad_range).");

static PyObject *
trace_columns(PyObject *Py_UNUSED(module), PyObject *trace)
{
    if (!PyList_Check(trace)) {
        PyErr_SetString(PyExc_TypeError, "_trace_columns() takes a list");
        return NULL;
    }
    return tgc_alloc_columns(trace);
}

PyDoc_STRVAR(detail_doc,
"_detail($module, cols, pre, use_free_requested, max_stacks, labels=None, max_allocs=-1,\n"
"        columns=0, cats=None, raw=False, top=0, /)\n--\n\n"
"Every allocation of a trace on the trace's own clock, varint-encoded for the timeline page\n"
"(allocator/detail.c), a dict: labels=(entry_labels, pre_labels, entry_names, pre_names, names)\n"
"from _timeline also gives each allocation its label (cats) and name index; max_allocs >= 0\n"
"encodes that many of the largest; columns > 0 adds the active bytes by column (by category\n"
"with cats: a category byte per allocation); raw adds the allocations' arrays as bytes; top > 0\n"
"lists the top largest (their indexes among those encoded).");

static PyObject *
detail(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *cols, *pre, *labels = Py_None, *cats = Py_None;
    int use_req, raw = 0;
    unsigned int max_stacks, columns = 0;
    Py_ssize_t max_allocs = -1, top = 0;
    if (!PyArg_ParseTuple(args, "O!O!pI|OnIOpn:_detail", &PyTuple_Type, &cols, &PyList_Type, &pre,
                          &use_req, &max_stacks, &labels, &max_allocs, &columns, &cats, &raw,
                          &top)) {
        return NULL;
    }
    if (columns > 100000) {
        PyErr_SetString(PyExc_ValueError, "columns must be 0..100000");
        return NULL;
    }
    if (top > max_allocs && max_allocs >= 0) {
        top = max_allocs;
    }
    return tgc_alloc_detail(cols, pre, use_req, max_stacks, labels, max_allocs, columns, cats,
                            raw, top);
}

PyDoc_STRVAR(stack_frames_doc,
"_stack_frames($module, stacks, used, max_frames, max_ids, /)\n--\n\n"
"The stacks used by a timeline page with their frames interned (allocator/page.c):\n"
"(frames, ids, lens, full).");

static PyObject *
stack_frames(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *stacks, *used;
    Py_ssize_t max_frames, max_ids;
    if (!PyArg_ParseTuple(args, "O!O!nn:_stack_frames", &PyList_Type, &stacks, &PyList_Type,
                          &used, &max_frames, &max_ids)) {
        return NULL;
    }
    return tgc_alloc_stack_frames(stacks, used, max_frames, max_ids);
}

PyDoc_STRVAR(trace_streams_doc,
"_trace_streams($module, trace, /)\n--\n\n"
"The stream of each entry of a trace (a list of entry dicts) as int64 bytes (allocator/page.c).");

static PyObject *
trace_streams(PyObject *Py_UNUSED(module), PyObject *trace)
{
    if (!PyList_Check(trace)) {
        PyErr_SetString(PyExc_TypeError, "_trace_streams() takes a list");
        return NULL;
    }
    return tgc_alloc_trace_streams(trace);
}

PyDoc_STRVAR(series_doc,
"_series($module, a, f, s, events, cats, columns, /)\n--\n\n"
"The active bytes over a trace by column, by category with cats, and at its peak, of the\n"
"allocations given as _detail's raw arrays (allocator/detail.c), a dict.");

static PyObject *
series(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *a, *f, *s, *cats;
    unsigned long long events;
    unsigned int columns;
    if (!PyArg_ParseTuple(args, "SSSKOI:_series", &a, &f, &s, &events, &cats, &columns)) {
        return NULL;
    }
    return tgc_alloc_series(a, f, s, events, cats, columns);
}

PyDoc_STRVAR(stack_hints_doc,
"_stack_hints($module, stacks, /)\n--\n\n"
"What each stack (a list of frames lists) says of its allocations: one hint per stack\n"
"(include/tensorgc/infer.h), as bytes.");

static PyObject *
stack_hints(PyObject *Py_UNUSED(module), PyObject *stacks)
{
    if (!PyList_Check(stacks)) {
        PyErr_SetString(PyExc_TypeError, "_stack_hints() takes a list");
        return NULL;
    }
    return tgc_alloc_stack_hints(stacks);
}

PyDoc_STRVAR(segmap_doc,
"_segmap($module, trace, segments, device, upto, use_free_requested, /)\n--\n\n"
"Segments (kind 0) and allocations (kind 1) after trace[:upto] (allocator/segmap.c), a list.");

static PyObject *
segmap(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *trace, *segs;
    int device, use_req;
    Py_ssize_t upto;
    if (!PyArg_ParseTuple(args, "O!O!inp:_segmap", &PyList_Type, &trace, &PyList_Type, &segs,
                          &device, &upto, &use_req)) {
        return NULL;
    }
    return tgc_alloc_segmap(trace, segs, device, upto, use_req);
}

PyDoc_STRVAR(check_trace_doc,
"_check_trace($module, trace, start, seen, /)\n--\n\n"
"The first index >= start whose entry is not of torch's plain shape (allocator/trace.c); "
"len(trace) when all are.");

static PyObject *
check_trace(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *trace, *seen;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!nO!:_check_trace", &PyList_Type, &trace, &start,
                          &PySet_Type, &seen)) {
        return NULL;
    }
    return tgc_alloc_check_trace(trace, start, seen);
}

PyDoc_STRVAR(device_memory_doc,
"_device_memory($module, ordinal, /)\n--\n\nThe CUDA driver's and NVML's view of one device, "
"loaded at run time, a dict; {'ok': False, 'error': ...} without a driver.");

static PyObject *
device_memory(PyObject *Py_UNUSED(module), PyObject *arg)
{
    long v = PyLong_Check(arg) ? PyLong_AsLong(arg) : -1;
    int ordinal = v > INT_MAX ? -1 : (int)v;  /* not truncated: 2**32 + 1 is no device 1 */
    if (ordinal < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "_device_memory() takes a device ordinal >= 0");
        }
        return NULL;
    }
    tgc_device_mem m;
    int rc;
    Py_BEGIN_ALLOW_THREADS  /* the first call loads libcuda and NVML */
    rc = tgc_device_query(ordinal, &m);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("{s:O,s:i,s:K,s:L,s:L,s:L,s:O,s:s,s:s,s:s}",
                         "ok", rc == 0 ? Py_True : Py_False, "ordinal", ordinal,
                         "total", m.total, "free", m.free, "device_used", m.device_used,
                         "process_used", m.process_used, "nvml", m.nvml ? Py_True : Py_False,
                         "name", m.name, "source", m.source, "error", m.error);
}

PyDoc_STRVAR(pickle_scan_doc,
"_pickle_scan($module, data, /)\n--\n\nThe pre-scan of an untrusted pickle (allocator/pickscan.c): "
"(code, pos, a, b, c).");

/* The scan runs without the GIL on the bytes object, which the caller's reference keeps alive
 * and immutable. */
static PyObject *
pickle_scan(PyObject *Py_UNUSED(module), PyObject *data)
{
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "_pickle_scan() takes bytes");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    size_t n = (size_t)PyBytes_GET_SIZE(data);
    tgc_ps_result r;
    Py_BEGIN_ALLOW_THREADS
    tgc_pickle_scan(p, n, &r);
    Py_END_ALLOW_THREADS
    if (r.code == TGC_PS_NOMEM) {
        return PyErr_NoMemory();
    }
    return Py_BuildValue("(iKKKK)", r.code, (unsigned long long)r.pos,
                         (unsigned long long)r.a, (unsigned long long)r.b,
                         (unsigned long long)r.c);
}

PyDoc_STRVAR(pickle_stream_doc,
"_pickle_stream($module, fd, size, max_bytes, make_trace, seed, /)\n--\n\n"
"Loads an untrusted snapshot pickle from the file descriptor in chunks, its trace entries as\n"
"columns (allocator/pickstream.c): (code, pos, a, b, c, size, text, payload).");

static PyObject *
pickle_stream(PyObject *Py_UNUSED(module), PyObject *args)
{
    int fd;
    unsigned long long size, max_bytes, seed;
    PyObject *make_trace;
    if (!PyArg_ParseTuple(args, "iKKOK:_pickle_stream", &fd, &size, &max_bytes, &make_trace,
                          &seed)) {
        return NULL;
    }
    if (fd < 0 || !PyCallable_Check(make_trace)) {
        PyErr_SetString(PyExc_TypeError, "_pickle_stream() takes a file descriptor >= 0 and a "
                        "callable make_trace");
        return NULL;
    }
    return tgc_alloc_pickle_stream(fd, size, max_bytes, make_trace, seed);
}

PyMethodDef tgc_alloc_methods[] = {
    {"_alloc_attribute", (PyCFunction)(void (*)(void))alloc_attribute, METH_FASTCALL,
     alloc_attribute_doc},
    {"_device_memory", (PyCFunction)device_memory, METH_O, device_memory_doc},
    {"_timeline", (PyCFunction)timeline, METH_VARARGS, timeline_doc},
    {"_segmap", (PyCFunction)segmap, METH_VARARGS, segmap_doc},
    {"_trace_columns", (PyCFunction)trace_columns, METH_O, trace_columns_doc},
    {"_detail", detail, METH_VARARGS, detail_doc},
    {"_stack_frames", (PyCFunction)stack_frames, METH_VARARGS, stack_frames_doc},
    {"_trace_streams", (PyCFunction)trace_streams, METH_O, trace_streams_doc},
    {"_series", (PyCFunction)series, METH_VARARGS, series_doc},
    {"_stack_hints", (PyCFunction)stack_hints, METH_O, stack_hints_doc},
    {"_pickle_scan", (PyCFunction)pickle_scan, METH_O, pickle_scan_doc},
    {"_check_trace", (PyCFunction)check_trace, METH_VARARGS, check_trace_doc},
    {"_pickle_stream", (PyCFunction)pickle_stream, METH_VARARGS, pickle_stream_doc},
    {NULL, NULL, 0, NULL},
};
