/* heapmark.c: the visited mark young.h lends the owner-chain search (graph/owners.c, through
 * binding.c and module.c): the collector's "being collected" bit of a gc object's header, clear
 * on every object outside a collection. Built with Py_BUILD_CORE for gclists.h, like young.c;
 * usable only where young.c's self-check passed, and never during a collection. */
#define Py_BUILD_CORE 1
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/compat.h"
#include "tensorgc/internals.h"
#include "gclists.h"

#include "tensorgc/owners.h"
#include "tensorgc/tensor.h"
#include "young.h"

#if TGC_HAVE_YOUNG_SCAN
static int
heapmark__usable(void)
{
    /* Inside a collection (a finalizer or a weakref callback calling in) the collector owns
     * the bit: the caller keeps its own set then. */
    return tgc_young_layout_ok() && !tgc_gc_collecting();
}

static int
heapmark__test_and_set(PyObject *op)
{
    tgc_gc_node *g = tgc_gc_node_of(op);
    int was = tgc_gc_marked(g);
    tgc_gc_mark(g);
    return was;
}

static int
heapmark__test(PyObject *op)
{
    return tgc_gc_marked(tgc_gc_node_of(op));
}

static void
heapmark__clear(PyObject *op)
{
    tgc_gc_unmark(tgc_gc_node_of(op));
}
#else
static int heapmark__usable(void) { return 0; }
static int heapmark__test_and_set(PyObject *op) { (void)op; return 0; }
static int heapmark__test(PyObject *op) { (void)op; return 0; }
static void heapmark__clear(PyObject *op) { (void)op; }
#endif

const tgc_heapmark tgc_young_mark = {
    heapmark__usable, heapmark__test_and_set, heapmark__test, heapmark__clear,
};
