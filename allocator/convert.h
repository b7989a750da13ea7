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
/* The data of the timeline page (detail.h): {streams, unit, xunit, n, total, npre, npre_total,
 * events, used, segments, other, times, t0, timed, keep, series, raw, cats, categories,
 * name_index, names, top}; labels: None, or the replay's (see columns.c's col__labels); see
 * binding.c's _detail for the rest. */
PyObject *tgc_alloc_detail(PyObject *cols, PyObject *pre, int use_free_requested,
                           unsigned max_stacks, PyObject *labels, Py_ssize_t max_allocs,
                           unsigned columns, PyObject *cats, int raw, Py_ssize_t top);
/* One hint (include/tensorgc/infer.h) per stack of a list of frames lists, as bytes. */
PyObject *tgc_alloc_stack_hints(PyObject *stacks);

/* The series of detail.h as a dict {max, at, bycat, peak, peak_at, peak_bycat, top}. */
PyObject *tgc_alloc_series_dict(const tgc_series *s);

/* page.c */
/* (frames, ids, lens, full): the distinct frames of stacks[used[u]] for each u, each as a key
 * (filename, line, name), or None for a frame of another shape; ids: their frame ids, stack
 * after stack (uint32, the first max_frames frames of each, max_ids in all); lens: how many ids
 * each stack has there; full: how many frames it has. */
PyObject *tgc_alloc_stack_frames(PyObject *stacks, PyObject *used, Py_ssize_t max_frames,
                                 Py_ssize_t max_ids);
/* The "stream" of each entry of a trace (a list of entry dicts) as n int64s (0 where an entry
 * has none, or not an int64). */
PyObject *tgc_alloc_trace_streams(PyObject *trace);
/* The series (detail.h) of allocations given as arrays (a, f, s: uint64 each; cats: a byte
 * each, or None) over a trace of `events` entries. */
PyObject *tgc_alloc_series(PyObject *a, PyObject *f, PyObject *s, unsigned long long events,
                           PyObject *cats, unsigned columns);

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
