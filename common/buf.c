/* buf.c: growable buffer and escapers (contract in buf.h). Numbers are formatted by hand: the
 * report path writes a dozen per report, and printf's format parsing cost more than the rest of
 * the formatting together. */
#include "tensorgc/buf.h"

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

void
tgc_buf_reset(tgc_buf *b)
{
    b->len = 0;
    if (b->data != NULL) {
        b->data[0] = '\0';
    }
}

/* Out of memory for good: cap 0 sends every later append to tgc_buf_reserve, which refuses it
 * (tgc_buf_add's inline path relies on cap > 0 meaning "not out of memory"). The data stays
 * allocated until tgc_buf_free. */
static void
buf__fail(tgc_buf *b)
{
    b->oom = 1;
    b->cap = 0;
}

int
tgc_buf_reserve(tgc_buf *b, size_t extra)
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
        buf__fail(b);
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void
tgc_buf_add_grow(tgc_buf *b, const char *s, size_t n)
{
    if (tgc_buf_reserve(b, n) < 0) {
        return;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void
tgc_buf_append(tgc_buf *b, const tgc_buf *src)
{
    if (src->oom) {
        buf__fail(b);
    }
    else if (src->len > 0) {
        tgc_buf_add(b, src->data, src->len);
    }
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
    if (tgc_buf_reserve(b, (size_t)n) < 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* The escapers copy runs of characters that need nothing in one go, not byte by byte. */
void
tgc_buf_dot(tgc_buf *b, const char *s, size_t n)
{
    size_t run = 0;  /* start of the pending plain run */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != 0x7f && c != '\\' && c != '"' && c != '&') {
            continue;
        }
        if (i > run) {
            tgc_buf_add(b, s + run, i - run);
        }
        run = i + 1;
        switch (c) {
        case '\\': tgc_buf_add(b, "\\\\", 2); break;
        case '"': tgc_buf_add(b, "\\\"", 2); break;
        case '&': tgc_buf_add(b, "&amp;", 5); break;
        case '\n': tgc_buf_add(b, "\\l", 2); break;
        default: break;  /* other control characters are dropped */
        }
    }
    if (n > run) {
        tgc_buf_add(b, s + run, n - run);
    }
}

void
tgc_buf_html(tgc_buf *b, const char *s, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 0x20 || c == '\n' || c == '\t') && c != '&' && c != '<' && c != '>' &&
            c != '"' && c != '\'') {
            continue;
        }
        if (i > run) {
            tgc_buf_add(b, s + run, i - run);
        }
        run = i + 1;
        switch (c) {
        case '&': tgc_buf_add(b, "&amp;", 5); break;
        case '<': tgc_buf_add(b, "&lt;", 4); break;
        case '>': tgc_buf_add(b, "&gt;", 4); break;
        case '"': tgc_buf_add(b, "&quot;", 6); break;
        case '\'': tgc_buf_add(b, "&#39;", 5); break;
        default: break;  /* other control characters are dropped */
        }
    }
    if (n > run) {
        tgc_buf_add(b, s + run, n - run);
    }
}

/* Decimal digits of n at the end of out[20]; returns where they start. */
static char *
buf__digits(char out[20], uint64_t n)
{
    char *p = out + 20;
    do {
        *--p = (char)('0' + n % 10);
        n /= 10;
    } while (n != 0);
    return p;
}

void
tgc_buf_uint(tgc_buf *b, uint64_t n)
{
    char digits[20];
    char *p = buf__digits(digits, n);
    tgc_buf_add(b, p, (size_t)(digits + 20 - p));
}

void
tgc_buf_int(tgc_buf *b, int64_t n)
{
    if (n < 0) {
        tgc_buf_add(b, "-", 1);
    }
    /* the magnitude, computed so that INT64_MIN does not overflow */
    tgc_buf_uint(b, n < 0 ? (uint64_t)-(n + 1) + 1 : (uint64_t)n);
}

void
tgc_buf_bytes(tgc_buf *b, uint64_t nbytes)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (nbytes < 1024) {
        tgc_buf_uint(b, nbytes);
        tgc_buf_add(b, " B", 2);
        return;
    }
    if (nbytes >= (1ULL << 53)) {
        /* (8 PiB and up) the double no longer holds nbytes exactly: let printf round it */
        double v = (double)nbytes;
        int u = 0;
        while (v >= 1024.0 && u < 5) {
            v /= 1024.0;
            u++;
        }
        tgc_buf_printf(b, "%.1f %s", v, units[u]);
        return;
    }
    /* What "%.1f" prints for nbytes / 1024^u, from integers: that quotient is exact in a
     * double here, and printf rounds its exact value to tenths, ties to even. */
    int u = 0;
    while (u < 5 && nbytes >> (10 * (u + 1)) != 0) {
        u++;
    }
    unsigned shift = 10u * (unsigned)u;
    uint64_t scaled = nbytes * 10;  /* < 2^57 */
    uint64_t tenths = scaled >> shift;
    uint64_t rest = scaled & ((1ULL << shift) - 1), half = 1ULL << (shift - 1);
    if (rest > half || (rest == half && (tenths & 1))) {
        tenths++;
    }
    tgc_buf_uint(b, tenths / 10);
    char frac[3] = {'.', (char)('0' + tenths % 10), ' '};
    tgc_buf_add(b, frac, 3);
    tgc_buf_puts(b, units[u]);
}

void
tgc_buf_count(tgc_buf *b, uint64_t n)
{
    char digits[20], out[27];
    char *p = buf__digits(digits, n);
    size_t len = (size_t)(digits + 20 - p), k = 0;
    for (size_t i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0) {
            out[k++] = ',';
        }
        out[k++] = p[i];
    }
    tgc_buf_add(b, out, k);
}
