/* binding.c: the Python binding of the reference-graph engine's owner-chain search
 * (include/tensorgc/owners.h), of the edge names along a chain (include/tensorgc/names.h, shared
 * with the cycle reports) and of a running frame's locals (frames.h). It only converts arguments
 * and results; tensorgc/reporter/owner_chains.py chooses the roots and writes the chains. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/compat.h"
#include "tensorgc/names.h"
#include "tensorgc/owners.h"
#include "binding.h"
#include "frames.h"

/* The visited mark the search borrows (tgc_owners_lend_mark; NULL: none lent), and the testing
 * switch that turns it off (_owner_marks). Process-wide, like the header bit the mark stands
 * for; GIL. */
static const tgc_heapmark *binding_mark;
static int binding_marks_on = 1;

void
tgc_owners_lend_mark(const tgc_heapmark *mark)
{
    binding_mark = mark;
}

/* A chain longer than this keeps its root and the two objects after it (which name the holder,
 * a module's dict folded in) and its last TGC_CHAIN_MAX - 3 objects, with None where the middle
 * was cut (at TGC_CHAIN_GAP). */
#define TGC_CHAIN_MAX 256
#define TGC_CHAIN_GAP 3

/* The chain to objs[i], root first: a new tuple. *dropped: how many references a cut chain
 * leaves out (those from its third object to the first of its last ones), 0 when whole. */
static PyObject *
owners__chain(const tgc_owners *o, uint32_t i, uint32_t *dropped)
{
    uint32_t depth = 1;
    for (uint32_t k = i; o->parent[k] != TGC_OWNERS_NONE; k = o->parent[k]) {
        depth++;
    }
    int cut = depth > TGC_CHAIN_MAX;
    uint32_t len = cut ? TGC_CHAIN_MAX + 1 : depth;
    /* kept: the root and two objects, then the last len - TGC_CHAIN_GAP - 1 objects */
    *dropped = cut ? depth - (len - 1) + 1 : 0;
    PyObject *t = PyTuple_New(len);  /* new reference */
    if (t == NULL) {
        return NULL;
    }
    uint32_t k = i, pos = len;
    while (pos > (cut ? TGC_CHAIN_GAP + 1u : 0u)) {
        PyTuple_SET_ITEM(t, --pos, Py_NewRef(o->objs[k]));
        k = o->parent[k];
    }
    if (cut) {
        /* the root and the first two objects on the way from it */
        uint32_t h0 = k, h1 = TGC_OWNERS_NONE, h2 = TGC_OWNERS_NONE;
        while (o->parent[h0] != TGC_OWNERS_NONE) {
            h2 = h1;
            h1 = h0;
            h0 = o->parent[h0];
        }
        PyTuple_SET_ITEM(t, TGC_CHAIN_GAP, Py_NewRef(Py_None));
        PyTuple_SET_ITEM(t, 2, Py_NewRef(o->objs[h2]));
        PyTuple_SET_ITEM(t, 1, Py_NewRef(o->objs[h1]));
        PyTuple_SET_ITEM(t, 0, Py_NewRef(o->objs[h0]));
    }
    return t;
}

static PyObject *
owners__results(const tgc_owners *o)
{
    PyObject *chains = PyList_New(o->ntargets), *refs = PyList_New(o->ntargets);  /* new */
    PyObject *info = NULL, *chain = NULL;
    if (chains == NULL || refs == NULL) {
        goto error;
    }
    for (uint32_t j = 0; j < o->ntargets; j++) {
        PyObject *r = PyLong_FromUnsignedLong(o->referrers[j]);
        if (r == NULL) {
            goto error;
        }
        PyList_SET_ITEM(refs, j, r);
        uint32_t i = o->found[j];
        if (i == TGC_OWNERS_NONE) {
            PyList_SET_ITEM(chains, j, Py_NewRef(Py_None));
            continue;
        }
        uint32_t dropped = 0;
        chain = owners__chain(o, i, &dropped);
        if (chain == NULL) {
            goto error;
        }
        /* where a cut chain's middle was left out (its slot holds None), 0 when whole */
        Py_ssize_t cut = PyTuple_GET_SIZE(chain) > TGC_CHAIN_MAX ? TGC_CHAIN_GAP : 0;
        uint32_t root = i;
        while (o->parent[root] != TGC_OWNERS_NONE) {
            root = o->parent[root];
        }
        uint32_t aux = o->aux[root];
        PyObject *item = (aux & TGC_OWNERS_DARK)
            ? Py_BuildValue("(sIOnI)", "outside", aux & ~TGC_OWNERS_DARK, chain, cut, dropped)
            : (aux & TGC_OWNERS_GARBAGE)
            ? Py_BuildValue("(sIOnI)", "garbage", 0u, chain, cut, dropped)
            : Py_BuildValue("(sIOnI)", "root", aux, chain, cut, dropped);
        Py_CLEAR(chain);
        if (item == NULL) {
            goto error;
        }
        PyList_SET_ITEM(chains, j, item);
    }
    info = Py_BuildValue("{sIsisisi}", "visited", o->n, "truncated", o->truncated,
                         "second_pass", o->dark_pass, "stopped", o->stopped);
    if (info == NULL) {
        goto error;
    }
    PyObject *res = PyTuple_Pack(3, chains, refs, info);
    Py_DECREF(chains);
    Py_DECREF(refs);
    Py_DECREF(info);
    return res;

error:
    Py_XDECREF(chains);
    Py_XDECREF(refs);
    Py_XDECREF(info);
    return NULL;
}

PyDoc_STRVAR(owner_search_doc,
"_owner_search($module, roots, targets, exclude, n_twice, tracked, max_objects, n_late=0,\n"
"              stop_when_found=False, /)\n"
"--\n\n"
"The shortest chain of references from roots to each target (tensorgc.owners uses it); the\n"
"last n_late roots are searched from only after everything the others reach;\n"
"stop_when_found: the pass ends once every target is found (referrers then partial).\n"
"Returns (chains, referrers, info): chains[i] is None (not reached: held by something the\n"
"collector does not track) or (kind, n, objects, cut, dropped), kind 'root' (n: the root's\n"
"index), 'outside' (n: references no Python object shows) or 'garbage' (n: 0); objects run\n"
"from the root to the target, objects[cut] standing for a cut middle (cut 0: whole) of\n"
"`dropped` references. Automatic collection is off meanwhile.");

static PyObject *
owner_search(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 6 || nargs > 8) {
        PyErr_SetString(PyExc_TypeError, "_owner_search takes 6 to 8 arguments");
        return NULL;
    }
    PyObject *roots = NULL, *targets = NULL, *exclude = NULL, *tracked = NULL, *res = NULL;
    Py_ssize_t n_twice = PyLong_AsSsize_t(args[3]);
    unsigned long max_objects = PyLong_AsUnsignedLong(args[5]);
    Py_ssize_t n_late = nargs >= 7 ? PyLong_AsSsize_t(args[6]) : 0;
    int stop_when_found = nargs == 8 ? PyObject_IsTrue(args[7]) : 0;
    if (stop_when_found < 0 || PyErr_Occurred()) {
        return NULL;
    }
    roots = PySequence_Fast(args[0], "roots must be a sequence");       /* new references */
    targets = roots ? PySequence_Fast(args[1], "targets must be a sequence") : NULL;
    exclude = targets ? PySequence_Fast(args[2], "exclude must be a sequence") : NULL;
    if (exclude != NULL && args[4] != Py_None) {
        tracked = PySequence_Fast(args[4], "tracked must be a sequence or None");
        if (tracked == NULL) {
            goto done;
        }
    }
    if (exclude == NULL) {
        goto done;
    }
    Py_ssize_t nr = PySequence_Fast_GET_SIZE(roots), nt = PySequence_Fast_GET_SIZE(targets);
    Py_ssize_t ne = PySequence_Fast_GET_SIZE(exclude);
    if (nr >= UINT32_MAX || nt >= UINT32_MAX || ne >= UINT32_MAX || n_twice < 0 || n_twice > ne ||
        n_late < 0 || n_late > nr || max_objects == 0 || max_objects >= UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "_owner_search: a count is out of range");
        goto done;
    }
    /* No collection while the result holds borrowed references: one could free them. The
     * search itself allocates no Python object; building the result does. */
    int was_enabled = PyGC_Disable();
    tgc_owners o;
    if (tgc_owners_search(&o, binding_marks_on ? binding_mark : NULL,
                          PySequence_Fast_ITEMS(roots), (uint32_t)nr, (uint32_t)n_late,
                          PySequence_Fast_ITEMS(targets), (uint32_t)nt,
                          PySequence_Fast_ITEMS(exclude), (uint32_t)ne, (uint32_t)n_twice,
                          tracked ? PySequence_Fast_ITEMS(tracked) : NULL,
                          tracked ? (size_t)PySequence_Fast_GET_SIZE(tracked) : 0,
                          /* the caller's list and our PySequence_Fast of it (the same object) */
                          tracked ? 1 : 0, (uint32_t)max_objects, stop_when_found) == 0) {
        res = owners__results(&o);
    }
    tgc_owners_free(&o);
    if (was_enabled) {
        PyGC_Enable();
    }

done:
    Py_XDECREF(roots);
    Py_XDECREF(targets);
    Py_XDECREF(exclude);
    Py_XDECREF(tracked);
    return res;
}

/* The label of the edge from a type to a value in its own dict: ".name". New reference, or
 * NULL with no exception when v is not there. */
static PyObject *
owners__type_attr(PyObject *dict, PyObject *v)
{
    Py_ssize_t pos = 0;
    PyObject *k, *val;
    while (PyDict_Next(dict, &pos, &k, &val)) {
        if (val == v && PyUnicode_Check(k)) {
            return tgc_cut(PyUnicode_FromFormat(".%U", k), TGC_NAME_MAX);
        }
    }
    return NULL;
}

/* The label of the reference from a plain list, tuple or dict to c, found by scanning for it
 * (the same labels tgc_names_collect gives, without naming every other entry: a chain through a
 * container of a million entries costs one scan, not a million labels). New reference, or NULL
 * without an exception when p is not such a container or c is not directly in it. */
static PyObject *
owners__item_label(PyObject *p, PyObject *c)
{
    if (PyList_CheckExact(p) || PyTuple_CheckExact(p)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(p);
        PyObject **items = PySequence_Fast_ITEMS(p);
        for (Py_ssize_t k = 0; k < n; k++) {
            if (items[k] == c) {
                return PyUnicode_FromFormat("[%zd]", k);
            }
        }
        return NULL;
    }
    if (PyDict_CheckExact(p)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(p, &pos, &k, &v)) {
            if (v == c) {
                return tgc_names_key_label(k);
            }
            if (k == c) {
                return PyUnicode_FromString("(key)");
            }
        }
    }
    return NULL;
}

static int
owners__folded(const tgc_names *ns, PyObject *o)
{
    for (int f = 0; f < ns->nfolds; f++) {
        if (ns->folds[f] == o) {
            return 1;
        }
    }
    return 0;
}

PyDoc_STRVAR(owner_labels_doc,
"_owner_labels($module, chain, cut, /)\n--\n\n"
"The names of the references along a chain (a tuple, root first; chain[cut] stands for the\n"
"middle of a cut chain, 0: none), in the cycle reports'\n"
"vocabulary: a list of (label, index), index being the object the reference leads to. A\n"
"container drawn as part of its owner (an instance's or a class's __dict__) is folded in.");

static PyObject *
owner_labels(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_owner_labels takes 2 arguments");
        return NULL;
    }
    PyObject *chain = args[0];
    Py_ssize_t cut = PyLong_AsSsize_t(args[1]);
    if (cut == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyTuple_Check(chain)) {
        PyErr_SetString(PyExc_TypeError, "_owner_labels: chain must be a tuple");
        return NULL;
    }
    PyObject *out = PyList_New(0), *owned = PyList_New(0);  /* new references */
    tgc_names ns = {0};
    if (out == NULL || owned == NULL) {
        goto error;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(chain);
    for (Py_ssize_t i = 0; i + 1 < n;) {
        PyObject *p = PyTuple_GET_ITEM(chain, i), *c = PyTuple_GET_ITEM(chain, i + 1);  /* borrowed */
        PyObject *next = i + 2 < n && i + 2 != cut ? PyTuple_GET_ITEM(chain, i + 2) : NULL;
        PyObject *label = NULL;  /* new reference */
        Py_ssize_t to = i + 1;
        if (cut > 0 && i + 1 == cut) {
            label = PyUnicode_FromString("\u2026");  /* the cut middle: one label for it */
            to = i + 2 < n ? i + 2 : i + 1;
        }
        else if (PyType_Check(p) && next != NULL && c == ((PyTypeObject *)p)->tp_dict) {
            label = owners__type_attr(c, next);
            to = label ? i + 2 : to;
        }
        if (label == NULL && !PyErr_Occurred()) {
            label = owners__item_label(p, c);
        }
        if (label == NULL && !PyErr_Occurred()) {
            if (tgc_names_collect(p, &ns, owned) < 0) {
                goto error;
            }
            /* Containers drawn as part of p (its __dict__, a function's closure tuple and
             * cells) are folded: the label of the deepest object reached through them wins,
             * "closure x" for p -> tuple -> cell -> x. */
            Py_ssize_t end = i + 1;
            while (end + 1 < n && end + 1 != cut && owners__folded(&ns, PyTuple_GET_ITEM(chain, end))) {
                end++;
            }
            PyObject *l = NULL;  /* borrowed */
            for (; end >= i + 2 && l == NULL; end--) {
                PyObject *via = PyTuple_GET_ITEM(chain, end - 1);
                l = tgc_names_take(&ns, PyTuple_GET_ITEM(chain, end), via);
                to = l ? end : to;
            }
            if (l == NULL) {
                to = i + 1;
                l = tgc_names_take(&ns, c, NULL);
            }
            label = l ? Py_NewRef(l) : NULL;
            tgc_names_clear(&ns);
            if (label == NULL) {
                /* a reference tp_traverse reports and no field names (a C extension's slot) */
                PyObject *tn = tgc_type_name(c);
                label = tn ? PyUnicode_FromFormat("%c %U", 0x2192, tn) : NULL;
                Py_XDECREF(tn);
            }
        }
        if (label == NULL) {
            goto error;
        }
        PyObject *item = Py_BuildValue("(Nn)", label, to);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto error;
        }
        Py_DECREF(item);
        i = to;
    }
    Py_DECREF(owned);
    return out;

error:
    tgc_names_clear(&ns);
    Py_XDECREF(out);
    Py_XDECREF(owned);
    return NULL;
}

PyDoc_STRVAR(thread_states_doc,
"_thread_states($module, /)\n--\n\n"
"[(thread id, its state dict or None)] for every thread of the interpreter: where\n"
"threading.local keeps each thread's values, which no Python object refers to.");

static PyObject *
thread_states(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0);  /* new reference */
    if (out == NULL) {
        return NULL;
    }
    PyInterpreterState *interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    /* The GIL is held, so no thread state is created or freed while we walk the list. */
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        PyObject *d = tgc_compat_thread_dict(ts);  /* borrowed or NULL */
        PyObject *item = Py_BuildValue("(kO)", tgc_compat_thread_id(ts), d ? d : Py_None);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    return out;
}

PyDoc_STRVAR(frame_locals_doc,
"_frame_locals($module, frame, /)\n--\n\n"
"A function frame's local variables as a new dict, read from its slots: frame.f_locals is\n"
"never materialised. None for a module's or class body's frame; NotImplemented where the\n"
"frame layout is not known here (3.13+: copy frame.f_locals, a proxy).");

static PyObject *
frame_locals(PyObject *Py_UNUSED(module), PyObject *frame)
{
    return tgc_frame_snapshot(frame);
}

PyMethodDef tgc_owners_methods[] = {
    {"_frame_locals", (PyCFunction)frame_locals, METH_O, frame_locals_doc},
    {"_owner_search", (PyCFunction)(void (*)(void))owner_search, METH_FASTCALL, owner_search_doc},
    {"_owner_labels", (PyCFunction)(void (*)(void))owner_labels, METH_FASTCALL, owner_labels_doc},
    {"_thread_states", (PyCFunction)thread_states, METH_NOARGS, thread_states_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(owner_marks_doc,
"_owner_marks($module, on=None, /)\n--\n\n"
"Whether the owner-chain search marks visited objects in their gc header (on: set it);\n"
"False makes it keep its own map, as where the header is unknown. Returns the old value.");

static PyObject *
owner_marks(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "_owner_marks() takes at most one argument");
        return NULL;
    }
    int was = binding_marks_on;
    if (nargs == 1 && args[0] != Py_None) {
        int on = PyObject_IsTrue(args[0]);
        if (on < 0) {
            return NULL;
        }
        binding_marks_on = on;
    }
    return PyBool_FromLong(was);
}

PyMethodDef tgc_owners_testing_methods[] = {
    {"_owner_marks", (PyCFunction)(void (*)(void))owner_marks, METH_FASTCALL, owner_marks_doc},
    {NULL, NULL, 0, NULL},
};
