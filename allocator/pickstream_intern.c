/* pickstream_intern.c: the streaming loader's tables (shared declarations in
 * pickstream_int.h): growable arrays, seeded hashing, open-addressing indexes over ids, and the
 * interning of strings, frames, stacks (runs of frame ids) and sets of an entry's other fields,
 * so that memory grows with what is distinct, not with the entries. */
#include <stdlib.h>
#include <string.h>

#include "pickstream_int.h"

/* ------------------------------------------------------------------------------------------ */
/* Growable arrays, hashing, index tables                                                      */

/* tgc_ps__grow's slow path: *cap < need. */
int
tgc_ps__grow_slow(void *pp, size_t *cap, size_t need, size_t size)
{
    void **p = (void **)pp;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        c = c > SIZE_MAX / 4 ? need : c * 2;
    }
    if (c > SIZE_MAX / size) {
        return -1;
    }
    void *q = realloc(*p, c * size);
    if (q == NULL) {
        return -1;
    }
    *p = q;
    *cap = c;
    return 0;
}

/* A hash of n bytes keyed by the caller's seed (untrusted input: crafted collisions would
 * need the seed). */
static uint32_t
hash_bytes(uint64_t seed, const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = seed ^ (n * UINT64_C(0x9E3779B97F4A7C15));
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = tgc_ps__mix64(h ^ w) + seed;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) {
        w |= (uint64_t)p[i] << (8 * i);
    }
    return (uint32_t)tgc_ps__mix64(h ^ w ^ (seed << 1));
}

typedef int (*eq_fn)(const S *s, uint32_t id, const void *key);
typedef uint32_t (*hash_of_fn)(const S *s, uint32_t id);

/* The slot of the id equal to key, or the empty slot where it would go. */
static uint32_t *
index_find(const index_t *t, uint32_t h, eq_fn eq, const S *s, const void *key)
{
    size_t mask = t->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t v = t->slot[i];
        if (v == 0 || eq(s, v - 1, key)) {
            return &t->slot[i];
        }
    }
}

/* Room for one more id (rehashing into twice the slots when half full). */
static int
index_reserve(index_t *t, hash_of_fn hof, const S *s)
{
    if ((t->n + 1) * 2 <= t->cap) {
        return 0;
    }
    size_t cap = t->cap ? t->cap * 2 : 1024;
    uint32_t *slot = calloc(cap, sizeof(uint32_t));
    if (slot == NULL) {
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
        uint32_t v = t->slot[i];
        if (v != 0) {
            size_t j = hof(s, v - 1) & (cap - 1);
            while (slot[j] != 0) {
                j = (j + 1) & (cap - 1);
            }
            slot[j] = v;
        }
    }
    free(t->slot);
    t->slot = slot;
    t->cap = cap;
    return 0;
}

/* tgc_ps__map_get's creating path. */
uint32_t *
tgc_ps__map_add(map64 *m, uint64_t seed, uint64_t key, int *nomem_out)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        uint64_t *keys = calloc(cap, sizeof(uint64_t));
        uint32_t *vals = calloc(cap, sizeof(uint32_t));
        if (keys == NULL || vals == NULL) {
            free(keys);
            free(vals);
            *nomem_out = 1;
            return NULL;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (m->keys[i] != 0) {
                size_t j = tgc_ps__mix64(m->keys[i] ^ seed) & (cap - 1);
                while (keys[j] != 0) {
                    j = (j + 1) & (cap - 1);
                }
                keys[j] = m->keys[i];
                vals[j] = m->vals[i];
            }
        }
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    size_t mask = m->cap - 1;
    for (size_t i = tgc_ps__mix64((key + 1) ^ seed) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == key + 1) {
            return &m->vals[i];
        }
        if (m->keys[i] == 0) {
            m->keys[i] = key + 1;
            m->vals[i] = 0;
            m->n++;
            return &m->vals[i];
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Strings                                                                                     */

typedef struct {
    const char *p;
    size_t n;
    uint32_t h;
} str_key;

static int
str_eq(const S *s, uint32_t id, const void *key)
{
    const str_key *k = key;
    const str_rec *r = &s->strs[id];
    return r->hash == k->h && r->len == k->n &&
           (k->n == 0 || memcmp(s->sb + r->off, k->p, k->n) == 0);
}

static uint32_t
str_hash_of(const S *s, uint32_t id)
{
    return s->strs[id].hash;
}

int
tgc_ps__intern_str(S *s, const char *p, size_t n, uint32_t *sid)
{
    if (n > UINT32_MAX) {
        return tgc_ps__fail_text(s, TGC_PS_BOUND, "a string of more than 4 GiB");
    }
    str_key k = {p, n, hash_bytes(s->seed, p, n)};
    if (index_reserve(&s->sidx, str_hash_of, s) < 0) {
        return tgc_ps__nomem(s);
    }
    uint32_t *slot = index_find(&s->sidx, k.h, str_eq, s, &k);
    if (*slot != 0) {
        *sid = *slot - 1;
        return 0;
    }
    if (s->nstr >= TGC_PS_MAX_STRINGS) {
        return tgc_ps__fail_text(s, TGC_PS_BOUND, "more than %u distinct strings",
                                 TGC_PS_MAX_STRINGS);
    }
    if (tgc_ps__grow(&s->strs, &s->strcap, s->nstr + 1, sizeof(str_rec)) < 0 ||
        tgc_ps__grow(&s->sb, &s->sbcap, s->sblen + n + 1, 1) < 0) {
        return tgc_ps__nomem(s);
    }
    if (n > 0) {
        memcpy(s->sb + s->sblen, p, n);
    }
    s->strs[s->nstr] = (str_rec){s->sblen, (uint32_t)n, k.h};
    s->sblen += n;
    *slot = (uint32_t)s->nstr + 1;
    s->sidx.n++;
    *sid = (uint32_t)s->nstr++;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Frames, stacks and sets of other fields                                                     */

static uint32_t
frame_hash(const S *s, const frame_rec *f)
{
    uint64_t h = tgc_ps__mix64(s->seed ^ ((uint64_t)f->filename << 32 | f->name));
    h = tgc_ps__mix64(h ^ (uint64_t)f->line);
    h = tgc_ps__mix64(h ^ ((uint64_t)f->line_kind | (uint64_t)f->bad << 8 |
                           (uint64_t)f->bad_range << 16 | (uint64_t)f->extra << 24) ^
                      (uint64_t)(uintptr_t)f->bad_type);
    return (uint32_t)h;
}

static int
frame_eq(const S *s, uint32_t id, const void *key)
{
    const frame_rec *a = &s->frames[id], *b = key;
    return a->hash == b->hash && a->filename == b->filename && a->name == b->name &&
           a->line == b->line && a->line_kind == b->line_kind && a->bad == b->bad &&
           a->bad_range == b->bad_range && a->bad_type == b->bad_type && a->extra == b->extra;
}

static uint32_t
frame_hash_of(const S *s, uint32_t id)
{
    return s->frames[id].hash;
}

int
tgc_ps__intern_frame(S *s, frame_rec *f, uint32_t *id)
{
    f->hash = frame_hash(s, f);
    if (index_reserve(&s->fidx, frame_hash_of, s) < 0) {
        return tgc_ps__nomem(s);
    }
    uint32_t *slot = index_find(&s->fidx, f->hash, frame_eq, s, f);
    if (*slot != 0) {
        *id = *slot - 1;
        return 0;
    }
    if (s->nframes >= TGC_PS_MAX_FRAMES) {
        return tgc_ps__fail_text(s, TGC_PS_BOUND, "more than %u distinct frames",
                                 TGC_PS_MAX_FRAMES);
    }
    if (tgc_ps__grow(&s->frames, &s->framecap, s->nframes + 1, sizeof(frame_rec)) < 0) {
        return tgc_ps__nomem(s);
    }
    s->frames[s->nframes] = *f;
    *slot = (uint32_t)s->nframes + 1;
    s->fidx.n++;
    *id = (uint32_t)s->nframes++;
    return 0;
}

/* Stacks and sets of other fields are runs of items in a pool, interned by their bytes. */
typedef struct {
    const void *items;
    size_t n;
    uint32_t h;
} pooled_key;

/* Whether a pooled run (its hash, length and first item) holds exactly the key's items. */
static int
pooled_same(uint32_t hash, uint32_t len, const void *at, const pooled_key *k, size_t size)
{
    return hash == k->h && len == k->n && (k->n == 0 || memcmp(at, k->items, k->n * size) == 0);
}

/* Appends n items of `size` bytes to a pool (grown to hold them and one more). */
static int
pool_append(void *pool, size_t *cap, size_t *used, const void *items, size_t n, size_t size)
{
    void **p = pool;
    if (tgc_ps__grow(p, cap, *used + n + 1, size) < 0) {
        return -1;
    }
    if (n > 0) {
        memcpy((char *)*p + *used * size, items, n * size);
    }
    *used += n;
    return 0;
}

static int
stack_eq(const S *s, uint32_t id, const void *key)
{
    const stack_rec *r = &s->stacks[id];
    return pooled_same(r->hash, r->len, s->spool + r->off, key, sizeof(uint32_t));
}

static uint32_t
stack_hash_of(const S *s, uint32_t id)
{
    return s->stacks[id].hash;
}

int
tgc_ps__intern_stack(S *s, const uint32_t *ids, size_t n, uint32_t *id)
{
    pooled_key k = {ids, n, hash_bytes(s->seed, ids, n * sizeof(uint32_t))};
    if (index_reserve(&s->kidx, stack_hash_of, s) < 0) {
        return tgc_ps__nomem(s);
    }
    uint32_t *slot = index_find(&s->kidx, k.h, stack_eq, s, &k);
    if (*slot != 0) {
        *id = *slot - 1;
        return 0;
    }
    if (s->nstacks >= TGC_PS_MAX_STACKS) {
        return tgc_ps__fail_text(s, TGC_PS_BOUND, "more than %u distinct stacks",
                                 TGC_PS_MAX_STACKS);
    }
    if (n > TGC_PS_MAX_STACK_IDS - s->spool_n) {
        return tgc_ps__fail_text(s, TGC_PS_BOUND, "the distinct stacks hold more than %u frames",
                                 TGC_PS_MAX_STACK_IDS);
    }
    uint32_t bad = UINT32_MAX;
    for (size_t i = 0; i < n; i++) {
        if (s->frames[ids[i]].bad != BAD_NONE) {
            bad = (uint32_t)i;
            break;
        }
    }
    size_t off = s->spool_n;
    if (tgc_ps__grow(&s->stacks, &s->stackcap, s->nstacks + 1, sizeof(stack_rec)) < 0 ||
        pool_append(&s->spool, &s->spool_cap, &s->spool_n, ids, n, sizeof(uint32_t)) < 0) {
        return tgc_ps__nomem(s);
    }
    s->stacks[s->nstacks] = (stack_rec){off, (uint32_t)n, k.h, bad};
    *slot = (uint32_t)s->nstacks + 1;
    s->kidx.n++;
    *id = (uint32_t)s->nstacks++;
    return 0;
}

static int
extras_eq(const S *s, uint32_t id, const void *key)
{
    const extras_rec *r = &s->xs[id];
    return pooled_same(r->hash, r->len, s->xpool + r->off, key, sizeof(pair));
}

static uint32_t
extras_hash_of(const S *s, uint32_t id)
{
    return s->xs[id].hash;
}

/* The id of a set of (key, value) pairs: normalized values (role and a zero), an object's
 * reference taken when the set is new. */
int
tgc_ps__intern_extras(S *s, const pair *items, size_t n, uint32_t *id)
{
    pooled_key k = {items, n, hash_bytes(s->seed, items, n * sizeof(pair))};
    if (index_reserve(&s->xidx, extras_hash_of, s) < 0) {
        return tgc_ps__nomem(s);
    }
    uint32_t *slot = index_find(&s->xidx, k.h, extras_eq, s, &k);
    if (*slot != 0) {
        *id = *slot - 1;
        return 0;
    }
    if (s->nxs >= TGC_PS_MAX_EXTRAS) {
        return tgc_ps__fail_text(s, TGC_PS_BOUND, "more than %u distinct sets of other fields "
                                 "(compile_context, user_metadata, ...) in trace entries",
                                 TGC_PS_MAX_EXTRAS);
    }
    size_t off = s->xpool_n;
    if (tgc_ps__grow(&s->xs, &s->xcap, s->nxs + 1, sizeof(extras_rec)) < 0 ||
        pool_append(&s->xpool, &s->xpool_cap, &s->xpool_n, items, n, sizeof(pair)) < 0) {
        return tgc_ps__nomem(s);
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].k.kind == V_OBJ) {
            s->b.incref(s->b.ctx, (void *)(uintptr_t)items[i].k.b);
        }
        if (items[i].v.kind == V_OBJ) {
            s->b.incref(s->b.ctx, (void *)(uintptr_t)items[i].v.b);
        }
    }
    s->xs[s->nxs] = (extras_rec){off, (uint32_t)n, k.h};
    *slot = (uint32_t)s->nxs + 1;
    s->xidx.n++;
    *id = (uint32_t)s->nxs++;
    return 0;
}

