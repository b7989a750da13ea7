/* storages.c: the storages that a list of tensors holds, as tensorgc.checkpoint() and growth()
 * compare them (contract in reporter.h; the Python side is tensorgc/reporter/growth.py).
 *
 * A storage is known by its key (device, data address, bytes), and counted once: for the first
 * row that MemReporter's _build (tensorgc/reporter/__init__.py) would count it in. So the rules
 * here are _build's: tensors in the list's order, a tensor on a device the filter leaves out or
 * with no elements gives no row, a tensor's rows are its own storage or else its parts (a sparse
 * tensor's indices and values, a wrapper subclass's inner tensors), the first row with a given
 * (device, address) claims it and its bytes are the key's.
 *
 * A plain tensor (one whose type runs no __torch_function__ of its own, with a readable storage)
 * is read directly: its device, whether it has elements (its nbytes), and untyped_storage()'s
 * nbytes() and data_ptr(), the calls tensor/layout.c makes for it. Every other tensor, and any
 * plain one whose read fails, gets tgc_walk_row's whole row with subclass dispatch off, as _build
 * gets it, and its parts' rows likewise.
 *
 * The claims and the checkpoint's keys share one open-addressing table, so a row costs one probe
 * and a key the checkpoint has makes no Python object. A checkpoint keeps its pass's table as a
 * flat image (bytes), which the next comparisons copy instead of reading its keys back one by
 * one; a set of keys is read when there is no image (a Checkpoint made by hand, or a copy). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "reporter.h"

/* The table of a call: the checkpoint's keys (KEYS_BEFORE) and the (device, address) pairs the
 * rows claimed (KEYS_CLAIMED), open addressing on (address, device), so each row costs one probe
 * and a key in both makes no Python object. A pair may have several entries (a checkpoint made by
 * hand can hold one address twice with two sizes): a probe looks at all of them. */
#define KEYS_BEFORE 1u
#define KEYS_CLAIMED 2u
typedef struct {
    unsigned long long ptr;     /* 0: an empty slot (address 0 is never claimed) */
    unsigned long long nbytes;
    uint32_t dev;               /* index into keys_ctx.devs */
    uint32_t flags;
} keys_slot;

/* A device string met in the call, from a key of `before` or a tensor. Rows of one device
 * usually share one str object (tgc_tensor_str caches them), so most lookups are a pointer
 * compare over a handful of entries. */
typedef struct {
    PyObject *device_s;  /* new reference */
    int known;           /* meta and keep are read (from a tensor's device object) */
    int meta;            /* the meta device: no storage */
    int keep;            /* the filter keeps it */
} keys_device;

/* What a type's tensors need: 1 plain (read directly), 0 read through tgc_walk_row. */
typedef struct {
    PyTypeObject *type;  /* borrowed: kept alive by the list's tensors during the call */
    int plain;
} keys_type;

#define KEYS_TYPES 8

/* A row read, waiting for its turn at the table: the reads come first (each one torch's calls),
 * the table's probes after, in the same order, each slot fetched a few rows ahead. */
typedef struct {
    unsigned long long ptr, nbytes;
    Py_ssize_t at;   /* the claiming tensor's index in the list */
    uint32_t dev;
} keys_row;

#define KEYS_AHEAD 8  /* rows whose slot is fetched before it is probed */
#if defined(__GNUC__) || defined(__clang__)
#  define KEYS_PREFETCH(p) __builtin_prefetch((p), 1)
#else
#  define KEYS_PREFETCH(p) ((void)(p))
#endif

typedef struct {
    tgc_reporter *r;
    const tgc_device_filter *f;
    tgc_storage_keys_result *out;
    keys_slot *slots;
    size_t mask, used;
    keys_row *rows;
    size_t nrows, rowcap;
    keys_device *devs;
    uint32_t ndevs, devcap;
    keys_type types[KEYS_TYPES];
    int ntypes, next_type;
    tgc_tensor_nodispatch guard;
    int guarded;                     /* subclass dispatch switched off (on the first slow row) */
    /* The storages' type (borrowed: a storage of it is alive while the two are used) and its
     * nbytes and data_ptr (new references), looked up once rather than per storage. */
    PyTypeObject *stype;
    PyObject *s_nbytes, *s_data_ptr;
} keys_ctx;

/* An int's value modulo 2**64 (int or a subclass, borrowed): addresses and sizes are below
 * 2**64, and this avoids the generic conversion's byte-array path for multi-digit ints. */
static inline unsigned long long
keys__u64(PyObject *v)
{
    unsigned long long x = PyLong_AsUnsignedLongLongMask(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return x;
}

static inline size_t
keys__hash(unsigned long long ptr, uint32_t dev, size_t mask)
{
    unsigned long long x = (ptr >> 4) ^ ((unsigned long long)dev << 58);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & mask;
}

/* An empty table of at least 2n slots. 0, or -1 with MemoryError set. */
static int
keys__alloc(keys_ctx *c, size_t n)
{
    size_t cap = 1024;
    while (cap < n * 2) {
        cap <<= 1;
    }
    c->slots = calloc(cap, sizeof(keys_slot));
    if (c->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->mask = cap - 1;
    c->used = 0;
    return 0;
}

/* Puts a slot in (no lookup: the caller knows where it goes, or is rehashing). Keeps at most half
 * of the table full, doubling it first. 0, or -1 with MemoryError set. */
static int
keys__put(keys_ctx *c, keys_slot s)
{
    if ((c->used + 1) * 2 > c->mask + 1) {
        keys_slot *old = c->slots;
        size_t n = c->mask + 1;
        if (keys__alloc(c, n) < 0) {  /* at least 2n slots */
            c->slots = old;
            c->mask = n - 1;
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            if (old[i].ptr != 0) {
                (void)keys__put(c, old[i]);  /* cannot grow again: half full at most */
            }
        }
        free(old);
    }
    size_t i = keys__hash(s.ptr, s.dev, c->mask);
    while (c->slots[i].ptr != 0) {
        i = (i + 1) & c->mask;
    }
    c->slots[i] = s;
    c->used++;
    return 0;
}

/* The index of a device string (borrowed) in c->devs, added when new. -1 with MemoryError. */
static int64_t
keys__dev(keys_ctx *c, PyObject *device_s)
{
    for (uint32_t i = 0; i < c->ndevs; i++) {
        if (c->devs[i].device_s == device_s) {
            return i;
        }
    }
    for (uint32_t i = 0; i < c->ndevs; i++) {
        int eq = PyUnicode_Compare(c->devs[i].device_s, device_s);
        if (eq == -1 && PyErr_Occurred()) {
            PyErr_Clear();  /* not a str: compared by identity only */
        }
        else if (eq == 0) {
            /* the same device in another str object: the one met last is looked for next */
            Py_SETREF(c->devs[i].device_s, Py_NewRef(device_s));
            return i;
        }
    }
    if (c->ndevs == c->devcap) {
        uint32_t cap = c->devcap ? c->devcap * 2 : 8;
        keys_device *d = realloc(c->devs, cap * sizeof(keys_device));
        if (d == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->devs = d;
        c->devcap = cap;
    }
    keys_device *d = &c->devs[c->ndevs];
    d->device_s = Py_NewRef(device_s);
    d->known = d->meta = d->keep = 0;
    return c->ndevs++;
}

/* The image of a table (tgc_storage_keys_result.table's bytes): a header, then the slots as they
 * are, each slot's dev an index into the devices tuple that comes with it. Only this build reads
 * it: an image of another layout (a checkpoint pickled by another version) is refused, and the
 * caller passes the keys instead. */
#define KEYS_MAGIC 0x317379656b636774ULL  /* "tgckeys1", little-endian */
typedef struct {
    unsigned long long magic;
    unsigned long long used;
} keys_image;

/* The checkpoint's table: the claims with bytes become its keys (KEYS_BEFORE); the other slots
 * stay, flagged 0, so probe sequences are unbroken. New reference: (bytes, devices), or NULL with
 * an exception. */
static PyObject *
keys__export(keys_ctx *c)
{
    size_t cap = c->mask + 1;
    PyObject *img = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(sizeof(keys_image) +
                                                                 cap * sizeof(keys_slot)));
    PyObject *devs = img ? PyTuple_New(c->ndevs) : NULL;
    if (devs == NULL) {
        Py_XDECREF(img);
        return NULL;
    }
    char *buf = PyBytes_AS_STRING(img);
    keys_image h = {KEYS_MAGIC, c->used};
    memcpy(buf, &h, sizeof(h));
    keys_slot *out = (keys_slot *)(buf + sizeof(h));
    for (size_t i = 0; i < cap; i++) {
        keys_slot s = c->slots[i];
        s.flags = (s.flags & KEYS_CLAIMED) && s.nbytes != 0 ? KEYS_BEFORE : 0;
        memcpy(&out[i], &s, sizeof(s));
    }
    for (uint32_t i = 0; i < c->ndevs; i++) {
        PyTuple_SET_ITEM(devs, i, Py_NewRef(c->devs[i].device_s));
    }
    PyObject *res = PyTuple_Pack(2, img, devs);
    Py_DECREF(img);
    Py_DECREF(devs);
    return res;
}

/* A checkpoint's table (borrowed (bytes, devices) from keys__export) into c: a copy of its
 * slots, which keys__put doubles once new claims fill half of it. 1 done, 0 when it is not an
 * image of this build (no exception; c may hold some of its devices), -1 with an exception. */
static int
keys__import(keys_ctx *c, PyObject *table)
{
    PyObject *img = PyTuple_Check(table) && PyTuple_GET_SIZE(table) == 2
                        ? PyTuple_GET_ITEM(table, 0) : NULL;
    PyObject *devs = img ? PyTuple_GET_ITEM(table, 1) : NULL;
    if (img == NULL || !PyBytes_Check(img) || !PyTuple_Check(devs) ||
        (size_t)PyBytes_GET_SIZE(img) < sizeof(keys_image) + 1024 * sizeof(keys_slot)) {
        return 0;
    }
    size_t len = (size_t)PyBytes_GET_SIZE(img) - sizeof(keys_image);
    size_t cap = len / sizeof(keys_slot);
    keys_image h;
    memcpy(&h, PyBytes_AS_STRING(img), sizeof(h));
    if (h.magic != KEYS_MAGIC || len % sizeof(keys_slot) != 0 || (cap & (cap - 1)) != 0 ||
        h.used * 2 > cap || (size_t)PyTuple_GET_SIZE(devs) >= UINT32_MAX) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(devs); i++) {
        /* in order, so the image's indices hold (a string listed twice is refused) */
        if (!PyUnicode_Check(PyTuple_GET_ITEM(devs, i)) ||
            keys__dev(c, PyTuple_GET_ITEM(devs, i)) != i) {
            return PyErr_Occurred() ? -1 : 0;
        }
    }
    c->slots = malloc(cap * sizeof(keys_slot));
    if (c->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(c->slots, PyBytes_AS_STRING(img) + sizeof(h), cap * sizeof(keys_slot));
    c->mask = cap - 1;
    c->used = (size_t)h.used;
    for (size_t i = 0; i < cap; i++) {
        if (c->slots[i].ptr != 0 && c->slots[i].dev >= c->ndevs) {
            return 0;  /* a device index out of range: not ours (c->slots is freed by the caller) */
        }
    }
    return 1;
}

/* The checkpoint's keys into the table. 0, or -1 with an exception (a key that is not a
 * (str, int, int) tuple is a TypeError). */
static int
keys__load(keys_ctx *c, PyObject *before)
{
    PyObject *it = PyObject_GetIter(before);  /* new reference */
    if (it == NULL) {
        return -1;
    }
    PyObject *k;
    int rc = 0;
    while (rc == 0 && (k = PyIter_Next(it)) != NULL) {  /* new reference */
        if (!PyTuple_Check(k) || PyTuple_GET_SIZE(k) != 3 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(k, 0)) || !PyLong_Check(PyTuple_GET_ITEM(k, 1)) ||
            !PyLong_Check(PyTuple_GET_ITEM(k, 2))) {
            PyErr_SetString(PyExc_TypeError,
                            "a checkpoint's keys are (device, data address, bytes) tuples");
            rc = -1;
        }
        unsigned long long ptr = rc == 0 ? keys__u64(PyTuple_GET_ITEM(k, 1)) : 0;
        unsigned long long nb = rc == 0 ? keys__u64(PyTuple_GET_ITEM(k, 2)) : 0;
        int64_t dev = rc == 0 ? keys__dev(c, PyTuple_GET_ITEM(k, 0)) : -1;
        if (rc == 0 && dev < 0) {
            rc = -1;
        }
        else if (rc == 0 && ptr != 0) {  /* no row has address 0: such a key never matches */
            keys_slot s = {ptr, nb, (uint32_t)dev, KEYS_BEFORE};
            rc = keys__put(c, s);
        }
        Py_DECREF(k);
    }
    Py_DECREF(it);
    return rc < 0 || PyErr_Occurred() ? -1 : 0;  /* PyIter_Next's error, if any */
}

/* One row's storage (device_s borrowed), queued for keys__settle. ptr 0: no address, never
 * claimed. 0, or -1 with MemoryError set. */
static int
keys__row(keys_ctx *c, Py_ssize_t at, PyObject *device_s, unsigned long long ptr,
          unsigned long long nbytes)
{
    if (ptr == 0) {
        return 0;
    }
    int64_t dev = keys__dev(c, device_s);
    if (dev < 0) {
        return -1;
    }
    if (c->nrows == c->rowcap) {
        size_t cap = c->rowcap ? c->rowcap * 2 : 4096;
        keys_row *rows = realloc(c->rows, cap * sizeof(keys_row));
        if (rows == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->rows = rows;
        c->rowcap = cap;
    }
    keys_row *w = &c->rows[c->nrows++];
    w->ptr = ptr;
    w->nbytes = nbytes;
    w->at = at;
    w->dev = (uint32_t)dev;
    return 0;
}

/* A queued row at the table: the first row with its (device, address) claims it; a claimed one
 * with bytes is a key, listed unless the checkpoint has it (then counted in matched). 0, or -1
 * with an exception. */
static int
keys__claim(keys_ctx *c, const keys_row *w)
{
    keys_slot *first = NULL;
    int had = 0;
    for (size_t i = keys__hash(w->ptr, w->dev, c->mask); c->slots[i].ptr != 0;
         i = (i + 1) & c->mask) {
        keys_slot *s = &c->slots[i];
        if (s->ptr != w->ptr || s->dev != w->dev) {
            continue;
        }
        if (s->flags & KEYS_CLAIMED) {
            return 0;  /* an earlier row counted this storage */
        }
        first = first ? first : s;
        had |= (s->flags & KEYS_BEFORE) && s->nbytes == w->nbytes;
    }
    if (first != NULL) {
        first->flags |= KEYS_CLAIMED;
    }
    else {
        keys_slot s = {w->ptr, w->nbytes, w->dev, KEYS_CLAIMED};
        if (keys__put(c, s) < 0) {
            return -1;
        }
    }
    if (w->nbytes == 0) {
        return 0;
    }
    if (had) {
        c->out->matched++;
        return 0;
    }
    PyObject *p = PyLong_FromUnsignedLongLong(w->ptr);
    PyObject *n = p ? PyLong_FromUnsignedLongLong(w->nbytes) : NULL;
    PyObject *key = n ? PyTuple_Pack(3, c->devs[w->dev].device_s, p, n) : NULL;  /* new */
    if (key != NULL) {
        /* a str and two ints: no cycle through it, so the collector need not see it (a
         * checkpoint makes one a storage, and the collections after it would examine them all
         * before untracking them themselves) */
        PyObject_GC_UnTrack(key);
    }
    PyObject *idx = key && c->out->where ? PyLong_FromSsize_t(w->at) : NULL;
    int rc = key != NULL && PyList_Append(c->out->keys, key) == 0 &&
             (c->out->where == NULL || (idx != NULL && PyList_Append(c->out->where, idx) == 0))
             ? 0 : -1;
    Py_XDECREF(p);
    Py_XDECREF(n);
    Py_XDECREF(key);
    Py_XDECREF(idx);
    if (rc == 0) {
        c->out->nbytes += w->nbytes;
    }
    return rc;
}

/* Every queued row at the table, in order; the table is a few MB, so each probe would wait
 * for memory: the slot of the row KEYS_AHEAD on is fetched first. 0, or -1 with an exception. */
static int
keys__settle(keys_ctx *c)
{
    for (size_t i = 0; i < c->nrows; i++) {
        if (i + KEYS_AHEAD < c->nrows) {
            const keys_row *a = &c->rows[i + KEYS_AHEAD];
            KEYS_PREFETCH(&c->slots[keys__hash(a->ptr, a->dev, c->mask)]);
        }
        if (keys__claim(c, &c->rows[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Whether the filter keeps (dev_type, dev_index): reporter.py's _matches. dev_index borrowed,
 * an int or None. 1, 0, or -1 with an exception. */
static int
keys__keeps(const tgc_device_filter *f, PyObject *dev_type, PyObject *dev_index)
{
    if (f->type == NULL) {
        return 1;
    }
    int same = PyUnicode_Check(dev_type) ? PyUnicode_Compare(dev_type, f->type) : 1;
    if (same == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (same != 0) {
        return 0;
    }
    if (f->index < 0) {
        return 1;
    }
    long i = dev_index == Py_None ? 0 : PyLong_AsLong(dev_index);
    if (i == -1 && PyErr_Occurred()) {
        return -1;
    }
    return i == f->index;
}

/* The device entry of a tensor's device object (borrowed) and its string (borrowed), its filter
 * and meta flags read once per call: NULL with no exception when its .type or .index cannot be
 * read (the row will say), NULL with one on MemoryError. */
static keys_device *
keys__device(keys_ctx *c, PyObject *device, PyObject *device_s)
{
    int64_t i = keys__dev(c, device_s);
    if (i < 0) {
        return NULL;
    }
    keys_device *d = &c->devs[i];
    if (d->known) {
        return d;
    }
    tgc_tensor_state *tn = c->r->tensor;
    PyObject *type = PyObject_GetAttr(device, tn->str_type);     /* new reference */
    PyObject *index = type ? PyObject_GetAttr(device, tn->str_index) : NULL;
    int keep = index ? keys__keeps(c->f, type, index) : -1;
    int meta = keep >= 0 && PyUnicode_Check(type) &&
               PyUnicode_CompareWithASCIIString(type, "meta") == 0;
    Py_XDECREF(type);
    Py_XDECREF(index);
    if (keep < 0) {
        if (!PyErr_ExceptionMatches(PyExc_MemoryError)) {
            PyErr_Clear();
        }
        return NULL;
    }
    d->known = 1;
    d->meta = meta;
    d->keep = keep;
    return d;
}

/* Whether tensors of this type are read directly: no __torch_function__ of their own (TensorBase,
 * torch.Tensor, nn.Parameter...). */
static int
keys__plain_type(keys_ctx *c, PyTypeObject *tp)
{
    for (int i = 0; i < c->ntypes; i++) {
        if (c->types[i].type == tp) {
            return c->types[i].plain;
        }
    }
    int plain = !tgc_tensor_may_dispatch(c->r->tensor, tp);
    keys_type *slot = c->ntypes < KEYS_TYPES ? &c->types[c->ntypes++]
                                             : &c->types[c->next_type++ % KEYS_TYPES];
    slot->type = tp;
    slot->plain = plain;
    return plain;
}

/* An unsigned value that calling m (borrowed) on o returns. 0, or -1 with no exception. */
static int
keys__call_ull(PyObject *m, PyObject *o, unsigned long long *v)
{
    PyObject *x = PyObject_CallOneArg(m, o);  /* new reference */
    int rc = x != NULL && PyLong_Check(x) ? 0 : -1;
    *v = rc == 0 ? keys__u64(x) : 0;
    Py_XDECREF(x);
    PyErr_Clear();
    return rc;
}

/* A storage's size and address: its nbytes() and data_ptr(), the two looked up on its type
 * once per type met. 0, or -1 with no exception (not readable). */
static int
keys__storage(keys_ctx *c, PyObject *s, unsigned long long *nbytes, unsigned long long *ptr)
{
    if (Py_TYPE(s) != c->stype) {
        tgc_tensor_state *tn = c->r->tensor;
        PyObject *nb = PyObject_GetAttr((PyObject *)Py_TYPE(s), tn->str_nbytes);  /* new */
        PyObject *dp = nb ? PyObject_GetAttr((PyObject *)Py_TYPE(s), tn->str_data_ptr) : NULL;
        if (dp == NULL) {
            Py_XDECREF(nb);
            PyErr_Clear();
            return -1;
        }
        Py_XSETREF(c->s_nbytes, nb);
        Py_XSETREF(c->s_data_ptr, dp);
        c->stype = Py_TYPE(s);
    }
    return keys__call_ull(c->s_nbytes, s, nbytes) == 0 &&
           keys__call_ull(c->s_data_ptr, s, ptr) == 0 ? 0 : -1;
}

/* A plain tensor read directly: 1 done (its key claimed or none to claim), 0 when it must be
 * read through its row instead (nothing claimed yet), -1 with an exception. */
static int
keys__plain(keys_ctx *c, Py_ssize_t at, PyObject *t)
{
    tgc_tensor_state *tn = c->r->tensor;
    if (!keys__plain_type(c, Py_TYPE(t))) {
        return 0;
    }
    PyObject *device = tgc_tensor_get(tn->get_device, t);       /* new reference */
    PyObject *device_s = device ? tgc_tensor_str(tn, device) : NULL;
    keys_device *d = device_s ? keys__device(c, device, device_s) : NULL;
    Py_XDECREF(device);
    int rc = 0;
    if (d == NULL) {
        goto fallback;
    }
    if (!d->keep || d->meta) {
        rc = 1;  /* no row on this device; a meta tensor's row claims nothing */
        goto done;
    }
    /* Whether it has elements: its nbytes (numel times the element size, a getter: cheaper than
     * the numel() method's call) is 0 exactly when numel() is. */
    PyObject *g = tn->attr[TGC_TA_NBYTES];
    PyObject *m = tn->attr[TGC_TA_NUMEL];
    PyObject *size = g ? tgc_tensor_get(g, t) : m ? PyObject_CallOneArg(m, t) : NULL;  /* new */
    long long n = size && PyLong_Check(size) ? PyLong_AsLongLong(size) : -1;
    Py_XDECREF(size);
    if (n < 0) {
        goto fallback;
    }
    if (n == 0) {
        rc = 1;  /* _build skips a tensor without elements */
        goto done;
    }
    PyObject *s = PyObject_CallOneArg(tn->untyped_storage, t);  /* new reference */
    unsigned long long nbytes = 0, ptr = 0;
    int ok = s && keys__storage(c, s, &nbytes, &ptr) == 0;
    Py_XDECREF(s);
    if (!ok) {
        goto fallback;
    }
    rc = keys__row(c, at, device_s, ptr, nbytes) < 0 ? -1 : 1;
    goto done;
fallback:
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
            rc = -1;
            goto done;
        }
        PyErr_Clear();
    }
    rc = 0;
done:
    Py_XDECREF(device_s);
    return rc;
}

/* A row's address or size: its value, 0 for None (no address). */
static unsigned long long
keys__ull(PyObject *v)
{
    return v != NULL && PyLong_Check(v) ? keys__u64(v) : 0;
}

/* Any tensor, through its row (tgc_walk_row) and its parts' rows, as _build reads them. 0, or
 * -1 with an exception. */
static int
keys__slow(keys_ctx *c, Py_ssize_t at, PyObject *t)
{
    if (!c->guarded) {
        tgc_tensor_nodispatch_enter(c->r->tensor, &c->guard);
        c->guarded = 1;
    }
    /* (storage_ptr, storage_nbytes, device, device_type, device_index, shape, dtype, numel,
     *  is_sparse, storage, parts, nbytes, no_storage): walk.c */
    PyObject *row = tgc_walk_row(c->r, t);  /* new reference */
    if (row == NULL) {
        return -1;
    }
    int rc = keys__keeps(c->f, PyTuple_GET_ITEM(row, 3), PyTuple_GET_ITEM(row, 4));
    PyObject *numel = PyTuple_GET_ITEM(row, 7);
    if (rc <= 0 || (PyLong_Check(numel) && keys__ull(numel) == 0)) {
        Py_DECREF(row);
        return rc < 0 ? -1 : 0;
    }
    PyObject *parts = PyTuple_GET_ITEM(row, 10);
    if (!PyTuple_Check(parts)) {
        rc = keys__row(c, at, PyTuple_GET_ITEM(row, 2), keys__ull(PyTuple_GET_ITEM(row, 0)),
                       keys__ull(PyTuple_GET_ITEM(row, 11)));
        Py_DECREF(row);
        return rc;
    }
    Py_INCREF(parts);
    Py_DECREF(row);
    rc = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(parts) && rc == 0; i++) {
        PyObject *sub = tgc_walk_row(c->r, PyTuple_GET_ITEM(PyTuple_GET_ITEM(parts, i), 1));
        if (sub == NULL) {
            rc = -1;
            break;
        }
        rc = keys__row(c, at, PyTuple_GET_ITEM(sub, 2), keys__ull(PyTuple_GET_ITEM(sub, 0)),
                       keys__ull(PyTuple_GET_ITEM(sub, 11)));
        Py_DECREF(sub);
    }
    Py_DECREF(parts);
    return rc;
}

int
tgc_storage_keys(tgc_reporter *r, PyObject *tensors, const tgc_device_filter *f,
                 PyObject *before, tgc_storage_keys_result *out)
{
    memset(out, 0, sizeof(*out));
    /* a tuple copy that also keeps each tensor alive: a slow row may run Python code */
    PyObject *items = PyList_AsTuple(tensors);  /* new reference */
    if (items == NULL) {
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    keys_ctx c;
    memset(&c, 0, sizeof(c));
    c.r = r;
    c.f = f;
    c.out = out;
    out->keys = PyList_New(0);
    out->where = before != NULL ? PyList_New(0) : NULL;
    int rc = out->keys && (before == NULL || out->where) ? 0 : -1;
    if (rc == 0 && before != NULL && !PyAnySet_Check(before)) {
        rc = keys__import(&c, before);
        if (rc == 0) {
            PyErr_SetString(PyExc_ValueError, "not a table of this build's checkpoints");
        }
        rc = rc > 0 ? 0 : -1;
    }
    else if (rc == 0) {
        Py_ssize_t nb = before != NULL ? PySet_GET_SIZE(before) : 0;
        rc = keys__alloc(&c, (size_t)(n + nb) + 16);
        if (rc == 0 && before != NULL) {
            rc = keys__load(&c, before);
        }
    }
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        PyObject *t = PyTuple_GET_ITEM(items, i);
        if (!tgc_tensor_check(r->tensor, t)) {
            PyErr_Format(PyExc_TypeError, "expected a tensor, got %.100s", Py_TYPE(t)->tp_name);
            rc = -1;
            break;
        }
        int done = keys__plain(&c, i, t);
        rc = done < 0 ? -1 : done == 0 ? keys__slow(&c, i, t) : 0;
    }
    if (c.guarded) {
        tgc_tensor_nodispatch_exit(&c.guard);  /* keeps a pending exception */
    }
    if (rc == 0) {
        rc = keys__settle(&c);
    }
    if (rc == 0 && before == NULL) {
        out->table = keys__export(&c);
        rc = out->table ? 0 : -1;
    }
    for (uint32_t i = 0; i < c.ndevs; i++) {
        Py_DECREF(c.devs[i].device_s);
    }
    Py_XDECREF(c.s_nbytes);
    Py_XDECREF(c.s_data_ptr);
    free(c.devs);
    free(c.slots);
    free(c.rows);
    Py_DECREF(items);
    if (rc < 0) {
        Py_CLEAR(out->keys);
        Py_CLEAR(out->where);
        Py_CLEAR(out->table);
        return -1;
    }
    return 0;
}
