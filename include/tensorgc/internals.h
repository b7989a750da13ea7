/* internals.h: whether tensorgc may read the running interpreter's internals (the collector's
 * generation lists, a frame's slots), decided once at module exec (common/internals.c).
 *
 * Two halves must agree. At build time, compat.h's TGC_INTERNALS_KNOWN: compiled against CPython
 * 3.10-3.13 with the GIL (the code that reads internals is compiled only there). At run time,
 * this unit: the interpreter that loaded the module is the major.minor the build was compiled
 * for, and the environment does not ask for the portable path (TENSORGC_PORTABLE set to anything
 * but "" or "0"). Where either says no, the module runs on the public gc API only, and
 * tensorgc.features() says what that turns off and why. Python.h comes first. */
#ifndef TENSORGC_INTERNALS_H
#define TENSORGC_INTERNALS_H

/* Decides (the first call; later calls return the same answer) and returns tgc_internals_ok().
 * Reads the environment and the interpreter's version; runs no Python code; never fails. GIL. */
int tgc_internals_decide(void);

/* 1 when internals may be read; 0 before tgc_internals_decide ran, or when they may not. */
int tgc_internals_ok(void);

/* Why not (a static string; "" when tgc_internals_ok()). */
const char *tgc_internals_why(void);

#endif /* TENSORGC_INTERNALS_H */
