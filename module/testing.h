/* testing.h: how tensorgc._tensorgc_testing (module/testing.c, an extension of its own) finds
 * the functions it exposes: tensorgc._tensorgc's attribute _testing is a capsule named
 * TGC_TESTING_CAPSULE holding a tgc_testing_api, whose tables' functions the testing module binds
 * to the main module (their self), so they read its state. The functions stay in the main
 * extension, next to the engines they switch, and out of its namespace. Python.h comes first. */
#ifndef TGC_MODULE_TESTING_H
#define TGC_MODULE_TESTING_H

#define TGC_TESTING_CAPSULE "tensorgc._tensorgc._testing"
#define TGC_TESTING_API_VERSION 1  /* a testing module built from other sources refuses it */

typedef struct {
    int version;                   /* TGC_TESTING_API_VERSION */
    PyMethodDef *const *tables;    /* NULL-terminated list of NULL-terminated method tables */
} tgc_testing_api;

#endif /* TGC_MODULE_TESTING_H */
