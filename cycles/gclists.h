/* gclists.h: the cyclic collector's internals that cycles/young.c reads (and, for the sentinel,
 * writes: a node moved within its lists, PEP 442's "finalized" bit), and nothing else of them:
 * its generation lists (doubly linked through the PyGC_Head before each tracked object),
 * the "being collected" bit of a header, and whether a collection is running. Only where
 * compat.h's TGC_HAVE_YOUNG_SCAN says the build knows them: CPython 3.10-3.13 with the GIL,
 * whose collectors (Modules/gcmodule.c to 3.12, Python/gc.c in 3.13) keep every tracked object
 * in one of NUM_GENERATIONS lists, interp->gc.generations[g].head, a new object at the tail of
 * generation 0, and collect generation g by merging the lists 0..g-1 into g's. 3.14's collector
 * keeps a young list and two old spaces instead (docs/api.md): none of this applies there, and
 * TGC_HAVE_YOUNG_SCAN is 0.
 *
 * For young.c only, which is built with Py_BUILD_CORE (Python.h and tensorgc/compat.h first).
 * Everything here needs the GIL; tgc_young_selfcheck (young.c) confirms the layout on the
 * running interpreter before any of it is used. */
#ifndef TGC_GCLISTS_H
#define TGC_GCLISTS_H

#if TGC_HAVE_YOUNG_SCAN

#include "internal/pycore_interp.h"
#include "internal/pycore_gc.h"

#define TGC_GC_GENERATIONS NUM_GENERATIONS

typedef PyGC_Head tgc_gc_node;

/* The head of generation gen's list (0 <= gen < TGC_GC_GENERATIONS). */
static inline tgc_gc_node *
tgc_gc_list(int gen)
{
    return &PyInterpreterState_Get()->gc.generations[gen].head;
}

/* The head of the list gc.freeze() moves objects to (the permanent generation). */
static inline tgc_gc_node *
tgc_gc_permanent_list(void)
{
    return &PyInterpreterState_Get()->gc.permanent_generation.head;
}

static inline tgc_gc_node *
tgc_gc_next(tgc_gc_node *g)
{
    return _PyGCHead_NEXT(g);
}

static inline tgc_gc_node *
tgc_gc_prev(tgc_gc_node *g)
{
    return _PyGCHead_PREV(g);
}

/* The object a list node heads (borrowed), and the node of a gc object. */
static inline PyObject *
tgc_gc_object(tgc_gc_node *g)
{
    return (PyObject *)(g + 1);
}

static inline tgc_gc_node *
tgc_gc_node_of(PyObject *op)
{
    return _Py_AS_GC(op);
}

static inline int
tgc_gc_tracked(PyObject *op)
{
    return _PyObject_GC_IS_TRACKED(op);
}

/* The collector's "being collected" bit (_PyGC_PREV_MASK_COLLECTING of _gc_prev): clear on every
 * object outside a collection; the collector sets it on the objects it examines first thing
 * (update_refs) and clears it on survivors before the collection ends. Borrowed as a mark only
 * while no collection runs and no Python code can run (young.h says who). */
static inline int
tgc_gc_marked(const tgc_gc_node *g)
{
    return (g->_gc_prev & _PyGC_PREV_MASK_COLLECTING) != 0;
}

static inline void
tgc_gc_mark(tgc_gc_node *g)
{
    g->_gc_prev |= _PyGC_PREV_MASK_COLLECTING;
}

static inline void
tgc_gc_unmark(tgc_gc_node *g)
{
    g->_gc_prev &= ~(uintptr_t)_PyGC_PREV_MASK_COLLECTING;
}

/* Whether PEP 442's finalizer already ran on the object (_PyGC_PREV_MASK_FINALIZED), and setting
 * or clearing that: the sentinel (young.c) defers the finalizers of the garbage it takes, so that
 * the report sees the garbage as the collector found it, and gives them back before it is freed. */
static inline int
tgc_gc_finalized(const tgc_gc_node *g)
{
    return (g->_gc_prev & _PyGC_PREV_MASK_FINALIZED) != 0;
}

static inline void
tgc_gc_set_finalized(tgc_gc_node *g)
{
    g->_gc_prev |= _PyGC_PREV_MASK_FINALIZED;
}

static inline void
tgc_gc_unset_finalized(tgc_gc_node *g)
{
    g->_gc_prev &= ~(uintptr_t)_PyGC_PREV_MASK_FINALIZED;
}

/* Moves node (in some list) to just after head, as the collector's gc_list_move does; the flag
 * bits of node's _gc_prev are kept. Only outside the collector's passes (its "start" callbacks). */
static inline void
tgc_gc_move_after(tgc_gc_node *node, tgc_gc_node *head)
{
    tgc_gc_node *prev = _PyGCHead_PREV(node), *next = _PyGCHead_NEXT(node);
    _PyGCHead_SET_NEXT(prev, next);
    _PyGCHead_SET_PREV(next, prev);
    tgc_gc_node *first = _PyGCHead_NEXT(head);
    _PyGCHead_SET_NEXT(head, node);
    _PyGCHead_SET_PREV(node, head);
    _PyGCHead_SET_NEXT(node, first);
    _PyGCHead_SET_PREV(first, node);
}

/* The collector's debug flags (gc.get_debug()), read without a call. */
static inline int
tgc_gc_debug(void)
{
    return PyInterpreterState_Get()->gc.debug;
}

/* Whether a collection is running (the collector owns the bits above then). */
static inline int
tgc_gc_collecting(void)
{
    return PyInterpreterState_Get()->gc.collecting != 0;
}

/* How many collections the collector finished, all generations together: it adds one at the end
 * of each, so the number names the collection under way. */
static inline Py_ssize_t
tgc_gc_collections(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    Py_ssize_t n = 0;
    for (int g = 0; g < NUM_GENERATIONS; g++) {
        n += interp->gc.generation_stats[g].collections;
    }
    return n;
}

/* The head of the list the collector is examining, during its first passes (update_refs marks
 * every object of it as being collected and puts its gc_refs where the back link was; the lists
 * of the younger generations were merged into it, empty): the youngest list that is not empty,
 * when its first object is marked and does not link back to the head. NULL at any other time:
 * outside those passes no list holds a marked object, except while young.c marks the young
 * lists itself, between collections or in a "start" callback, where every back link is intact. */
static inline tgc_gc_node *
tgc_gc_examined_list(void)
{
    for (int g = 0; g < NUM_GENERATIONS; g++) {
        tgc_gc_node *head = tgc_gc_list(g);
        tgc_gc_node *first = (tgc_gc_node *)head->_gc_next;
        if (first != head) {
            return tgc_gc_marked(first) && _PyGCHead_PREV(first) != head ? head : NULL;
        }
    }
    return NULL;
}

/* Links the untracked node at the front of the examined list (tgc_gc_examined_list), as
 * update_refs and subtract_refs leave an object they examined: the list is singly linked through
 * _gc_next then, and _gc_prev holds the object's gc_refs (`refs`: its references from outside
 * the list) and the "being collected" bit; move_unreachable relinks it like the others. Only
 * inside those passes, behind the collector's cursor (the front). */
static inline void
tgc_gc_link_examined(tgc_gc_node *node, tgc_gc_node *head, Py_ssize_t refs)
{
    node->_gc_next = head->_gc_next;
    node->_gc_prev = (node->_gc_prev & _PyGC_PREV_MASK_FINALIZED) | _PyGC_PREV_MASK_COLLECTING |
                     ((uintptr_t)refs << _PyGC_PREV_SHIFT);
    head->_gc_next = (uintptr_t)node;
}

#endif /* TGC_HAVE_YOUNG_SCAN */

#endif /* TGC_GCLISTS_H */
