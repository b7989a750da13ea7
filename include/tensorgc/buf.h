/* buf.h: the contract of common/buf.c, a growable byte buffer and the escapers every
 * user-derived string goes through (DOT labels, HTML text). Plain C, shared by every subsystem:
 * cycles/ writes reports and pages with it, tensor/ the explanation of a wrapper's bytes.
 * common/buf_py.c adds the one Python-facing helper (tgc_buf_pystr). */
#ifndef TENSORGC_BUF_H
#define TENSORGC_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *data;     /* NUL-terminated while len < cap; NULL until the first append */
    size_t len, cap;  /* cap is 0 while data is NULL, and from the moment oom is set */
    int oom;        /* sticky: set once an allocation failed, later appends do nothing */
} tgc_buf;

void tgc_buf_free(tgc_buf *b);
/* Empties b and keeps its memory for the next use (an out-of-memory b stays so). */
void tgc_buf_reset(tgc_buf *b);
/* Room for extra more bytes (and the NUL) without another allocation; 0, or -1 once oom. */
int tgc_buf_reserve(tgc_buf *b, size_t extra);
/* tgc_buf_add's path through tgc_buf_reserve; callers use tgc_buf_add. */
void tgc_buf_add_grow(tgc_buf *b, const char *s, size_t n);
/* Inline: a report makes a few hundred small appends, nearly all into room already there. */
static inline void
tgc_buf_add(tgc_buf *b, const char *s, size_t n)
{
    if (b->len + n < b->cap) {  /* cap > 0 here: data is allocated, oom is not set */
        memcpy(b->data + b->len, s, n);
        b->len += n;
        b->data[b->len] = '\0';
        return;
    }
    tgc_buf_add_grow(b, s, n);
}
/* Inline so that the compiler measures string literals, the usual argument, at build time. */
static inline void
tgc_buf_puts(tgc_buf *b, const char *s)
{
    tgc_buf_add(b, s, strlen(s));
}
void tgc_buf_printf(tgc_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Appends src's bytes; an out-of-memory src makes b out of memory too. */
void tgc_buf_append(tgc_buf *b, const tgc_buf *src);
/* For a Graphviz quoted string: \ and " escaped, & as &amp; (Graphviz decodes entities in
 * labels), newlines as \l (left-justified line break), other control characters dropped. */
void tgc_buf_dot(tgc_buf *b, const char *s, size_t n);
/* For HTML text and attribute values: & < > " ' as entities, control characters dropped. */
void tgc_buf_html(tgc_buf *b, const char *s, size_t n);
/* "4.0 MiB" style sizes, binary units. */
void tgc_buf_bytes(tgc_buf *b, uint64_t nbytes);
/* 1,234,567 */
void tgc_buf_count(tgc_buf *b, uint64_t n);
/* 1234567: what "%llu" prints, without printf's format parsing. */
void tgc_buf_uint(tgc_buf *b, uint64_t n);
void tgc_buf_int(tgc_buf *b, int64_t n);

#ifdef Py_PYTHON_H  /* the Python half (common/buf_py.c): for files that include Python.h first */
/* Anything written into a buffer from a Python str is cut at TGC_PYSTR_MAX bytes, a safety net
 * (the strings that reach a buffer were cut already), with an ellipsis and the true length. */
#define TGC_PYSTR_MAX 4096
/* Appends str s as UTF-8 (lone surrogates backslash-escaped), raw (how 0), escaped for DOT ('d')
 * or for HTML ('h'). 0, or -1 with MemoryError set (b is then out of memory). */
int tgc_buf_pystr(tgc_buf *b, PyObject *s, int how);
#endif

#endif /* TENSORGC_BUF_H */
