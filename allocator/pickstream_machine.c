/* pickstream_machine.c: the streaming loader's opcode machine (tgc_ps_run; shared declarations
 * in pickstream_int.h): a stack of tagged values with its marks and memo, the opcodes and rules
 * of form it shares with pickscan.c (pickrules.h), strings checked as the unpickler decodes them,
 * and each value routed where its container puts it: onto the trace's path (pickstream_rows.c)
 * or into a builder object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickrules.h"
#include "pickstream_int.h"

/* ------------------------------------------------------------------------------------------ */
/* Text from the file                                                                          */

/* UTF-8 as the unpickler decodes it: "surrogatepass" (encoded surrogates taken) for strings,
 * "strict" (refused) for GLOBAL's names. */
static inline int
utf8_check(const unsigned char *p, size_t n, int strict)
{
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if ((w & UINT64_C(0x8080808080808080)) == 0) {
                i += 8;
                continue;
            }
        }
        unsigned c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            k = 1;
        }
        else if (c >= 0xE0 && c <= 0xEF) {
            k = 2;
            if (c == 0xE0) {
                lo = 0xA0;
            }
            else if (c == 0xED && strict) {
                hi = 0x9F;
            }
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            k = 3;
            if (c == 0xF0) {
                lo = 0x90;
            }
            else if (c == 0xF4) {
                hi = 0x8F;
            }
        }
        else {
            return 0;
        }
        if (i + k >= n) {
            return 0;
        }
        if (p[i + 1] < lo || p[i + 1] > hi) {
            return 0;
        }
        for (size_t j = 2; j <= k; j++) {
            if (p[i + j] < 0x80 || p[i + j] > 0xBF) {
                return 0;
            }
        }
        i += k + 1;
    }
    return 1;
}

static int
utf8_ok(const unsigned char *p, size_t n)
{
    return utf8_check(p, n, 0);
}

static int
ascii_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= 0x80) {
            return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* The machine                                                                                 */

/* The values above the top mark (the unpickler's fence): what an opcode may pop. */
static inline size_t
above_mark(const S *s)
{
    return s->n - s->fence;
}

static int push_slow(S *s, val v);

static inline int
push(S *s, val v)
{
    if (s->n < s->cap) {
        s->st[s->n++] = v;
        return 0;
    }
    return push_slow(s, v);
}

static int
push_slow(S *s, val v)
{
    if (s->n == s->cap) {
        if (s->n >= TGC_PS_MAX_STACK) {
            tgc_ps__drop(s, &v);
            return tgc_ps__fail_text(s, TGC_PS_BOUND, "more than %u values on the pickle stack",
                                     TGC_PS_MAX_STACK);
        }
        if (tgc_ps__grow(&s->st, &s->cap, s->n + 1, sizeof(val)) < 0) {
            tgc_ps__drop(s, &v);
            return tgc_ps__nomem(s);
        }
    }
    s->st[s->n++] = v;
    return 0;
}

static int
push_obj(S *s, void *o, uint16_t flags)
{
    if (o == NULL) {
        return tgc_ps__builder_failed(s);
    }
    return push(s, (val){V_OBJ, R_NONE, flags, 0, (uint64_t)(uintptr_t)o});
}

static int
drop_range(S *s, size_t from)
{
    int rc = 0;
    while (s->n > from) {
        if (tgc_ps__drop(s, &s->st[--s->n]) < 0) {
            rc = -1;
        }
    }
    return rc;
}

/* As a dict key or set member (pickscan's classes). */
static int
klass(S *s, const val *v)
{
    switch (v->kind) {
    case V_NONE: case V_TRUE: case V_FALSE: case V_FLOAT: case V_STR:
        return TGC_PSK_CHEAP;
    case V_INT:
        return v->flags & F_COSTLY ? TGC_PSK_COSTLY : TGC_PSK_CHEAP;
    case V_OBJ:
        if (v->flags & F_COSTLY) {
            return TGC_PSK_COSTLY;
        }
        return v->role != R_NONE ? TGC_PSK_UNHASHABLE
                                 : s->b.classify(s->b.ctx, (void *)(uintptr_t)v->b);
    default:
        return TGC_PSK_UNHASHABLE;
    }
}

/* Boxes st[from, from + n) into s->items (new references; the caller lets go of them). */
static int
box_items(S *s, size_t from, size_t n)
{
    if (tgc_ps__grow(&s->items, &s->items_cap, n + 1, sizeof(void *)) < 0) {
        return tgc_ps__nomem(s);
    }
    for (size_t i = 0; i < n; i++) {
        s->items[i] = tgc_ps__box(s, &s->st[from + i]);
        if (s->items[i] == NULL) {
            while (i > 0) {
                s->b.decref(s->b.ctx, s->items[--i]);
            }
            return -1;
        }
    }
    return 0;
}

static void
unbox_items(S *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        s->b.decref(s->b.ctx, s->items[i]);
    }
}

/* A new builder container of st[from:] (those values leave the stack), pushed. */
static int
make_from(S *s, int kind, size_t from, uint16_t flags)
{
    size_t n = s->n - from;
    if (box_items(s, from, n) < 0) {
        return -1;
    }
    void *o = s->b.make(s->b.ctx, kind, s->items, n);
    unbox_items(s, n);
    if (drop_range(s, from) < 0) {
        if (o) {
            s->b.decref(s->b.ctx, o);
        }
        return -1;
    }
    return push_obj(s, o, flags);
}

/* st[from:] appended (APPENDS), set (SETITEMS, pairs) or added (ADDITEMS) to st[from - 1]. */
static int
extend(S *s, int op, size_t from)
{
    val *t = &s->st[from - 1];
    size_t n = s->n - from;
    int rc = 0;
    if (n == 0) {
        return 0;
    }
    switch (t->kind) {
    case V_OBJ:
        if ((op == TGC_PSB_APPENDS && s->listcache.n) ||
            (op == TGC_PSB_SETITEMS && s->dictcache.n)) {
            int nm = 0;
            uint32_t *hit = tgc_ps__map_get(op == TGC_PSB_APPENDS ? &s->listcache : &s->dictcache,
                                            s->seed, t->b, 0, &nm);
            if (hit != NULL && *hit != 0) {
                return tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED,
                                         "a %s changed after an entry used it",
                                         op == TGC_PSB_APPENDS ? "frames list" : "frame dict");
            }
        }
        if (box_items(s, from, n) < 0) {
            return -1;
        }
        rc = s->b.extend(s->b.ctx, (void *)(uintptr_t)t->b, op, s->items, n);
        unbox_items(s, n);
        if (rc < 0) {
            return tgc_ps__builder_failed(s);
        }
        break;
    case V_ENTRY:
        if (op != TGC_PSB_SETITEMS) {
            goto wrong;
        }
        rc = tgc_ps__pend_begin(s, t->a, (uint32_t)t->b);
        for (size_t i = from; i + 1 < s->n && rc == 0; i += 2) {
            rc = tgc_ps__row_set(s, t->a, (uint32_t)t->b, &s->st[i], &s->st[i + 1]);
        }
        if (tgc_ps__pend_end(s) < 0) {
            rc = -1;
        }
        break;
    case V_FDICT:
        if (op != TGC_PSB_SETITEMS) {
            goto wrong;
        }
        for (size_t i = from; i + 1 < s->n && rc == 0; i += 2) {
            rc = tgc_ps__frame_set(s, t->a, &s->st[i], &s->st[i + 1]);
        }
        if (rc == 0) {
            rc = tgc_ps__settle(s, t);  /* read now: the memo hands out the frame from here on */
        }
        break;
    case V_FRAME:
        return tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED, "a frame dict changed after it was read");
    case V_DEVICE:
        if (op != TGC_PSB_APPENDS) {
            goto wrong;
        }
        for (size_t i = from; i < s->n && rc == 0; i++) {
            rc = tgc_ps__device_append(s, (uint32_t)t->b, &s->st[i]);
        }
        break;
    case V_FRAMES:
        if (op != TGC_PSB_APPENDS) {
            goto wrong;
        }
        for (size_t i = from; i < s->n && rc == 0; i++) {
            uint32_t id;
            rc = tgc_ps__frame_of(s, &s->st[i], &id);
            if (rc == 0) {
                open_rec *r = &s->opens[t->a];
                if (tgc_ps__grow(&r->ids, &r->cap, r->n + 1, sizeof(uint32_t)) < 0) {
                    return tgc_ps__nomem(s);
                }
                r->ids[r->n++] = id;
            }
        }
        break;
    case V_STACK:
        return tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED,
                                 "a frames list changed after an entry used it");
    default:
        goto wrong;
    }
    if (rc < 0) {
        return -1;
    }
    return drop_range(s, from);
wrong:
    return tgc_ps__fail_text(s, TGC_PS_CORRUPT, "%s onto a value of type %s",
                             op == TGC_PSB_APPENDS ? "APPENDS"
                             : op == TGC_PSB_SETITEMS ? "SETITEMS" : "ADDITEMS",
                             tgc_ps__kind_type(t->kind));
}

/* Where a value pushed now may go: up to two (container, key) candidates, nearest first. The
 * single-item forms (APPEND, SETITEM: the container right below) and the batched ones (the
 * container below the top mark) look alike on the stack: [traces, MARK, device 0] and a new
 * value may be device 0's one item or the batch's next device. So the opcode that makes the
 * value picks the first candidate its rule takes (a list under traces is a device, a dict
 * under a device an entry); a wrong pick is caught where the value is consumed. key: the key's
 * index for a dict receiving a value, else SIZE_MAX. */
typedef struct {
    size_t parent[2], key[2];
    int n;
} where_t;

static void
where_of(const S *s, where_t *w)
{
    size_t n = s->n, m = s->nmarks ? s->marks[s->nmarks - 1] : SIZE_MAX;
    int marked = s->nmarks > 0;
    w->n = 0;
    if (n >= 1 && (!marked || m < n)) {
        const val *t = &s->st[n - 1];
        if (t->kind == V_DEVICE || t->kind == V_FRAMES ||
            (t->kind == V_OBJ && t->role == R_TRACES)) {
            w->parent[w->n] = n - 1;
            w->key[w->n++] = SIZE_MAX;
        }
    }
    if (n >= 2 && (!marked || m <= n - 2)) {
        const val *t = &s->st[n - 2];
        if (t->kind == V_ENTRY || (t->kind == V_OBJ && t->role == R_ROOT)) {
            w->parent[w->n] = n - 2;
            w->key[w->n++] = n - 1;
        }
    }
    if (marked && m >= 1) {
        const val *t = &s->st[m - 1];
        w->parent[w->n] = m - 1;
        w->key[w->n] = SIZE_MAX;
        if ((t->kind == V_ENTRY || (t->kind == V_OBJ && t->role == R_ROOT)) && (n - m) % 2 == 1) {
            w->key[w->n] = n - 1;
        }
        w->n++;
    }
}

static int
empty_dict(S *s)
{
    if (s->n == 0 && s->nmarks == 0) {  /* the top-level object */
        void *o = s->b.make(s->b.ctx, TGC_PSB_DICT, NULL, 0);
        if (o == NULL) {
            return tgc_ps__builder_failed(s);
        }
        return push(s, (val){V_OBJ, R_ROOT, 0, 0, (uint64_t)(uintptr_t)o});
    }
    where_t w;
    where_of(s, &w);
    for (int c = 0; c < w.n; c++) {
        const val *pv = &s->st[w.parent[c]];
        if (pv->kind == V_DEVICE) {  /* an entry */
            uint32_t d = (uint32_t)pv->b, row;
            if (tgc_ps__new_row(s, d, &row) < 0) {
                return -1;
            }
            return push(s, (val){V_ENTRY, 0, 0, d, row});
        }
        if (pv->kind == V_FRAMES) {  /* a frame */
            uint32_t idx;
            if (tgc_ps__open_new(s, 1, &idx) < 0) {
                return -1;
            }
            return push(s, (val){V_FDICT, 0, 0, idx, 0});
        }
    }
    return push_obj(s, s->b.make(s->b.ctx, TGC_PSB_DICT, NULL, 0), 0);
}

static int
empty_list(S *s)
{
    where_t w;
    where_of(s, &w);
    for (int c = 0; c < w.n; c++) {
        const val *pv = &s->st[w.parent[c]];
        const val *kv = w.key[c] != SIZE_MAX ? &s->st[w.key[c]] : NULL;
        if (pv->kind == V_OBJ && pv->role == R_ROOT && kv && kv->kind == V_STR &&
            kv->b == K_DEVICE_TRACES) {  /* snap["device_traces"] */
            void *o = s->b.make(s->b.ctx, TGC_PSB_LIST, NULL, 0);
            if (o == NULL) {
                return tgc_ps__builder_failed(s);
            }
            return push(s, (val){V_OBJ, R_TRACES, 0, 0, (uint64_t)(uintptr_t)o});
        }
        if (pv->kind == V_OBJ && pv->role == R_TRACES) {  /* a device's list */
            uint32_t d = 0;
            if (tgc_ps__new_device(s, &d) < 0) {
                return -1;
            }
            return push(s, (val){V_DEVICE, 0, 0, 0, d});
        }
        if (pv->kind == V_ENTRY && kv && kv->kind == V_STR && kv->b == K_FRAMES) {  /* frames */
            uint32_t idx;
            if (tgc_ps__open_new(s, 0, &idx) < 0) {
                return -1;
            }
            return push(s, (val){V_FRAMES, 0, 0, idx, 0});
        }
    }
    return push_obj(s, s->b.make(s->b.ctx, TGC_PSB_LIST, NULL, 0), 0);
}

static int
memo_get(S *s, uint64_t idx)
{
    uint64_t *slot = tgc_ps__memo_slot(s, idx, 0);
    if (slot == NULL || *slot == 0) {
        tgc_ps__fail(s, TGC_PS_MEMO_UNSET, idx, 0, 0);
        return -1;
    }
    uint64_t x = *slot, p = M_PAY(x);
    switch (M_TAG(x)) {
    case M_OBJ:
        s->b.incref(s->b.ctx, (void *)(uintptr_t)x);
        return push(s, (val){V_OBJ, R_NONE, 0, idx < UINT32_MAX - 1 ? (uint32_t)idx + 1 : 0, x});
    case M_STR: return push(s, (val){V_STR, 0, 0, 0, p});
    case M_INT: return push(s, (val){V_INT, 0, 0, 0, (uint64_t)((int64_t)x >> 3)});
    case M_ENTRY: return push(s, (val){V_ENTRY, 0, 0, (uint32_t)(p >> 32), p & 0xFFFFFFFFu});
    case M_STACK: return push(s, (val){V_STACK, 0, 0, 0, p});
    case M_FRAME: return push(s, (val){V_FRAME, 0, 0, 0, p});
    case M_OPEN:
        return tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED, "a %s referred to (memo index %llu) "
                                 "before it is complete", p & 1 ? "frame dict" : "frames list",
                                 (unsigned long long)idx);
    default:
        if (p >= MISC_DEVICE) {
            return push(s, (val){V_DEVICE, 0, 0, 0, p - MISC_DEVICE});
        }
        return push(s, (val){(uint8_t)(p == MISC_NONE ? V_NONE : p == MISC_TRUE ? V_TRUE : V_FALSE),
                             0, 0, 0, 0});
    }
}

/* memo[idx] = the top of the stack. */
static int
memo_put(S *s, uint64_t idx)
{
    tgc_ps_result rule;
    if (tgc_ps__rule_take(above_mark(s), 1, &rule) != TGC_PS_OK) {
        tgc_ps__fail(s, rule.code, rule.a, rule.b, rule.c);
        return -1;
    }
    val *v = &s->st[s->n - 1];
    uint64_t x;
    switch (v->kind) {
    case V_NONE: x = M_MAKE(M_MISC, MISC_NONE); break;
    case V_TRUE: x = M_MAKE(M_MISC, MISC_TRUE); break;
    case V_FALSE: x = M_MAKE(M_MISC, MISC_FALSE); break;
    case V_STR: x = M_MAKE(M_STR, v->b); break;
    case V_ENTRY: x = M_MAKE(M_ENTRY, (uint64_t)v->a << 32 | v->b); break;
    case V_DEVICE: x = M_MAKE(M_MISC, MISC_DEVICE + v->b); break;
    case V_STACK: x = M_MAKE(M_STACK, v->b); break;
    case V_FRAME: x = M_MAKE(M_FRAME, v->b); break;
    case V_FRAMES: case V_FDICT:
        if (s->opens[v->a].memo != NO_MEMO) {
            return tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED,
                                     "a frames list or frame dict memoized twice");
        }
        x = M_MAKE(M_OPEN, (uint64_t)v->a << 1 | (v->kind == V_FDICT));
        break;
    case V_INT:
        if (!(v->flags & F_UNSIGNED) && (int64_t)v->b >= INT61_MIN && (int64_t)v->b <= INT61_MAX) {
            x = M_MAKE(M_INT, 0) | ((uint64_t)v->b << 3);
            break;
        }
        __attribute__((fallthrough));  /* a wide int: boxed */
    default: {
        void *o = tgc_ps__box(s, v);  /* an object; a float or a wide int as one */
        if (o == NULL) {
            return -1;
        }
        if (((uintptr_t)o & 7u) != 0) {
            s->b.decref(s->b.ctx, o);
            return tgc_ps__fail_text(s, TGC_PS_CORRUPT, "the builder's object is not 8-aligned");
        }
        x = (uint64_t)(uintptr_t)o;
        break;
    }
    }
    uint64_t *slot = tgc_ps__memo_slot(s, idx, 1);
    if (slot == NULL) {
        if (M_TAG(x) == M_OBJ) {
            s->b.decref(s->b.ctx, (void *)(uintptr_t)x);
        }
        return -1;
    }
    uint64_t old = *slot;
    if (old == 0) {
        s->memo_set++;
    }
    else if (M_TAG(old) == M_OBJ) {
        s->b.decref(s->b.ctx, (void *)(uintptr_t)old);
    }
    else if (M_TAG(old) == M_OPEN && s->opens[M_PAY(old) >> 1].memo == idx) {
        s->opens[M_PAY(old) >> 1].memo = NO_MEMO;
    }
    *slot = x;
    if (v->kind == V_FRAMES || v->kind == V_FDICT) {
        s->opens[v->a].memo = idx;
    }
    return 0;
}

/* After STOP: the stack and the memo are let go of (the memo holds 8 bytes per slot the file
 * filled, most of the machine's memory after the columns). */
void
tgc_ps__release_machine(S *s)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->st[i].kind == V_OBJ) {
            s->b.decref(s->b.ctx, (void *)(uintptr_t)s->st[i].b);
        }
    }
    s->n = 0;
    s->nmarks = 0;
    s->fence = 0;
    for (size_t p = 0; p < s->npages; p++) {
        if (s->memo[p] == NULL) {
            continue;
        }
        for (size_t i = 0; i < MEMO_PAGE; i++) {
            uint64_t x = s->memo[p][i];
            if (x != 0 && M_TAG(x) == M_OBJ) {
                s->b.decref(s->b.ctx, (void *)(uintptr_t)x);
            }
        }
        free(s->memo[p]);
        s->memo[p] = NULL;
    }
}

static uint64_t
le(const unsigned char *p, int width)
{
    uint64_t x = 0;
    for (int i = width - 1; i >= 0; i--) {
        x = (x << 8) | p[i];
    }
    return x;
}

/* A LONG1/LONG4 payload: little-endian two's complement. */
static int
push_long(S *s, const unsigned char *p, size_t k)
{
    if (k == 0) {
        return push(s, (val){V_INT, 0, 0, 0, 0});
    }
    if (k <= 8) {
        uint64_t x = le(p, (int)k);
        if (k < 8 && (p[k - 1] & 0x80)) {
            x |= ~UINT64_C(0) << (8 * k);  /* sign extension */
        }
        return push(s, (val){V_INT, 0, 0, 0, x});
    }
    if (k == 9 && p[8] == 0 && (p[7] & 0x80)) {  /* [2**63, 2**64) */
        return push(s, (val){V_INT, 0, F_UNSIGNED | F_COSTLY, 0, le(p, 8)});
    }
    tgc_ps_scalar sc;
    memset(&sc, 0, sizeof(sc));
    sc.kind = TGC_PSS_BIGINT;
    sc.p = (const char *)p;
    sc.n = k;
    return push_obj(s, s->b.scalar(s->b.ctx, &sc), F_COSTLY);
}

/* A string or bytes payload of k bytes (in the buffer or big): pushed as its kind. */
static int
push_payload(S *s, unsigned op, const unsigned char *p, size_t k)
{
    tgc_ps_scalar sc;
    memset(&sc, 0, sizeof(sc));
    sc.sid = UINT32_MAX;
    sc.p = (const char *)p;
    sc.n = k;
    switch (op) {
    case 0x8C: case 'X': case 0x8D:  /* SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 */
        if (!utf8_ok(p, k)) {
            return tgc_ps__fail_text(s, TGC_PS_CORRUPT, "a string that is not UTF-8");
        }
        break;
    case 0x55: case 'T':  /* SHORT_BINSTRING, BINSTRING: str, decoded as ASCII */
        if (!ascii_ok(p, k)) {
            return tgc_ps__fail_text(s, TGC_PS_CORRUPT, "a protocol-2 string that is not ASCII");
        }
        break;
    case 0x96:
        sc.kind = TGC_PSS_BYTEARRAY;
        return push_obj(s, s->b.scalar(s->b.ctx, &sc), 0);
    default:  /* bytes */
        sc.kind = TGC_PSS_BYTES;
        return push_obj(s, s->b.scalar(s->b.ctx, &sc), 0);
    }
    if (k <= TGC_PS_STR_INTERN) {
        uint32_t sid;
        if (tgc_ps__intern_str(s, (const char *)p, k, &sid) < 0) {
            return -1;
        }
        return push(s, (val){V_STR, 0, 0, 0, sid});
    }
    sc.kind = TGC_PSS_STR;
    return push_obj(s, s->b.scalar(s->b.ctx, &sc), 0);
}

/* GLOBAL, INST or STACK_GLOBAL with both names (UTF-8): refused by them, escaped. */
static int
lookup(S *s, const char *mod, const char *name)
{
    snprintf(s->err.text, sizeof(s->err.text), "%s.%s", mod, name);
    tgc_ps__fail(s, TGC_PS_LOOKUP, 0, 0, 0);
    return -1;
}

/* One of GLOBAL's or INST's name lines into out, escaped, checked as the unpickler checks it
 * (an empty name reads as truncated; GLOBAL decodes UTF-8, INST ASCII). 0, or -1. */
static int
name_line(S *s, unsigned op, char out[TGC_PS_NAME_CAP])
{
    const unsigned char *line;
    size_t len;
    if (tgc_ps__rd_line(s, &line, &len) < 0) {
        return -1;
    }
    if (len == 0) {
        return tgc_ps__fail_text(s, TGC_PS_CORRUPT, "an empty name after %s",
                                 op == 'c' ? "GLOBAL" : "INST");
    }
    if (op == 'c' ? !utf8_check(line, len, 1) : !ascii_ok(line, len)) {
        return tgc_ps__fail_text(s, TGC_PS_CORRUPT, "a name after %s that is not %s",
                                 op == 'c' ? "GLOBAL" : "INST", op == 'c' ? "UTF-8" : "ASCII");
    }
    tgc_ps__escape_name(out, line, len);
    return 0;
}

#define FAIL(code_, a_, b_, c_) do { tgc_ps__fail(s, (code_), (a_), (b_), (c_)); goto failed; \
                                } while (0)
#define CHECK(x) do { if ((x) < 0) { goto failed; } } while (0)
#define AVAIL (s->hi - s->lo)
#define HERE (s->buf + s->lo)
#define ADV(k) do { s->lo += (k); s->off += (k); } while (0)
#define NEED(k) do { if (s->flim - s->lo < (size_t)(k)) { \
                         CHECK(tgc_ps__need_slow(s, (size_t)(k))); } \
                } while (0)
/* A rule of pickrules.h that does not hold fails the load with its verdict (at the opcode's
 * end; RULE_AT: at p). */
#define RULE(x) do { if ((x) != TGC_PS_OK) { FAIL(rule.code, rule.a, rule.b, rule.c); } } while (0)
#define RULE_AT(p, x) do { if ((x) != TGC_PS_OK) { \
                               tgc_ps__fail_at(s, rule.code, (p), rule.a, rule.b, rule.c); \
                               goto failed; } } while (0)
#define POPMARK(m) do { RULE(tgc_ps__rule_popmark(s->marks, s->nmarks, s->n, &rule)); \
                        (m) = s->marks[--s->nmarks]; \
                        s->fence = s->nmarks ? s->marks[s->nmarks - 1] : 0; } while (0)
#define KEYS_CHEAP(from, step, code) do { \
        for (size_t i_ = (from); i_ < s->n; i_ += (step)) { \
            if (klass(s, &s->st[i_]) != TGC_PSK_CHEAP) { FAIL((code), 0, 0, 0); } } \
    } while (0)

int
tgc_ps_run(tgc_ps_stream *s, void **result)
{
    tgc_ps_result rule;  /* the last rule's verdict */
    *result = NULL;
    for (;;) {
        s->op_end = s->off;
        if (s->flim == s->lo) {
            CHECK(tgc_ps__next_op_slow(s));
        }
        unsigned op = *HERE;
        ADV(1);
        s->op_end = s->off;
        uint64_t k, idx;
        size_t m;
        switch (op) {
        case 0x80:  /* PROTO */
            NEED(1);
            k = *HERE;
            ADV(1);
            if (k > 5) {
                s->op_end = s->off;
                tgc_ps__fail_text(s, TGC_PS_CORRUPT, "unsupported pickle protocol: %u",
                                  (unsigned)k);
                goto failed;
            }
            break;
        case 0x95:  /* FRAME: whole opcodes inside (NEED, rd_line), and not inside another */
            RULE(tgc_ps__rule_frame(s->frame_end != NO_FRAME, s->frame_end, s->off - 1, &rule));
            NEED(8);
            k = le(HERE, 8);
            ADV(8);
            RULE_AT(s->off, tgc_ps__rule_declared(op, k, tgc_ps__known_size(s) - s->off, &rule));
            s->frame_end = s->off + k;
            tgc_ps__set_flim(s);
            break;
        case 0x2E: {  /* STOP: the result alone on the stack */
            RULE(tgc_ps__rule_stop(s->nmarks, s->n, &rule));
            val top = s->st[--s->n];
            void *o = tgc_ps__box(s, &top);
            int rc = tgc_ps__drop(s, &top);
            if (o == NULL || rc < 0) {
                if (o) {
                    s->b.decref(s->b.ctx, o);
                }
                goto failed;
            }
            uint64_t end = s->off, trailing = AVAIL;
            s->lo = s->hi = 0;
            while (!s->eof) {
                int r = tgc_ps__rd_fill(s, TGC_PS_CHUNK);
                trailing += s->hi;
                s->lo = s->hi = 0;
                if (r < 0) {
                    s->b.decref(s->b.ctx, o);
                    goto failed;
                }
            }
            if (trailing > 0) {
                s->b.decref(s->b.ctx, o);
                tgc_ps__fail_at(s, TGC_PS_TRAILING, end, trailing, 0, 0);
                goto failed;
            }
            tgc_ps__release_machine(s);
            for (uint32_t d = 0; d < s->ndevs; d++) {
                if (tgc_ps__device_fault(s, d) < 0) {
                    s->b.decref(s->b.ctx, o);
                    goto failed;
                }
            }
            s->err.pos = end;
            *result = o;
            return 0;
        }
        case 0x28:  /* MARK */
            if (s->nmarks >= TGC_PS_MAX_MARKS) {
                tgc_ps__fail_text(s, TGC_PS_BOUND, "more than %u nested marks", TGC_PS_MAX_MARKS);
                goto failed;
            }
            if (tgc_ps__grow(&s->marks, &s->mcap, s->nmarks + 1, sizeof(size_t)) < 0) {
                tgc_ps__nomem(s);
                goto failed;
            }
            s->marks[s->nmarks++] = s->n;
            s->fence = s->n;
            break;
        case 0x30:  /* POP: the item, or the mark when nothing is above it */
            if (s->nmarks > 0 && s->marks[s->nmarks - 1] == s->n) {
                s->nmarks--;
                s->fence = s->nmarks ? s->marks[s->nmarks - 1] : 0;
            }
            else {
                if (s->n == 0) {
                    FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
                }
                CHECK(tgc_ps__drop(s, &s->st[--s->n]));
            }
            break;
        case 0x31:  /* POP_MARK */
            POPMARK(m);
            CHECK(drop_range(s, m));
            break;
        case 0x32: {  /* DUP */
            RULE(tgc_ps__rule_take(above_mark(s), 1, &rule));
            val v = s->st[s->n - 1];
            if (v.kind == V_FRAMES || v.kind == V_FDICT) {
                tgc_ps__fail_text(s, TGC_PS_UNSUPPORTED,
                                  "DUP of a frames list or frame dict being read");
                goto failed;
            }
            if (v.kind == V_OBJ) {
                s->b.incref(s->b.ctx, (void *)(uintptr_t)v.b);
                v.role = R_NONE;
            }
            CHECK(push(s, v));
            break;
        }
        case 0x4E: CHECK(push(s, (val){V_NONE, 0, 0, 0, 0})); break;
        case 0x88: CHECK(push(s, (val){V_TRUE, 0, 0, 0, 0})); break;
        case 0x89: CHECK(push(s, (val){V_FALSE, 0, 0, 0, 0})); break;
        case 0x4B:  /* BININT1 */
            NEED(1);
            k = *HERE;
            ADV(1);
            CHECK(push(s, (val){V_INT, 0, 0, 0, k}));
            break;
        case 0x4D:  /* BININT2 */
            NEED(2);
            k = le(HERE, 2);
            ADV(2);
            CHECK(push(s, (val){V_INT, 0, 0, 0, k}));
            break;
        case 0x4A:  /* BININT: signed */
            NEED(4);
            k = (uint64_t)(int64_t)(int32_t)(uint32_t)le(HERE, 4);
            ADV(4);
            CHECK(push(s, (val){V_INT, 0, 0, 0, k}));
            break;
        case 0x47: {  /* BINFLOAT: big-endian */
            NEED(8);
            uint64_t bits = 0;
            for (int i = 0; i < 8; i++) {
                bits = (bits << 8) | HERE[i];
            }
            ADV(8);
            CHECK(push(s, (val){V_FLOAT, 0, 0, 0, bits}));
            break;
        }
        case 0x8A:  /* LONG1 */
            NEED(1);
            k = *HERE;
            ADV(1);
            NEED(k);
            CHECK(push_long(s, HERE, (size_t)k));
            ADV(k);
            break;
        case 0x8C: case 0x43: case 0x55:  /* SHORT_BINUNICODE, SHORT_BINBYTES, SHORT_BINSTRING */
            NEED(1);
            k = *HERE;
            ADV(1);
            NEED(k);
            CHECK(push_payload(s, op, HERE, (size_t)k));
            ADV(k);
            break;
        case 'X': case 'B': case 'T': case 0x8B:       /* 4-byte lengths */
        case 0x8D: case 0x8E: case 0x96: {             /* 8-byte lengths */
            int width = (op == 'X' || op == 'B' || op == 'T' || op == 0x8B) ? 4 : 8;
            NEED(width);
            k = le(HERE, width);
            ADV(width);
            RULE_AT(s->off, tgc_ps__rule_declared(op, k, tgc_ps__known_size(s) - s->off, &rule));
            if (k > SIZE_MAX - 1) {
                tgc_ps__nomem(s);
                goto failed;
            }
            if (k <= TGC_PS_CHUNK) {  /* NEED checks the frame too */
                NEED(k);
                CHECK(op == 0x8B ? push_long(s, HERE, (size_t)k)
                                 : push_payload(s, op, HERE, (size_t)k));
                ADV(k);
            }
            else {
                if (s->off + k > s->frame_end) {
                    FAIL(TGC_PS_FRAME_CROSSED, s->frame_end, 0, 0);
                }
                unsigned char *big = tgc_ps__rd_big(s, (size_t)k);
                if (big == NULL) {
                    goto failed;
                }
                int rc = op == 0x8B ? push_long(s, big, (size_t)k)
                                    : push_payload(s, op, big, (size_t)k);
                free(big);
                CHECK(rc);
            }
            break;
        }
        case 0x7D:  /* EMPTY_DICT */
            CHECK(empty_dict(s));
            break;
        case 0x5D:  /* EMPTY_LIST */
            CHECK(empty_list(s));
            break;
        case 0x8F:  /* EMPTY_SET */
            CHECK(push_obj(s, s->b.make(s->b.ctx, TGC_PSB_SET, NULL, 0), 0));
            break;
        case 0x29:  /* EMPTY_TUPLE */
            CHECK(push_obj(s, s->b.make(s->b.ctx, TGC_PSB_TUPLE, NULL, 0), F_COSTLY));
            break;
        case 0x85: case 0x86: case 0x87:  /* TUPLE1..3 */
            RULE(tgc_ps__rule_take(above_mark(s), op - 0x84u, &rule));
            CHECK(make_from(s, TGC_PSB_TUPLE, s->n - (op - 0x84u), F_COSTLY));
            break;
        case 0x74:  /* TUPLE */
            POPMARK(m);
            CHECK(make_from(s, TGC_PSB_TUPLE, m, F_COSTLY));
            break;
        case 0x6C:  /* LIST */
            POPMARK(m);
            CHECK(make_from(s, TGC_PSB_LIST, m, 0));
            break;
        case 0x64:  /* DICT */
            POPMARK(m);
            KEYS_CHEAP(m, 2, TGC_PS_BAD_KEY);
            if ((s->n - m) % 2) {
                tgc_ps__fail_text(s, TGC_PS_CORRUPT, "odd number of items for DICT");
                goto failed;
            }
            CHECK(make_from(s, TGC_PSB_DICT, m, 0));
            break;
        case 0x91:  /* FROZENSET */
            POPMARK(m);
            KEYS_CHEAP(m, 1, TGC_PS_BAD_MEMBER);
            CHECK(make_from(s, TGC_PSB_FROZENSET, m, F_COSTLY));
            break;
        case 0x75:  /* SETITEMS */
            POPMARK(m);
            RULE(tgc_ps__rule_batch(m, s->fence, &rule));  /* the dict above the next mark */
            KEYS_CHEAP(m, 2, TGC_PS_BAD_KEY);
            if ((s->n - m) % 2) {
                tgc_ps__fail_text(s, TGC_PS_CORRUPT, "odd number of items for SETITEMS");
                goto failed;
            }
            CHECK(extend(s, TGC_PSB_SETITEMS, m));
            break;
        case 0x73:  /* SETITEM */
            RULE(tgc_ps__rule_take(above_mark(s), 3, &rule));
            if (klass(s, &s->st[s->n - 2]) != TGC_PSK_CHEAP) {
                FAIL(TGC_PS_BAD_KEY, 0, 0, 0);
            }
            CHECK(extend(s, TGC_PSB_SETITEMS, s->n - 2));
            break;
        case 0x65:  /* APPENDS */
            POPMARK(m);
            RULE(tgc_ps__rule_batch(m, s->fence, &rule));  /* the list above the next mark */
            CHECK(extend(s, TGC_PSB_APPENDS, m));
            break;
        case 0x61:  /* APPEND */
            RULE(tgc_ps__rule_take(above_mark(s), 2, &rule));
            CHECK(extend(s, TGC_PSB_APPENDS, s->n - 1));
            break;
        case 0x90:  /* ADDITEMS */
            POPMARK(m);
            RULE(tgc_ps__rule_batch(m, s->fence, &rule));  /* the set above the next mark */
            KEYS_CHEAP(m, 1, TGC_PS_BAD_MEMBER);
            CHECK(extend(s, TGC_PSB_ADDITEMS, m));
            break;
        case 0x68: case 0x6A:  /* BINGET, LONG_BINGET */
            NEED(op == 0x68 ? 1 : 4);
            idx = le(HERE, op == 0x68 ? 1 : 4);
            ADV(op == 0x68 ? 1 : 4);
            CHECK(memo_get(s, idx));
            break;
        case 0x94:  /* MEMOIZE (memo_put checks the stack) */
            RULE_AT(s->off, tgc_ps__rule_memoize(s->memo_set, tgc_ps__known_size(s), s->off,
                                                 &rule));
            CHECK(memo_put(s, s->memo_set));
            break;
        case 0x71: case 0x72:  /* BINPUT, LONG_BINPUT */
            NEED(op == 0x71 ? 1 : 4);
            idx = le(HERE, op == 0x71 ? 1 : 4);
            ADV(op == 0x71 ? 1 : 4);
            RULE_AT(s->off, tgc_ps__rule_put(idx, s->off, &rule));
            s->op_end = s->off;
            CHECK(memo_put(s, idx));
            break;
        case 'g': case 'p': {  /* GET, PUT: a decimal index */
            const unsigned char *line;
            size_t len;
            CHECK(tgc_ps__rd_line(s, &line, &len));
            RULE(tgc_ps__rule_text_index(line, len, &idx, &rule));
            if (op == 'g') {
                CHECK(memo_get(s, idx));
            }
            else {
                s->op_end = s->off;
                RULE(tgc_ps__rule_put(idx, s->off, &rule));
                CHECK(memo_put(s, idx));
            }
            break;
        }
        case 'I': case 'L': case 'F': case 'S': case 'V': {  /* protocol 0 scalars */
            const unsigned char *line;
            size_t len;
            CHECK(tgc_ps__rd_line(s, &line, &len));
            void *o = s->b.text(s->b.ctx, op, (const char *)line, len);
            CHECK(push_obj(s, o, (op == 'I' || op == 'L') && len > 18 ? F_COSTLY : 0));
            break;
        }
        case 'c': case 'i': {  /* GLOBAL, INST: refused by their names */
            char mod[TGC_PS_NAME_CAP], name[TGC_PS_NAME_CAP];
            if (op == 'i' && s->nmarks == 0) {  /* INST takes its arguments' mark first */
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            CHECK(name_line(s, op, mod));
            CHECK(name_line(s, op, name));
            s->op_end = s->off;
            lookup(s, mod, name);
            goto failed;
        }
        case 0x93: {  /* STACK_GLOBAL */
            RULE(tgc_ps__rule_take(above_mark(s), 2, &rule));
            char names[2][TGC_PS_NAME_CAP];
            for (int i = 0; i < 2; i++) {
                const val *v = &s->st[s->n - 2 + i];
                tgc_ps_scalar sc;
                if (v->kind == V_STR) {
                    tgc_ps__escape_name(names[i],
                                        (const unsigned char *)s->sb + s->strs[v->b].off,
                                        s->strs[v->b].len);
                }
                else if (v->kind == V_OBJ && !(v->flags & F_COSTLY) && v->role == R_NONE &&
                         s->b.unbox(s->b.ctx, (void *)(uintptr_t)v->b, &sc) == 0 &&
                         sc.kind == TGC_PSS_STR) {  /* a long string, boxed at once */
                    tgc_ps__escape_name(names[i], (const unsigned char *)sc.p, sc.n);
                }
                else {
                    tgc_ps__fail_text(s, TGC_PS_CORRUPT, "STACK_GLOBAL requires str");
                    goto failed;
                }
            }
            lookup(s, names[0], names[1]);
            goto failed;
        }
        default:  /* refused, or no opcode (pickrules.h's table) */
            tgc_ps__rule_other_op(op, &rule);
            FAIL(rule.code, rule.a, rule.b, rule.c);
        }
    }
failed:
    if (s->err.code == TGC_PS_OK) {
        tgc_ps__fail(s, TGC_PS_CORRUPT, 0, 0, 0);
    }
    return -1;
}

