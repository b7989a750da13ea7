/* buf.c: growable buffer and escapers (contract in buf.h). */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
tgc_buf_free(tgc_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}

static int
buf__reserve(tgc_buf *b, size_t extra)
{
    if (b->oom) {
        return -1;
    }
    if (b->len + extra + 1 <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        b->oom = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void
tgc_buf_add(tgc_buf *b, const char *s, size_t n)
{
    if (buf__reserve(b, n) < 0) {
        return;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void
tgc_buf_puts(tgc_buf *b, const char *s)
{
    tgc_buf_add(b, s, strlen(s));
}

void
tgc_buf_printf(tgc_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    if ((size_t)n < sizeof(small)) {
        tgc_buf_add(b, small, (size_t)n);
        return;
    }
    if (buf__reserve(b, (size_t)n) < 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void
tgc_buf_dot(tgc_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '\\': tgc_buf_add(b, "\\\\", 2); break;
        case '"': tgc_buf_add(b, "\\\"", 2); break;
        case '&': tgc_buf_add(b, "&amp;", 5); break;
        case '\n': tgc_buf_add(b, "\\l", 2); break;
        default:
            if (c >= 0x20 && c != 0x7f) {
                tgc_buf_add(b, (const char *)&s[i], 1);
            }
        }
    }
}

void
tgc_buf_html(tgc_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '&': tgc_buf_add(b, "&amp;", 5); break;
        case '<': tgc_buf_add(b, "&lt;", 4); break;
        case '>': tgc_buf_add(b, "&gt;", 4); break;
        case '"': tgc_buf_add(b, "&quot;", 6); break;
        case '\'': tgc_buf_add(b, "&#39;", 5); break;
        default:
            if (c >= 0x20 || c == '\n' || c == '\t') {
                tgc_buf_add(b, (const char *)&s[i], 1);
            }
        }
    }
}

void
tgc_buf_bytes(tgc_buf *b, uint64_t nbytes)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (nbytes < 1024) {
        tgc_buf_printf(b, "%llu B", (unsigned long long)nbytes);
        return;
    }
    double v = (double)nbytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    tgc_buf_printf(b, "%.1f %s", v, units[u]);
}

void
tgc_buf_count(tgc_buf *b, uint64_t n)
{
    char digits[32];
    int len = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)n);
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0) {
            tgc_buf_add(b, ",", 1);
        }
        tgc_buf_add(b, &digits[i], 1);
    }
}
