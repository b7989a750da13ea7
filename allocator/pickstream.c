/* pickstream.c: the streaming snapshot loader (contract in pickstream.h): a chunked reader, a
 * pickle machine over tagged values, the interning tables (strings, frames, stacks, sets of an
 * entry's other fields) and the rows of the devices' traces. Plain C: Python objects only
 * through the builder (allocator/pickstream_py.c makes them). */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorgc/pickstream.h"

/* ------------------------------------------------------------------------------------------ */
/* Values                                                                                      */

/* A value on the machine's stack. Scalars are kept unboxed (strings as ids of the string
 * table) until a builder container takes them; trace entries, frames lists and frame dicts on
 * the trace's path never become objects. */
enum {
    V_NONE, V_TRUE, V_FALSE,
    V_INT,      /* b: int64 bits, or a uint64 >= 2**63 with F_UNSIGNED */
    V_FLOAT,    /* b: the double's bits */
    V_STR,      /* b: string id */
    V_OBJ,      /* b: builder object (the stack slot owns a reference); role; a: the memo
                   index + 1 it was got from (0: none) */
    V_ENTRY,    /* a trace entry: a = device, b = row */
    V_DEVICE,   /* a device's trace list: b = device */
    V_FRAMES,   /* an open frames list: a = open record */
    V_STACK,    /* a read frames list: b = stack id */
    V_FDICT,    /* an open frame dict: a = open record */
    V_FRAME     /* a read frame dict: b = frame id */
};
enum { R_NONE, R_ROOT, R_TRACES };  /* what a V_OBJ is on the trace's path */
#define F_UNSIGNED 1u
#define F_COSTLY 2u  /* pickscan's COSTLY: refused as a dict key or set member */

typedef struct {
    uint8_t kind, role;
    uint16_t flags;
    uint32_t a;
    uint64_t b;
} val;

/* Memo slots are 8 bytes: a tag in the low three bits. Builder objects are 8-aligned, so an
 * object is stored as its pointer (tag 0; 0 is an unset slot). */
enum { M_OBJ, M_STR, M_INT, M_ENTRY, M_STACK, M_FRAME, M_OPEN, M_MISC };
#define M_TAG(x) ((unsigned)((x) & 7u))
#define M_PAY(x) ((x) >> 3)
#define M_MAKE(tag, pay) (((uint64_t)(pay) << 3) | (tag))
#define MISC_NONE 0u
#define MISC_TRUE 1u
#define MISC_FALSE 2u
#define MISC_DEVICE 3u  /* + device */
#define INT61_MIN (-(INT64_C(1) << 60))
#define INT61_MAX ((INT64_C(1) << 60) - 1)
#define MEMO_PAGE_BITS 13
#define MEMO_PAGE (1u << MEMO_PAGE_BITS)
#define NO_MEMO UINT64_MAX
#define NO_FRAME UINT64_MAX

/* The keys the trace's path reads, interned first so that their string ids are these. */
enum { K_ACTION, K_ADDR, K_SIZE, K_STREAM, K_TIME_US, K_DEVICE_FREE, K_FRAMES, K_FILENAME,
       K_NAME, K_LINE, K_DEVICE_TRACES, NKNOWN };
static const char *const known_keys[NKNOWN] = {
    "action", "addr", "size", "stream", "time_us", "device_free", "frames", "filename", "name",
    "line", "device_traces"};

/* An entry's checked fields, in check_snapshot's order, and how one is wrong. */
enum { F_ACTION, F_ADDR, F_SIZE, F_DEVFREE, F_TIME, F_FRAMES, NFIELD };
static const char *const field_names[NFIELD] = {"action", "addr", "size", "device_free",
                                                "time_us", "frames"};
enum { E_OK, E_TYPE, E_RANGE, E_NEG, E_FRAME };

/* How a frame dict is wrong (the first of filename, name, line, as check_snapshot reads them). */
enum { BAD_NONE, BAD_NOTDICT, BAD_FILENAME, BAD_NAME, BAD_LINE };
enum { FS_ABSENT, FS_OK, FS_TYPE, FS_RANGE };

/* ------------------------------------------------------------------------------------------ */
/* Tables                                                                                      */

typedef struct {
    uint64_t off;
    uint32_t len, hash;
} str_rec;

typedef struct {
    uint32_t filename, name;
    int64_t line;
    uint8_t line_kind, bad, bad_range;
    const char *bad_type;
    uint32_t extra;              /* the set of its other keys */
    uint32_t hash;
} frame_rec;

typedef struct {
    uint64_t off;
    uint32_t len, hash, bad_k;  /* bad_k: the first item that is a faulty frame, or UINT32_MAX */
} stack_rec;

typedef struct {
    val k, v;
} pair;

typedef struct {
    uint64_t off;
    uint32_t len, hash;
} extras_rec;

/* Open addressing over ids (a slot holds id + 1; 0 is empty), at most half full. */
typedef struct {
    uint32_t *slot;
    size_t cap, n;
} index_t;

/* uint64 keys to uint32 values (keys stored + 1). */
typedef struct {
    uint64_t *keys;
    uint32_t *vals;
    size_t cap, n;
} map64;

/* A frames list or frame dict being read: what the stack value and its memo slot stand for. */
typedef struct {
    uint8_t used, fdict;
    uint64_t memo;               /* the memo index holding it, or NO_MEMO */
    uint32_t *ids;               /* frames list: its frame ids */
    size_t n, cap;
    uint8_t fst[3];              /* frame dict: filename, name, line: FS_* */
    const char *ftype[3];
    uint32_t fsid[2];
    int64_t line;
    uint8_t line_kind;
    pair *x;                     /* frame dict: its other keys */
    size_t nx, xcap;
    void **xrefs;                /* boxed values among them (new references) */
    size_t nxrefs, xrefcap;
} open_rec;

typedef struct {
    uint8_t code[NFIELD];
    uint8_t notdict;
    const char *type[NFIELD];
    int64_t neg[NFIELD];         /* E_NEG: the value; E_FRAME: the stack id */
} row_err;

typedef struct {
    void *col[TGC_PS_NCOLS];     /* row-indexed columns */
    uint32_t rows;               /* row slots */
    size_t cap;
    uint32_t len;                /* positions of the list */
    uint32_t *order;             /* position -> row; NULL while position i holds row i */
    size_t ocap;
    uint32_t actions[256];       /* code -> string id */
    uint32_t nactions;
    uint32_t last_sid, last_code;
    char *error;
    uint8_t taken[TGC_PS_NCOLS];
} device;

static const size_t col_size[TGC_PS_NCOLS] = {1, 8, 8, 8, 8, 8, 4, 1, 4};

struct tgc_ps_stream {
    tgc_ps_builder b;
    tgc_ps_read_fn read;
    void *read_ctx;
    uint64_t size, max_bytes, seed;
    tgc_ps_error err;
    /* the reader: unread bytes are buf[lo, hi); off is the file offset of buf[lo]. An opcode
     * reads up to flim: hi, or where the FRAME it is in ends when that comes first (so one
     * compare checks both; set_flim after hi, off or frame_end change other than by reading) */
    unsigned char *buf;
    size_t lo, hi, flim;
    uint64_t off, total, op_end;
    uint64_t frame_end;          /* the end of the FRAME being read, or NO_FRAME */
    int eof;
    /* the machine */
    val *st;
    size_t n, cap;
    size_t *marks;
    size_t nmarks, mcap;
    size_t fence;                /* the top mark (0 without one): no opcode pops below it */
    uint64_t **memo;
    size_t npages;
    uint64_t memo_set;           /* slots set: MEMOIZE's index, as CPython's unpickler */
    open_rec *opens;
    size_t nopens, ocap;
    uint32_t *free_opens;
    size_t nfree, fcap;
    /* strings */
    char *sb;
    size_t sblen, sbcap;
    str_rec *strs;
    size_t nstr, strcap;
    index_t sidx;
    /* frames, stacks, sets of other fields */
    frame_rec *frames;
    size_t nframes, framecap;
    index_t fidx;
    uint32_t *spool;
    size_t spool_n, spool_cap;
    stack_rec *stacks;
    size_t nstacks, stackcap;
    index_t kidx;
    pair *xpool;
    size_t xpool_n, xpool_cap;
    extras_rec *xs;
    size_t nxs, xcap;
    index_t xidx;
    map64 listcache;             /* builder list (a frames list read elsewhere) -> stack id + 1 */
    map64 dictcache;             /* builder dict (a frame read elsewhere) -> frame id + 1; the
                                    machine holds a reference to each key of both */
    /* devices and their faulty entries */
    device *devs;
    size_t ndevs, devcap;
    map64 errmap;                /* (device << 32 | row) -> index into errs */
    row_err *errs;
    size_t nerrs, errcap;
    /* the other fields of the entry one SETITEMS fills: interned once, at its end */
    int pending;
    uint32_t pend_dev, pend_row;
    pair *pend;
    size_t npend, pendcap;
    void **pend_refs;            /* boxed values among them (new references) */
    size_t npend_refs, pend_refs_cap;
    /* scratch */
    pair *xscratch;
    size_t xscratch_cap;
    void **items;
    size_t items_cap;
};

typedef struct tgc_ps_stream S;

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */

static void
fail_at(S *s, int code, uint64_t pos, uint64_t a, uint64_t b, uint64_t c)
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

static void
fail(S *s, int code, uint64_t a, uint64_t b, uint64_t c)
{
    fail_at(s, code, s->op_end, a, b, c);
}

static int
fail_text(S *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int
fail_text(S *s, int code, const char *fmt, ...)
{
    if (s->err.code == TGC_PS_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->err.text, sizeof(s->err.text), fmt, ap);
        va_end(ap);
        fail(s, code, 0, 0, 0);
    }
    return -1;
}

static int
nomem(S *s)
{
    fail(s, TGC_PS_NOMEM, 0, 0, 0);
    return -1;
}

static int
builder_failed(S *s)
{
    fail(s, TGC_PS_BUILDER, 0, 0, 0);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Growable arrays, hashing, index tables                                                      */

/* Room for `need` elements of `size` bytes in *p (capacity *cap, doubling from 16). 0, or -1
 * when out of memory (*p unchanged). */
static int
grow(void *pp, size_t *cap, size_t need, size_t size)
{
    void **p = (void **)pp;
    if (need <= *cap) {
        return 0;
    }
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

static inline uint64_t
mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
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
        h = mix64(h ^ w) + seed;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) {
        w |= (uint64_t)p[i] << (8 * i);
    }
    return (uint32_t)mix64(h ^ w ^ (seed << 1));
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

/* The value slot of key, or NULL when absent (create: added with value 0). -1 in *nomem. */
static uint32_t *
map_get(map64 *m, uint64_t seed, uint64_t key, int create, int *nomem_out)
{
    if (m->cap == 0 && !create) {
        return NULL;
    }
    if (create && (m->n + 1) * 2 > m->cap) {
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
                size_t j = mix64(m->keys[i] ^ seed) & (cap - 1);
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
    for (size_t i = mix64((key + 1) ^ seed) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == key + 1) {
            return &m->vals[i];
        }
        if (m->keys[i] == 0) {
            if (!create) {
                return NULL;
            }
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

/* The id of the string p[0:n], added when new. 0, or -1 (error set). */
static int
intern_str(S *s, const char *p, size_t n, uint32_t *sid)
{
    if (n > UINT32_MAX) {
        return fail_text(s, TGC_PS_BOUND, "a string of more than 4 GiB");
    }
    str_key k = {p, n, hash_bytes(s->seed, p, n)};
    if (index_reserve(&s->sidx, str_hash_of, s) < 0) {
        return nomem(s);
    }
    uint32_t *slot = index_find(&s->sidx, k.h, str_eq, s, &k);
    if (*slot != 0) {
        *sid = *slot - 1;
        return 0;
    }
    if (s->nstr >= TGC_PS_MAX_STRINGS) {
        return fail_text(s, TGC_PS_BOUND, "more than %u distinct strings", TGC_PS_MAX_STRINGS);
    }
    if (grow(&s->strs, &s->strcap, s->nstr + 1, sizeof(str_rec)) < 0 ||
        grow(&s->sb, &s->sbcap, s->sblen + n + 1, 1) < 0) {
        return nomem(s);
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
/* Frames, stacks and sets of other fields                                                     */

static uint32_t
frame_hash(const S *s, const frame_rec *f)
{
    uint64_t h = mix64(s->seed ^ ((uint64_t)f->filename << 32 | f->name));
    h = mix64(h ^ (uint64_t)f->line);
    h = mix64(h ^ ((uint64_t)f->line_kind | (uint64_t)f->bad << 8 | (uint64_t)f->bad_range << 16 |
                   (uint64_t)f->extra << 24) ^ (uint64_t)(uintptr_t)f->bad_type);
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

static int
intern_frame(S *s, frame_rec *f, uint32_t *id)
{
    f->hash = frame_hash(s, f);
    if (index_reserve(&s->fidx, frame_hash_of, s) < 0) {
        return nomem(s);
    }
    uint32_t *slot = index_find(&s->fidx, f->hash, frame_eq, s, f);
    if (*slot != 0) {
        *id = *slot - 1;
        return 0;
    }
    if (s->nframes >= TGC_PS_MAX_FRAMES) {
        return fail_text(s, TGC_PS_BOUND, "more than %u distinct frames", TGC_PS_MAX_FRAMES);
    }
    if (grow(&s->frames, &s->framecap, s->nframes + 1, sizeof(frame_rec)) < 0) {
        return nomem(s);
    }
    s->frames[s->nframes] = *f;
    *slot = (uint32_t)s->nframes + 1;
    s->fidx.n++;
    *id = (uint32_t)s->nframes++;
    return 0;
}

/* A frame that is not a dict at all (frame k "is int, not dict"). */
static int
notdict_frame(S *s, const char *type, uint32_t *id)
{
    frame_rec f = {TGC_PS_ABSENT, TGC_PS_ABSENT, 0, 0, BAD_NOTDICT, 0, type, 0, 0};
    return intern_frame(s, &f, id);
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
    if (grow(p, cap, *used + n + 1, size) < 0) {
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

static int
intern_stack(S *s, const uint32_t *ids, size_t n, uint32_t *id)
{
    pooled_key k = {ids, n, hash_bytes(s->seed, ids, n * sizeof(uint32_t))};
    if (index_reserve(&s->kidx, stack_hash_of, s) < 0) {
        return nomem(s);
    }
    uint32_t *slot = index_find(&s->kidx, k.h, stack_eq, s, &k);
    if (*slot != 0) {
        *id = *slot - 1;
        return 0;
    }
    if (s->nstacks >= TGC_PS_MAX_STACKS) {
        return fail_text(s, TGC_PS_BOUND, "more than %u distinct stacks", TGC_PS_MAX_STACKS);
    }
    if (n > TGC_PS_MAX_STACK_IDS - s->spool_n) {
        return fail_text(s, TGC_PS_BOUND, "the distinct stacks hold more than %u frames",
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
    if (grow(&s->stacks, &s->stackcap, s->nstacks + 1, sizeof(stack_rec)) < 0 ||
        pool_append(&s->spool, &s->spool_cap, &s->spool_n, ids, n, sizeof(uint32_t)) < 0) {
        return nomem(s);
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
static int
intern_extras(S *s, const pair *items, size_t n, uint32_t *id)
{
    pooled_key k = {items, n, hash_bytes(s->seed, items, n * sizeof(pair))};
    if (index_reserve(&s->xidx, extras_hash_of, s) < 0) {
        return nomem(s);
    }
    uint32_t *slot = index_find(&s->xidx, k.h, extras_eq, s, &k);
    if (*slot != 0) {
        *id = *slot - 1;
        return 0;
    }
    if (s->nxs >= TGC_PS_MAX_EXTRAS) {
        return fail_text(s, TGC_PS_BOUND, "more than %u distinct sets of other fields "
                         "(compile_context, user_metadata, ...) in trace entries",
                         TGC_PS_MAX_EXTRAS);
    }
    size_t off = s->xpool_n;
    if (grow(&s->xs, &s->xcap, s->nxs + 1, sizeof(extras_rec)) < 0 ||
        pool_append(&s->xpool, &s->xpool_cap, &s->xpool_n, items, n, sizeof(pair)) < 0) {
        return nomem(s);
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

/* ------------------------------------------------------------------------------------------ */
/* The reader                                                                                  */

static int rd_fill_raw(S *s, size_t need);

static inline void
set_flim(S *s)
{
    s->flim = s->hi;
    if (s->frame_end != NO_FRAME && s->frame_end - s->off < s->hi - s->lo) {
        s->flim = s->lo + (size_t)(s->frame_end - s->off);
    }
}

/* At least `need` (<= TGC_PS_CHUNK) unread bytes in buf: 0, 1 when the file ends first, -1 on
 * a read error or past max_bytes. */
static int
rd_fill(S *s, size_t need)
{
    int r = rd_fill_raw(s, need);
    set_flim(s);
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
            fail(s, TGC_PS_READ, 0, 0, 0);
            return -1;
        }
        if (got == 0) {
            s->eof = 1;
            break;
        }
        s->hi += (size_t)got;
        s->total += (uint64_t)got;
        if (s->total > s->max_bytes) {
            fail(s, TGC_PS_LIMIT, s->max_bytes, 0, 0);
            return -1;
        }
    }
    return s->hi < need ? 1 : 0;
}

/* The next k bytes, k > TGC_PS_CHUNK, into a new buffer (the caller frees it). */
static unsigned char *
rd_big(S *s, size_t k)
{
    unsigned char *p = malloc(k ? k : 1);
    if (p == NULL) {
        nomem(s);
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
                fail(s, TGC_PS_READ, 0, 0, 0);
            }
            else {
                s->eof = 1;
                fail(s, TGC_PS_TRUNCATED, 0, 0, 0);
            }
            return NULL;
        }
        have += (size_t)got;
        s->total += (uint64_t)got;
        if (s->total > s->max_bytes) {
            free(p);
            fail(s, TGC_PS_LIMIT, s->max_bytes, 0, 0);
            return NULL;
        }
    }
    s->off += k;
    set_flim(s);
    return p;
}

/* The file's length as known now (it may have grown since the caller measured it). */
static uint64_t
known_size(const S *s)
{
    return s->size > s->total ? s->size : s->total;
}

/* ------------------------------------------------------------------------------------------ */
/* The machine's values: boxing, dropping, open records                                        */

static const char *
kind_type(int kind)
{
    switch (kind) {
    case V_NONE: return "NoneType";
    case V_TRUE: case V_FALSE: return "bool";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return "str";
    case V_ENTRY: case V_FDICT: case V_FRAME: return "dict";
    default: return "list";
    }
}

static int
open_new(S *s, int fdict, uint32_t *idx)
{
    if (s->nfree > 0) {
        *idx = s->free_opens[--s->nfree];
    }
    else {
        if (s->nopens >= UINT32_MAX ||
            grow(&s->opens, &s->ocap, s->nopens + 1, sizeof(open_rec)) < 0) {
            return nomem(s);
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
    if (grow(&s->free_opens, &s->fcap, s->nfree + 1, sizeof(uint32_t)) < 0) {
        return nomem(s);
    }
    s->free_opens[s->nfree++] = idx;
    return 0;
}

static uint64_t *
memo_slot(S *s, uint64_t idx, int create)
{
    uint64_t page = idx >> MEMO_PAGE_BITS;
    if (page >= s->npages) {
        if (!create) {
            return NULL;
        }
        size_t np = s->npages ? s->npages : 64;
        while (np <= page) {
            np *= 2;
        }
        uint64_t **pages = realloc(s->memo, np * sizeof(uint64_t *));
        if (pages == NULL) {
            nomem(s);
            return NULL;
        }
        memset(pages + s->npages, 0, (np - s->npages) * sizeof(uint64_t *));
        s->memo = pages;
        s->npages = np;
    }
    if (s->memo[page] == NULL) {
        if (!create) {
            return NULL;
        }
        s->memo[page] = calloc(MEMO_PAGE, sizeof(uint64_t));
        if (s->memo[page] == NULL) {
            nomem(s);
            return NULL;
        }
    }
    return &s->memo[page][idx & (MEMO_PAGE - 1)];
}

/* A builder dict (list) got from memo slot a - 1 was read as frame (stack) id: the slot holds
 * that handle from now on, and the builder takes the object as the one standing for it, so a
 * BINGET of it no longer costs an object's reference, reading and lookup. */
static void
memo_adopt(S *s, uint32_t a, int tag, uint32_t id, void *obj)
{
    if (a == 0) {
        return;
    }
    uint64_t *slot = memo_slot(s, (uint64_t)a - 1, 0);
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
    uint64_t *slot = memo_slot(s, r->memo, 0);
    if (slot != NULL && *slot == M_MAKE(M_OPEN, (uint64_t)idx << 1 | r->fdict)) {
        *slot = became;
    }
}

static int
close_fdict(S *s, uint32_t idx, uint32_t *id)
{
    open_rec *r = &s->opens[idx];
    frame_rec f = {TGC_PS_ABSENT, TGC_PS_ABSENT, 0, 0, BAD_NONE, 0, NULL, 0, 0};
    if (intern_extras(s, r->x, r->nx, &f.extra) < 0) {
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
    if (intern_frame(s, &f, id) < 0) {
        return -1;
    }
    open_settle_memo(s, idx, M_MAKE(M_FRAME, *id));
    return open_release(s, idx);
}

static int
close_frames(S *s, uint32_t idx, uint32_t *id)
{
    open_rec *r = &s->opens[idx];
    if (intern_stack(s, r->ids, r->n, id) < 0) {
        return -1;
    }
    open_settle_memo(s, idx, M_MAKE(M_STACK, *id));
    return open_release(s, idx);
}

/* An open frames list or frame dict becomes the stack or frame it reads as. */
static int
settle(S *s, val *v)
{
    uint32_t id;
    if (v->kind == V_FDICT) {
        if (close_fdict(s, v->a, &id) < 0) {
            return -1;
        }
        *v = (val){V_FRAME, 0, 0, 0, id};
    }
    else if (v->kind == V_FRAMES) {
        if (close_frames(s, v->a, &id) < 0) {
            return -1;
        }
        *v = (val){V_STACK, 0, 0, 0, id};
    }
    return 0;
}

/* The builder object for v (a new reference); open records are read first. */
static void *
box(S *s, val *v)
{
    tgc_ps_scalar sc;
    memset(&sc, 0, sizeof(sc));
    sc.sid = UINT32_MAX;
    void *o;
    if (settle(s, v) < 0) {
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
        fail_text(s, TGC_PS_UNSUPPORTED, "trace entry %llu of device %u is referred to from "
                  "outside its list (through the memo); the streaming loader keeps trace "
                  "entries as rows", (unsigned long long)v->b, v->a);
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
        fail_text(s, TGC_PS_CORRUPT, "a value of unknown kind %d", v->kind);
        return NULL;
    }
    o = s->b.scalar(s->b.ctx, &sc);
made:
    if (o == NULL) {
        builder_failed(s);
    }
    return o;
}

/* Lets go of a value leaving the stack. An open record the memo holds is read now, so that a
 * later BINGET finds what it became. */
static int
drop(S *s, val *v)
{
    if (v->kind == V_OBJ) {
        s->b.decref(s->b.ctx, (void *)(uintptr_t)v->b);
    }
    else if (v->kind == V_FDICT || v->kind == V_FRAMES) {
        if (s->opens[v->a].memo != NO_MEMO) {
            return settle(s, v);
        }
        return open_release(s, v->a);
    }
    v->kind = V_NONE;
    return 0;
}

static int
drop_range(S *s, size_t from)
{
    int rc = 0;
    while (s->n > from) {
        if (drop(s, &s->st[--s->n]) < 0) {
            rc = -1;
        }
    }
    return rc;
}

/* What v holds as a field value: ints (bools are ints, as for isinstance; `boolean` says which
 * were, for a column cannot give a bool back), strings (interned: *sid), or a type name. */
enum { L_INT, L_UINT, L_BIG, L_STR, L_NONE, L_LIST, L_DICT, L_OTHER };
typedef struct {
    int kind, boolean;
    int64_t i;
    uint64_t u;
    uint32_t sid;
    const char *type;
} look_t;

static int
look(S *s, val *v, look_t *out)
{
    memset(out, 0, sizeof(*out));
    out->type = kind_type(v->kind);
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
        return builder_failed(s);
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
        return intern_str(s, sc.p, sc.n, &out->sid);
    case TGC_PSS_LIST: out->kind = L_LIST; break;
    case TGC_PSS_DICT: out->kind = L_DICT; break;
    default: out->kind = L_OTHER; break;
    }
    return 0;
}

/* A builder object as a stack value (a new one: an object keeps a new reference). */
static int
from_obj(S *s, void *o, val *out)
{
    tgc_ps_scalar sc;
    memset(&sc, 0, sizeof(sc));
    if (s->b.unbox(s->b.ctx, o, &sc) < 0) {
        return builder_failed(s);
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
            if (intern_str(s, sc.p, sc.n, &sid) < 0) {
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

/* ------------------------------------------------------------------------------------------ */
/* Frame dicts and frames lists on the trace's path                                            */

static int extras_val(S *s, val *v, val *out, void **boxed);

/* Sets one key of an open frame dict: filename and name are str, line an int in
 * [-2**63, 2**64) (checked as check_snapshot checks them); other keys are kept as a set. */
static int
frame_set(S *s, uint32_t idx, val *k, val *v)
{
    int which = k->kind != V_STR ? -1 : k->b == K_FILENAME ? 0 : k->b == K_NAME ? 1
              : k->b == K_LINE ? 2 : -1;
    look_t l;
    if (which >= 0) {
        if (look(s, v, &l) < 0) {
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
        val kx, vx;
        void *kb = NULL, *vb = NULL;
        if (extras_val(s, k, &kx, &kb) < 0 || extras_val(s, v, &vx, &vb) < 0) {
            if (kb) {
                s->b.decref(s->b.ctx, kb);
            }
            return -1;
        }
        open_rec *r = &s->opens[idx];
        size_t j = 0;
        for (size_t i = 0; i < r->nx; i++) {  /* the last setting of a key stands */
            if (memcmp(&r->x[i].k, &kx, sizeof(val)) != 0) {
                r->x[j++] = r->x[i];
            }
        }
        r->nx = j;
        if (grow(&r->x, &r->xcap, r->nx + 1, sizeof(pair)) < 0 ||
            grow(&r->xrefs, &r->xrefcap, r->nxrefs + 2, sizeof(void *)) < 0) {
            if (kb) {
                s->b.decref(s->b.ctx, kb);
            }
            if (vb) {
                s->b.decref(s->b.ctx, vb);
            }
            return nomem(s);
        }
        if (kb) {
            r->xrefs[r->nxrefs++] = kb;
        }
        if (vb) {
            r->xrefs[r->nxrefs++] = vb;
        }
        r->x[r->nx++] = (pair){kx, vx};
        return 0;
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
    uint32_t *hit = map_get(&s->dictcache, s->seed, (uint64_t)(uintptr_t)dict, 0, &nm);
    if (hit != NULL && *hit != 0) {
        *id = *hit - 1;
        return 0;
    }
    uint32_t idx;
    if (open_new(s, 1, &idx) < 0) {
        return -1;
    }
    size_t pos = 0;
    void *k, *v;
    int rc;
    while ((rc = s->b.dict_next(s->b.ctx, dict, &pos, &k, &v)) == 1) {
        val kv, vv;
        if (from_obj(s, k, &kv) < 0) {
            return -1;
        }
        if (from_obj(s, v, &vv) < 0) {
            drop(s, &kv);
            return -1;
        }
        rc = frame_set(s, idx, &kv, &vv);
        int rc2 = drop(s, &kv);
        if (drop(s, &vv) < 0 || rc2 < 0 || rc < 0) {
            return -1;
        }
    }
    if (rc < 0) {
        return builder_failed(s);
    }
    if (close_fdict(s, idx, id) < 0) {
        return -1;
    }
    uint32_t *slot = map_get(&s->dictcache, s->seed, (uint64_t)(uintptr_t)dict, 1, &nm);
    if (slot == NULL) {
        return nomem(s);
    }
    if (*slot == 0) {
        s->b.incref(s->b.ctx, dict);
    }
    *slot = *id + 1;
    return 0;
}

/* One item of a frames list as a frame id (a faulty frame has an id too: its entry says why). */
static int
frame_of(S *s, val *item, uint32_t *id)
{
    switch (item->kind) {
    case V_FRAME:
        *id = (uint32_t)item->b;
        return 0;
    case V_FDICT:
        return close_fdict(s, item->a, id) < 0 ? -1 : (item->kind = V_NONE, 0);
    case V_ENTRY:
        return fail_text(s, TGC_PS_UNSUPPORTED, "a trace entry used as a frame");
    case V_OBJ: {
        tgc_ps_scalar sc;
        memset(&sc, 0, sizeof(sc));
        if (s->b.unbox(s->b.ctx, (void *)(uintptr_t)item->b, &sc) < 0) {
            return builder_failed(s);
        }
        if (sc.kind == TGC_PSS_DICT) {
            if (frame_from_dict(s, (void *)(uintptr_t)item->b, id) < 0) {
                return -1;
            }
            memo_adopt(s, item->a, M_FRAME, *id, (void *)(uintptr_t)item->b);
            return 0;
        }
        return notdict_frame(s, sc.type_name ? sc.type_name : "object", id);
    }
    default:
        return notdict_frame(s, kind_type(item->kind), id);
    }
}

/* The stack of a builder list used as an entry's frames (made_snapshot-style files share one
 * list between a block and entries). Read once per list object: the machine keeps it alive, so
 * its address stays its own; APPENDS onto it drop the entry. */
static int
stack_from_list(S *s, void *list, uint32_t *id)
{
    int nm = 0;
    uint32_t *hit = map_get(&s->listcache, s->seed, (uint64_t)(uintptr_t)list, 0, &nm);
    if (hit != NULL && *hit != 0) {
        *id = *hit - 1;
        return 0;
    }
    /* scratch may be grown by nested reads: collect ids in an open record instead */
    uint32_t idx;
    if (open_new(s, 0, &idx) < 0) {
        return -1;
    }
    void *item;
    int rc;
    for (size_t i = 0; (rc = s->b.list_item(s->b.ctx, list, i, &item)) == 1; i++) {
        val v;
        uint32_t fid;
        if (from_obj(s, item, &v) < 0) {
            return -1;
        }
        rc = frame_of(s, &v, &fid);
        if (drop(s, &v) < 0 || rc < 0) {
            return -1;
        }
        open_rec *r = &s->opens[idx];
        if (grow(&r->ids, &r->cap, r->n + 1, sizeof(uint32_t)) < 0) {
            return nomem(s);
        }
        r->ids[r->n++] = fid;
    }
    if (rc < 0) {
        return builder_failed(s);
    }
    if (close_frames(s, idx, id) < 0) {
        return -1;
    }
    uint32_t *slot = map_get(&s->listcache, s->seed, (uint64_t)(uintptr_t)list, 1, &nm);
    if (slot == NULL) {
        return nomem(s);
    }
    if (*slot == 0) {
        s->b.incref(s->b.ctx, list);
    }
    *slot = *id + 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Devices and their rows                                                                      */

static int
new_device(S *s, uint32_t *d)
{
    if (s->ndevs >= TGC_PS_MAX_DEVICES) {
        return fail_text(s, TGC_PS_BOUND, "more than %u device traces", TGC_PS_MAX_DEVICES);
    }
    if (grow(&s->devs, &s->devcap, s->ndevs + 1, sizeof(device)) < 0) {
        return nomem(s);
    }
    memset(&s->devs[s->ndevs], 0, sizeof(device));
    s->devs[s->ndevs].last_sid = UINT32_MAX;
    *d = (uint32_t)s->ndevs++;
    return 0;
}

static int
new_row(S *s, uint32_t d, uint32_t *row)
{
    device *dv = &s->devs[d];
    if (dv->rows >= TGC_PS_MAX_ROWS) {
        return fail_text(s, TGC_PS_BOUND, "more than %u trace entries on device %u",
                         TGC_PS_MAX_ROWS, d);
    }
    if (dv->rows == dv->cap) {
        size_t cap = dv->cap ? dv->cap * 2 : 1024;
        for (int c = 0; c < TGC_PS_NCOLS; c++) {
            void *p = realloc(dv->col[c], cap * col_size[c]);
            if (p == NULL) {
                return nomem(s);
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
        return fail_text(s, TGC_PS_BOUND, "more than %u trace entries on device %u",
                         TGC_PS_MAX_ROWS, d);
    }
    int first = dv->order == NULL;
    if (grow(&dv->order, &dv->ocap, (size_t)dv->len + 1, sizeof(uint32_t)) < 0) {
        return nomem(s);
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
    uint32_t *slot = map_get(&s->errmap, s->seed, (uint64_t)d << 32 | row, create, &nm);
    if (slot == NULL) {
        if (nm) {
            nomem(s);
        }
        return NULL;
    }
    if (*slot == 0) {  /* new */
        if (s->nerrs >= (1u << 16)) {
            fail_text(s, TGC_PS_BOUND, "more than 65536 faulty trace entries");
            return NULL;
        }
        if (grow(&s->errs, &s->errcap, s->nerrs + 1, sizeof(row_err)) < 0) {
            nomem(s);
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
        *boxed = box(s, v);
        if (*boxed == NULL) {
            return -1;
        }
        *out = (val){V_OBJ, 0, 0, 0, (uint64_t)(uintptr_t)*boxed};
        return 0;
    }
}

/* The pending set (one SETITEMS on one entry): key set to value, or removed. */
static int
pend_put(S *s, val *key, val *value)
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
    for (size_t i = 0; i < s->npend; i++) {
        if (memcmp(&s->pend[i].k, &k, sizeof(val)) != 0) {
            s->pend[j++] = s->pend[i];
        }
    }
    s->npend = j;
    if (grow(&s->pend, &s->pendcap, s->npend + 1, sizeof(pair)) < 0 ||
        grow(&s->pend_refs, &s->pend_refs_cap, s->npend_refs + 2, sizeof(void *)) < 0) {
        if (kb) {
            s->b.decref(s->b.ctx, kb);
        }
        if (vb) {
            s->b.decref(s->b.ctx, vb);
        }
        return nomem(s);
    }
    if (kb) {
        s->pend_refs[s->npend_refs++] = kb;
    }
    if (vb) {
        s->pend_refs[s->npend_refs++] = vb;
    }
    if (value != NULL) {
        s->pend[s->npend++] = (pair){k, v};
    }
    return 0;
}

/* One SETITEMS on an entry begins: its set of other fields is collected, not interned. */
static int
pend_begin(S *s, uint32_t d, uint32_t row)
{
    const extras_rec *r = &s->xs[((uint32_t *)s->devs[d].col[TGC_PS_COL_EXTRA])[row]];
    if (grow(&s->pend, &s->pendcap, r->len + 1, sizeof(pair)) < 0) {
        return nomem(s);
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

static int
pend_end(S *s)
{
    uint32_t id = 0;
    int rc = 0;
    if (s->pending) {
        s->pending = 0;
        rc = intern_extras(s, s->pend, s->npend, &id);
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
        return pend_put(s, key, value);
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
    if (grow(&s->xscratch, &s->xscratch_cap, r->len + 1, sizeof(pair)) < 0) {
        nomem(s);
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
    if (intern_extras(s, s->xscratch, n, &id) < 0) {
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
            return fail_text(s, TGC_PS_BOUND, "more than 256 distinct actions in the trace of "
                             "device %u", d);
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
        if (settle(s, v) < 0) {
            return -1;
        }
    }
    if (v->kind == V_STACK) {
        id = (uint32_t)v->b;
    }
    else if (v->kind == V_OBJ) {
        look_t l;
        if (look(s, v, &l) < 0) {
            return -1;
        }
        if (l.kind != L_LIST) {
            return set_err(s, d, row, F_FRAMES, E_TYPE, l.type, 0);
        }
        if (stack_from_list(s, (void *)(uintptr_t)v->b, &id) < 0) {
            return -1;
        }
        memo_adopt(s, v->a, M_STACK, id, (void *)(uintptr_t)v->b);
    }
    else if (v->kind == V_DEVICE) {
        return fail_text(s, TGC_PS_UNSUPPORTED, "a device's trace used as an entry's frames");
    }
    else {
        return set_err(s, d, row, F_FRAMES, E_TYPE, kind_type(v->kind), 0);
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
    if (look(s, v, &l) < 0) {
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
static int
row_set(S *s, uint32_t d, uint32_t row, val *k, val *v)
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
        if (look(s, v, &l) < 0) {
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
        if (look(s, v, &l) < 0) {
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
    if (pend_begin(s, d, row) < 0) {
        return -1;
    }
    while ((rc = s->b.dict_next(s->b.ctx, dict, &pos, &k, &v)) == 1) {
        val kv, vv;
        if (from_obj(s, k, &kv) < 0) {
            pend_end(s);
            return -1;
        }
        if (from_obj(s, v, &vv) < 0) {
            drop(s, &kv);
            pend_end(s);
            return -1;
        }
        rc = row_set(s, d, row, &kv, &vv);
        int rc2 = drop(s, &kv);
        if (drop(s, &vv) < 0 || rc2 < 0 || rc < 0) {
            pend_end(s);
            return -1;
        }
    }
    if (rc < 0) {
        pend_end(s);
        return builder_failed(s);
    }
    return pend_end(s);
}

/* An item appended to device d's list. */
static int
device_append(S *s, uint32_t d, val *item)
{
    uint32_t row;
    switch (item->kind) {
    case V_ENTRY:
        if (item->a != d) {
            return fail_text(s, TGC_PS_UNSUPPORTED, "trace entry %llu of device %u is also in "
                             "the list of device %u (through the memo)",
                             (unsigned long long)item->b, item->a, d);
        }
        return place_row(s, d, (uint32_t)item->b);
    case V_FDICT: case V_FRAME:
        return fail_text(s, TGC_PS_UNSUPPORTED, "a frame dict used as a trace entry");
    case V_OBJ: {
        look_t l;
        if (look(s, item, &l) < 0 || new_row(s, d, &row) < 0) {
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
        if (new_row(s, d, &row) < 0) {
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

static int
device_fault(S *s, uint32_t d)
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
            return nomem(s);
        }
    }
    return 0;
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
            drop(s, &v);
            return fail_text(s, TGC_PS_BOUND, "more than %u values on the pickle stack",
                             TGC_PS_MAX_STACK);
        }
        if (grow(&s->st, &s->cap, s->n + 1, sizeof(val)) < 0) {
            drop(s, &v);
            return nomem(s);
        }
    }
    s->st[s->n++] = v;
    return 0;
}

static int
push_obj(S *s, void *o, uint16_t flags)
{
    if (o == NULL) {
        return builder_failed(s);
    }
    return push(s, (val){V_OBJ, R_NONE, flags, 0, (uint64_t)(uintptr_t)o});
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
    if (grow(&s->items, &s->items_cap, n + 1, sizeof(void *)) < 0) {
        return nomem(s);
    }
    for (size_t i = 0; i < n; i++) {
        s->items[i] = box(s, &s->st[from + i]);
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
            uint32_t *hit = map_get(op == TGC_PSB_APPENDS ? &s->listcache : &s->dictcache,
                                    s->seed, t->b, 0, &nm);
            if (hit != NULL && *hit != 0) {
                return fail_text(s, TGC_PS_UNSUPPORTED, "a %s changed after an entry used it",
                                 op == TGC_PSB_APPENDS ? "frames list" : "frame dict");
            }
        }
        if (box_items(s, from, n) < 0) {
            return -1;
        }
        rc = s->b.extend(s->b.ctx, (void *)(uintptr_t)t->b, op, s->items, n);
        unbox_items(s, n);
        if (rc < 0) {
            return builder_failed(s);
        }
        break;
    case V_ENTRY:
        if (op != TGC_PSB_SETITEMS) {
            goto wrong;
        }
        rc = pend_begin(s, t->a, (uint32_t)t->b);
        for (size_t i = from; i + 1 < s->n && rc == 0; i += 2) {
            rc = row_set(s, t->a, (uint32_t)t->b, &s->st[i], &s->st[i + 1]);
        }
        if (pend_end(s) < 0) {
            rc = -1;
        }
        break;
    case V_FDICT:
        if (op != TGC_PSB_SETITEMS) {
            goto wrong;
        }
        for (size_t i = from; i + 1 < s->n && rc == 0; i += 2) {
            rc = frame_set(s, t->a, &s->st[i], &s->st[i + 1]);
        }
        if (rc == 0) {
            rc = settle(s, t);  /* read now: the memo hands out the frame from here on */
        }
        break;
    case V_FRAME:
        return fail_text(s, TGC_PS_UNSUPPORTED, "a frame dict changed after it was read");
    case V_DEVICE:
        if (op != TGC_PSB_APPENDS) {
            goto wrong;
        }
        for (size_t i = from; i < s->n && rc == 0; i++) {
            rc = device_append(s, (uint32_t)t->b, &s->st[i]);
        }
        break;
    case V_FRAMES:
        if (op != TGC_PSB_APPENDS) {
            goto wrong;
        }
        for (size_t i = from; i < s->n && rc == 0; i++) {
            uint32_t id;
            rc = frame_of(s, &s->st[i], &id);
            if (rc == 0) {
                open_rec *r = &s->opens[t->a];
                if (grow(&r->ids, &r->cap, r->n + 1, sizeof(uint32_t)) < 0) {
                    return nomem(s);
                }
                r->ids[r->n++] = id;
            }
        }
        break;
    case V_STACK:
        return fail_text(s, TGC_PS_UNSUPPORTED, "a frames list changed after an entry used it");
    default:
        goto wrong;
    }
    if (rc < 0) {
        return -1;
    }
    return drop_range(s, from);
wrong:
    return fail_text(s, TGC_PS_CORRUPT, "%s onto a value of type %s",
                     op == TGC_PSB_APPENDS ? "APPENDS" : op == TGC_PSB_SETITEMS ? "SETITEMS"
                                                                                 : "ADDITEMS",
                     kind_type(t->kind));
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
            return builder_failed(s);
        }
        return push(s, (val){V_OBJ, R_ROOT, 0, 0, (uint64_t)(uintptr_t)o});
    }
    where_t w;
    where_of(s, &w);
    for (int c = 0; c < w.n; c++) {
        const val *pv = &s->st[w.parent[c]];
        if (pv->kind == V_DEVICE) {  /* an entry */
            uint32_t d = (uint32_t)pv->b, row;
            if (new_row(s, d, &row) < 0) {
                return -1;
            }
            return push(s, (val){V_ENTRY, 0, 0, d, row});
        }
        if (pv->kind == V_FRAMES) {  /* a frame */
            uint32_t idx;
            if (open_new(s, 1, &idx) < 0) {
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
                return builder_failed(s);
            }
            return push(s, (val){V_OBJ, R_TRACES, 0, 0, (uint64_t)(uintptr_t)o});
        }
        if (pv->kind == V_OBJ && pv->role == R_TRACES) {  /* a device's list */
            uint32_t d = 0;
            if (new_device(s, &d) < 0) {
                return -1;
            }
            return push(s, (val){V_DEVICE, 0, 0, 0, d});
        }
        if (pv->kind == V_ENTRY && kv && kv->kind == V_STR && kv->b == K_FRAMES) {  /* frames */
            uint32_t idx;
            if (open_new(s, 0, &idx) < 0) {
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
    uint64_t *slot = memo_slot(s, idx, 0);
    if (slot == NULL || *slot == 0) {
        fail(s, TGC_PS_MEMO_UNSET, idx, 0, 0);
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
        return fail_text(s, TGC_PS_UNSUPPORTED, "a %s referred to (memo index %llu) before it "
                         "is complete", p & 1 ? "frame dict" : "frames list",
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
    if (above_mark(s) == 0) {
        fail(s, TGC_PS_UNDERFLOW, 0, 0, 0);
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
            return fail_text(s, TGC_PS_UNSUPPORTED, "a frames list or frame dict memoized twice");
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
        void *o = box(s, v);  /* an object; a float or a wide int as one */
        if (o == NULL) {
            return -1;
        }
        if (((uintptr_t)o & 7u) != 0) {
            s->b.decref(s->b.ctx, o);
            return fail_text(s, TGC_PS_CORRUPT, "the builder's object is not 8-aligned");
        }
        x = (uint64_t)(uintptr_t)o;
        break;
    }
    }
    uint64_t *slot = memo_slot(s, idx, 1);
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
static void
release_machine(S *s)
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
            return fail_text(s, TGC_PS_CORRUPT, "a string that is not UTF-8");
        }
        break;
    case 0x55: case 'T':  /* SHORT_BINSTRING, BINSTRING: str, decoded as ASCII */
        if (!ascii_ok(p, k)) {
            return fail_text(s, TGC_PS_CORRUPT, "a protocol-2 string that is not ASCII");
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
        if (intern_str(s, (const char *)p, k, &sid) < 0) {
            return -1;
        }
        return push(s, (val){V_STR, 0, 0, 0, sid});
    }
    sc.kind = TGC_PSS_STR;
    return push_obj(s, s->b.scalar(s->b.ctx, &sc), 0);
}

/* A text line (protocol 0 arguments, GLOBAL's names), the newline excluded; inside a frame, the
 * newline must be in it (pickscan's rule). */
static int
rd_line(S *s, const unsigned char **line, size_t *len)
{
    for (;;) {
        size_t avail = s->hi - s->lo;
        int capped = s->frame_end != NO_FRAME && s->frame_end - s->off <= avail;
        const unsigned char *nl = memchr(s->buf + s->lo, '\n',
                                         capped ? (size_t)(s->frame_end - s->off) : avail);
        if (nl == NULL && capped) {
            fail(s, TGC_PS_FRAME_CROSSED, s->frame_end, 0, 0);
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
            return fail_text(s, TGC_PS_BOUND, "a text argument longer than %u bytes",
                             TGC_PS_CHUNK);
        }
        int r = rd_fill(s, s->hi - s->lo + 1);
        if (r < 0) {
            return -1;
        }
        if (r > 0) {
            fail(s, TGC_PS_TRUNCATED, 0, 0, 0);
            return -1;
        }
    }
}

static int
text_index(S *s, const unsigned char *p, size_t len, uint64_t *idx)
{
    if (len == 0 || len > 19) {
        fail(s, TGC_PS_MEMO_NAN, 0, 0, 0);
        return -1;
    }
    *idx = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            fail(s, TGC_PS_MEMO_NAN, 0, 0, 0);
            return -1;
        }
        *idx = *idx * 10 + (uint64_t)(p[i] - '0');
    }
    return 0;
}

static int
refused(unsigned op)
{
    switch (op) {
    case 'R': case 'b': case 'o': case 0x81: case 0x92: case 'P': case 'Q':
    case 0x82: case 0x83: case 0x84: case 0x97: case 0x98:
        return 1;
    default:
        return 0;
    }
}

/* A name from the file, for a message: printable ASCII kept, a backslash doubled, any other
 * code point escaped as \xNN, \uNNNN or \UNNNNNNNN; cut with "..." where the next piece would
 * pass NAME_LIMIT characters (snapshot._printable writes the same from a str). p is UTF-8, lone
 * surrogates allowed; a stray byte (never passed) would read as its own code point. */
#define NAME_LIMIT 200
#define NAME_CAP (NAME_LIMIT + 4)
static void
escape_name(char out[NAME_CAP], const unsigned char *p, size_t n)
{
    size_t used = 0, i = 0;
    while (i < n) {
        uint32_t cp = p[i];
        size_t k = cp < 0x80 ? 0 : cp >= 0xF0 ? 3 : cp >= 0xE0 ? 2 : cp >= 0xC0 ? 1 : 0;
        if (k > 0 && i + k < n) {
            cp &= 0x3Fu >> k;
            for (size_t j = 1; j <= k; j++) {
                cp = cp << 6 | (p[i + j] & 0x3Fu);
            }
        }
        else {
            k = 0;
        }
        i += k + 1;
        char piece[12];
        if (cp >= 0x20 && cp < 0x7F && cp != '\\') {
            piece[0] = (char)cp;
            piece[1] = 0;
        }
        else if (cp == '\\') {
            memcpy(piece, "\\\\", 3);
        }
        else {
            snprintf(piece, sizeof(piece), cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x"
                                                                            : "\\U%08x", cp);
        }
        size_t len = strlen(piece);
        if (used + len > NAME_LIMIT) {
            memcpy(out + used, "...", 3);
            used += 3;
            break;
        }
        memcpy(out + used, piece, len);
        used += len;
    }
    out[used] = 0;
}

/* GLOBAL, INST or STACK_GLOBAL with both names (UTF-8): refused by them, escaped. */
static int
lookup(S *s, const char *mod, const char *name)
{
    snprintf(s->err.text, sizeof(s->err.text), "%s.%s", mod, name);
    fail(s, TGC_PS_LOOKUP, 0, 0, 0);
    return -1;
}

/* One of GLOBAL's or INST's name lines into out, escaped, checked as the unpickler checks it
 * (an empty name reads as truncated; GLOBAL decodes UTF-8, INST ASCII). 0, or -1. */
static int
name_line(S *s, unsigned op, char out[NAME_CAP])
{
    const unsigned char *line;
    size_t len;
    if (rd_line(s, &line, &len) < 0) {
        return -1;
    }
    if (len == 0) {
        return fail_text(s, TGC_PS_CORRUPT, "an empty name after %s",
                         op == 'c' ? "GLOBAL" : "INST");
    }
    if (op == 'c' ? !utf8_check(line, len, 1) : !ascii_ok(line, len)) {
        return fail_text(s, TGC_PS_CORRUPT, "a name after %s that is not %s",
                         op == 'c' ? "GLOBAL" : "INST", op == 'c' ? "UTF-8" : "ASCII");
    }
    escape_name(out, line, len);
    return 0;
}

/* NEED's slow path (fewer than k bytes before flim): k more bytes of the opcode, which must
 * lie in its frame (checked first: a frame lies within the file) and in the file. 0, or -1. */
static int
need_slow(S *s, size_t k)
{
    if (s->off + k > s->frame_end) {
        fail(s, TGC_PS_FRAME_CROSSED, s->frame_end, 0, 0);
        return -1;
    }
    if (s->hi - s->lo < k) {
        int r = rd_fill(s, k);
        if (r < 0) {
            return -1;
        }
        if (r > 0) {
            fail(s, TGC_PS_TRUNCATED, 0, 0, 0);
            return -1;
        }
    }
    return 0;
}

/* The next opcode's byte when none is before flim: past the end of its frame the opcodes are in
 * none (or in the next FRAME), else the buffer is refilled. 0, or -1. */
static int
next_op_slow(S *s)
{
    if (s->off >= s->frame_end) {
        s->frame_end = NO_FRAME;
        set_flim(s);
        if (s->flim > s->lo) {
            return 0;
        }
    }
    return need_slow(s, 1);
}

#define FAIL(code_, a_, b_, c_) do { fail(s, (code_), (a_), (b_), (c_)); goto failed; } while (0)
#define CHECK(x) do { if ((x) < 0) { goto failed; } } while (0)
#define AVAIL (s->hi - s->lo)
#define HERE (s->buf + s->lo)
#define ADV(k) do { s->lo += (k); s->off += (k); } while (0)
#define NEED(k) do { if (s->flim - s->lo < (size_t)(k)) { CHECK(need_slow(s, (size_t)(k))); } \
                } while (0)
#define POPMARK(m) do { if (s->nmarks == 0 || s->marks[s->nmarks - 1] > s->n) { \
                            FAIL(TGC_PS_UNDERFLOW, 0, 0, 0); } \
                        (m) = s->marks[--s->nmarks]; \
                        s->fence = s->nmarks ? s->marks[s->nmarks - 1] : 0; } while (0)
#define KEYS_CHEAP(from, step, code) do { \
        for (size_t i_ = (from); i_ < s->n; i_ += (step)) { \
            if (klass(s, &s->st[i_]) != TGC_PSK_CHEAP) { FAIL((code), 0, 0, 0); } } \
    } while (0)

int
tgc_ps_run(tgc_ps_stream *s, void **result)
{
    *result = NULL;
    for (;;) {
        s->op_end = s->off;
        if (s->flim == s->lo) {
            CHECK(next_op_slow(s));
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
                fail_text(s, TGC_PS_CORRUPT, "unsupported pickle protocol: %u", (unsigned)k);
                goto failed;
            }
            break;
        case 0x95:  /* FRAME: whole opcodes inside, and not inside another (pickscan's rules) */
            if (s->frame_end != NO_FRAME) {
                FAIL(TGC_PS_FRAME_NESTED, s->frame_end - (s->off - 1), 0, 0);
            }
            NEED(8);
            k = le(HERE, 8);
            ADV(8);
            if (k > known_size(s) - s->off) {
                fail_at(s, TGC_PS_DECLARES, s->off, op, k, known_size(s) - s->off);
                goto failed;
            }
            s->frame_end = s->off + k;
            set_flim(s);
            break;
        case 0x2E: {  /* STOP: the result alone on the stack (pickscan's rule) */
            if (s->nmarks > 0) {
                FAIL(TGC_PS_STOP_MARK, s->nmarks, 0, 0);
            }
            if (s->n == 0) {
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            if (s->n > 1) {
                FAIL(TGC_PS_STOP_STACK, s->n - 1, 0, 0);
            }
            val top = s->st[--s->n];
            void *o = box(s, &top);
            int rc = drop(s, &top);
            if (o == NULL || rc < 0) {
                if (o) {
                    s->b.decref(s->b.ctx, o);
                }
                goto failed;
            }
            uint64_t end = s->off, trailing = AVAIL;
            s->lo = s->hi = 0;
            while (!s->eof) {
                int r = rd_fill(s, TGC_PS_CHUNK);
                trailing += s->hi;
                s->lo = s->hi = 0;
                if (r < 0) {
                    s->b.decref(s->b.ctx, o);
                    goto failed;
                }
            }
            if (trailing > 0) {
                s->b.decref(s->b.ctx, o);
                fail_at(s, TGC_PS_TRAILING, end, trailing, 0, 0);
                goto failed;
            }
            release_machine(s);
            for (uint32_t d = 0; d < s->ndevs; d++) {
                if (device_fault(s, d) < 0) {
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
                fail_text(s, TGC_PS_BOUND, "more than %u nested marks", TGC_PS_MAX_MARKS);
                goto failed;
            }
            if (grow(&s->marks, &s->mcap, s->nmarks + 1, sizeof(size_t)) < 0) {
                nomem(s);
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
                CHECK(drop(s, &s->st[--s->n]));
            }
            break;
        case 0x31:  /* POP_MARK */
            POPMARK(m);
            CHECK(drop_range(s, m));
            break;
        case 0x32: {  /* DUP */
            if (above_mark(s) == 0) {
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            val v = s->st[s->n - 1];
            if (v.kind == V_FRAMES || v.kind == V_FDICT) {
                fail_text(s, TGC_PS_UNSUPPORTED, "DUP of a frames list or frame dict being read");
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
            int negative = (op == 'T' || op == 0x8B) && (k & 0x80000000u);
            if (negative || k > known_size(s) - s->off) {
                fail_at(s, TGC_PS_DECLARES, s->off, op, negative ? UINT64_MAX : k,
                        known_size(s) - s->off);
                goto failed;
            }
            if (k > SIZE_MAX - 1) {
                nomem(s);
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
                unsigned char *big = rd_big(s, (size_t)k);
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
            if (above_mark(s) < op - 0x84u) {
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
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
                fail_text(s, TGC_PS_CORRUPT, "odd number of items for DICT");
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
            if (m <= s->n - above_mark(s)) {  /* the dict must be above the next mark */
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            KEYS_CHEAP(m, 2, TGC_PS_BAD_KEY);
            if ((s->n - m) % 2) {
                fail_text(s, TGC_PS_CORRUPT, "odd number of items for SETITEMS");
                goto failed;
            }
            CHECK(extend(s, TGC_PSB_SETITEMS, m));
            break;
        case 0x73:  /* SETITEM */
            if (above_mark(s) < 3) {
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            if (klass(s, &s->st[s->n - 2]) != TGC_PSK_CHEAP) {
                FAIL(TGC_PS_BAD_KEY, 0, 0, 0);
            }
            CHECK(extend(s, TGC_PSB_SETITEMS, s->n - 2));
            break;
        case 0x65:  /* APPENDS */
            POPMARK(m);
            if (m <= s->n - above_mark(s)) {  /* the list must be above the next mark */
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            CHECK(extend(s, TGC_PSB_APPENDS, m));
            break;
        case 0x61:  /* APPEND */
            if (above_mark(s) < 2) {
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            CHECK(extend(s, TGC_PSB_APPENDS, s->n - 1));
            break;
        case 0x90:  /* ADDITEMS */
            POPMARK(m);
            if (m <= s->n - above_mark(s)) {  /* the set must be above the next mark */
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
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
            if (s->memo_set > known_size(s)) {
                fail_at(s, TGC_PS_MEMO_PAST, s->off, s->memo_set, s->off, 0);
                goto failed;
            }
            CHECK(memo_put(s, s->memo_set));
            break;
        case 0x71: case 0x72:  /* BINPUT, LONG_BINPUT */
            NEED(op == 0x71 ? 1 : 4);
            idx = le(HERE, op == 0x71 ? 1 : 4);
            ADV(op == 0x71 ? 1 : 4);
            if (idx > s->off) {  /* as pickscan: the unpickler sizes its memo by the index */
                fail_at(s, TGC_PS_MEMO_PAST, s->off, idx, s->off, 0);
                goto failed;
            }
            s->op_end = s->off;
            CHECK(memo_put(s, idx));
            break;
        case 'g': case 'p': {  /* GET, PUT: a decimal index */
            const unsigned char *line;
            size_t len;
            CHECK(rd_line(s, &line, &len));
            CHECK(text_index(s, line, len, &idx));
            if (op == 'g') {
                CHECK(memo_get(s, idx));
            }
            else {
                s->op_end = s->off;
                if (idx > s->off) {
                    FAIL(TGC_PS_MEMO_PAST, idx, s->off, 0);
                }
                CHECK(memo_put(s, idx));
            }
            break;
        }
        case 'I': case 'L': case 'F': case 'S': case 'V': {  /* protocol 0 scalars */
            const unsigned char *line;
            size_t len;
            CHECK(rd_line(s, &line, &len));
            void *o = s->b.text(s->b.ctx, op, (const char *)line, len);
            CHECK(push_obj(s, o, (op == 'I' || op == 'L') && len > 18 ? F_COSTLY : 0));
            break;
        }
        case 'c': case 'i': {  /* GLOBAL, INST: refused by their names */
            char mod[NAME_CAP], name[NAME_CAP];
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
            if (above_mark(s) < 2) {
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            char names[2][NAME_CAP];
            for (int i = 0; i < 2; i++) {
                const val *v = &s->st[s->n - 2 + i];
                tgc_ps_scalar sc;
                if (v->kind == V_STR) {
                    escape_name(names[i], (const unsigned char *)s->sb + s->strs[v->b].off,
                                s->strs[v->b].len);
                }
                else if (v->kind == V_OBJ && !(v->flags & F_COSTLY) && v->role == R_NONE &&
                         s->b.unbox(s->b.ctx, (void *)(uintptr_t)v->b, &sc) == 0 &&
                         sc.kind == TGC_PSS_STR) {  /* a long string, boxed at once */
                    escape_name(names[i], (const unsigned char *)sc.p, sc.n);
                }
                else {
                    fail_text(s, TGC_PS_CORRUPT, "STACK_GLOBAL requires str");
                    goto failed;
                }
            }
            lookup(s, names[0], names[1]);
            goto failed;
        }
        default:
            if (refused(op)) {
                FAIL(TGC_PS_REFUSED, op, 0, 0);
            }
            FAIL(TGC_PS_UNKNOWN, op, 0, 0);
        }
    }
failed:
    if (s->err.code == TGC_PS_OK) {
        fail(s, TGC_PS_CORRUPT, 0, 0, 0);
    }
    return -1;
}

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
    s->seed = mix64(seed ^ UINT64_C(0x243F6A8885A308D3));
    s->buf = malloc(TGC_PS_CHUNK);
    if (s->buf == NULL) {
        free(s);
        return NULL;
    }
    for (int i = 0; i < NKNOWN; i++) {
        uint32_t sid;
        if (intern_str(s, known_keys[i], strlen(known_keys[i]), &sid) < 0 || sid != (uint32_t)i) {
            tgc_ps_free(s);
            return NULL;
        }
    }
    uint32_t id;
    if (intern_stack(s, NULL, 0, &id) < 0 || intern_extras(s, NULL, 0, &id) < 0) {
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
    release_machine(s);
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
    return box(s, value ? &p.v : &p.k);
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
    size_t w = col_size[col], len = dv->len;
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
