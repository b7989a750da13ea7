/* resident.c: the resident sentinel (contract in young.h): a spare pair the tensor watch plants
 * from inside the collections that meet a tensor (watch.h's planter), so that the detector needs
 * no gc.callbacks entry between collections. The pair itself, its walk and its finalizer are
 * young.c's (sentinel.h); this file keeps the spare, plants it, and keeps a planted pair through
 * its collection. Built with Py_BUILD_CORE for gclists.h, like young.c. */
#define Py_BUILD_CORE 1
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tensorgc/compat.h"
#include "gclists.h"

#include "tensorgc/owners.h"
#include "young.h"
#include "watch.h"
#include "sentinel.h"

#if TGC_HAVE_YOUNG_SCAN

static void resident__done(young_sentinel *s);

/* All protected by the GIL (the collector, and every caller of tp_is_gc, hold it). */
static young_sentinel *resident_spare;     /* new reference: the first of an untracked pair that
                                              waits for the next collection; NULL when none */
static int resident_on;
static PyTypeObject *resident_tensor;      /* borrowed, as tgc_young_plant's tensor */
static tgc_young_catch resident_catch;
static tgc_young_lost resident_lost, resident_tick;
static void *resident_arg;
static young_sentinel *resident_held;      /* new reference: the last pair planted, kept
                                              through its collection (resident__done) */
static Py_ssize_t resident_token = -1;     /* the collection the last pair was planted in */
static unsigned long long resident_n, resident_missed;  /* pairs planted; spares not made */

/* A new spare: an untracked pair, a holding b and b holding a. 0, or -1 without memory (no
 * exception left set). */
static int
resident__make_spare(void)
{
    resident_spare = tgc_sentinel_pair_new();  /* new reference */
    return resident_spare != NULL ? 0 : -1;
}

static void
resident__drop(young_sentinel **slot)
{
    young_sentinel *a = *slot;
    *slot = NULL;
    if (a != NULL) {
        tgc_sentinel_break(a);
        Py_DECREF(a);
    }
}

/* The watch's planter (watch.h): called on every reference to a tensor the collector, or anyone
 * asking _PyObject_IS_GC, follows. Plants the spare only the first time in a collection's first
 * passes (young.h says why that is the first reference the collection follows to a tensor). */
static void
resident__plant(void *unused, PyObject *tensor)
{
    (void)unused;
    young_sentinel *a = resident_spare;
    if (a == NULL || !resident_on) {
        /* The spare went into this collection (every later reference it follows to a tensor
         * ends here), or none could be made (resident__done said so). */
        return;
    }
    if (!tgc_gc_collecting()) {
        return;
    }
    tgc_gc_node *head = tgc_gc_examined_list();
    if (head == NULL) {
        return;
    }
    Py_ssize_t token = tgc_gc_collections();
    if (token == resident_token) {
        return;  /* planted in this collection already */
    }
    resident_token = token;
    resident_spare = NULL;
    young_sentinel *b = (young_sentinel *)a->peer;
    a->first = 1;
    a->resident = 1;
    a->done = resident__done;
    a->tensor = resident_tensor;
    a->catch = resident_catch;
    a->arg = resident_arg;
    tgc_watch_set_mark(&a->watch, 1);  /* counts this visit: the planter runs before the count */
    /* The reference changes no gc_refs (the collector computed them from the refcounts before
     * this pass) and is dropped by the pair's finalizer, before the collector reads refcounts
     * again (its resurrection check). */
    a->hint = Py_NewRef(tensor);
    /* each is referenced once, by the other, from inside the list: gc_refs 0 */
    tgc_gc_link_examined(tgc_gc_node_of((PyObject *)b), head, 0);
    tgc_gc_link_examined(tgc_gc_node_of((PyObject *)a), head, 0);
    resident_n++;
    Py_DECREF(a);  /* the spare's reference (not the last): the pair lives by its cycle alone */
}

/* A resident pair's `done`, from its finalizer once the walk ran: keeps the pair, breaks up the
 * one kept before, and makes the next spare, or tells the caller there is none. */
static void
resident__done(young_sentinel *s)
{
    s->done = NULL;
    /* The pair outlives its collection, as a planted one does (not counted as collected
     * either): freed now it would leave the collector's list of finalized garbage, and a pair
     * of another copy of tensorgc planted behind it would take itself for the first of the
     * garbage and walk what this one took. The last one is broken up here, outside its own
     * collection's lists. */
    young_sentinel *old = resident_held;
    resident_held = (young_sentinel *)Py_NewRef((PyObject *)s);
    if (old != NULL) {
        tgc_sentinel_break(old);
        Py_DECREF(old);
    }
    if (resident_on && resident_spare == NULL && resident__make_spare() < 0) {
        resident_missed++;
        if (resident_lost != NULL) {
            resident_lost(resident_arg);
        }
    }
    if (resident_on && resident_tick != NULL) {
        resident_tick(resident_arg);
    }
}

int
tgc_young_collecting(void)
{
    return tgc_young_layout_ok() ? tgc_gc_collecting() : -1;
}

int
tgc_young_resident_start(PyTypeObject *tensor, tgc_young_catch catch, tgc_young_lost lost,
                         tgc_young_lost tick, void *arg)
{
    if (!tgc_young_layout_ok() || !tgc_sentinel_type_ready() || tensor == NULL ||
        !tgc_watch_on(tensor)) {
        return -1;
    }
    if (resident_spare == NULL && resident__make_spare() < 0) {
        return -1;
    }
    if (!tgc_watch_planter_set(resident__plant, NULL)) {
        resident__drop(&resident_spare);
        return -1;
    }
    resident_tensor = tensor;
    resident_catch = catch;
    resident_lost = lost;
    resident_tick = tick;
    resident_arg = arg;
    resident_on = 1;
    return 0;
}

void
tgc_young_resident_stop(void)
{
    tgc_watch_planter_clear(resident__plant, NULL);
    resident_on = 0;
    resident__drop(&resident_spare);
    resident__drop(&resident_held);
}

int
tgc_young_resident(void)
{
    return resident_on && tgc_watch_planter_is(resident__plant, NULL);
}

unsigned long long
tgc_young_resident_planted(unsigned long long *missed)
{
    *missed = resident_missed;
    return resident_n;
}

#else  /* no known generation lists: never resident */

int
tgc_young_resident_start(PyTypeObject *tensor, tgc_young_catch catch, tgc_young_lost lost,
                         tgc_young_lost tick, void *arg)
{
    (void)tensor, (void)catch, (void)lost, (void)tick, (void)arg;
    return -1;
}

int
tgc_young_collecting(void)
{
    return -1;
}

void
tgc_young_resident_stop(void)
{
}

int
tgc_young_resident(void)
{
    return 0;
}

unsigned long long
tgc_young_resident_planted(unsigned long long *missed)
{
    *missed = 0;
    return 0;
}

#endif
