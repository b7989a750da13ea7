/* buf.h: a growable byte buffer and the escapers every user-derived string goes through
 * (DOT labels, HTML text). Plain C; used by report.c (DOT, text) and render.c (HTML). */
#ifndef TGC_BUF_H
#define TGC_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *data;     /* NUL-terminated while len < cap; NULL until the first append */
    size_t len, cap;
    int oom;        /* sticky: set once an allocation failed, later appends do nothing */
} tgc_buf;

void tgc_buf_free(tgc_buf *b);
void tgc_buf_add(tgc_buf *b, const char *s, size_t n);
void tgc_buf_puts(tgc_buf *b, const char *s);
void tgc_buf_printf(tgc_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* For a Graphviz quoted string: \ and " escaped, & as &amp; (Graphviz decodes entities in
 * labels), newlines as \l (left-justified line break), other control characters dropped. */
void tgc_buf_dot(tgc_buf *b, const char *s, size_t n);
/* For HTML text and attribute values: & < > " ' as entities, control characters dropped. */
void tgc_buf_html(tgc_buf *b, const char *s, size_t n);
/* "4.0 MiB" style sizes, binary units. */
void tgc_buf_bytes(tgc_buf *b, uint64_t nbytes);
/* 1,234,567 */
void tgc_buf_count(tgc_buf *b, uint64_t n);

#endif /* TGC_BUF_H */
