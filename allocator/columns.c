/* columns.c: a trace as columns (include/tensorgc/detail.h's tgc_tcols), read from a list of
 * entry dicts or taken from the bytes the streaming loader made, and the two readers of columns
 * that answer Python: the detail data of the timeline page (detail.c) and the columns' check.
 * The replay (trace.c) reads the same columns. Contract in convert.h; GIL held throughout except
 * around the plain-C engines. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/detail.h"
#include "tensorgc/infer.h"
#include "tensorgc/ptrmap.h"
#include "tensorgc/timeline.h"
#include "convert.h"

#define COL_STACK_FRAMES 64  /* frames compared when telling equal stacks apart */

/* The keys an entry is read by, made once per call (a lookup by a C string would make one each
 * time). New references. */
typedef struct {
    PyObject *action, *addr, *size, *time_us, *frames, *filename, *name, *line;
} col_keys;

static int
col__keys(col_keys *k)
{
    k->action = PyUnicode_InternFromString("action");
    k->addr = PyUnicode_InternFromString("addr");
    k->size = PyUnicode_InternFromString("size");
    k->time_us = PyUnicode_InternFromString("time_us");
    k->frames = PyUnicode_InternFromString("frames");
    k->filename = PyUnicode_InternFromString("filename");
    k->name = PyUnicode_InternFromString("name");
    k->line = PyUnicode_InternFromString("line");
    return k->action && k->addr && k->size && k->time_us && k->frames && k->filename && k->name
           && k->line ? 0 : -1;
}

static void
col__keys_clear(col_keys *k)
{
    Py_CLEAR(k->action);
    Py_CLEAR(k->addr);
    Py_CLEAR(k->size);
    Py_CLEAR(k->time_us);
    Py_CLEAR(k->frames);
    Py_CLEAR(k->filename);
    Py_CLEAR(k->name);
    Py_CLEAR(k->line);
}

/* d[key], borrowed, or NULL when absent; a failing lookup (a key's __eq__ raising) is absent.
 * A lookup runs Python code when d holds a key of another type with an equal hash (its __eq__),
 * and that code may change d or anything else: a value is borrowed only until the next lookup,
 * so whatever must outlive one is held by a strong reference. */
static inline PyObject *
col__get(PyObject *d, PyObject *key)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v == NULL) {
        PyErr_Clear();
    }
    return v;
}

/* An action string as a kind. */
static int
col__kind_of(PyObject *a)
{
    static const struct { const char *name; uint8_t kind; } kinds[] = {
        {"alloc", TGC_TK_ALLOC}, {"free_requested", TGC_TK_FREE_REQUESTED},
        {"free_completed", TGC_TK_FREE_COMPLETED}, {"oom", TGC_TK_OOM},
        {"segment_alloc", TGC_TK_SEGMENT_ALLOC}, {"segment_free", TGC_TK_SEGMENT_FREE},
        {"segment_map", TGC_TK_SEGMENT_MAP}, {"segment_unmap", TGC_TK_SEGMENT_UNMAP},
    };
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        if (PyUnicode_CompareWithASCIIString(a, kinds[k].name) == 0) {
            return kinds[k].kind;
        }
    }
    return TGC_TK_OTHER;
}

/* A trace entry's action as a kind; -1 when there is no str action. Entries of one pickle share
 * their action strings (the memo), so the last string's kind is kept. */
static int
col__kind(PyObject *e, const col_keys *keys, PyObject **last, int *last_kind)
{
    PyObject *a = col__get(e, keys->action);  /* borrowed */
    if (a == NULL || !PyUnicode_Check(a)) {
        return -1;
    }
    if (a != *last) {
        Py_INCREF(a);  /* held: the entry may drop it, and another string take its address */
        Py_XSETREF(*last, a);
        *last_kind = col__kind_of(a);
    }
    return *last_kind;
}

/* d[key] (a required field) as an unsigned 64-bit int; ValueError otherwise. */
static int
col__req_u64(PyObject *d, PyObject *key, uint64_t *out)
{
    PyObject *v = col__get(d, key);  /* borrowed */
    if (v == NULL) {
        PyErr_Format(PyExc_ValueError, "allocator snapshot: a record has no '%U'", key);
        return -1;
    }
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_ValueError, "allocator snapshot: %U must be an int, not %.50s", key,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "allocator snapshot: %U out of range", key);
        return -1;
    }
    *out = x;
    return 0;
}

/* An exact int in [0, 2**64 - 2] at d[key]; 0 when it is one, else -1 (no exception). */
static int
col__u64(PyObject *d, PyObject *key, uint64_t *out)
{
    PyObject *v = col__get(d, key);  /* borrowed */
    if (v == NULL || !PyLong_Check(v)) {
        return -1;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if ((x == (unsigned long long)-1 && PyErr_Occurred()) || x == UINT64_MAX) {
        PyErr_Clear();
        return -1;
    }
    *out = x;
    return 0;
}

/* Equal stacks share an id: a frames list seen before (by identity, torch shares them), or one
 * whose first COL_STACK_FRAMES frames have the same file, name and line (exact str and int
 * fields only, so that no Python code runs; any other shape gets an id of its own). */
typedef struct {
    tgc_ptrmap by_list;     /* frames list -> id */
    uint32_t *table;        /* open addressing over content hashes: ids, 0 empty */
    size_t mask;
    uint64_t *hash;         /* hash[id] */
    PyObject *stacks;       /* list: stacks[id] is the first frames list with that id */
    PyObject *keep;         /* list: the other frames lists in by_list, held so that no other
                             * object takes their address while the map names them */
    const col_keys *keys;
} col_stacks;

/* A frame's file and name (new references, on 0 only) and line; -1 when it is not of the plain
 * shape. f: held by the caller (each lookup may run code that drops it from its list). */
static int
col__frame(const col_keys *k, PyObject *f, PyObject **file, PyObject **name, long long *line)
{
    *file = *name = NULL;
    if (!PyDict_CheckExact(f)) {
        return -1;
    }
    *file = col__get(f, k->filename);
    Py_XINCREF(*file);  /* held across the next lookups */
    *name = col__get(f, k->name);
    Py_XINCREF(*name);
    PyObject *l = col__get(f, k->line);  /* borrowed: read before any other code runs */
    int overflow = 0;
    *line = l != NULL && PyLong_CheckExact(l) ? PyLong_AsLongLongAndOverflow(l, &overflow) : 0;
    if (*file == NULL || *name == NULL || l == NULL || !PyUnicode_CheckExact(*file) ||
        !PyUnicode_CheckExact(*name) || !PyLong_CheckExact(l) || overflow ||
        (*line == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        Py_CLEAR(*file);
        Py_CLEAR(*name);
        return -1;
    }
    return 0;
}

/* frames[i], held (new reference), or NULL past its end: code run by a lookup may shrink it */
static inline PyObject *
col__item(PyObject *frames, Py_ssize_t i)
{
    PyObject *f = i < PyList_GET_SIZE(frames) ? PyList_GET_ITEM(frames, i) : NULL;
    Py_XINCREF(f);
    return f;
}

/* The content hash of a frames list; 0 (and *plain = 0) when it is not of the plain shape. */
static uint64_t
col__hash(const col_keys *k, PyObject *frames, int *plain)
{
    Py_ssize_t n = PyList_GET_SIZE(frames);
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(n > COL_STACK_FRAMES ? COL_STACK_FRAMES : n);
    *plain = 0;
    for (Py_ssize_t i = 0; i < n && i < COL_STACK_FRAMES; i++) {
        PyObject *file, *name;
        long long line;
        PyObject *f = col__item(frames, i);  /* new */
        int rc = f != NULL ? col__frame(k, f, &file, &name, &line) : -1;
        Py_XDECREF(f);
        if (rc < 0) {
            return 0;
        }
        Py_hash_t hf = PyObject_Hash(file), hn = PyObject_Hash(name);  /* exact str: cached */
        Py_DECREF(file);
        Py_DECREF(name);
        h = (h ^ (uint64_t)hf) * 0x100000001b3ULL;
        h = (h ^ (uint64_t)hn) * 0x100000001b3ULL;
        h = (h ^ (uint64_t)line) * 0x100000001b3ULL;
    }
    *plain = 1;
    return h;
}

static int
col__same(const col_keys *k, PyObject *a, PyObject *b)
{
    Py_ssize_t na = PyList_GET_SIZE(a), nb = PyList_GET_SIZE(b);
    if (na > COL_STACK_FRAMES) {
        na = COL_STACK_FRAMES;
    }
    if (nb > COL_STACK_FRAMES) {
        nb = COL_STACK_FRAMES;
    }
    if (na != nb) {
        return 0;
    }
    int same = 1;
    for (Py_ssize_t i = 0; i < na && same; i++) {
        PyObject *fa = NULL, *ma = NULL, *fb = NULL, *mb = NULL;
        long long la, lb;
        PyObject *ia = col__item(a, i), *ib = col__item(b, i);  /* new */
        same = ia != NULL && ib != NULL && col__frame(k, ia, &fa, &ma, &la) == 0 &&
               col__frame(k, ib, &fb, &mb, &lb) == 0 && la == lb &&
               PyUnicode_Compare(fa, fb) == 0 && PyUnicode_Compare(ma, mb) == 0;
        Py_XDECREF(ia);
        Py_XDECREF(ib);
        Py_XDECREF(fa);
        Py_XDECREF(ma);
        Py_XDECREF(fb);
        Py_XDECREF(mb);
    }
    return same;
}

/* The id of a frames list (new ids from 1 on); 0 for none; UINT32_MAX with an exception.
 * frames: borrowed from its entry, held here (the lookups of its frames may run code that drops
 * it from the entry). */
static uint32_t
col__stack_id(col_stacks *st, PyObject *frames)
{
    if (frames == NULL || !PyList_Check(frames) || PyList_GET_SIZE(frames) == 0) {
        return 0;
    }
    uint32_t id = tgc_ptrmap_get(&st->by_list, frames);
    if (id != UINT32_MAX) {
        return id;
    }
    Py_INCREF(frames);
    int plain;
    uint64_t h = col__hash(st->keys, frames, &plain);
    size_t slot = (size_t)(h ^ (h >> 29)) & st->mask;
    if (plain) {
        for (; st->table[slot] != 0; slot = (slot + 1) & st->mask) {
            uint32_t c = st->table[slot];
            if (st->hash[c] == h && col__same(st->keys, PyList_GET_ITEM(st->stacks, c), frames)) {
                id = PyList_Append(st->keep, frames) < 0 ? UINT32_MAX : c;
                if (id != UINT32_MAX) {
                    (void)tgc_ptrmap_put(&st->by_list, frames, c);
                }
                Py_DECREF(frames);
                return id;
            }
        }
    }
    id = (uint32_t)PyList_GET_SIZE(st->stacks);
    if (PyList_Append(st->stacks, frames) < 0) {
        Py_DECREF(frames);
        return UINT32_MAX;
    }
    st->hash[id] = h;
    if (plain) {
        st->table[slot] = id;
    }
    (void)tgc_ptrmap_put(&st->by_list, frames, id);
    Py_DECREF(frames);  /* stacks holds it */
    return id;
}

PyObject *
tgc_alloc_columns(PyObject *trace)
{
    PyObject *items = PySequence_Tuple(trace);  /* new: a fixed copy of the list */
    if (items == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items), bad_time = -1;
    int bad_range = 0;  /* the first bad time_us is an int out of range (else not an int) */
    PyObject *result = NULL;
    PyObject *kind = PyBytes_FromStringAndSize(NULL, n);
    PyObject *addr = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *size = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *time = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *stack = PyBytes_FromStringAndSize(NULL, n * 4);
    col_stacks st = {{0}};
    col_keys keys = {0};
    PyObject *last = NULL;  /* new: the last action string, and its kind */
    int last_kind = 0;
    st.keys = &keys;
    size_t cap = 16;
    while (cap < (size_t)n * 2 + 2) {
        cap <<= 1;
    }
    st.stacks = PyList_New(0);
    st.keep = PyList_New(0);
    st.table = calloc(cap, sizeof(uint32_t));
    st.hash = malloc(((size_t)n + 1) * sizeof(uint64_t));
    st.mask = cap - 1;
    if (kind == NULL || addr == NULL || size == NULL || time == NULL || stack == NULL ||
        st.stacks == NULL || st.keep == NULL || col__keys(&keys) < 0) {
        goto done;
    }
    if (n >= (Py_ssize_t)UINT32_MAX - 16) {
        PyErr_SetString(PyExc_ValueError, "trace too long");
        goto done;
    }
    if (st.table == NULL || st.hash == NULL || tgc_ptrmap_init(&st.by_list, (size_t)n + 1) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *none = PyList_New(0);
    if (none == NULL || PyList_Append(st.stacks, none) < 0) {  /* stacks[0]: no frames */
        Py_XDECREF(none);
        goto done;
    }
    Py_DECREF(none);
    st.hash[0] = 0;
    uint8_t *K = (uint8_t *)PyBytes_AS_STRING(kind);
    uint64_t *A = (uint64_t *)PyBytes_AS_STRING(addr), *S = (uint64_t *)PyBytes_AS_STRING(size);
    int64_t *T = (int64_t *)PyBytes_AS_STRING(time);
    uint32_t *F = (uint32_t *)PyBytes_AS_STRING(stack);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyTuple_GET_ITEM(items, i);  /* borrowed; the tuple keeps it */
        if (!PyDict_Check(e)) {
            PyErr_Format(PyExc_ValueError, "trace entry %zd is not a dict", i);
            goto done;
        }
        int k = col__kind(e, &keys, &last, &last_kind);
        if (k < 0) {
            PyErr_Format(PyExc_ValueError, "trace entry %zd has no str 'action'", i);
            goto done;
        }
        A[i] = S[i] = 0;
        F[i] = 0;
        if (k == TGC_TK_ALLOC || k == TGC_TK_FREE_REQUESTED || k == TGC_TK_FREE_COMPLETED) {
            /* the replay's own events: a malformed one is an error, as it always was */
            if (col__req_u64(e, keys.addr, &A[i]) < 0 || col__req_u64(e, keys.size, &S[i]) < 0) {
                goto done;
            }
        }
        else if (k != TGC_TK_OOM && k != TGC_TK_OTHER &&
                 (col__u64(e, keys.addr, &A[i]) < 0 || col__u64(e, keys.size, &S[i]) < 0)) {
            k = TGC_TK_OTHER;  /* a segment event without its numbers: not drawn */
        }
        K[i] = (uint8_t)k;
        T[i] = INT64_MIN;
        PyObject *t = col__get(e, keys.time_us);  /* borrowed */
        if (t != NULL) {
            int overflow = 0;
            long long x = PyLong_Check(t) ? PyLong_AsLongLongAndOverflow(t, &overflow) : 0;
            if (!PyLong_Check(t) || overflow || (x == -1 && PyErr_Occurred()) || x == INT64_MIN) {
                PyErr_Clear();
                if (bad_time < 0) {
                    bad_time = i;
                    bad_range = PyLong_Check(t);
                }
            }
            else {
                T[i] = x;
            }
        }
        if (k != TGC_TK_OTHER) {
            /* an allocation's stack, a free's (zero_grad freeing a grad says what the block was),
             * a segment's, an OOM's */
            uint32_t id = col__stack_id(&st, col__get(e, keys.frames));
            if (id == UINT32_MAX) {
                goto done;
            }
            F[i] = id;
        }
    }
    result = Py_BuildValue("(OOOOOOni)", kind, addr, size, time, stack, st.stacks, bad_time,
                           bad_range);
done:
    col__keys_clear(&keys);
    tgc_ptrmap_free(&st.by_list);
    free(st.table);
    free(st.hash);
    Py_XDECREF(st.stacks);
    Py_XDECREF(st.keep);
    Py_XDECREF(last);
    Py_XDECREF(kind);
    Py_XDECREF(addr);
    Py_XDECREF(size);
    Py_XDECREF(time);
    Py_XDECREF(stack);
    Py_DECREF(items);
    return result;
}

int
tgc_alloc_cols(PyObject *cols, tgc_tcols *out)
{
    PyObject *v[5];
    if (!PyTuple_Check(cols) || PyTuple_GET_SIZE(cols) < 5) {
        PyErr_SetString(PyExc_TypeError, "columns: expected (kind, addr, size, time, stack, ...)");
        return -1;
    }
    static const size_t width[5] = {1, 8, 8, 8, 4};
    for (int c = 0; c < 5; c++) {
        v[c] = PyTuple_GET_ITEM(cols, c);
        if (!PyBytes_Check(v[c])) {
            PyErr_SetString(PyExc_TypeError, "columns: expected bytes");
            return -1;
        }
    }
    size_t n = (size_t)PyBytes_GET_SIZE(v[0]);
    for (int c = 1; c < 5; c++) {
        if ((size_t)PyBytes_GET_SIZE(v[c]) != n * width[c]) {
            PyErr_SetString(PyExc_ValueError, "columns: lengths disagree");
            return -1;
        }
    }
    const uint8_t *k = (const uint8_t *)PyBytes_AS_STRING(v[0]);
    for (size_t i = 0; i < n; i++) {
        if (k[i] >= TGC_NTK) {
            PyErr_Format(PyExc_ValueError, "columns: entry %zu has kind %d", i, (int)k[i]);
            return -1;
        }
    }
    out->n = n;
    out->kind = k;
    out->addr = (const uint64_t *)PyBytes_AS_STRING(v[1]);
    out->size = (const uint64_t *)PyBytes_AS_STRING(v[2]);
    out->time = (const int64_t *)PyBytes_AS_STRING(v[3]);
    out->stack = (const uint32_t *)PyBytes_AS_STRING(v[4]);
    out->stream = NULL;
    /* an optional stream column after (stacks, bad_time, bad_range) */
    if (PyTuple_GET_SIZE(cols) > 8) {
        PyObject *w = PyTuple_GET_ITEM(cols, 8);
        if (w != Py_None) {
            if (!PyBytes_Check(w) || (size_t)PyBytes_GET_SIZE(w) != n * 8) {
                PyErr_SetString(PyExc_ValueError, "columns: the stream column must be n int64s");
                return -1;
            }
            out->stream = (const int64_t *)PyBytes_AS_STRING(w);
        }
    }
    return 0;
}

/* pre: a list of (addr, size) or (addr, size, stack id) tuples, into malloc'd arrays. */
static int
col__pre(PyObject *pre, uint64_t **addr, uint64_t **size, uint32_t **stack, size_t *n)
{
    Py_ssize_t np = PyList_GET_SIZE(pre);
    *addr = malloc(((size_t)np + 1) * sizeof(uint64_t));
    *size = malloc(((size_t)np + 1) * sizeof(uint64_t));
    *stack = calloc((size_t)np + 1, sizeof(uint32_t));
    if (*addr == NULL || *size == NULL || *stack == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < np; i++) {
        unsigned long long a, s;
        unsigned int k = 0;
        PyObject *t = PyList_GET_ITEM(pre, i);  /* borrowed */
        if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "KK|I", &a, &s, &k)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "pre: expected (addr, size) tuples");
            }
            return -1;
        }
        (*addr)[i] = a;
        (*size)[i] = s;
        (*stack)[i] = k;
    }
    *n = (size_t)np;
    return 0;
}

/* bytes of n native values of `width` bytes, copied from p (widened from uint32 when wide) */
static PyObject *
col__raw(const void *p, size_t n, size_t width)
{
    return PyBytes_FromStringAndSize(p != NULL ? (const char *)p : "", (Py_ssize_t)(n * width));
}

static PyObject *
col__u64_list(const uint64_t *v, size_t n, size_t stride)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l != NULL && i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(v[i * stride]);
        if (x == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, x);  /* stolen */
    }
    return l;
}

/* The series as a dict {max, at, bycat (None, or a list of 16 per column), peak, peak_at,
 * peak_bycat, top (allocation indexes)}. */
PyObject *
tgc_alloc_series_dict(const tgc_series *s)
{
    PyObject *max = col__u64_list(s->max, s->columns, 1);
    PyObject *at = PyList_New((Py_ssize_t)s->columns);
    PyObject *bycat = s->bycat != NULL ? PyList_New((Py_ssize_t)s->columns) : Py_NewRef(Py_None);
    PyObject *peak = col__u64_list(s->peak_bycat, 16, 1), *r = NULL;
    if (max == NULL || at == NULL || bycat == NULL || peak == NULL) {
        goto done;
    }
    for (uint32_t c = 0; c < s->columns; c++) {
        PyObject *x = PyLong_FromLongLong(s->at[c]);
        if (x == NULL) {
            goto done;
        }
        PyList_SET_ITEM(at, c, x);  /* stolen */
        if (s->bycat != NULL) {
            PyObject *row = col__u64_list(&s->bycat[(size_t)c * 16], 16, 1);
            if (row == NULL) {
                goto done;
            }
            PyList_SET_ITEM(bycat, c, row);  /* stolen */
        }
    }
    PyObject *top = PyList_New((Py_ssize_t)s->ntop);
    for (uint32_t q = 0; top != NULL && q < s->ntop; q++) {
        PyObject *x = PyLong_FromUnsignedLong(s->top[q]);
        if (x == NULL) {
            Py_CLEAR(top);
            break;
        }
        PyList_SET_ITEM(top, q, x);  /* stolen */
    }
    if (top == NULL) {
        goto done;
    }
    r = Py_BuildValue("{s:O,s:O,s:O,s:K,s:L,s:O,s:N}", "max", max, "at", at, "bycat", bycat,
                      "peak", (unsigned long long)s->peak, "peak_at", (long long)s->peak_at,
                      "peak_bycat", peak, "top", top);
done:
    Py_XDECREF(max);
    Py_XDECREF(at);
    Py_XDECREF(bycat);
    Py_XDECREF(peak);
    return r;
}

/* labels: (entry_labels, pre_labels, entry_names, pre_names, names) as _timeline returns the
 * first four (bytes; names: the list the name indices point into, passed through), into *l with
 * pointers into the bytes (the caller's tuple keeps them). */
static int
col__labels(PyObject *labels, size_t n, size_t npre, tgc_detail_labels *l)
{
    static const size_t width[4] = {1, 1, 4, 4};
    size_t count[4] = {n, npre, n, npre};
    const void *p[4];
    if (!PyTuple_Check(labels) || PyTuple_GET_SIZE(labels) != 5 ||
        !PyList_Check(PyTuple_GET_ITEM(labels, 4))) {
        PyErr_SetString(PyExc_TypeError, "labels: expected (entry_labels, pre_labels, "
                        "entry_names, pre_names: bytes, names: list)");
        return -1;
    }
    for (int j = 0; j < 4; j++) {
        PyObject *b = PyTuple_GET_ITEM(labels, j);
        if (!PyBytes_Check(b) || (size_t)PyBytes_GET_SIZE(b) != count[j] * width[j]) {
            PyErr_SetString(PyExc_ValueError, "labels: one label and one name per trace entry "
                            "and per block of pre");
            return -1;
        }
        p[j] = PyBytes_AS_STRING(b);
    }
    l->entry_label = p[0];
    l->pre_label = p[1];
    l->entry_name = p[2];
    l->pre_name = p[3];
    return 0;
}

PyObject *
tgc_alloc_detail(PyObject *cols, PyObject *pre, int use_free_requested, unsigned max_stacks,
                 PyObject *labels, Py_ssize_t max_allocs, unsigned columns, PyObject *cats,
                 int raw, Py_ssize_t top)
{
    tgc_tcols c;
    tgc_detail d;
    tgc_detail_enc enc = {{0}};
    tgc_series ser = {0};
    uint64_t *pa = NULL, *ps = NULL;
    uint32_t *pk = NULL;
    uint8_t *keep = NULL, *times = NULL;
    size_t np = 0, ntimes = 0;
    int64_t t0 = 0;
    int timed = 0;
    PyObject *result = NULL, *streams = NULL, *used = NULL, *segs = NULL, *other = NULL;
    PyObject *keep_b = NULL, *times_b = NULL, *series = NULL, *raws = NULL;
    PyObject *labs = NULL, *name_index = NULL, *catnames = NULL, *tops = NULL;
    uint8_t *topmask = NULL;
    tgc_detail_labels lab;
    int built = 0, rc, with_labels = labels != NULL && labels != Py_None;
    size_t npre_kept = 0, nkept = 0;
    if (tgc_alloc_cols(cols, &c) < 0 || col__pre(pre, &pa, &ps, &pk, &np) < 0) {
        goto done;
    }
    if (with_labels && col__labels(labels, c.n, np, &lab) < 0) {
        goto done;
    }
    /* the stack ids index the columns' stacks (and size the engine's table of them) */
    PyObject *stacks = PyTuple_GET_SIZE(cols) > 5 ? PyTuple_GET_ITEM(cols, 5) : NULL;
    if (stacks == NULL || !PyList_Check(stacks)) {
        PyErr_SetString(PyExc_TypeError, "columns: expected the stacks list after the stack ids");
        goto done;
    }
    for (size_t i = 0; i < c.n; i++) {
        if (c.stack[i] >= (uint64_t)PyList_GET_SIZE(stacks)) {
            PyErr_Format(PyExc_ValueError, "columns: entry %zu has stack %u of %zd", i,
                         (unsigned)c.stack[i], PyList_GET_SIZE(stacks));
            goto done;
        }
    }
    for (size_t p = 0; p < np; p++) {
        if (pk[p] >= (uint64_t)PyList_GET_SIZE(stacks)) {
            PyErr_Format(PyExc_ValueError, "pre: block %zu has stack %u of %zd", p,
                         (unsigned)pk[p], PyList_GET_SIZE(stacks));
            goto done;
        }
    }
    if (cats != Py_None && !PyBytes_Check(cats)) {
        PyErr_SetString(PyExc_TypeError, "cats: expected bytes, one per allocation");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS  /* plain C over the bytes the caller's tuple keeps alive */
    rc = tgc_detail_build(&c, pa, ps, pk, np, use_free_requested ? TGC_TK_FREE_REQUESTED
                                                                 : TGC_TK_FREE_COMPLETED,
                          max_stacks, with_labels ? &lab : NULL, &d);
    if (rc == 0) {
        built = 1;
        if (max_allocs >= 0 && (size_t)max_allocs < d.n) {
            keep = tgc_detail_largest(&d, (size_t)max_allocs);
            rc = keep == NULL ? -1 : 0;
        }
    }
    if (rc == 0 && top > 0) {
        topmask = tgc_detail_largest(&d, (size_t)top);
        rc = topmask == NULL ? -1 : 0;
    }
    if (rc == 0) {
        rc = tgc_detail_encode(&d, keep, &enc);
    }
    if (rc == 0) {
        rc = tgc_times_encode(c.time, c.n, &times, &ntimes, &t0, &timed);
    }
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (columns > 0) {
        const uint8_t *cat = NULL;
        if (cats != Py_None) {
            if ((size_t)PyBytes_GET_SIZE(cats) != d.n) {
                PyErr_Format(PyExc_ValueError, "cats: %zd bytes for %zu allocations",
                             PyBytes_GET_SIZE(cats), d.n);
                goto done;
            }
            cat = (const uint8_t *)PyBytes_AS_STRING(cats);
        }
        Py_BEGIN_ALLOW_THREADS
        rc = tgc_detail_series(&d, cat, columns, &ser);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            PyErr_NoMemory();
            goto done;
        }
        series = tgc_alloc_series_dict(&ser);
        if (series == NULL) {
            goto done;
        }
    }
    tops = PyList_New(0);
    if (tops == NULL) {
        goto done;
    }
    for (size_t j = 0; j < d.n; j++) {
        int kept = keep == NULL || keep[j];
        if (kept && topmask != NULL && topmask[j]) {  /* numbered among the kept ones */
            PyObject *x = PyLong_FromSize_t(nkept);
            int bad = x == NULL || PyList_Append(tops, x) < 0;
            Py_XDECREF(x);
            if (bad) {
                goto done;
            }
        }
        nkept += kept;
        npre_kept += kept && j < d.npre;
    }
    streams = PyTuple_New(TGC_DETAIL_STREAMS);
    used = PyList_New((Py_ssize_t)d.nused);
    segs = PyList_New((Py_ssize_t)d.nsegs);
    other = col__raw(d.other, d.nother, sizeof(uint32_t));
    times_b = col__raw(times, ntimes, 1);
    keep_b = keep != NULL ? col__raw(keep, d.n, 1) : Py_NewRef(Py_None);
    if (streams == NULL || used == NULL || segs == NULL || other == NULL || times_b == NULL ||
        keep_b == NULL) {
        goto done;
    }
    for (int t = 0; t < TGC_DETAIL_STREAMS; t++) {
        PyObject *b = col__raw(enc.stream[t], enc.len[t], 1);
        if (b == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(streams, t, b);  /* stolen */
    }
    for (size_t i = 0; i < d.nused; i++) {
        PyObject *x = PyLong_FromUnsignedLong(d.used[i]);
        if (x == NULL) {
            goto done;
        }
        PyList_SET_ITEM(used, (Py_ssize_t)i, x);  /* stolen */
    }
    for (size_t g = 0; g < d.nsegs; g++) {
        const int64_t *r = &d.seg[g * TGC_DETAIL_SEG_FIELDS];
        PyObject *row = Py_BuildValue("[LLKKLLL]", (long long)r[0], (long long)r[1],
                                      (unsigned long long)(uint64_t)r[2],
                                      (unsigned long long)(uint64_t)r[3], (long long)r[4],
                                      (long long)r[5], (long long)r[6]);
        if (row == NULL) {
            goto done;
        }
        PyList_SET_ITEM(segs, (Py_ssize_t)g, row);  /* stolen */
    }
    if (with_labels) {  /* every allocation's label and name index, the unkept ones too */
        labs = PyBytes_FromStringAndSize((const char *)d.label, (Py_ssize_t)d.n);
        name_index = PyBytes_FromStringAndSize((const char *)d.name,
                                               (Py_ssize_t)(d.n * sizeof(uint32_t)));
        catnames = PyTuple_New(TGC_NCAT);
        for (int k = 0; catnames != NULL && k < TGC_NCAT; k++) {
            PyObject *x = PyUnicode_FromString(tgc_category_names[k]);
            if (x == NULL) {
                Py_CLEAR(catnames);
                break;
            }
            PyTuple_SET_ITEM(catnames, k, x);  /* stolen */
        }
        if (labs == NULL || name_index == NULL || catnames == NULL) {
            goto done;
        }
    }
    if (raw) {
        raws = Py_BuildValue("{s:N,s:N,s:N,s:N,s:N,s:N}",
                             "a", col__raw(d.a, d.n, 8), "f", col__raw(d.f, d.n, 8),
                             "s", col__raw(d.s, d.n, 8), "x", col__raw(d.x, d.n, 8),
                             "k", col__raw(d.k, d.n, 4), "r", col__raw(d.r, d.n, 4));
        if (raws == NULL) {
            goto done;
        }
    }
    else {
        raws = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("{s:O,s:K,s:K,s:n,s:n,s:n,s:n,s:K,s:O,s:O,s:O,s:O,s:L,s:O,s:O,s:O,"
                           "s:O,s:O,s:O,s:O,s:O,s:O}",
                           "streams", streams, "unit", (unsigned long long)enc.unit,
                           "xunit", (unsigned long long)enc.xunit, "n", (Py_ssize_t)nkept,
                           "total", (Py_ssize_t)d.n, "npre", (Py_ssize_t)npre_kept,
                           "npre_total", (Py_ssize_t)d.npre,
                           "events", (unsigned long long)d.events, "used", used,
                           "segments", segs, "other", other, "times", times_b,
                           "t0", (long long)t0, "keep", keep_b,
                           "series", series != NULL ? series : Py_None, "raw", raws,
                           "timed", timed ? Py_True : Py_False,
                           "cats", labs ? labs : Py_None,
                           "categories", catnames ? catnames : Py_None,
                           "name_index", name_index ? name_index : Py_None,
                           "names", with_labels ? PyTuple_GET_ITEM(labels, 4) : Py_None,
                           "top", tops);
done:
    if (built) {
        tgc_detail_free(&d);
        tgc_detail_enc_free(&enc);
    }
    tgc_series_free(&ser);
    free(pa);
    free(ps);
    free(pk);
    free(keep);
    free(times);
    Py_XDECREF(streams);
    Py_XDECREF(used);
    Py_XDECREF(segs);
    Py_XDECREF(other);
    Py_XDECREF(keep_b);
    Py_XDECREF(times_b);
    Py_XDECREF(series);
    Py_XDECREF(raws);
    Py_XDECREF(labs);
    Py_XDECREF(name_index);
    Py_XDECREF(catnames);
    Py_XDECREF(tops);
    free(topmask);
    return result;
}

/* The facts of frames (infer.h), each frame dict read once: torch's pickles share one dict
 * among the stacks that hold the frame. The cache holds the dicts it names (keep), so that no
 * other object takes their address while it does, and stops growing at its capacity. */
typedef struct {
    tgc_ptrmap map;              /* frame dict -> index into facts */
    tgc_frame_facts *facts;
    size_t n, cap;
    PyObject *keep;              /* list */
    const col_keys *keys;
} col_facts;

/* What one frame dict says: its file and name read as UTF-8 (exact str only, so no Python code
 * runs), its line as an exact int. f: held by the caller. */
static void
col__frame_facts(const col_keys *k, PyObject *f, tgc_frame_facts *out)
{
    tgc_frame fr = {NULL, NULL, 0, 0, 0};
    PyObject *file = col__get(f, k->filename), *name;
    Py_XINCREF(file);  /* held across the next lookups */
    name = col__get(f, k->name);
    Py_XINCREF(name);
    PyObject *line = col__get(f, k->line);  /* borrowed: read before any other code */
    int overflow = 0;
    long long ln = line != NULL && PyLong_CheckExact(line)
                   ? PyLong_AsLongLongAndOverflow(line, &overflow) : 0;
    if (overflow || (ln == -1 && PyErr_Occurred())) {
        ln = 0;
    }
    PyErr_Clear();
    Py_ssize_t n;
    if (file != NULL && PyUnicode_CheckExact(file) &&
        (fr.file = PyUnicode_AsUTF8AndSize(file, &n)) != NULL) {
        fr.file_len = (size_t)n;
    }
    PyErr_Clear();  /* a lone surrogate has no UTF-8: the field says nothing */
    if (name != NULL && PyUnicode_CheckExact(name) &&
        (fr.name = PyUnicode_AsUTF8AndSize(name, &n)) != NULL) {
        fr.name_len = (size_t)n;
    }
    PyErr_Clear();
    fr.line = ln;
    tgc_frame_facts_of(&fr, out);  /* the strings are held until here */
    Py_XDECREF(file);
    Py_XDECREF(name);
}

/* The facts of frames[j]; 0 bits for a frame that is no dict. -1 with an exception. */
static int
col__facts_at(col_facts *c, PyObject *frames, Py_ssize_t j, tgc_frame_facts *out)
{
    out->bits = 0;
    out->apply_line = -1;
    PyObject *f = col__item(frames, j);  /* new; NULL once the list shrank */
    if (f == NULL || !PyDict_CheckExact(f)) {
        Py_XDECREF(f);
        return 0;
    }
    uint32_t k = tgc_ptrmap_get(&c->map, f);
    if (k != UINT32_MAX) {
        *out = c->facts[k];
        Py_DECREF(f);
        return 0;
    }
    col__frame_facts(c->keys, f, out);
    if (c->n < c->cap) {
        if (PyList_Append(c->keep, f) < 0) {
            Py_DECREF(f);
            return -1;
        }
        c->facts[c->n] = *out;
        (void)tgc_ptrmap_put(&c->map, f, (uint32_t)c->n++);
    }
    Py_DECREF(f);
    return 0;
}

#define COL_FACTS_CACHE (1u << 20)  /* distinct frames remembered */

PyObject *
tgc_alloc_stack_hints(PyObject *stacks)
{
    PyObject *items = PySequence_Tuple(stacks);  /* new: a fixed copy of the list */
    if (items == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    int64_t *lines = malloc(((size_t)n + 1) * sizeof(int64_t));
    col_keys keys = {0};
    col_facts c = {{0}, NULL, 0, 0, NULL, &keys};
    tgc_frame_facts fr[2 * TGC_HINT_FRAMES];
    size_t python_stacks = 0, frames = 0;
    int64_t first_apply = INT64_MAX;
    if (out == NULL || col__keys(&keys) < 0 || (c.keep = PyList_New(0)) == NULL) {
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {  /* the cache's size: the frames the windows read */
        PyObject *st = PyTuple_GET_ITEM(items, i);
        size_t len = PyList_Check(st) ? (size_t)PyList_GET_SIZE(st) : 0;
        frames += len < 2 * TGC_HINT_FRAMES ? len : 2 * TGC_HINT_FRAMES;
    }
    c.cap = frames < COL_FACTS_CACHE ? frames : COL_FACTS_CACHE;
    c.facts = malloc((c.cap + 1) * sizeof(tgc_frame_facts));
    if (lines == NULL || c.facts == NULL || tgc_ptrmap_init(&c.map, c.cap + 1) < 0) {
        PyErr_NoMemory();
        goto error;
    }
    uint8_t *h = (uint8_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *st = PyTuple_GET_ITEM(items, i);  /* borrowed; the tuple holds it */
        h[i] = TGC_HINT(TGC_HP_UNKNOWN, TGC_HK_PLAIN);
        lines[i] = -1;
        if (!PyList_Check(st)) {
            continue;
        }
        size_t len = (size_t)PyList_GET_SIZE(st), head, tail, nf = 0;
        if (len == 0) {
            h[i] = TGC_HINT(TGC_HP_FRAMELESS, TGC_HK_PLAIN);  /* undone below without Python */
            continue;
        }
        tgc_hint_window(len, &head, &tail);
        int python = 0;
        for (size_t j = 0; j < len; j = j + 1 == head ? tail : j + 1) {
            if (col__facts_at(&c, st, (Py_ssize_t)j, &fr[nf]) < 0) {
                goto error;
            }
            python |= (fr[nf++].bits & TGC_FF_PYTHON) != 0;
        }
        h[i] = tgc_stack_hint(fr, nf, TGC_HINT(TGC_HP_UNKNOWN, TGC_HK_PLAIN), &lines[i]);
        python_stacks += python;
        if (lines[i] >= 0 && lines[i] < first_apply) {
            first_apply = lines[i];
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* _apply moves parameters at one line and buffers (and grads) at later ones */
        if (lines[i] >= 0 && lines[i] > first_apply) {
            h[i] = TGC_HINT(TGC_HINT_PHASE(h[i]), TGC_HK_BUFFER);
        }
        /* no Python anywhere (a trace recorded without Python frames): a stack without frames
         * says nothing of its thread */
        if (python_stacks == 0 && h[i] == TGC_HINT(TGC_HP_FRAMELESS, TGC_HK_PLAIN)) {
            h[i] = TGC_HINT(TGC_HP_UNKNOWN, TGC_HK_PLAIN);
        }
    }
    goto done;
error:
    Py_CLEAR(out);
done:
    col__keys_clear(&keys);
    tgc_ptrmap_free(&c.map);
    free(c.facts);
    Py_XDECREF(c.keep);
    free(lines);
    Py_DECREF(items);
    return out;
}
