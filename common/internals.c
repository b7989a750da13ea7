/* internals.c: the run-time half of the decision whether tensorgc reads the interpreter's
 * internals (contract in include/tensorgc/internals.h; the build-time half is compat.h's
 * TGC_INTERNALS_KNOWN). An extension is normally loaded only by the interpreter it was built
 * for (its file name carries the version), but that is a convention of the importer, not a
 * guarantee: a renamed or copied file, an embedding application, a stable-ABI loader. Reading
 * another version's collector lists would read garbage, so the version is checked here too. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorgc/compat.h"
#include "tensorgc/internals.h"

/* Written by the first tgc_internals_decide (module exec, GIL held), read-only afterwards: every
 * later exec (a reload, a subinterpreter of the same process) would compute the same answer. */
static int internals_state = -1;  /* -1: not decided; 0: no; 1: yes */
static char internals_why[240];

/* The running interpreter's major and minor version. Py_Version is 3.11+; before that, the
 * version string ("3.10.13 (main, ...)"). */
static void
internals__running(int *major, int *minor)
{
#if PY_VERSION_HEX >= 0x030B0000
    *major = (int)((Py_Version >> 24) & 0xFF);
    *minor = (int)((Py_Version >> 16) & 0xFF);
#else
    *major = *minor = -1;
    if (sscanf(Py_GetVersion(), "%d.%d", major, minor) != 2) {
        *major = *minor = -1;
    }
#endif
}

static int
internals__portable_asked(void)
{
    const char *v = getenv("TENSORGC_PORTABLE");
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

int
tgc_internals_decide(void)
{
    if (internals_state >= 0) {
        return internals_state;
    }
    int major, minor;
    internals__running(&major, &minor);
    int built_major = (PY_VERSION_HEX >> 24) & 0xFF, built_minor = (PY_VERSION_HEX >> 16) & 0xFF;
    internals_state = 0;
    if (!TGC_INTERNALS_KNOWN) {
        snprintf(internals_why, sizeof(internals_why), "%s", TGC_INTERNALS_WHY);
    }
    else if (major != built_major || minor != built_minor) {
        snprintf(internals_why, sizeof(internals_why),
                 "built for CPython %d.%d, running on %d.%d: the collector's layout of the "
                 "running interpreter is not the one this build reads",
                 built_major, built_minor, major, minor);
    }
    else if (internals__portable_asked()) {
        snprintf(internals_why, sizeof(internals_why),
                 "TENSORGC_PORTABLE is set: the public gc API only, by request");
    }
    else {
        internals_why[0] = '\0';
        internals_state = 1;
    }
    return internals_state;
}

int
tgc_internals_ok(void)
{
    return internals_state == 1;
}

const char *
tgc_internals_why(void)
{
    return internals_state == 1 ? "" : internals_state < 0 ? "not decided yet" : internals_why;
}
