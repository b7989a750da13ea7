/* pickstream_rows.c: the trace's path in the streaming loader (shared declarations in
 * pickstream_int.h): frame dicts and frames lists read as interned frames and stacks, a
 * device's entries as rows of columns with their other fields as interned sets, every field
 * checked as snapshot.check_snapshot checks it, and each device's first faulty entry in its
 * words. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickstream_int.h"

/* ------------------------------------------------------------------------------------------ */
/* Frame dicts and frames lists on the trace's path                                            */

static int extras_val(S *s, val *v, val *out, void **boxed);

/* A list of other fields (an open frame dict's, or the pending set of one SETITEMS) with key
 * set to value (value NULL: key removed); the last setting of a key stands. Boxed values are
 * kept in refs (new references, let go of with the list). */
static int
pairs_put(S *s, pair **xs, size_t *n, size_t *cap, void ***refs, size_t *nrefs, size_t *refcap,
          val *key, val *value)
{
    val k, v;
    void *kb = NULL, *vb = NULL;
    if (extras_val(s, key, &k, &kb) < 0 || (value && extras_val(s, value, &v, &vb) < 0)) {
        if (kb) {
            s->b.decref(s->b.ctx, kb);
        }
        return -1;
    }
    size_t j = 0;
    for (size_t i = 0; i < *n; i++) {
        if (memcmp(&(*xs)[i].k, &k, sizeof(val)) != 0) {
            (*xs)[j++] = (*xs)[i];
        }
    }
    *n = j;
    if (tgc_ps__grow(xs, cap, *n + 1, sizeof(pair)) < 0 ||
        tgc_ps__grow(refs, refcap, *nrefs + 2, sizeof(void *)) < 0) {
        if (kb) {
            s->b.decref(s->b.ctx, kb);
        }
        if (vb) {
            s->b.decref(s->b.ctx, vb);
        }
        return tgc_ps__nomem(s);
    }
    if (kb) {
        (*refs)[(*nrefs)++] = kb;
    }
    if (vb) {
        (*refs)[(*nrefs)++] = vb;
    }
    if (value != NULL) {
        (*xs)[(*n)++] = (pair){k, v};
    }
    return 0;
}

/* A frame that is not a dict at all (frame k "is int, not dict"). */
static int
notdict_frame(S *s, const char *type, uint32_t *id)
{
    frame_rec f = {TGC_PS_ABSENT, TGC_PS_ABSENT, 0, 0, BAD_NOTDICT, 0, type, 0, 0};
    return tgc_ps__intern_frame(s, &f, id);
}

/* Sets one key of an open frame dict: filename and name are str, line an int in
 * [-2**63, 2**64) (checked as check_snapshot checks them); other keys are kept as a set. */
int
tgc_ps__frame_set(S *s, uint32_t idx, val *k, val *v)
{
    int which = k->kind != V_STR ? -1 : k->b == K_FILENAME ? 0 : k->b == K_NAME ? 1
              : k->b == K_LINE ? 2 : -1;
    look_t l;
    if (which >= 0) {
        if (tgc_ps__look(s, v, &l) < 0) {
            return -1;
        }
        if (which == 2 && l.boolean) {  /* a bool line: valid, kept as it is with the others */
            open_rec *r = &s->opens[idx];
            r->ftype[2] = l.type;
            r->fst[2] = FS_OK;
            r->line_kind = 0;
            which = -1;
        }
    }
    if (which < 0) {
        open_rec *r = &s->opens[idx];
        return pairs_put(s, &r->x, &r->nx, &r->xcap, &r->xrefs, &r->nxrefs, &r->xrefcap, k, v);
    }
    open_rec *r = &s->opens[idx];
    if (which == 2) {  /* a line set again: a bool line set before is no more */
        size_t j = 0;
        for (size_t i = 0; i < r->nx; i++) {
            if (!(r->x[i].k.kind == V_STR && r->x[i].k.b == K_LINE)) {
                r->x[j++] = r->x[i];
            }
        }
        r->nx = j;
    }
    r->ftype[which] = l.type;
    if (which < 2) {
        r->fst[which] = l.kind == L_STR ? FS_OK : FS_TYPE;
        r->fsid[which] = l.sid;
    }
    else if (l.kind == L_INT || l.kind == L_UINT) {
        r->fst[2] = FS_OK;
        r->line_kind = l.kind == L_INT ? 1 : 2;
        r->line = l.kind == L_INT ? l.i : (int64_t)l.u;
    }
    else {
        r->fst[2] = l.kind == L_BIG ? FS_RANGE : FS_TYPE;
    }
    return 0;
}

/* A frame read from a builder dict (a frame shared with another part of the file): read once
 * per dict (the machine keeps it alive, so its address stays its own; a SETITEMS onto it later
 * is refused). */
static int
frame_from_dict(S *s, void *dict, uint32_t *id)
{
    int nm = 0;
    uint32_t *hit = tgc_ps__map_get(&s->dictcache, s->seed, (uint64_t)(uintptr_t)dict, 0, &nm);
    if (hit != NULL && *hit != 0) {
        *id = *hit - 1;
        return 0;
    }
    uint32_t idx;
    if (tgc_ps__open_new(s, 1, &idx) < 0) {
        return -1;
    }
    size_t pos = 0;
    void *k, *v;
    int rc;
    while ((rc = s->b.dict_next(s->b.ctx, dict, &pos, &k, &v)) == 1) {
        val kv, vv;
        if (tgc_ps__from_obj(s, k, &kv) < 0) {
            return -1;
        }
        if (tgc_ps__from_obj(s, v, &vv) < 0) {
            tgc_ps__drop(s, &kv);
            return -1;
        }
        rc = tgc_ps__frame_set(s, idx, &kv, &vv);
        int rc2 = tgc_ps__drop(s, &kv);
        if (tgc_ps__drop(s, &vv) < 0 || rc2 < 0 || rc < 0) {
            return -1;
        }
    }
    if (rc < 0) {
        return tgc_ps__builder_failed(s);
    }
    if (tgc_ps__close_fdict(s, idx, id) < 0) {
        return -1;
    }
    uint32_t *slot = tgc_ps__map_get(&s->dictcache, s->seed, (uint64_t)(uintptr_t)dict, 1, &nm);
    if (slot == NULL) {
        return tgc_ps__nomem(s);
    }
    if (*slot == 0) {
        s->b.incref(s->b.ctx, dict);
    }
    *slot = *id + 1;
    return 0;
}

/* One item of a frames list as a frame id (a faulty frame has an id too: its entry says why). */
int
tgc_ps__frame_of(S *s, val *item, uint32_t *id)
{
    switch (item->kind) {
    case V_FRAME:
        *id = (uint32_t)item->b;
        return 0;
    case V_FDICT:
        return tgc_ps__close_fdict(s, item->a, id) < 0 ? -1 : (item->kind = V_NONE, 0);
    case V_ENTRY:
        return tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED, "a trace entry used as a frame");
    case V_OBJ: {
        tgc_ps_scalar sc;
        memset(&sc, 0, sizeof(sc));
        if (s->b.unbox(s->b.ctx, (void *)(uintptr_t)item->b, &sc) < 0) {
            return tgc_ps__builder_failed(s);
        }
        if (sc.kind == TGC_PSS_DICT) {
            if (frame_from_dict(s, (void *)(uintptr_t)item->b, id) < 0) {
                return -1;
            }
            tgc_ps__memo_adopt(s, item->a, M_FRAME, *id, (void *)(uintptr_t)item->b);
            return 0;
        }
        return notdict_frame(s, sc.type_name ? sc.type_name : "object", id);
    }
    default:
        return notdict_frame(s, tgc_ps__kind_type(item->kind), id);
    }
}

/* The stack of a builder list used as an entry's frames (made_snapshot-style files share one
 * list between a block and entries). Read once per list object: the machine keeps it alive, so
 * its address stays its own; APPENDS onto it drop the entry. */
static int
stack_from_list(S *s, void *list, uint32_t *id)
{
    int nm = 0;
    uint32_t *hit = tgc_ps__map_get(&s->listcache, s->seed, (uint64_t)(uintptr_t)list, 0, &nm);
    if (hit != NULL && *hit != 0) {
        *id = *hit - 1;
        return 0;
    }
    /* scratch may be grown by nested reads: collect ids in an open record instead */
    uint32_t idx;
    if (tgc_ps__open_new(s, 0, &idx) < 0) {
        return -1;
    }
    void *item;
    int rc;
    for (size_t i = 0; (rc = s->b.list_item(s->b.ctx, list, i, &item)) == 1; i++) {
        val v;
        uint32_t fid;
        if (tgc_ps__from_obj(s, item, &v) < 0) {
            return -1;
        }
        rc = tgc_ps__frame_of(s, &v, &fid);
        if (tgc_ps__drop(s, &v) < 0 || rc < 0) {
            return -1;
        }
        open_rec *r = &s->opens[idx];
        if (tgc_ps__grow(&r->ids, &r->cap, r->n + 1, sizeof(uint32_t)) < 0) {
            return tgc_ps__nomem(s);
        }
        r->ids[r->n++] = fid;
    }
    if (rc < 0) {
        return tgc_ps__builder_failed(s);
    }
    if (tgc_ps__close_frames(s, idx, id) < 0) {
        return -1;
    }
    uint32_t *slot = tgc_ps__map_get(&s->listcache, s->seed, (uint64_t)(uintptr_t)list, 1, &nm);
    if (slot == NULL) {
        return tgc_ps__nomem(s);
    }
    if (*slot == 0) {
        s->b.incref(s->b.ctx, list);
    }
    *slot = *id + 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Devices and their rows                                                                      */

const size_t tgc_ps__col_size[TGC_PS_NCOLS] = {1, 8, 8, 8, 8, 8, 4, 1, 4};

int
tgc_ps__new_device(S *s, uint32_t *d)
{
    if (s->ndevs >= TGC_PS_MAX_DEVICES) {
        return tgc_ps__fail_text(s, TGC_PS_BOUND, "more than %u device traces", TGC_PS_MAX_DEVICES);
    }
    if (tgc_ps__grow(&s->devs, &s->devcap, s->ndevs + 1, sizeof(device)) < 0) {
        return tgc_ps__nomem(s);
    }
    memset(&s->devs[s->ndevs], 0, sizeof(device));
    s->devs[s->ndevs].last_sid = UINT32_MAX;
    *d = (uint32_t)s->ndevs++;
    return 0;
}

int
tgc_ps__new_row(S *s, uint32_t d, uint32_t *row)
{
    device *dv = &s->devs[d];
    if (dv->rows >= TGC_PS_MAX_ROWS) {
        return tgc_ps__fail_text(s, TGC_PS_BOUND, "more than %u trace entries on device %u",
                                 TGC_PS_MAX_ROWS, d);
    }
    if (dv->rows == dv->cap) {
        size_t cap = dv->cap ? dv->cap * 2 : 1024;
        for (int c = 0; c < TGC_PS_NCOLS; c++) {
            void *p = realloc(dv->col[c], cap * tgc_ps__col_size[c]);
            if (p == NULL) {
                return tgc_ps__nomem(s);
            }
            dv->col[c] = p;
        }
        dv->cap = cap;
    }
    uint32_t r = dv->rows++;
    ((uint8_t *)dv->col[TGC_PS_COL_ACTION])[r] = 0;
    ((uint64_t *)dv->col[TGC_PS_COL_ADDR])[r] = 0;
    ((uint64_t *)dv->col[TGC_PS_COL_SIZE])[r] = 0;
    ((int64_t *)dv->col[TGC_PS_COL_TIME])[r] = INT64_MIN;
    ((int64_t *)dv->col[TGC_PS_COL_STREAM])[r] = 0;
    ((uint64_t *)dv->col[TGC_PS_COL_DEVFREE])[r] = 0;
    ((uint32_t *)dv->col[TGC_PS_COL_STACK])[r] = 0;
    ((uint8_t *)dv->col[TGC_PS_COL_PRESENT])[r] = 0;
    ((uint32_t *)dv->col[TGC_PS_COL_EXTRA])[r] = 0;
    *row = r;
    return 0;
}

/* Row `row` takes the next position of device d's list. */
static int
place_row(S *s, uint32_t d, uint32_t row)
{
    device *dv = &s->devs[d];
    if (dv->order == NULL && row == dv->len) {
        dv->len++;  /* the common case: rows in list order, no order array */
        return 0;
    }
    if (dv->len >= TGC_PS_MAX_ROWS) {
        return tgc_ps__fail_text(s, TGC_PS_BOUND, "more than %u trace entries on device %u",
                                 TGC_PS_MAX_ROWS, d);
    }
    int first = dv->order == NULL;
    if (tgc_ps__grow(&dv->order, &dv->ocap, (size_t)dv->len + 1, sizeof(uint32_t)) < 0) {
        return tgc_ps__nomem(s);
    }
    if (first) {
        for (uint32_t i = 0; i < dv->len; i++) {
            dv->order[i] = i;
        }
    }
    dv->order[dv->len++] = row;
    return 0;
}

static row_err *
row_err_get(S *s, uint32_t d, uint32_t row, int create)
{
    if (!create && s->errmap.n == 0) {
        return NULL;
    }
    int nm = 0;
    uint32_t *slot = tgc_ps__map_get(&s->errmap, s->seed, (uint64_t)d << 32 | row, create, &nm);
    if (slot == NULL) {
        if (nm) {
            tgc_ps__nomem(s);
        }
        return NULL;
    }
    if (*slot == 0) {  /* new */
        if (s->nerrs >= (1u << 16)) {
            tgc_ps__fail_text(s, TGC_PS_BOUND, "more than 65536 faulty trace entries");
            return NULL;
        }
        if (tgc_ps__grow(&s->errs, &s->errcap, s->nerrs + 1, sizeof(row_err)) < 0) {
            tgc_ps__nomem(s);
            return NULL;
        }
        memset(&s->errs[s->nerrs], 0, sizeof(row_err));
        *slot = (uint32_t)++s->nerrs;
    }
    return &s->errs[*slot - 1];
}

static int
set_err(S *s, uint32_t d, uint32_t row, int field, int code, const char *type, int64_t neg)
{
    row_err *e = row_err_get(s, d, row, 1);
    if (e == NULL) {
        return -1;
    }
    e->code[field] = (uint8_t)code;
    e->type[field] = type;
    e->neg[field] = neg;
    return 0;
}

static void
clear_err(S *s, uint32_t d, uint32_t row, int field)
{
    row_err *e = row_err_get(s, d, row, 0);
    if (e != NULL) {
        e->code[field] = E_OK;
    }
}

/* A value as an item of a set of other fields: normalized, a trace value boxed (*boxed: a new
 * reference the caller lets go of once the set is interned). */
static int
extras_val(S *s, val *v, val *out, void **boxed)
{
    *boxed = NULL;
    switch (v->kind) {
    case V_NONE: case V_TRUE: case V_FALSE: case V_STR:
        *out = (val){v->kind, 0, 0, 0, v->kind == V_STR ? v->b : 0};
        return 0;
    case V_INT: case V_FLOAT:
        *out = (val){v->kind, 0, (uint16_t)(v->flags & F_UNSIGNED), 0, v->b};
        return 0;
    case V_OBJ:
        *out = (val){V_OBJ, 0, 0, 0, v->b};
        return 0;
    default:
        *boxed = tgc_ps__box(s, v);
        if (*boxed == NULL) {
            return -1;
        }
        *out = (val){V_OBJ, 0, 0, 0, (uint64_t)(uintptr_t)*boxed};
        return 0;
    }
}

/* One SETITEMS on an entry begins: its set of other fields is collected, not interned. */
int
tgc_ps__pend_begin(S *s, uint32_t d, uint32_t row)
{
    const extras_rec *r = &s->xs[((uint32_t *)s->devs[d].col[TGC_PS_COL_EXTRA])[row]];
    if (tgc_ps__grow(&s->pend, &s->pendcap, r->len + 1, sizeof(pair)) < 0) {
        return tgc_ps__nomem(s);
    }
    if (r->len > 0) {
        memcpy(s->pend, s->xpool + r->off, r->len * sizeof(pair));
    }
    s->npend = r->len;
    s->pending = 1;
    s->pend_dev = d;
    s->pend_row = row;
    return 0;
}

int
tgc_ps__pend_end(S *s)
{
    uint32_t id = 0;
    int rc = 0;
    if (s->pending) {
        s->pending = 0;
        rc = tgc_ps__intern_extras(s, s->pend, s->npend, &id);
        if (rc == 0) {
            ((uint32_t *)s->devs[s->pend_dev].col[TGC_PS_COL_EXTRA])[s->pend_row] = id;
        }
    }
    for (size_t i = 0; i < s->npend_refs; i++) {
        s->b.decref(s->b.ctx, s->pend_refs[i]);
    }
    s->npend_refs = 0;
    s->npend = 0;
    return rc;
}

/* The row's set of other fields, with key set to value (value NULL: key removed). */
static int
row_extra(S *s, uint32_t d, uint32_t row, val *key, val *value)
{
    if (s->pending && s->pend_dev == d && s->pend_row == row) {
        return pairs_put(s, &s->pend, &s->npend, &s->pendcap, &s->pend_refs, &s->npend_refs,
                         &s->pend_refs_cap, key, value);
    }
    uint32_t *xcol = s->devs[d].col[TGC_PS_COL_EXTRA];
    uint32_t old = xcol[row];
    if (value == NULL) {  /* removal: only when the set holds the key (a str of the table) */
        const extras_rec *r = &s->xs[old];
        uint32_t i = 0;
        while (i < r->len && !(s->xpool[r->off + i].k.kind == key->kind &&
                               s->xpool[r->off + i].k.b == key->b)) {
            i++;
        }
        if (i == r->len) {
            return 0;
        }
    }
    val k, v;
    void *kb = NULL, *vb = NULL;
    int rc = -1;
    if (extras_val(s, key, &k, &kb) < 0 || (value && extras_val(s, value, &v, &vb) < 0)) {
        goto done;
    }
    const extras_rec *r = &s->xs[old];
    size_t n = 0;
    if (tgc_ps__grow(&s->xscratch, &s->xscratch_cap, r->len + 1, sizeof(pair)) < 0) {
        tgc_ps__nomem(s);
        goto done;
    }
    r = &s->xs[old];
    for (uint32_t i = 0; i < r->len; i++) {
        const pair *p = &s->xpool[r->off + i];
        if (memcmp(&p->k, &k, sizeof(val)) != 0) {
            s->xscratch[n++] = *p;
        }
    }
    if (value != NULL) {
        s->xscratch[n++] = (pair){k, v};
    }
    uint32_t id = 0;
    if (tgc_ps__intern_extras(s, s->xscratch, n, &id) < 0) {
        goto done;
    }
    xcol[row] = id;
    rc = 0;
done:
    if (kb) {
        s->b.decref(s->b.ctx, kb);
    }
    if (vb) {
        s->b.decref(s->b.ctx, vb);
    }
    return rc;
}

/* The action's code on device d (codes in order of first appearance). */
static int
action_code(S *s, uint32_t d, uint32_t sid, uint8_t *code)
{
    device *dv = &s->devs[d];
    if (sid == dv->last_sid) {
        *code = (uint8_t)dv->last_code;
        return 0;
    }
    uint32_t c = 0;
    while (c < dv->nactions && dv->actions[c] != sid) {
        c++;
    }
    if (c == dv->nactions) {
        if (c == 256) {
            return tgc_ps__fail_text(s, TGC_PS_BOUND, "more than 256 distinct actions in the "
                                     "trace of device %u", d);
        }
        dv->actions[dv->nactions++] = sid;
    }
    dv->last_sid = sid;
    dv->last_code = c;
    *code = (uint8_t)c;
    return 0;
}

/* An entry's frames value as a stack id; a faulty one records the entry's fault. */
static int
row_frames(S *s, uint32_t d, uint32_t row, val *v)
{
    device *dv = &s->devs[d];
    uint8_t *present = dv->col[TGC_PS_COL_PRESENT];
    uint32_t id = 0;
    present[row] &= (uint8_t)~(TGC_PS_P_FRAMES | TGC_PS_P_FRAMES_NONE);
    ((uint32_t *)dv->col[TGC_PS_COL_STACK])[row] = 0;
    if (v->kind == V_NONE) {
        present[row] |= TGC_PS_P_FRAMES_NONE;
        clear_err(s, d, row, F_FRAMES);
        return 0;
    }
    if (v->kind == V_FRAMES) {
        if (tgc_ps__settle(s, v) < 0) {
            return -1;
        }
    }
    if (v->kind == V_STACK) {
        id = (uint32_t)v->b;
    }
    else if (v->kind == V_OBJ) {
        look_t l;
        if (tgc_ps__look(s, v, &l) < 0) {
            return -1;
        }
        if (l.kind != L_LIST) {
            return set_err(s, d, row, F_FRAMES, E_TYPE, l.type, 0);
        }
        if (stack_from_list(s, (void *)(uintptr_t)v->b, &id) < 0) {
            return -1;
        }
        tgc_ps__memo_adopt(s, v->a, M_STACK, id, (void *)(uintptr_t)v->b);
    }
    else if (v->kind == V_DEVICE) {
        return tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED,
                                 "a device's trace used as an entry's frames");
    }
    else {
        return set_err(s, d, row, F_FRAMES, E_TYPE, tgc_ps__kind_type(v->kind), 0);
    }
    present[row] |= TGC_PS_P_FRAMES;
    ((uint32_t *)dv->col[TGC_PS_COL_STACK])[row] = id;
    if (s->stacks[id].bad_k != UINT32_MAX) {
        return set_err(s, d, row, F_FRAMES, E_FRAME, NULL, id);
    }
    clear_err(s, d, row, F_FRAMES);
    return 0;
}

/* An address, size or device_free: an int in [0, 2**64). A bool is one, in the column for the
 * readers, and kept as it is with the other fields too (they win when the entry is made). */
static int
row_u64(S *s, uint32_t d, uint32_t row, int field, int col, int bit, val *k, val *v)
{
    device *dv = &s->devs[d];
    look_t l;
    uint64_t *c = dv->col[col];
    if (tgc_ps__look(s, v, &l) < 0) {
        return -1;
    }
    ((uint8_t *)dv->col[TGC_PS_COL_PRESENT])[row] |= (uint8_t)bit;
    c[row] = 0;
    if (l.kind == L_INT && l.i < 0) {
        return set_err(s, d, row, field, E_NEG, NULL, l.i);
    }
    if (l.kind == L_INT || l.kind == L_UINT) {
        c[row] = l.kind == L_INT ? (uint64_t)l.i : l.u;
        clear_err(s, d, row, field);
        return l.boolean ? row_extra(s, d, row, k, v) : 0;
    }
    return set_err(s, d, row, field, l.kind == L_BIG ? E_RANGE : E_TYPE, l.type, 0);
}

/* entry[key] = value. The fields tensorgc reads go to their columns (checked as check_snapshot
 * does); the rest, and values a column cannot hold, to the row's set of other fields. */
int
tgc_ps__row_set(S *s, uint32_t d, uint32_t row, val *k, val *v)
{
    device *dv = &s->devs[d];
    uint8_t *present = dv->col[TGC_PS_COL_PRESENT];
    int sid = k->kind == V_STR && k->b < NKNOWN ? (int)k->b : -1;
    look_t l;
    if (sid >= 0 && (s->pending ? s->npend > 0
                                : ((uint32_t *)dv->col[TGC_PS_COL_EXTRA])[row] != 0)) {
        if (row_extra(s, d, row, k, NULL) < 0) {  /* the column takes it, or nobody */
            return -1;
        }
    }
    switch (sid) {
    case K_ACTION:
        if (tgc_ps__look(s, v, &l) < 0) {
            return -1;
        }
        present[row] |= TGC_PS_P_ACTION;
        if (l.kind != L_STR) {
            return set_err(s, d, row, F_ACTION, E_TYPE, l.type, 0);
        }
        if (action_code(s, d, l.sid, &((uint8_t *)dv->col[TGC_PS_COL_ACTION])[row]) < 0) {
            return -1;
        }
        clear_err(s, d, row, F_ACTION);
        return 0;
    case K_ADDR:
        return row_u64(s, d, row, F_ADDR, TGC_PS_COL_ADDR, TGC_PS_P_ADDR, k, v);
    case K_SIZE:
        return row_u64(s, d, row, F_SIZE, TGC_PS_COL_SIZE, TGC_PS_P_SIZE, k, v);
    case K_DEVICE_FREE:
        return row_u64(s, d, row, F_DEVFREE, TGC_PS_COL_DEVFREE, TGC_PS_P_DEVFREE, k, v);
    case K_TIME_US:
        if (tgc_ps__look(s, v, &l) < 0) {
            return -1;
        }
        present[row] &= (uint8_t)~TGC_PS_P_TIME;
        ((int64_t *)dv->col[TGC_PS_COL_TIME])[row] = INT64_MIN;
        if (l.kind == L_INT) {
            present[row] |= TGC_PS_P_TIME;
            ((int64_t *)dv->col[TGC_PS_COL_TIME])[row] = l.i;
            clear_err(s, d, row, F_TIME);
            return l.boolean ? row_extra(s, d, row, k, v) : 0;  /* a bool: as row_u64 keeps it */
        }
        if (l.kind == L_UINT) {  /* valid, but no int64: kept with the other fields */
            clear_err(s, d, row, F_TIME);
            return row_extra(s, d, row, k, v);
        }
        return set_err(s, d, row, F_TIME, l.kind == L_BIG ? E_RANGE : E_TYPE, l.type, 0);
    case K_STREAM:
        present[row] &= (uint8_t)~TGC_PS_P_STREAM;
        ((int64_t *)dv->col[TGC_PS_COL_STREAM])[row] = 0;
        if (v->kind == V_INT && !(v->flags & F_UNSIGNED)) {
            present[row] |= TGC_PS_P_STREAM;
            ((int64_t *)dv->col[TGC_PS_COL_STREAM])[row] = (int64_t)v->b;
            return 0;
        }
        return row_extra(s, d, row, k, v);
    case K_FRAMES:
        return row_frames(s, d, row, v);
    default:
        return row_extra(s, d, row, k, v);
    }
}

/* A row filled from a builder dict appended to a device's list (built with DICT, or shared
 * with another part of the file). */
static int
row_from_dict(S *s, uint32_t d, uint32_t row, void *dict)
{
    size_t pos = 0;
    void *k, *v;
    int rc;
    if (tgc_ps__pend_begin(s, d, row) < 0) {
        return -1;
    }
    while ((rc = s->b.dict_next(s->b.ctx, dict, &pos, &k, &v)) == 1) {
        val kv, vv;
        if (tgc_ps__from_obj(s, k, &kv) < 0) {
            tgc_ps__pend_end(s);
            return -1;
        }
        if (tgc_ps__from_obj(s, v, &vv) < 0) {
            tgc_ps__drop(s, &kv);
            tgc_ps__pend_end(s);
            return -1;
        }
        rc = tgc_ps__row_set(s, d, row, &kv, &vv);
        int rc2 = tgc_ps__drop(s, &kv);
        if (tgc_ps__drop(s, &vv) < 0 || rc2 < 0 || rc < 0) {
            tgc_ps__pend_end(s);
            return -1;
        }
    }
    if (rc < 0) {
        tgc_ps__pend_end(s);
        return tgc_ps__builder_failed(s);
    }
    return tgc_ps__pend_end(s);
}

/* An item appended to device d's list. */
int
tgc_ps__device_append(S *s, uint32_t d, val *item)
{
    uint32_t row;
    switch (item->kind) {
    case V_ENTRY:
        if (item->a != d) {
            return tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED, "trace entry %llu of device %u is "
                                     "also in the list of device %u (through the memo)",
                                     (unsigned long long)item->b, item->a, d);
        }
        return place_row(s, d, (uint32_t)item->b);
    case V_FDICT: case V_FRAME:
        return tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED, "a frame dict used as a trace entry");
    case V_OBJ: {
        look_t l;
        if (tgc_ps__look(s, item, &l) < 0 || tgc_ps__new_row(s, d, &row) < 0) {
            return -1;
        }
        if (l.kind == L_DICT) {
            if (row_from_dict(s, d, row, (void *)(uintptr_t)item->b) < 0) {
                return -1;
            }
        }
        else {
            row_err *e = row_err_get(s, d, row, 1);
            if (e == NULL) {
                return -1;
            }
            e->notdict = 1;
        }
        return place_row(s, d, row);
    }
    default: {
        if (tgc_ps__new_row(s, d, &row) < 0) {
            return -1;
        }
        row_err *e = row_err_get(s, d, row, 1);
        if (e == NULL) {
            return -1;
        }
        e->notdict = 1;
        return place_row(s, d, row);
    }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The first faulty entry of each device, in check_snapshot's words                            */

static const char *const field_names[NFIELD] = {"action", "addr", "size", "device_free",
                                                "time_us", "frames"};

static void
frame_fault(const S *s, uint32_t stack, char *out, size_t cap)
{
    const stack_rec *r = &s->stacks[stack];
    const frame_rec *f = &s->frames[s->spool[r->off + r->bad_k]];
    static const char *const names[] = {"", "", "filename", "name", "line"};
    if (f->bad == BAD_NOTDICT) {
        snprintf(out, cap, "frame %u is %s, not dict", r->bad_k, f->bad_type);
    }
    else if (f->bad_range) {
        snprintf(out, cap, "frame %u '%s' is out of range", r->bad_k, names[f->bad]);
    }
    else {
        snprintf(out, cap, "frame %u '%s' is %s, not %s", r->bad_k, names[f->bad], f->bad_type,
                 f->bad == BAD_LINE ? "int" : "str");
    }
}

int
tgc_ps__device_fault(S *s, uint32_t d)
{
    device *dv = &s->devs[d];
    const uint8_t *present = dv->col[TGC_PS_COL_PRESENT];
    char why[400];
    uint32_t neg_pos = UINT32_MAX;
    int neg_field = 0;
    int64_t neg_value = 0;
    why[0] = 0;
    uint32_t j;
    for (j = 0; j < dv->len; j++) {
        uint32_t row = dv->order ? dv->order[j] : j;
        const row_err *e = row_err_get(s, d, row, 0);
        if (e != NULL && e->notdict) {
            snprintf(why, sizeof(why), "trace entry %u of device %u is not a dict", j, d);
            break;
        }
        if (!(present[row] & TGC_PS_P_ACTION)) {
            snprintf(why, sizeof(why), "trace entry %u of device %u: has no 'action'", j, d);
            break;
        }
        if (e == NULL) {
            continue;
        }
        int f;
        for (f = 0; f < NFIELD; f++) {
            if (e->code[f] != E_OK && e->code[f] != E_NEG) {
                break;
            }
        }
        if (f < NFIELD) {
            char detail[300];
            if (e->code[f] == E_FRAME) {
                frame_fault(s, (uint32_t)e->neg[f], detail, sizeof(detail));
            }
            else if (e->code[f] == E_RANGE) {
                snprintf(detail, sizeof(detail), "'%s' is out of range", field_names[f]);
            }
            else {
                snprintf(detail, sizeof(detail), "'%s' is %s, not %s", field_names[f],
                         e->type[f], f == F_ACTION ? "str" : f == F_FRAMES ? "list" : "int");
            }
            snprintf(why, sizeof(why), "trace entry %u of device %u: %s", j, d, detail);
            break;
        }
        if (neg_pos == UINT32_MAX) {
            for (f = 0; f < NFIELD; f++) {
                if (e->code[f] == E_NEG) {
                    neg_pos = j;
                    neg_field = f;
                    neg_value = e->neg[f];
                    break;
                }
            }
        }
    }
    if (why[0] == 0 && neg_pos != UINT32_MAX) {
        snprintf(why, sizeof(why), "trace entry %u of device %u: '%s' is negative (%lld): "
                 "addresses, sizes and devices are >= 0", neg_pos, d, field_names[neg_field],
                 (long long)neg_value);
    }
    if (why[0] != 0) {
        dv->error = strdup(why);
        if (dv->error == NULL) {
            return tgc_ps__nomem(s);
        }
    }
    return 0;
}

