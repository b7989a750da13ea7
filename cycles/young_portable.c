/* young_portable.c: young.h's functions where the build cannot read the collector's lists
 * (compat.h's TGC_HAVE_YOUNG_SCAN is 0: an interpreter this build does not know the collector
 * of). Nothing is pre-scanned, no sentinel is planted and no island proven: every collection may
 * hold tensors, and the detector arms them all (the portable path young.c's header describes).
 * tgc_young_plain, which needs no list, stays in young.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "tensorgc/compat.h"
#include "tensorgc/internals.h"
#include "tensorgc/owners.h"
#include "tensorgc/tensor.h"
#include "young.h"  /* after owners.h and tensor.h, as it says */

#if !TGC_HAVE_YOUNG_SCAN

int
tgc_young_layout_ok(void)
{
    return 0;
}

int
tgc_young_plant(int generation, PyTypeObject *tensor, tgc_young_catch catch, void *arg)
{
    (void)generation, (void)tensor, (void)catch, (void)arg;
    return -1;
}

int
tgc_young_uproot(void)
{
    return 0;
}

int
tgc_young_planted(void)
{
    return 0;
}

void
tgc_young_undefer(PyObject *deferred)
{
    (void)deferred;
}

unsigned long long
tgc_young_unwalked(unsigned long long *cut)
{
    *cut = 0;
    return 0;
}

unsigned long long
tgc_young_near(void)
{
    return 0;
}

int
tgc_young_selfcheck(const char **why)
{
    tgc_shapes_init();  /* tgc_traverse_fast still uses it */
    *why = tgc_internals_decide() ? "this build does not read the collector's lists"
                                  : tgc_internals_why();
    return 0;
}

int
tgc_young_may_hold(PyTypeObject *tensor, int generation)
{
    (void)tensor;
    (void)generation;
    return 1;
}

int
tgc_young_island_exact(PyObject *list)
{
    (void)list;
    return 0;
}

Py_ssize_t
tgc_young_crosscheck_hits(PyTypeObject *tensor, int generation, Py_ssize_t *tested)
{
    (void)tensor;
    (void)generation;
    *tested = 0;
    return 0;
}

int
tgc_young_island(PyTypeObject *tensor, int generation, int crosscheck, PyObject **island,
                 tgc_island_info *info)
{
    (void)tensor;
    (void)generation;
    (void)crosscheck;
    *island = NULL;
    if (info != NULL) {
        memset(info, 0, sizeof(*info));
    }
    return TGC_YOUNG_ARM;
}

#endif
