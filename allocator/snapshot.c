/* snapshot.c: reads a caching-allocator snapshot's segments (torch.cuda.memory._snapshot()
 * ["segments"], or a list read from an untrusted file) into the blocks engine (blocks.c), and
 * answers block attribution for the reporter's storages (contract in convert.h). Every field is
 * type-checked: a malformed snapshot is a ValueError, never a crash. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/alloc.h"
#include "convert.h"

int
tgc_alloc_u64(PyObject *d, const char *key, uint64_t *out, int dflt_ok, uint64_t dflt)
{
    PyObject *v = PyDict_GetItemString(d, key);  /* borrowed */
    if (v == NULL) {
        if (dflt_ok) {
            *out = dflt;
            return 0;
        }
        PyErr_Format(PyExc_ValueError, "allocator snapshot: a record has no '%s'", key);
        return -1;
    }
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_ValueError, "allocator snapshot: %s must be an int, not %.50s", key,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "allocator snapshot: %s out of range", key);
        return -1;
    }
    *out = x;
    return 0;
}

static int
conv__state(PyObject *b)
{
    PyObject *s = PyDict_GetItemString(b, "state");  /* borrowed */
    if (s == NULL || !PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_ValueError, "allocator snapshot: a block's state must be a str");
        return -1;
    }
    if (PyUnicode_CompareWithASCIIString(s, "active_allocated") == 0) {
        return TGC_BLOCK_ALLOCATED;
    }
    if (PyUnicode_CompareWithASCIIString(s, "active_pending_free") == 0) {
        return TGC_BLOCK_PENDING_FREE;
    }
    if (PyUnicode_CompareWithASCIIString(s, "inactive") == 0) {
        return TGC_BLOCK_INACTIVE;
    }
    PyErr_Format(PyExc_ValueError, "allocator snapshot: unknown block state %R", s);
    return -1;
}

/* A dict lookup can run Python (__eq__ of a key whose hash collides), which could drop a
 * segment, its blocks or a block from under us: each is held by a strong reference while in
 * use. */
int
tgc_alloc_load(PyObject *segments, tgc_alloc *a)
{
    PyObject *s = NULL, *blocks = NULL, *b = NULL;  /* new references while in use */
    int rc = -1;
    if (!PyList_Check(segments)) {
        PyErr_SetString(PyExc_TypeError, "allocator snapshot: segments must be a list");
        return -1;
    }
    uint32_t ext = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(segments); i++) {
        s = Py_NewRef(PyList_GET_ITEM(segments, i));
        if (!PyDict_Check(s)) {
            PyErr_SetString(PyExc_ValueError, "allocator snapshot: a segment must be a dict");
            goto done;
        }
        uint64_t dev, addr, total;
        if (tgc_alloc_u64(s, "device", &dev, 0, 0) < 0 || tgc_alloc_u64(s, "address", &addr, 0, 0) < 0 ||
            tgc_alloc_u64(s, "total_size", &total, 0, 0) < 0) {
            goto done;
        }
        if (dev > 127 || addr + total < addr) {  /* torch device indices are int8 */
            PyErr_SetString(PyExc_ValueError, "allocator snapshot: segment out of range");
            goto done;
        }
        if (tgc_alloc_add_segment(a, (int32_t)dev, addr, total) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        blocks = PyDict_GetItemString(s, "blocks");  /* borrowed, then held */
        if (blocks == NULL || !PyList_Check(blocks)) {
            blocks = NULL;
            PyErr_SetString(PyExc_ValueError, "allocator snapshot: a segment's blocks must be a list");
            goto done;
        }
        Py_INCREF(blocks);
        uint64_t at = addr;  /* older snapshots give no block address: blocks tile the segment */
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(blocks); j++, ext++) {
            b = Py_NewRef(PyList_GET_ITEM(blocks, j));
            if (!PyDict_Check(b)) {
                PyErr_SetString(PyExc_ValueError, "allocator snapshot: a block must be a dict");
                goto done;
            }
            uint64_t baddr, size, req;
            int state = conv__state(b);
            if (state < 0 || tgc_alloc_u64(b, "size", &size, 0, 0) < 0 ||
                tgc_alloc_u64(b, "address", &baddr, 1, at) < 0 ||
                tgc_alloc_u64(b, "requested_size", &req, 1, size) < 0) {
                goto done;
            }
            if (baddr < addr || size > total || baddr - addr > total - size) {
                PyErr_SetString(PyExc_ValueError,
                                "allocator snapshot: a block lies outside its segment");
                goto done;
            }
            PyObject *frames = PyDict_GetItemString(b, "frames");  /* borrowed */
            int has_frames = frames != NULL && PyList_Check(frames) && PyList_GET_SIZE(frames) > 0;
            if (tgc_alloc_add_block(a, baddr, size, req, state, has_frames, ext) < 0) {
                PyErr_NoMemory();
                goto done;
            }
            at = baddr + size;
            Py_CLEAR(b);
        }
        Py_CLEAR(blocks);
        Py_CLEAR(s);
    }
    tgc_alloc_sort(a);
    rc = 0;
done:
    Py_XDECREF(b);
    Py_XDECREF(blocks);
    Py_XDECREF(s);
    return rc;
}

/* _attribute(segments, storages) -> (per_storage, totals, unseen)
 *   storages: list of (device_index, data_ptr, named) -- data_ptr of the storage.
 *   per_storage: for each storage, (block_number, block_addr, block_size, first) or None, where
 *                block_number is the block's position in snapshot order and first is True for
 *                the first storage found in that block (so the block is counted once).
 *   totals: {device_index: {...sums...}}
 *   unseen: [(block_number, size)] allocated blocks holding no storage we found, largest first. */
PyObject *
tgc_alloc_attribute(PyObject *segments, PyObject *storages)
{
    tgc_alloc a;
    uint8_t *mark = NULL;
    PyObject *items = NULL, *per = NULL, *totals = NULL, *unseen = NULL, *result = NULL;
    tgc_alloc_init(&a);
    if (!PyList_Check(storages)) {
        PyErr_SetString(PyExc_TypeError, "storages must be a list");
        goto done;
    }
    if (tgc_alloc_load(segments, &a) < 0) {
        goto done;
    }
    /* new reference: a fixed copy, since converting an item ("i": __index__, "p": __bool__) can
     * run Python that resizes the list */
    items = PyList_AsTuple(storages);
    if (items == NULL) {
        goto done;
    }
    mark = calloc(a.nblk ? a.nblk : 1, 1);
    per = PyList_New(PyTuple_GET_SIZE(items));
    totals = PyDict_New();
    unseen = PyList_New(0);
    if (mark == NULL || per == NULL || totals == NULL || unseen == NULL) {
        if (mark == NULL) {
            PyErr_NoMemory();
        }
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        PyObject *t = PyTuple_GET_ITEM(items, i);  /* borrowed from items */
        int dev, named;
        unsigned long long ptr;
        if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "iKp", &dev, &ptr, &named)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "storages: expected (device, data_ptr, named)");
            }
            goto done;
        }
        long k = tgc_alloc_find(&a, dev, ptr);
        PyObject *item;
        if (k < 0) {
            item = Py_NewRef(Py_None);
        }
        else {
            int first = mark[k] == 0;
            uint8_t m = named ? 2 : 1;
            if (mark[k] < m) {
                mark[k] = m;
            }
            item = Py_BuildValue("(IKKO)", a.blocks[k].ext, (unsigned long long)a.blocks[k].addr,
                                 (unsigned long long)a.blocks[k].size, first ? Py_True : Py_False);
            if (item == NULL) {
                goto done;
            }
        }
        PyList_SET_ITEM(per, i, item);
    }
    /* one totals dict per device present in the snapshot */
    for (size_t i = 0; i < a.nseg; i++) {
        int32_t dev = a.segs[i].device;
        PyObject *key = PyLong_FromLong(dev);
        int have = key ? PyDict_Contains(totals, key) : -1;
        if (have != 0) {
            Py_XDECREF(key);
            if (have < 0) {
                goto done;
            }
            continue;
        }
        tgc_alloc_totals tt;
        tgc_alloc_totals_for(&a, dev, mark, &tt);
        PyObject *d = Py_BuildValue(
            "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:I}",
            "reserved", (unsigned long long)tt.reserved, "allocated", (unsigned long long)tt.allocated,
            "requested", (unsigned long long)tt.requested,
            "pending_free", (unsigned long long)tt.pending_free,
            "inactive_split", (unsigned long long)tt.inactive_split,
            "inactive_whole", (unsigned long long)tt.inactive_whole,
            "named", (unsigned long long)tt.named, "seen", (unsigned long long)tt.seen,
            "stack_attributed", (unsigned long long)tt.stack,
            "unattributed", (unsigned long long)tt.unattributed,
            "segments", tt.nsegments, "blocks", tt.nblocks, "allocated_blocks", tt.nallocated);
        int rc = d ? PyDict_SetItem(totals, key, d) : -1;
        Py_DECREF(key);
        Py_XDECREF(d);
        if (rc < 0) {
            goto done;
        }
    }
    for (size_t i = 0; i < a.nblk; i++) {
        if (a.blocks[i].state == TGC_BLOCK_ALLOCATED && mark[i] == 0) {
            PyObject *item = Py_BuildValue("(IKi)", a.blocks[i].ext,
                                           (unsigned long long)a.blocks[i].size, a.blocks[i].device);
            if (item == NULL || PyList_Append(unseen, item) < 0) {
                Py_XDECREF(item);
                goto done;
            }
            Py_DECREF(item);
        }
    }
    result = PyTuple_Pack(3, per, totals, unseen);
done:
    free(mark);
    tgc_alloc_free(&a);
    Py_XDECREF(items);
    Py_XDECREF(per);
    Py_XDECREF(totals);
    Py_XDECREF(unseen);
    return result;
}