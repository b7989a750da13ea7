/* pickstream_read.c: the streaming loader's reader (shared declarations in pickstream_int.h):
 * the file comes through the caller's callback into one buffer of TGC_PS_CHUNK bytes; unread
 * bytes are buf[lo, hi), and an opcode reads up to flim, so that one compare checks both the
 * buffer and the end of the FRAME it is in. Payloads longer than a chunk get their own buffer,
 * and text lines (protocol 0 arguments, GLOBAL's names) must end inside their frame. */
#include <stdlib.h>
#include <string.h>

#include "pickstream_int.h"

static int rd_fill_raw(S *s, size_t need);

int
tgc_ps__rd_fill(S *s, size_t need)
{
    int r = rd_fill_raw(s, need);
    tgc_ps__set_flim(s);
    return r;
}

static int
rd_fill_raw(S *s, size_t need)
{
    if (s->lo > 0) {
        memmove(s->buf, s->buf + s->lo, s->hi - s->lo);
        s->hi -= s->lo;
        s->lo = 0;
    }
    while (s->hi < need && !s->eof) {
        long long got = s->read(s->read_ctx, s->buf + s->hi, TGC_PS_CHUNK - s->hi);
        if (got < 0) {
            tgc_ps__fail(s, TGC_PS_READ, 0, 0, 0);
            return -1;
        }
        if (got == 0) {
            s->eof = 1;
            break;
        }
        s->hi += (size_t)got;
        s->total += (uint64_t)got;
        if (s->total > s->max_bytes) {
            tgc_ps__fail(s, TGC_PS_LIMIT, s->max_bytes, 0, 0);
            return -1;
        }
    }
    return s->hi < need ? 1 : 0;
}

/* Whatever is buffered, then the rest read straight into the new buffer: a payload past a chunk
 * is copied once. */
unsigned char *
tgc_ps__rd_big(S *s, size_t k)
{
    unsigned char *p = malloc(k ? k : 1);
    if (p == NULL) {
        tgc_ps__nomem(s);
        return NULL;
    }
    size_t have = s->hi - s->lo;
    if (have > 0) {
        memcpy(p, s->buf + s->lo, have);
    }
    s->lo = s->hi = 0;
    while (have < k) {
        long long got = s->eof ? 0 : s->read(s->read_ctx, p + have, k - have);
        if (got <= 0) {
            free(p);
            if (got < 0) {
                tgc_ps__fail(s, TGC_PS_READ, 0, 0, 0);
            }
            else {
                s->eof = 1;
                tgc_ps__fail(s, TGC_PS_TRUNCATED, 0, 0, 0);
            }
            return NULL;
        }
        have += (size_t)got;
        s->total += (uint64_t)got;
        if (s->total > s->max_bytes) {
            free(p);
            tgc_ps__fail(s, TGC_PS_LIMIT, s->max_bytes, 0, 0);
            return NULL;
        }
    }
    s->off += k;
    tgc_ps__set_flim(s);
    return p;
}

/* A text line (protocol 0 arguments, GLOBAL's names), the newline excluded; inside a frame, the
 * newline must be in it (pickscan's rule). */
int
tgc_ps__rd_line(S *s, const unsigned char **line, size_t *len)
{
    for (;;) {
        size_t avail = s->hi - s->lo;
        int capped = s->frame_end != NO_FRAME && s->frame_end - s->off <= avail;
        const unsigned char *nl = memchr(s->buf + s->lo, '\n',
                                         capped ? (size_t)(s->frame_end - s->off) : avail);
        if (nl == NULL && capped) {
            tgc_ps__fail(s, TGC_PS_FRAME_CROSSED, s->frame_end, 0, 0);
            return -1;
        }
        if (nl != NULL) {
            *line = s->buf + s->lo;
            *len = (size_t)(nl - (s->buf + s->lo));
            s->lo += *len + 1;
            s->off += *len + 1;
            return 0;
        }
        if (s->hi - s->lo >= TGC_PS_CHUNK) {
            return tgc_ps__fail_text(s, TGC_PS_BOUND, "a text argument longer than %u bytes",
                                     TGC_PS_CHUNK);
        }
        int r = tgc_ps__rd_fill(s, s->hi - s->lo + 1);
        if (r < 0) {
            return -1;
        }
        if (r > 0) {
            tgc_ps__fail(s, TGC_PS_TRUNCATED, 0, 0, 0);
            return -1;
        }
    }
}

/* NEED's slow path (fewer than k bytes before flim): k more bytes of the opcode, which must
 * lie in its frame (checked first: a frame lies within the file) and in the file. 0, or -1. */
int
tgc_ps__need_slow(S *s, size_t k)
{
    if (s->off + k > s->frame_end) {
        tgc_ps__fail(s, TGC_PS_FRAME_CROSSED, s->frame_end, 0, 0);
        return -1;
    }
    if (s->hi - s->lo < k) {
        int r = tgc_ps__rd_fill(s, k);
        if (r < 0) {
            return -1;
        }
        if (r > 0) {
            tgc_ps__fail(s, TGC_PS_TRUNCATED, 0, 0, 0);
            return -1;
        }
    }
    return 0;
}

/* The next opcode's byte when none is before flim: past the end of its frame the opcodes are in
 * none (or in the next FRAME), else the buffer is refilled. 0, or -1. */
int
tgc_ps__next_op_slow(S *s)
{
    if (s->off >= s->frame_end) {
        s->frame_end = NO_FRAME;
        tgc_ps__set_flim(s);
        if (s->flim > s->lo) {
            return 0;
        }
    }
    return tgc_ps__need_slow(s, 1);
}

