/* pickstream_values.c: the streaming loader's values (shared declarations in
 * pickstream_int.h): open records (a frames list or frame dict on the trace's path while it is
 * read) and what they become, the memo's pages and the handles it holds, a value boxed into a
 * builder object or let go of, and how a value reads as a field of an entry or frame. */
#include <stdlib.h>
#include <string.h>

#include "pickstream_int.h"

int
tgc_ps__open_new(S *s, int fdict, uint32_t *idx)
{
    if (s->nfree > 0) {
        *idx = s->free_opens[--s->nfree];
    }
    else {
        if (s->nopens >= UINT32_MAX ||
            tgc_ps__grow(&s->opens, &s->ocap, s->nopens + 1, sizeof(open_rec)) < 0) {
            return tgc_ps__nomem(s);
        }
        memset(&s->opens[s->nopens], 0, sizeof(open_rec));
        *idx = (uint32_t)s->nopens++;
    }
    open_rec *r = &s->opens[*idx];
    open_rec keep = *r;
    memset(r, 0, sizeof(*r));
    r->ids = keep.ids;  /* the buffers are kept for the next record */
    r->cap = keep.cap;
    r->x = keep.x;
    r->xcap = keep.xcap;
    r->xrefs = keep.xrefs;
    r->xrefcap = keep.xrefcap;
    r->used = 1;
    r->fdict = (uint8_t)fdict;
    r->memo = NO_MEMO;
    return 0;
}

static int
open_release(S *s, uint32_t idx)
{
    open_rec *r = &s->opens[idx];
    for (size_t i = 0; i < r->nxrefs; i++) {
        s->b.decref(s->b.ctx, r->xrefs[i]);
    }
    r->nxrefs = 0;
    r->nx = 0;
    r->used = 0;
    if (tgc_ps__grow(&s->free_opens, &s->fcap, s->nfree + 1, sizeof(uint32_t)) < 0) {
        return tgc_ps__nomem(s);
    }
    s->free_opens[s->nfree++] = idx;
    return 0;
}

/* tgc_ps__memo_slot's slow path, creating: idx's page (and room for it) made. */
uint64_t *
tgc_ps__memo_page(S *s, uint64_t idx)
{
    uint64_t page = idx >> MEMO_PAGE_BITS;
    if (page >= s->npages) {
        size_t np = s->npages ? s->npages : 64;
        while (np <= page) {
            np *= 2;
        }
        uint64_t **pages = realloc(s->memo, np * sizeof(uint64_t *));
        if (pages == NULL) {
            tgc_ps__nomem(s);
            return NULL;
        }
        memset(pages + s->npages, 0, (np - s->npages) * sizeof(uint64_t *));
        s->memo = pages;
        s->npages = np;
    }
    if (s->memo[page] == NULL) {
        s->memo[page] = calloc(MEMO_PAGE, sizeof(uint64_t));
        if (s->memo[page] == NULL) {
            tgc_ps__nomem(s);
            return NULL;
        }
    }
    return &s->memo[page][idx & (MEMO_PAGE - 1)];
}

/* A builder dict (list) got from memo slot a - 1 was read as frame (stack) id: the slot holds
 * that handle from now on, and the builder takes the object as the one standing for it, so a
 * BINGET of it no longer costs an object's reference, reading and lookup. */
void
tgc_ps__memo_adopt(S *s, uint32_t a, int tag, uint32_t id, void *obj)
{
    if (a == 0) {
        return;
    }
    uint64_t *slot = tgc_ps__memo_slot(s, (uint64_t)a - 1, 0);
    if (slot == NULL || *slot != (uint64_t)(uintptr_t)obj) {
        return;  /* overwritten since */
    }
    s->b.adopt(s->b.ctx, tag == M_FRAME ? TGC_PSB_DICT : TGC_PSB_LIST, id, obj);
    *slot = M_MAKE(tag, id);
    s->b.decref(s->b.ctx, obj);  /* the memo's reference */
}

/* A read record's memo slot, if it still holds the open record, now holds what it became. */
static void
open_settle_memo(S *s, uint32_t idx, uint64_t became)
{
    open_rec *r = &s->opens[idx];
    if (r->memo == NO_MEMO) {
        return;
    }
    uint64_t *slot = tgc_ps__memo_slot(s, r->memo, 0);
    if (slot != NULL && *slot == M_MAKE(M_OPEN, (uint64_t)idx << 1 | r->fdict)) {
        *slot = became;
    }
}

int
tgc_ps__close_fdict(S *s, uint32_t idx, uint32_t *id)
{
    open_rec *r = &s->opens[idx];
    frame_rec f = {TGC_PS_ABSENT, TGC_PS_ABSENT, 0, 0, BAD_NONE, 0, NULL, 0, 0};
    if (tgc_ps__intern_extras(s, r->x, r->nx, &f.extra) < 0) {
        return -1;
    }
    r = &s->opens[idx];
    for (int i = 0; i < 3; i++) {
        if (r->fst[i] == FS_TYPE || r->fst[i] == FS_RANGE) {
            f.bad = (uint8_t)(BAD_FILENAME + i);
            f.bad_range = r->fst[i] == FS_RANGE;
            f.bad_type = r->ftype[i];
            break;
        }
    }
    if (f.bad == BAD_NONE) {
        f.filename = r->fst[0] == FS_OK ? r->fsid[0] : TGC_PS_ABSENT;
        f.name = r->fst[1] == FS_OK ? r->fsid[1] : TGC_PS_ABSENT;
        f.line_kind = r->fst[2] == FS_OK ? r->line_kind : 0;
        f.line = r->fst[2] == FS_OK ? r->line : 0;
    }
    if (tgc_ps__intern_frame(s, &f, id) < 0) {
        return -1;
    }
    open_settle_memo(s, idx, M_MAKE(M_FRAME, *id));
    return open_release(s, idx);
}

int
tgc_ps__close_frames(S *s, uint32_t idx, uint32_t *id)
{
    open_rec *r = &s->opens[idx];
    if (tgc_ps__intern_stack(s, r->ids, r->n, id) < 0) {
        return -1;
    }
    open_settle_memo(s, idx, M_MAKE(M_STACK, *id));
    return open_release(s, idx);
}

/* An open frames list or frame dict becomes the stack or frame it reads as. */
int
tgc_ps__settle(S *s, val *v)
{
    uint32_t id;
    if (v->kind == V_FDICT) {
        if (tgc_ps__close_fdict(s, v->a, &id) < 0) {
            return -1;
        }
        *v = (val){V_FRAME, 0, 0, 0, id};
    }
    else if (v->kind == V_FRAMES) {
        if (tgc_ps__close_frames(s, v->a, &id) < 0) {
            return -1;
        }
        *v = (val){V_STACK, 0, 0, 0, id};
    }
    return 0;
}

/* The builder object for v (a new reference); open records are read first. */
void *
tgc_ps__box(S *s, val *v)
{
    tgc_ps_scalar sc;
    memset(&sc, 0, sizeof(sc));
    sc.sid = UINT32_MAX;
    void *o;
    if (tgc_ps__settle(s, v) < 0) {
        return NULL;
    }
    switch (v->kind) {
    case V_NONE: sc.kind = TGC_PSS_NONE; break;
    case V_TRUE: sc.kind = TGC_PSS_TRUE; break;
    case V_FALSE: sc.kind = TGC_PSS_FALSE; break;
    case V_INT:
        if (v->flags & F_UNSIGNED) {
            sc.kind = TGC_PSS_UINT;
            sc.u = v->b;
        }
        else {
            sc.kind = TGC_PSS_INT;
            sc.i = (int64_t)v->b;
        }
        break;
    case V_FLOAT:
        sc.kind = TGC_PSS_FLOAT;
        memcpy(&sc.f, &v->b, sizeof(double));
        break;
    case V_STR:
        sc.kind = TGC_PSS_STR;
        sc.sid = (uint32_t)v->b;
        sc.p = s->sb + s->strs[v->b].off;
        sc.n = s->strs[v->b].len;
        break;
    case V_OBJ:
        s->b.incref(s->b.ctx, (void *)(uintptr_t)v->b);
        return (void *)(uintptr_t)v->b;
    case V_ENTRY:
        tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED, "trace entry %llu of device %u is referred to "
                          "from outside its list (through the memo); the streaming loader keeps "
                          "trace entries as rows", (unsigned long long)v->b, v->a);
        return NULL;
    case V_DEVICE:
        o = s->b.device(s->b.ctx, (uint32_t)v->b);
        goto made;
    case V_STACK:
        o = s->b.stack(s->b.ctx, (uint32_t)v->b);
        goto made;
    case V_FRAME:
        o = s->b.frame(s->b.ctx, (uint32_t)v->b);
        goto made;
    default:
        tgc_ps__fail_text(s, TGC_PS_CORRUPT, "a value of unknown kind %d", v->kind);
        return NULL;
    }
    o = s->b.scalar(s->b.ctx, &sc);
made:
    if (o == NULL) {
        tgc_ps__builder_failed(s);
    }
    return o;
}

/* tgc_ps__drop of an open record: one the memo holds is read now, so that a later BINGET finds
 * what it became; else it is let go of. */
int
tgc_ps__drop_open(S *s, val *v)
{
    if (s->opens[v->a].memo != NO_MEMO) {
        return tgc_ps__settle(s, v);
    }
    return open_release(s, v->a);
}

int
tgc_ps__look(S *s, val *v, look_t *out)
{
    memset(out, 0, sizeof(*out));
    out->type = tgc_ps__kind_type(v->kind);
    switch (v->kind) {
    case V_NONE: out->kind = L_NONE; return 0;
    case V_TRUE: case V_FALSE:
        out->kind = L_INT;
        out->boolean = 1;
        out->i = v->kind == V_TRUE;
        return 0;
    case V_INT:
        if (v->flags & F_UNSIGNED) {
            out->kind = L_UINT;
            out->u = v->b;
        }
        else {
            out->kind = L_INT;
            out->i = (int64_t)v->b;
        }
        return 0;
    case V_STR: out->kind = L_STR; out->sid = (uint32_t)v->b; return 0;
    case V_FLOAT: out->kind = L_OTHER; return 0;
    case V_ENTRY: case V_FDICT: case V_FRAME: out->kind = L_DICT; return 0;
    case V_DEVICE: case V_FRAMES: case V_STACK: out->kind = L_LIST; return 0;
    default: break;
    }
    tgc_ps_scalar sc;
    memset(&sc, 0, sizeof(sc));
    if (s->b.unbox(s->b.ctx, (void *)(uintptr_t)v->b, &sc) < 0) {
        return tgc_ps__builder_failed(s);
    }
    out->type = sc.type_name ? sc.type_name : "object";
    switch (sc.kind) {
    case TGC_PSS_NONE: out->kind = L_NONE; break;
    case TGC_PSS_TRUE: case TGC_PSS_FALSE:
        out->kind = L_INT;
        out->boolean = 1;
        out->i = sc.kind == TGC_PSS_TRUE;
        break;
    case TGC_PSS_INT: out->kind = L_INT; out->i = sc.i; break;
    case TGC_PSS_UINT: out->kind = L_UINT; out->u = sc.u; break;
    case TGC_PSS_BIGINT: out->kind = L_BIG; break;
    case TGC_PSS_STR:
        out->kind = L_STR;
        return tgc_ps__intern_str(s, sc.p, sc.n, &out->sid);
    case TGC_PSS_LIST: out->kind = L_LIST; break;
    case TGC_PSS_DICT: out->kind = L_DICT; break;
    default: out->kind = L_OTHER; break;
    }
    return 0;
}

/* A builder object as a stack value (a new one: an object keeps a new reference). */
int
tgc_ps__from_obj(S *s, void *o, val *out)
{
    tgc_ps_scalar sc;
    memset(&sc, 0, sizeof(sc));
    if (s->b.unbox(s->b.ctx, o, &sc) < 0) {
        return tgc_ps__builder_failed(s);
    }
    *out = (val){V_OBJ, R_NONE, 0, 0, (uint64_t)(uintptr_t)o};
    switch (sc.kind) {
    case TGC_PSS_NONE: out->kind = V_NONE; return 0;
    case TGC_PSS_TRUE: out->kind = V_TRUE; return 0;
    case TGC_PSS_FALSE: out->kind = V_FALSE; return 0;
    case TGC_PSS_INT: *out = (val){V_INT, 0, 0, 0, (uint64_t)sc.i}; return 0;
    case TGC_PSS_UINT: *out = (val){V_INT, 0, F_UNSIGNED, 0, sc.u}; return 0;
    case TGC_PSS_STR:
        if (sc.n <= TGC_PS_STR_INTERN) {
            uint32_t sid;
            if (tgc_ps__intern_str(s, sc.p, sc.n, &sid) < 0) {
                return -1;
            }
            *out = (val){V_STR, 0, 0, 0, sid};
            return 0;
        }
        break;
    default:
        break;
    }
    s->b.incref(s->b.ctx, o);
    return 0;
}

