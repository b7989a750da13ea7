/* pickstream_error.c: the streaming loader's error record (shared declarations in
 * pickstream_int.h), which every other part of the loader fills: the first failure stands, with
 * where it happened and its numbers, or a message. It calls nothing else of the loader, so the
 * loader's files depend on one another one way. */
#include <stdarg.h>
#include <stdio.h>

#include "pickstream_int.h"

void
tgc_ps__fail_at(S *s, int code, uint64_t pos, uint64_t a, uint64_t b, uint64_t c)
{
    if (s->err.code != TGC_PS_OK) {
        return;  /* the first failure stands */
    }
    s->err.code = code;
    s->err.pos = pos;
    s->err.a = a;
    s->err.b = b;
    s->err.c = c;
    s->err.size = s->size > s->total ? s->size : s->total;
}

int
tgc_ps__fail_text(S *s, int code, const char *fmt, ...)
{
    if (s->err.code == TGC_PS_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->err.text, sizeof(s->err.text), fmt, ap);
        va_end(ap);
        tgc_ps__fail(s, code, 0, 0, 0);
    }
    return -1;
}
