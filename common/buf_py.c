/* buf_py.c: the Python-facing helper of the byte buffer (contract in include/tensorgc/buf.h):
 * a str appended as UTF-8, cut at TGC_PYSTR_MAX bytes, raw or escaped. Kept apart from buf.c so
 * that the buffer itself stays plain C (the C unit tests link it without an interpreter). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>

#include "tensorgc/buf.h"

int
tgc_buf_pystr(tgc_buf *b, PyObject *s, int how)
{
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    PyObject *bytes = NULL;
    if (u == NULL) {
        /* lone surrogates and the like */
        PyErr_Clear();
        bytes = PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace");
        if (bytes == NULL) {
            return -1;
        }
        u = PyBytes_AS_STRING(bytes);
        n = PyBytes_GET_SIZE(bytes);
    }
    char tail[64] = "";
    if (n > TGC_PYSTR_MAX) {
        /* a safety net: the strings that reach here were cut already (tgc_cut) */
        snprintf(tail, sizeof(tail), "\xe2\x80\xa6 (%zd bytes)", n);
        n = TGC_PYSTR_MAX;
        while (n > 0 && ((unsigned char)u[n] & 0xC0) == 0x80) {
            n--;  /* not in the middle of a UTF-8 sequence */
        }
    }
    if (how == 'd') {
        tgc_buf_dot(b, u, (size_t)n);
    }
    else if (how == 'h') {
        tgc_buf_html(b, u, (size_t)n);
    }
    else {
        tgc_buf_add(b, u, (size_t)n);
    }
    tgc_buf_puts(b, tail);
    Py_XDECREF(bytes);
    return b->oom ? (PyErr_NoMemory(), -1) : 0;
}
