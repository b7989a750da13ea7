/* pickstream.c: the streaming snapshot loader's construction and its API (contract in
 * tensorgc/pickstream.h): the stream made and freed, and the interned tables and the devices'
 * columns read out after the load. The loader's other files and what they share:
 * allocator/pickstream_int.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickstream_int.h"

/* The keys the trace's path reads, interned first so that their string ids are the K_* values. */
static const char *const known_keys[NKNOWN] = {
    "action", "addr", "size", "stream", "time_us", "device_free", "frames", "filename", "name",
    "line", "device_traces"};

/* ------------------------------------------------------------------------------------------ */
/* Construction, tables, columns                                                               */

tgc_ps_stream *
tgc_ps_new(const tgc_ps_builder *b, tgc_ps_read_fn read, void *read_ctx, uint64_t size,
           uint64_t max_bytes, uint64_t seed)
{
    S *s = calloc(1, sizeof(S));
    if (s == NULL) {
        return NULL;
    }
    s->b = *b;
    s->read = read;
    s->read_ctx = read_ctx;
    s->size = size;
    s->max_bytes = max_bytes;
    s->frame_end = NO_FRAME;
    s->seed = tgc_ps__mix64(seed ^ UINT64_C(0x243F6A8885A308D3));
    s->buf = malloc(TGC_PS_CHUNK);
    if (s->buf == NULL) {
        free(s);
        return NULL;
    }
    for (int i = 0; i < NKNOWN; i++) {
        uint32_t sid;
        if (tgc_ps__intern_str(s, known_keys[i], strlen(known_keys[i]), &sid) < 0 ||
            sid != (uint32_t)i) {
            tgc_ps_free(s);
            return NULL;
        }
    }
    uint32_t id;
    if (tgc_ps__intern_stack(s, NULL, 0, &id) < 0 || tgc_ps__intern_extras(s, NULL, 0, &id) < 0) {
        tgc_ps_free(s);
        return NULL;
    }
    return s;
}

const tgc_ps_error *
tgc_ps_last_error(const tgc_ps_stream *s)
{
    return &s->err;
}

void
tgc_ps_free(tgc_ps_stream *s)
{
    if (s == NULL) {
        return;
    }
    tgc_ps__release_machine(s);
    for (size_t i = 0; i < s->xpool_n; i++) {
        if (s->xpool[i].k.kind == V_OBJ) {
            s->b.decref(s->b.ctx, (void *)(uintptr_t)s->xpool[i].k.b);
        }
        if (s->xpool[i].v.kind == V_OBJ) {
            s->b.decref(s->b.ctx, (void *)(uintptr_t)s->xpool[i].v.b);
        }
    }
    for (size_t i = 0; i < s->listcache.cap; i++) {
        if (s->listcache.keys[i] != 0) {
            s->b.decref(s->b.ctx, (void *)(uintptr_t)(s->listcache.keys[i] - 1));
        }
    }
    for (size_t i = 0; i < s->dictcache.cap; i++) {
        if (s->dictcache.keys[i] != 0) {
            s->b.decref(s->b.ctx, (void *)(uintptr_t)(s->dictcache.keys[i] - 1));
        }
    }
    for (size_t i = 0; i < s->nopens; i++) {
        for (size_t j = 0; j < s->opens[i].nxrefs; j++) {
            s->b.decref(s->b.ctx, s->opens[i].xrefs[j]);
        }
        free(s->opens[i].ids);
        free(s->opens[i].x);
        free(s->opens[i].xrefs);
    }
    for (size_t d = 0; d < s->ndevs; d++) {
        for (int c = 0; c < TGC_PS_NCOLS; c++) {
            free(s->devs[d].col[c]);
        }
        free(s->devs[d].order);
        free(s->devs[d].error);
    }
    free(s->listcache.keys);
    free(s->listcache.vals);
    free(s->dictcache.keys);
    free(s->dictcache.vals);
    free(s->errmap.keys);
    free(s->errmap.vals);
    free(s->errs);
    free(s->devs);
    free(s->memo);
    free(s->st);
    free(s->marks);
    free(s->opens);
    free(s->free_opens);
    free(s->sb);
    free(s->strs);
    free(s->sidx.slot);
    free(s->frames);
    free(s->fidx.slot);
    free(s->spool);
    free(s->stacks);
    free(s->kidx.slot);
    free(s->xpool);
    free(s->xs);
    free(s->xidx.slot);
    for (size_t i = 0; i < s->npend_refs; i++) {
        s->b.decref(s->b.ctx, s->pend_refs[i]);
    }
    free(s->pend);
    free(s->pend_refs);
    free(s->xscratch);
    free(s->items);
    free(s->buf);
    free(s);
}

int
tgc_ps_string(const tgc_ps_stream *s, uint32_t sid, const char **p, size_t *n)
{
    if (sid >= s->nstr) {
        return -1;
    }
    *p = s->sb + s->strs[sid].off;
    *n = s->strs[sid].len;
    return 0;
}

uint32_t
tgc_ps_nframes(const tgc_ps_stream *s)
{
    return (uint32_t)s->nframes;
}

int
tgc_ps_get_frame(const tgc_ps_stream *s, uint32_t id, tgc_ps_frame *out)
{
    if (id >= s->nframes) {
        return -1;
    }
    const frame_rec *f = &s->frames[id];
    out->filename = f->filename;
    out->name = f->name;
    out->line_kind = f->line_kind;
    out->line = f->line;
    out->extra = f->extra;
    return 0;
}

uint32_t
tgc_ps_nstacks(const tgc_ps_stream *s)
{
    return (uint32_t)s->nstacks;
}

const uint32_t *
tgc_ps_get_stack(const tgc_ps_stream *s, uint32_t id, uint32_t *n)
{
    if (id >= s->nstacks) {
        *n = 0;
        return NULL;
    }
    *n = s->stacks[id].len;
    return s->spool + s->stacks[id].off;
}

uint32_t
tgc_ps_nextras(const tgc_ps_stream *s)
{
    return (uint32_t)s->nxs;
}

uint32_t
tgc_ps_extras_len(const tgc_ps_stream *s, uint32_t id)
{
    return id < s->nxs ? s->xs[id].len : 0;
}

void *
tgc_ps_extras_item(tgc_ps_stream *s, uint32_t id, uint32_t k, int value)
{
    if (id >= s->nxs || k >= s->xs[id].len) {
        return NULL;
    }
    pair p = s->xpool[s->xs[id].off + k];
    return tgc_ps__box(s, value ? &p.v : &p.k);
}

uint32_t
tgc_ps_ndevices(const tgc_ps_stream *s)
{
    return (uint32_t)s->ndevs;
}

uint64_t
tgc_ps_device_len(const tgc_ps_stream *s, uint32_t d)
{
    return d < s->ndevs ? s->devs[d].len : 0;
}

uint32_t
tgc_ps_device_nactions(const tgc_ps_stream *s, uint32_t d)
{
    return d < s->ndevs ? s->devs[d].nactions : 0;
}

uint32_t
tgc_ps_device_action(const tgc_ps_stream *s, uint32_t d, uint32_t code)
{
    return d < s->ndevs && code < s->devs[d].nactions ? s->devs[d].actions[code] : TGC_PS_ABSENT;
}

const char *
tgc_ps_device_error(const tgc_ps_stream *s, uint32_t d)
{
    return d < s->ndevs ? s->devs[d].error : NULL;
}

int
tgc_ps_take_column(tgc_ps_stream *s, uint32_t d, int col, void **data, size_t *n)
{
    *data = NULL;
    *n = 0;
    if (d >= s->ndevs || col < 0 || col >= TGC_PS_NCOLS || s->devs[d].taken[col]) {
        return -1;
    }
    device *dv = &s->devs[d];
    size_t w = tgc_ps__col_size[col], len = dv->len;
    void *src = dv->col[col];
    if (dv->order != NULL) {  /* rows out of list order: copied in order */
        unsigned char *dst = malloc(len ? len * w : 1);
        if (dst == NULL) {
            return -1;
        }
        for (size_t i = 0; i < len; i++) {
            memcpy(dst + i * w, (unsigned char *)src + (size_t)dv->order[i] * w, w);
        }
        free(src);
        src = dst;
    }
    else if (src == NULL) {
        src = malloc(1);
        if (src == NULL) {
            return -1;
        }
    }
    dv->col[col] = NULL;
    dv->taken[col] = 1;
    *data = src;
    *n = len;
    return 0;
}
