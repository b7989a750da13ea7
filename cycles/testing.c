/* testing.c: the cycle detector's switches and counters, for tests and benchmarks only. These
 * functions live in tensorgc._tensorgc_testing (module/testing.c), never in tensorgc._tensorgc;
 * they are bound to the main module, whose state they read. Each converts its argument and calls
 * the hook's setter (hook.h); the switches are the hook's state. */
#include "cycles.h"
#include "module/state.h"
#include "binding.h"

/* The optional on/off argument of the switches below: 1 with *on set when one was given, 0 when
 * absent or None, -1 with an exception. */
static int
testing__arg(const char *name, PyObject *const *args, Py_ssize_t nargs, int *on)
{
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most one argument", name);
        return -1;
    }
    if (nargs == 0 || args[0] == Py_None) {
        return 0;
    }
    *on = PyObject_IsTrue(args[0]);
    return *on < 0 ? -1 : 1;
}

/* A counter a switch reports, by name. */
typedef struct {
    const char *name;
    unsigned long long value;
} testing_count;

/* What every switch does: turns switch `which` as its argument says (if given), then returns
 * {'enabled': bool, <counter>: int...} as a new dict, or NULL with an exception set. The counters
 * are read before the switch is turned: turning it changes none of them. */
static PyObject *
testing__switch(tgc_cycles *c, const char *name, PyObject *const *args, Py_ssize_t nargs,
                int which, const testing_count *counts, int ncounts)
{
    int on = 0, given = testing__arg(name, args, nargs, &on);
    if (given < 0 || (given && tgc_hook_switch(c, which, on) < 0)) {
        return NULL;
    }
    PyObject *d = PyDict_New();  /* new reference */
    if (d == NULL ||
        PyDict_SetItemString(d, "enabled", tgc_hook_switched(c, which) ? Py_True : Py_False) < 0) {
        goto error;
    }
    for (int i = 0; i < ncounts; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(counts[i].value);  /* new reference */
        int rc = v != NULL ? PyDict_SetItemString(d, counts[i].name, v) : -1;
        Py_XDECREF(v);
        if (rc < 0) {
            goto error;
        }
    }
    return d;
error:
    Py_XDECREF(d);
    return NULL;
}

PyDoc_STRVAR(young_scan_doc,
"_young_scan($module, enabled=None, /)\n--\n\n"
"The young-generation pre-scan (cycles/young.c): with enabled, switch it on or off (on is refused "
"where the interpreter's collector is not the one it was built for). Returns {'available', "
"'why', 'enabled', 'skipped', 'armed'}: why it is not available ('' where it is); the last two "
"count the collections that ran without the detector and those it armed since import.");

static PyObject *
young_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    const tgc_hook_counters *n = &c->counters;
    PyObject *d = testing__switch(c, "_young_scan", args, nargs, TGC_HOOK_YOUNG_SCAN,
                                  (testing_count[]){{"skipped", n->young_skipped},
                                                    {"armed", n->young_armed}}, 2);
    PyObject *avail = tgc_hook_prescan_available(c) ? Py_True : Py_False;
    PyObject *why = d != NULL ? PyUnicode_FromString(c->young_why) : NULL;  /* new reference */
    if (d != NULL && (why == NULL || PyDict_SetItemString(d, "available", avail) < 0 ||
                      PyDict_SetItemString(d, "why", why) < 0)) {
        Py_CLEAR(d);
    }
    Py_XDECREF(why);
    return d;
}

PyDoc_STRVAR(young_island_doc,
"_young_island($module, enabled=None, /)\n--\n\n"
"Islands (cycles/young.c): when a young collection could hold tensors, prove before it runs "
"that they sit in garbage nothing else references, and let the collector free the rest alone. "
"With enabled, switch it on or off (off: such collections are armed; on is refused where the "
"pre-scan is not available). Returns {'enabled', 'used', 'fallback', 'marked', 'finalized', "
"'early', 'finalizers'}: collections that took the path, young ones that could hold tensors but "
"were armed, proofs that needed the young lists marked (an old object or a class in reach, a "
"large set), islands with a pending finalizer (__del__, a suspended generator or coroutine), "
"those of them reported at the start of a full collection, and the finalizers the detector ran "
"for them after the report.");

static PyObject *
young_island(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    const tgc_hook_counters *n = &c->counters;
    return testing__switch(c, "_young_island", args, nargs, TGC_HOOK_ISLAND,
                           (testing_count[]){{"used", n->island_used},
                                             {"fallback", n->island_fallback},
                                             {"marked", n->island_marked},
                                             {"finalized", n->island_finalized},
                                             {"early", n->island_early},
                                             {"finalizers", n->island_finalizers}}, 6);
}

PyDoc_STRVAR(sentinel_doc,
"_sentinel($module, enabled=None, /)\n--\n\n"
"The sentinel (cycles/young.c's tgc_young_plant): collections run alone with a pair of objects "
"planted at the front of what they examine, which looks at their garbage once the collector found "
"it, instead of the pre-scan and islands before the collection. With enabled, switch it on or off "
"(on is refused where the pre-scan is not available). Returns {'enabled', 'planted', 'taken', "
"'armed', 'lost', 'unwalked'}: collections it was planted for; of those, whose garbage held "
"tensors and was taken for the report, that were armed from inside the collection (the user's gc "
"debug flags, or the garbage could not be walked), and whose sentinel outlived the collection; "
"the walks the tensor watch spared (the collector followed no reference to a tensor), those "
"it cut short (the hits found accounted for every such reference), and those that started beside "
"the tensor the collection planted the resident pair for ('near').");

static PyObject *
sentinel(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    const tgc_hook_counters *n = &c->counters;
    unsigned long long cut = 0, unwalked = tgc_young_unwalked(&cut);
    return testing__switch(c, "_sentinel", args, nargs, TGC_HOOK_SENTINEL,
                           (testing_count[]){{"planted", n->sentinel_planted},
                                             {"taken", n->sentinel_taken},
                                             {"armed", n->sentinel_armed},
                                             {"lost", n->sentinel_lost},
                                             {"unwalked", unwalked},
                                             {"cut", cut},
                                             {"near", tgc_young_near()}}, 7);
}

PyDoc_STRVAR(resident_doc,
"_resident($module, enabled=None, /)\n--\n\n"
"The resident sentinel (cycles/young.h): with the sentinel on, the hook leaves gc.callbacks and "
"the tensor watch plants the pair inside the collections that meet a tensor; the hook joins "
"gc.callbacks again only for the \"stop\" of a collection whose garbage the pair took or armed. "
"With enabled, switch it on or off (off: the hook stays on gc.callbacks and plants at every "
"\"start\"; on is refused where the pre-scan is not available). Returns {'enabled', 'resident', "
"'went', 'joined', 'planted', 'missed'}: whether it watches now (1 or 0), the times the hook "
"left gc.callbacks for it, the collections it joined gc.callbacks again for, the pairs planted, "
"and the spare pairs that could not be made (the hook went back to gc.callbacks).");

static PyObject *
resident(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    const tgc_hook_counters *n = &c->counters;
    unsigned long long missed = 0, planted = tgc_young_resident_planted(&missed);
    int now = tgc_hook_resident(c);
    return testing__switch(c, "_resident", args, nargs, TGC_HOOK_RESIDENT,
                           (testing_count[]){{"resident", (unsigned long long)now},
                                             {"went", n->resident_went},
                                             {"joined", n->resident_joined},
                                             {"planted", planted},
                                             {"missed", missed}}, 5);
}

PyDoc_STRVAR(island_crosscheck_doc,
"_island_crosscheck($module, enabled=None, /)\n--\n\n"
"With enabled, switch on or off checking every island proof that came without marking the "
"young lists against the marked proof (verdict, members, order). Returns {'enabled', "
"'checked', 'mismatched'}.");

static PyObject *
island_crosscheck(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    const tgc_hook_counters *n = &c->counters;
    return testing__switch(c, "_island_crosscheck", args, nargs, TGC_HOOK_CROSSCHECK,
                           (testing_count[]){{"checked", n->island_checked},
                                             {"mismatched", n->island_mismatched}}, 2);
}

PyDoc_STRVAR(prescan_crosscheck_doc,
"_prescan_crosscheck($module, enabled=None, /)\n--\n\n"
"With enabled, switch on or off testing every object of a young collection's generations both "
"as the pre-scan does (its fast paths, cycles/young.c) and through tp_traverse, before the "
"collection (on is refused where the pre-scan is not available). Returns {'enabled', 'checked', "
"'mismatched'}: objects tested both ways, and those the two ways disagreed on.");

static PyObject *
prescan_crosscheck(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    const tgc_hook_counters *n = &c->counters;
    return testing__switch(c, "_prescan_crosscheck", args, nargs, TGC_HOOK_PRESCAN_CHECK,
                           (testing_count[]){{"checked", n->prescan_checked},
                                             {"mismatched", n->prescan_mismatched}}, 2);
}

/* tp_traverse / tgc_traverse_fast visitor: appends the referent to a list (arg); -1 without
 * memory, which ends the traversal. */
static int
testing__collect(PyObject *o, void *arg)
{
    return PyList_Append((PyObject *)arg, o) < 0 ? -1 : 0;
}

PyDoc_STRVAR(traverse_fast_doc,
"_traverse_fast($module, obj, /)\n--\n\n"
"What the detector's fast traversal (cycles/young.c's tgc_traverse_fast, whose fast paths the "
"pre-scan shares) and obj's tp_traverse each visit, as two lists: (fast, full). The fast one "
"leaves out the type of a heap type's instance.");

static PyObject *
traverse_fast(PyObject *Py_UNUSED(module), PyObject *obj)
{
    PyObject *fast = PyList_New(0), *full = PyList_New(0);  /* new references */
    if (fast == NULL || full == NULL) {
        goto error;
    }
    tgc_shapes shapes;
    memset(&shapes, 0, sizeof(shapes));
    traverseproc trav = Py_TYPE(obj)->tp_traverse;
    if (tgc_traverse_fast(&shapes, obj, testing__collect, fast) != 0 ||
        (trav != NULL && PyObject_IS_GC(obj) && trav(obj, testing__collect, full) != 0)) {
        goto error;
    }
    PyObject *both = PyTuple_Pack(2, fast, full);  /* new reference */
    Py_DECREF(fast);
    Py_DECREF(full);
    return both;
error:
    Py_XDECREF(fast);
    Py_XDECREF(full);
    return NULL;
}

PyDoc_STRVAR(young_prescan_doc,
"_young_prescan($module, generation, /)\n--\n\n"
"Runs the pre-scan of a collection of generation (0 or 1) that would start now, and returns "
"whether it found a tensor, or an object referencing one (None where the pre-scan is not "
"available or torch is not imported). For micro-benchmarks of the pre-scan alone "
"(bench/micro_prescan.py).");

static PyObject *
young_prescan(PyObject *module, PyObject *arg)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    long gen = PyLong_AsLong(arg);
    if (gen == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (gen < 0 || gen > 1) {
        PyErr_SetString(PyExc_ValueError, "generation must be 0 or 1");
        return NULL;
    }
    if (!c->young_ok || tgc_tensor_resolve(c->tensor) != 1) {
        Py_RETURN_NONE;
    }
    return PyBool_FromLong(tgc_young_may_hold((PyTypeObject *)c->tensor->type, gen));
}

PyDoc_STRVAR(seeded_split_doc,
"_seeded_split($module, enabled=None, /)\n--\n\n"
"The seeded split (cycles/split.c): with enabled, switch it on or off (off: every report's "
"garbage goes through the full reference graph). Returns {'enabled', 'used', 'fallback'}: "
"splits it decided, and those it handed to the full split.");

static PyObject *
seeded_split(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    const tgc_hook_counters *n = &c->counters;
    return testing__switch(c, "_seeded_split", args, nargs, TGC_HOOK_SEEDED,
                           (testing_count[]){{"used", n->seeded_used},
                                             {"fallback", n->seeded_fallback}}, 2);
}

PyDoc_STRVAR(phase_times_doc,
"_phase_times($module, reset=False, /)\n--\n\n"
"Where the detector's time goes, per phase: {phase: (count, seconds)} since import or the last "
"reset; None unless the extension was built with -DTGC_PHASE_TIMES (make phases). For "
"benchmarks (bench/b1_inprocess.py).");

static PyObject *
phase_times(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    int reset = 0;
    if (testing__arg("_phase_times", args, nargs, &reset) < 0) {
        return NULL;
    }
#ifdef TGC_PHASE_TIMES
    static const char *const names[TGC_PHASE_COUNT] = {"scan", "island", "exact", "build",
                                                         "callback", "free", "plant", "walk",
                                                         "uproot"};
    tgc_young_walk_times(&c->phases[TGC_PHASE_WALK].n, &c->phases[TGC_PHASE_WALK].ns);
    PyObject *d = PyDict_New();  /* new reference */
    for (int i = 0; d != NULL && i < TGC_PHASE_COUNT; i++) {
        PyObject *v = Py_BuildValue("(Kd)", c->phases[i].n, (double)c->phases[i].ns / 1e9);
        if (v == NULL || PyDict_SetItemString(d, names[i], v) < 0) {
            Py_CLEAR(d);
        }
        Py_XDECREF(v);
    }
    if (d != NULL && reset) {
        memset(c->phases, 0, sizeof(c->phases));
    }
    return d;
#else
    (void)c;
    (void)reset;
    Py_RETURN_NONE;
#endif
}

PyDoc_STRVAR(report_dots_doc,
"_report_dots($module, /)\n--\n\n"
"A report's DOT is drawn on first use of .dot, .svg or .html, or when the detector lets go of a "
"report someone kept, since the garbage is freed then. Returns {'kept', 'skipped'}: reports "
"drawn at that moment, and reports nobody asked for nor kept, never drawn.");

static PyObject *
report_dots(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    const tgc_hook_counters *n = &tgc_state_of(module)->cycles->counters;
    return Py_BuildValue("{s:K,s:K}", "kept", n->dots_kept, "skipped", n->dots_skipped);
}

PyDoc_STRVAR(report_lists_doc,
"_report_lists($module, /)\n--\n\n"
"A report's lists (tensors, groups, edges, hints) are made on first use, or when the detector "
"lets go of a report someone kept. Returns how many reports had them made.");

static PyObject *
report_lists(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(tgc_state_of(module)->cycles->counters.lists_made);
}

PyDoc_STRVAR(renderer_stats_doc,
"_renderer_stats($module, /)\n--\n\n"
"The render worker's counters: started, killed (at the deadline), retired,\n"
"renders, lost (replaced because the program closed our socket), interrupted (by a Ctrl-C),\npid, fd.");

static PyObject *
renderer_stats(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    tgc_renderer_stats s;
    tgc_renderer_get_stats(&s);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:l,s:i}", "started",
                         (unsigned long long)s.started, "killed", (unsigned long long)s.killed,
                         "retired", (unsigned long long)s.retired, "renders",
                         (unsigned long long)s.renders, "lost", (unsigned long long)s.lost,
                         "interrupted", (unsigned long long)s.interrupted, "pid", s.pid,
                         "fd", s.fd);
}

PyDoc_STRVAR(set_render_worker_doc,
"_set_render_worker($module, path, /)\n--\n\n"
"Use the executable at path as the render worker from the next worker started on (tests: a\n"
"worker that never answers).");

static PyObject *
set_render_worker(PyObject *Py_UNUSED(module), PyObject *arg)
{
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes)) {
        return NULL;
    }
    int rc = tgc_renderer_set_path(PyBytes_AS_STRING(bytes));
    Py_DECREF(bytes);
    if (rc < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(observer_count_doc,
"_observer_count($module, /)\n--\n\nHow many observers are registered.");

static PyObject *
observer_count(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    return PyLong_FromSsize_t(c->observers ? PyList_GET_SIZE(c->observers) : 0);
}

PyDoc_STRVAR(tensor_watched_doc,
"_tensor_watched($module, tp, /)\n--\n\n"
"Whether the type tp carries the tensor watch's tp_is_gc (cycles/watch.c).");

static PyObject *
tensor_watched(PyObject *module, PyObject *tp)
{
    (void)module;
    if (!PyType_Check(tp)) {
        PyErr_SetString(PyExc_TypeError, "_tensor_watched(tp): a type");
        return NULL;
    }
    return PyBool_FromLong(tgc_watch_on_type((PyTypeObject *)tp));
}

PyDoc_STRVAR(tensor_watch_reset_doc,
"_tensor_watch_reset($module, /)\n--\n\n"
"Takes the tensor watch off every tensor type and forgets its verdict (cycles/watch.c's "
"tgc_watch_reset), so that the next collection with a cycle observer decides afresh, as the "
"first one of a process does. Needs torch imported.");

static PyObject *
tensor_watch_reset(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    tgc_cycles *c = tgc_state_of(module)->cycles;
    if (tgc_tensor_resolve(c->tensor) != 1) {
        PyErr_Clear();
        PyErr_SetString(PyExc_RuntimeError, "_tensor_watch_reset: torch is not imported");
        return NULL;
    }
    if (tgc_watch_reset((PyTypeObject *)c->tensor->type, tgc_young_layout_ok()) < 0 ||
        tgc_hook_resident_check(c) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Another tool's tp_is_gc, as far as the watch can tell: answers what an empty slot does. */
static int
testing__foreign_is_gc(PyObject *op)
{
    (void)op;
    return 1;
}

PyDoc_STRVAR(foreign_is_gc_doc,
"_foreign_is_gc($module, tp, on, /)\n--\n\n"
"Puts a tp_is_gc of another tool's on the type tp (on true), or takes it off (on false, only "
"where it is that one): a tensor type whose slot is someone else's, which the tensor watch must "
"leave alone.");

static PyObject *
foreign_is_gc(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "_foreign_is_gc(tp, on): a type and a flag");
        return NULL;
    }
    int on = PyObject_IsTrue(args[1]);
    if (on < 0) {
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)args[0];
    if (on && tp->tp_is_gc != NULL) {
        PyErr_SetString(PyExc_ValueError, "_foreign_is_gc: the type already has a tp_is_gc");
        return NULL;
    }
    if (on) {
        tp->tp_is_gc = testing__foreign_is_gc;
    }
    else if (tp->tp_is_gc == testing__foreign_is_gc) {
        tp->tp_is_gc = NULL;
    }
    Py_RETURN_NONE;
}

PyMethodDef tgc_cycles_testing_methods[] = {
    {"_tensor_watched", (PyCFunction)tensor_watched, METH_O, tensor_watched_doc},
    {"_tensor_watch_reset", (PyCFunction)tensor_watch_reset, METH_NOARGS,
     tensor_watch_reset_doc},
    {"_foreign_is_gc", (PyCFunction)(void (*)(void))foreign_is_gc, METH_FASTCALL,
     foreign_is_gc_doc},
    {"_phase_times", (PyCFunction)(void (*)(void))phase_times, METH_FASTCALL, phase_times_doc},
    {"_seeded_split", (PyCFunction)(void (*)(void))seeded_split, METH_FASTCALL, seeded_split_doc},
    {"_young_island", (PyCFunction)(void (*)(void))young_island, METH_FASTCALL, young_island_doc},
    {"_sentinel", (PyCFunction)(void (*)(void))sentinel, METH_FASTCALL, sentinel_doc},
    {"_resident", (PyCFunction)(void (*)(void))resident, METH_FASTCALL, resident_doc},
    {"_island_crosscheck", (PyCFunction)(void (*)(void))island_crosscheck, METH_FASTCALL,
     island_crosscheck_doc},
    {"_young_scan", (PyCFunction)(void (*)(void))young_scan, METH_FASTCALL, young_scan_doc},
    {"_prescan_crosscheck", (PyCFunction)(void (*)(void))prescan_crosscheck, METH_FASTCALL,
     prescan_crosscheck_doc},
    {"_traverse_fast", (PyCFunction)traverse_fast, METH_O, traverse_fast_doc},
    {"_young_prescan", (PyCFunction)young_prescan, METH_O, young_prescan_doc},
    {"_report_dots", (PyCFunction)report_dots, METH_NOARGS, report_dots_doc},
    {"_report_lists", (PyCFunction)report_lists, METH_NOARGS, report_lists_doc},
    {"_renderer_stats", (PyCFunction)renderer_stats, METH_NOARGS, renderer_stats_doc},
    {"_set_render_worker", (PyCFunction)set_render_worker, METH_O, set_render_worker_doc},
    {"_observer_count", (PyCFunction)observer_count, METH_NOARGS, observer_count_doc},
    {NULL, NULL, 0, NULL},
};
