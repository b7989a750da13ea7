/* convert.h: the allocator's readers of Python data (snapshot.c, trace.c): they turn snapshots and
 * traces, trusted or read from untrusted files, into the plain-C engines' arrays (alloc.h,
 * timeline.h, segmap.h) and the engines' answers back into Python objects. binding.c calls them
 * after parsing its arguments. Each returns a new reference, or NULL with an exception (ValueError
 * for malformed data, never a crash). Python.h comes first; GIL. */
#ifndef TGC_ALLOC_CONVERT_H
#define TGC_ALLOC_CONVERT_H

#include "tensorgc/alloc.h"
#include "tensorgc/detail.h"

/* snapshot.c */
/* d[key] as an unsigned 64-bit int; `dflt` when missing and dflt_ok, else ValueError. 0 or -1. */
int tgc_alloc_u64(PyObject *d, const char *key, uint64_t *out, int dflt_ok, uint64_t dflt);
/* Loads the segments (a list of segment dicts) into *a and sorts it. Each block's ext is its
 * running number in snapshot order, so the caller can find the block's dict (and its frames)
 * again. 0, or -1 with an exception (*a then holds what was loaded: free it). */
int tgc_alloc_load(PyObject *segments, tgc_alloc *a);
/* (per_storage, totals, unseen): the blocks of storages, a list of (device, data_ptr, named). */
PyObject *tgc_alloc_attribute(PyObject *segments, PyObject *storages);

/* columns.c */
/* A trace (a list of entry dicts) as columns: (kind, addr, size, time, stack: bytes, stacks: the
 * distinct frames lists, stacks[0] = [], bad_time: the first entry whose time_us is no int64 or
 * -1, bad_range: that one is an int out of range). Malformed alloc/free entries: ValueError. */
PyObject *tgc_alloc_columns(PyObject *trace);
/* Reads a columns tuple's first five bytes objects into *out (pointers into them: the tuple
 * must outlive its use); 0, or -1 with TypeError/ValueError. */
int tgc_alloc_cols(PyObject *cols, tgc_tcols *out);
/* The detail data of the timeline page: {streams, unit, xunit, n, events, used, segments, cats,
 * categories, name_index, names}; labels: None, or the replay's (see columns.c's col__labels). */
PyObject *tgc_alloc_detail(PyObject *cols, PyObject *pre, int use_free_requested,
                           unsigned max_stacks, PyObject *labels);
/* One hint (include/tensorgc/infer.h) per stack of a list of frames lists, as bytes. */
PyObject *tgc_alloc_stack_hints(PyObject *stacks);

/* trace.c */
/* The Active Memory Timeline of one device's trace (its columns), with `pre` the blocks alive
 * at the end; classify None or (spans, grads, named[, hints, pre_hints, names]). */
PyObject *tgc_alloc_timeline(PyObject *cols, PyObject *pre, unsigned columns, unsigned detail,
                             int use_free_requested, PyObject *classify);
/* The segments and allocations of one device after trace[0:upto]. */
PyObject *tgc_alloc_segmap(PyObject *trace, PyObject *segments, int device, Py_ssize_t upto,
                           int use_free_requested);
/* The first index >= start of trace whose entry is not of torch's plain shape; seen: a set. */
PyObject *tgc_alloc_check_trace(PyObject *trace, Py_ssize_t start, PyObject *seen);

/* pickstream_py.c */
/* The streaming load of an untrusted snapshot file from fd (pickstream.h): (code, pos, a, b, c,
 * size, text, payload); see the function's comment. */
PyObject *tgc_alloc_pickle_stream(int fd, unsigned long long size, unsigned long long max_bytes,
                                  PyObject *make_trace, unsigned long long seed);

#endif /* TGC_ALLOC_CONVERT_H */
