/* test_pickstream.c: the streaming snapshot loader's engine (allocator/pickstream.c) with no
 * interpreter around: a builder of counted nodes (so a leaked or twice-released object shows),
 * a source that hands the file over in odd chunk sizes (every refill path), the H100 sample and
 * a protocol-2 pickle loaded and their rows checked, then every truncation and thousands of
 * random byte flips: never a crash, every node released. The rules the engine shares with the
 * pre-scan (allocator/pickscan.c: frames, marks, STOP, memo counting) give both the same code
 * on the same bytes, at every chunk size. `make valgrind` runs it under memcheck. Exits
 * non-zero after the checks if one failed. */
#include "tensorgc/pickscan.h"
#include "tensorgc/pickstream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #cond);             \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

#define CHECK_EQ_U(a, b)                                                                   \
    do {                                                                                   \
        unsigned long long _a = (a), _b = (b);                                             \
        if (_a != _b) {                                                                    \
            fprintf(stderr, "%s:%d: %s == %s failed: %llu != %llu\n", __FILE__, __LINE__, #a, \
                    #b, _a, _b);                                                           \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

/* ------------------------------------------------------------------ a builder of nodes */

enum { N_SCALAR, N_LIST, N_DICT, N_SET, N_TUPLE, N_FROZENSET, N_DEVICE, N_TEXT };

typedef struct node {
    long refs;
    long gc_refs;            /* the cycle check's count */
    struct node *prev, *next;  /* every live node, for the cycle check */
    int kind;
    tgc_ps_scalar sc;        /* N_SCALAR (a copy of the bytes in own) */
    char *own;
    struct node **items;     /* N_DICT: key, value, key, value ... */
    size_t n, cap;
} node;

static long live;            /* nodes made and not released */
static tgc_ps_error last_err;  /* the last load's error */
static node all_nodes = {0, 0, &all_nodes, &all_nodes, 0, {0}, NULL, NULL, 0, 0};

typedef struct {
    tgc_ps_stream *s;
    node **frames, **stacks, **devices;
    size_t nframes, nstacks, ndevices;
    int fail_after;          /* > 0: the builder fails its nth call from now (its own error) */
} fake;

static int
fake_step(fake *f)
{
    return f->fail_after > 0 && --f->fail_after == 0;
}

static node *
node_new(int kind)
{
    node *n = calloc(1, sizeof(node));
    if (n != NULL) {
        n->refs = 1;
        n->kind = kind;
        n->next = all_nodes.next;
        n->prev = &all_nodes;
        all_nodes.next->prev = n;
        all_nodes.next = n;
        live++;
    }
    return n;
}

static void
node_release(node *n)
{
    if (n == NULL || --n->refs > 0) {
        return;
    }
    for (size_t i = 0; i < n->n; i++) {
        node_release(n->items[i]);
    }
    free(n->items);
    free(n->own);
    n->prev->next = n->next;
    n->next->prev = n->prev;
    free(n);
    live--;
}

/* After a load nothing outside the nodes refers to any node: what is left must be cyclic
 * garbage (a flipped file may make a dict hold itself; CPython's collector frees that). As
 * that collector does: subtract the references nodes hold to each other; a node still
 * referenced is leaked. The garbage is freed. Returns the leaked nodes. */
static long
collect_cycles(void)
{
    long leaked = 0;
    for (node *n = all_nodes.next; n != &all_nodes; n = n->next) {
        n->gc_refs = n->refs;
    }
    for (node *n = all_nodes.next; n != &all_nodes; n = n->next) {
        for (size_t i = 0; i < n->n; i++) {
            n->items[i]->gc_refs--;
        }
    }
    for (node *n = all_nodes.next; n != &all_nodes; n = n->next) {
        leaked += n->gc_refs > 0;
    }
    if (leaked) {
        return leaked;
    }
    while (all_nodes.next != &all_nodes) {
        node *n = all_nodes.next;
        n->prev->next = n->next;
        n->next->prev = n->prev;
        free(n->items);
        free(n->own);
        free(n);
        live--;
    }
    return 0;
}

static int
node_push(node *n, node *item)
{
    if (n->n == n->cap) {
        size_t cap = n->cap ? n->cap * 2 : 4;
        node **p = realloc(n->items, cap * sizeof(node *));
        if (p == NULL) {
            return -1;
        }
        n->items = p;
        n->cap = cap;
    }
    item->refs++;
    n->items[n->n++] = item;
    return 0;
}

static void *
fk_scalar(void *ctx, const tgc_ps_scalar *sc)
{
    if (fake_step(ctx)) {
        return NULL;
    }
    node *n = node_new(N_SCALAR);
    if (n == NULL) {
        return NULL;
    }
    n->sc = *sc;
    if (sc->p != NULL) {
        n->own = malloc(sc->n + 1);
        memcpy(n->own, sc->p, sc->n);
        n->sc.p = n->own;
    }
    return n;
}

static void *
fk_text(void *ctx, unsigned op, const char *arg, size_t len)
{
    (void)op;
    if (fake_step(ctx)) {
        return NULL;
    }
    node *n = node_new(N_TEXT);
    n->own = malloc(len + 1);
    memcpy(n->own, arg, len);
    n->sc.kind = TGC_PSS_OTHER;
    return n;
}

static void *
fk_make(void *ctx, int kind, void *const *items, size_t n)
{
    if (fake_step(ctx)) {
        return NULL;
    }
    static const int kinds[] = {N_LIST, N_DICT, N_SET, N_TUPLE, N_FROZENSET};
    node *c = node_new(kinds[kind]);
    for (size_t i = 0; c != NULL && i < n; i++) {
        node_push(c, items[i]);
    }
    return c;
}

static int
fk_extend(void *ctx, void *target, int op, void *const *items, size_t n)
{
    node *t = target;
    if (fake_step(ctx)) {
        return -1;
    }
    if ((op == TGC_PSB_APPENDS && t->kind != N_LIST) ||
        (op == TGC_PSB_SETITEMS && t->kind != N_DICT) ||
        (op == TGC_PSB_ADDITEMS && t->kind != N_SET)) {
        return -1;  /* the unpickler's AttributeError */
    }
    for (size_t i = 0; i < n; i++) {
        node_push(t, items[i]);
    }
    return 0;
}

/* The slot of id in a cache (grown as needed). */
static node **
cache_slot(node ***cache, size_t *nc, uint32_t id)
{
    if (id >= *nc) {
        size_t m = *nc ? *nc : 16;
        while (m <= id) {
            m *= 2;
        }
        *cache = realloc(*cache, m * sizeof(node *));
        memset(*cache + *nc, 0, (m - *nc) * sizeof(node *));
        *nc = m;
    }
    return &(*cache)[id];
}

static void *
fk_cached(fake *f, node ***cache, size_t *nc, uint32_t id, node *(*make)(fake *, uint32_t))
{
    node **slot = cache_slot(cache, nc, id);
    if (*slot == NULL) {
        node *n = make(f, id);
        if (n == NULL) {
            return NULL;
        }
        slot = cache_slot(cache, nc, id);  /* make may have grown the cache */
        *slot = n;
    }
    (*slot)->refs++;
    return *slot;
}

static node *
make_device(fake *f, uint32_t id)
{
    (void)f;
    node *n = node_new(N_DEVICE);
    n->sc.i = id;
    return n;
}

static node *
make_frame(fake *f, uint32_t id)
{
    tgc_ps_frame fr;
    if (tgc_ps_get_frame(f->s, id, &fr) < 0) {
        return NULL;
    }
    node *d = node_new(N_DICT);
    uint32_t sids[2] = {fr.name, fr.filename};
    for (int i = 0; i < 2; i++) {
        if (sids[i] != TGC_PS_ABSENT) {
            tgc_ps_scalar sc = {TGC_PSS_STR, 0, 0, 0, NULL, 0, sids[i], NULL};
            if (tgc_ps_string(f->s, sids[i], &sc.p, &sc.n) < 0) {
                failures++;
            }
            node *v = fk_scalar(f, &sc);
            node_push(d, v);  /* a key would go first; the test reads values only */
            node_release(v);
        }
    }
    for (uint32_t k = 0; k < tgc_ps_extras_len(f->s, fr.extra); k++) {
        node *key = tgc_ps_extras_item(f->s, fr.extra, k, 0);
        node *value = tgc_ps_extras_item(f->s, fr.extra, k, 1);
        if (key) {
            node_push(d, key);
            node_release(key);
        }
        if (value) {
            node_push(d, value);
            node_release(value);
        }
    }
    return d;
}

static node *
make_stack(fake *f, uint32_t id)
{
    uint32_t n;
    const uint32_t *ids = tgc_ps_get_stack(f->s, id, &n);
    node *l = node_new(N_LIST);
    for (uint32_t i = 0; i < n; i++) {
        node *fr = fk_cached(f, &f->frames, &f->nframes, ids[i], make_frame);
        if (fr != NULL) {
            node_push(l, fr);
            node_release(fr);
        }
    }
    return l;
}

static void *
fk_device(void *ctx, uint32_t dev)
{
    fake *f = ctx;
    return fake_step(f) ? NULL : fk_cached(f, &f->devices, &f->ndevices, dev, make_device);
}

static void *
fk_frame(void *ctx, uint32_t id)
{
    fake *f = ctx;
    return fake_step(f) ? NULL : fk_cached(f, &f->frames, &f->nframes, id, make_frame);
}

static void *
fk_stack(void *ctx, uint32_t id)
{
    fake *f = ctx;
    return fake_step(f) ? NULL : fk_cached(f, &f->stacks, &f->nstacks, id, make_stack);
}

static void
fk_incref(void *ctx, void *obj)
{
    (void)ctx;
    ((node *)obj)->refs++;
}

static void
fk_decref(void *ctx, void *obj)
{
    (void)ctx;
    node_release(obj);
}

static int
fk_classify(void *ctx, void *obj)
{
    (void)ctx;
    node *n = obj;
    if (n->kind == N_TUPLE || n->kind == N_FROZENSET ||
        (n->kind == N_SCALAR && n->sc.kind == TGC_PSS_BIGINT)) {
        return TGC_PSK_COSTLY;
    }
    return n->kind == N_SCALAR || n->kind == N_TEXT ? TGC_PSK_CHEAP : TGC_PSK_UNHASHABLE;
}

static int
fk_unbox(void *ctx, void *obj, tgc_ps_scalar *out)
{
    (void)ctx;
    node *n = obj;
    memset(out, 0, sizeof(*out));
    out->type_name = "node";
    out->sid = UINT32_MAX;
    if (n->kind == N_SCALAR) {
        *out = n->sc;
        out->type_name = "scalar";
    }
    else {
        out->kind = n->kind == N_LIST ? TGC_PSS_LIST : n->kind == N_DICT ? TGC_PSS_DICT
                                                                        : TGC_PSS_OTHER;
    }
    return 0;
}

static int
fk_dict_next(void *ctx, void *dict, size_t *pos, void **key, void **value)
{
    (void)ctx;
    node *d = dict;
    if (d->kind != N_DICT || *pos + 1 >= d->n) {
        return 0;
    }
    *key = d->items[*pos];
    *value = d->items[*pos + 1];
    *pos += 2;
    return 1;
}

static int
fk_list_item(void *ctx, void *list, size_t i, void **item)
{
    (void)ctx;
    node *l = list;
    if (l->kind != N_LIST || i >= l->n) {
        return 0;
    }
    *item = l->items[i];
    return 1;
}

static void
fk_adopt(void *ctx, int kind, uint32_t id, void *obj)
{
    fake *f = ctx;
    node **slot = kind == TGC_PSB_DICT ? cache_slot(&f->frames, &f->nframes, id)
                                       : cache_slot(&f->stacks, &f->nstacks, id);
    if (*slot == NULL) {
        ((node *)obj)->refs++;
        *slot = obj;
    }
}

/* ------------------------------------------------------------------ a chunked source */

typedef struct {
    const unsigned char *data;
    size_t n, pos, chunk;
} source;

static long long
src_read(void *ctx, unsigned char *buf, size_t want)
{
    source *r = ctx;
    size_t k = r->n - r->pos;
    if (k > want) {
        k = want;
    }
    if (k > r->chunk) {
        k = r->chunk;  /* short reads: every refill path */
    }
    memcpy(buf, r->data + r->pos, k);
    r->pos += k;
    return (long long)k;
}

static void
release_caches(fake *f)
{
    node **caches[] = {f->frames, f->stacks, f->devices};
    size_t ns[] = {f->nframes, f->nstacks, f->ndevices};
    for (int c = 0; c < 3; c++) {
        for (size_t i = 0; i < ns[c]; i++) {
            node_release(caches[c][i]);
        }
        free(caches[c]);
    }
    memset(f, 0, sizeof(*f));
}

/* Loads data; 0 or the error code. Every column is taken and freed, every node released. */
static int
load(const unsigned char *data, size_t n, size_t chunk, int fail_after, uint64_t *rows)
{
    fake f;
    memset(&f, 0, sizeof(f));
    f.fail_after = fail_after;
    tgc_ps_builder b = {&f, fk_scalar, fk_text, fk_make, fk_extend, fk_device, fk_frame,
                        fk_stack, fk_incref, fk_decref, fk_classify, fk_unbox, fk_dict_next,
                        fk_list_item, fk_adopt};
    source src = {data, n, 0, chunk};
    tgc_ps_stream *s = tgc_ps_new(&b, src_read, &src, n, n + 1, 42);
    if (s == NULL) {
        failures++;
        return -1;
    }
    f.s = s;
    void *root = NULL;
    int rc = tgc_ps_run(s, &root);
    int code = rc == 0 ? TGC_PS_OK : tgc_ps_last_error(s)->code;
    last_err = *tgc_ps_last_error(s);
    CHECK(rc == 0 ? code == TGC_PS_OK : code != TGC_PS_OK);
    if (rows != NULL) {
        *rows = 0;
    }
    if (rc == 0) {
        for (uint32_t d = 0; d < tgc_ps_ndevices(s); d++) {
            for (int c = 0; c < TGC_PS_NCOLS; c++) {
                void *col;
                size_t len;
                CHECK(tgc_ps_take_column(s, d, c, &col, &len) == 0);
                CHECK(len == tgc_ps_device_len(s, d));
                free(col);
            }
            if (rows != NULL) {
                *rows += tgc_ps_device_len(s, d);
            }
        }
        for (uint32_t i = 0; i < tgc_ps_nextras(s); i++) {
            for (uint32_t k = 0; k < tgc_ps_extras_len(s, i); k++) {
                node_release(tgc_ps_extras_item(s, i, k, 1));
            }
        }
        node_release(root);
    }
    tgc_ps_free(s);
    release_caches(&f);
    CHECK_EQ_U(collect_cycles(), 0);
    return code;
}

static unsigned char *
read_file(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        return NULL;
    }
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)len);
    if (p == NULL || fread(p, 1, (size_t)len, fp) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(fp);
    *n = (size_t)len;
    return p;
}

/* {"segments": [], "device_traces": [[{"action": "alloc", "addr": 7, "size": 8,
 *  "frames": [{"filename": "a.py", "name": "f", "line": 3}]}]]} in protocol 2 (BINPUT) */
static const unsigned char PROTO2[] =
    "\x80\x02}q\x00(X\x08\x00\x00\x00segmentsq\x01]q\x02X\x0d\x00\x00\x00""device_tracesq\x03]q"
    "\x04]q\x05}q\x06(X\x06\x00\x00\x00""actionq\x07X\x05\x00\x00\x00""allocq\x08X\x04\x00\x00"
    "\x00""addrq\x09K\x07X\x04\x00\x00\x00sizeq\x0aK\x08X\x06\x00\x00\x00""framesq\x0b]q\x0c}q"
    "\x0d(X\x08\x00\x00\x00""filenameq\x0eX\x04\x00\x00\x00""a.pyq\x0fX\x04\x00\x00\x00nameq\x10"
    "X\x01\x00\x00\x00""fq\x11X\x04\x00\x00\x00lineq\x12K\x03uauaau.";

/* Bytes both engines refuse alike, or read (the rules pickscan.h states): the stream's code and
 * `a`, and the pre-scan's code (GLOBAL and INST are its LOOKUP, whatever follows). */
typedef struct {
    const char *what;
    const char *data;
    size_t n;
    int code;
    unsigned long long a;
    int scan_code;
} rule_case;

#define F8(n) "\x95" n "\0\0\0\0\0\0\0"  /* FRAME of n (one byte) */
#define RULE(what, bytes, code, a, scan) {what, bytes, sizeof(bytes) - 1, code, a, scan}
static const rule_case RULES[] = {
    RULE("frame ends inside BININT2's argument", "\x80\x04" F8("\x06") "](K\x01M\x02\x00K\x03" "e.",
         TGC_PS_FRAME_CROSSED, 17, TGC_PS_FRAME_CROSSED),
    RULE("frame ends inside a text line", "\x80\x04" F8("\x05") "](I12\ne.",
         TGC_PS_FRAME_CROSSED, 16, TGC_PS_FRAME_CROSSED),
    RULE("frame ends inside a string", "\x80\x04" F8("\x04") "\x8c\x05hello.",
         TGC_PS_FRAME_CROSSED, 15, TGC_PS_FRAME_CROSSED),
    RULE("frame ends inside BINUNICODE's length", "\x80\x04" F8("\x03") "X\x01\0\0\0a.",
         TGC_PS_FRAME_CROSSED, 14, TGC_PS_FRAME_CROSSED),
    RULE("a FRAME inside a frame", "\x80\x04" F8("\x0d") "](" F8("\x02") "K\x01" "e.",
         TGC_PS_FRAME_NESTED, 11, TGC_PS_FRAME_NESTED),
    RULE("frames back to back, STOP in the last", "\x80\x04" F8("\x00") F8("\x01") "]" F8("\x01") ".",
         TGC_PS_OK, 0, TGC_PS_OK),
    RULE("an opcode between two frames", "\x80\x04" F8("\x01") "]K\x01" F8("\x02") "a.",
         TGC_PS_OK, 0, TGC_PS_OK),
    RULE("STOP with a mark over the result", "\x80\x02N(.", TGC_PS_STOP_MARK, 1, TGC_PS_STOP_MARK),
    RULE("STOP with a mark under the result", "\x80\x02(N.", TGC_PS_STOP_MARK, 1, TGC_PS_STOP_MARK),
    RULE("STOP with two values", "\x80\x02NN.", TGC_PS_STOP_STACK, 1, TGC_PS_STOP_STACK),
    RULE("STOP on an empty stack", "\x80\x02.", TGC_PS_UNDERFLOW, 0, TGC_PS_UNDERFLOW),
    RULE("APPEND onto a list below the mark", "\x80\x02](K\x01" "a1.", TGC_PS_UNDERFLOW, 0,
         TGC_PS_UNDERFLOW),
    RULE("SETITEM into a dict below the mark", "\x80\x02}(K\x01K\x02s1.", TGC_PS_UNDERFLOW, 0,
         TGC_PS_UNDERFLOW),
    RULE("APPENDS onto a list below the next mark", "\x80\x02]((K\x01" "e1.", TGC_PS_UNDERFLOW, 0,
         TGC_PS_UNDERFLOW),
    RULE("SETITEMS into a dict below the next mark", "\x80\x02}((K\x01K\x02u1.",
         TGC_PS_UNDERFLOW, 0, TGC_PS_UNDERFLOW),
    RULE("ADDITEMS into a set below the next mark", "\x80\x04\x8f((K\x01\x90" "1.", TGC_PS_UNDERFLOW,
         0, TGC_PS_UNDERFLOW),
    RULE("TUPLE2 across the mark", "\x80\x02N(N\x86" "1.", TGC_PS_UNDERFLOW, 0, TGC_PS_UNDERFLOW),
    RULE("DUP right after a mark", "\x80\x02N(21.", TGC_PS_UNDERFLOW, 0, TGC_PS_UNDERFLOW),
    RULE("BINPUT right after a mark", "\x80\x02N(q\x00" "1.", TGC_PS_UNDERFLOW, 0, TGC_PS_UNDERFLOW),
    RULE("MEMOIZE right after a mark", "\x80\x04N(\x94" "1.", TGC_PS_UNDERFLOW, 0, TGC_PS_UNDERFLOW),
    RULE("MEMOIZE after BINPUT 5 stores at 1", "\x80\x04]q\x05K\x01\x94" "0h\x01" "a.", TGC_PS_OK, 0,
         TGC_PS_OK),
    RULE("INST without a mark", "\x80\x02im\nx\n.", TGC_PS_UNDERFLOW, 0, TGC_PS_LOOKUP),
    RULE("GLOBAL with an empty name", "\x80\x02" "c\nx\n.", TGC_PS_CORRUPT, 0, TGC_PS_LOOKUP),
    RULE("GLOBAL with a name that is not UTF-8", "\x80\x02" "cm\n\xed\xa0\x80\n.", TGC_PS_CORRUPT, 0,
         TGC_PS_LOOKUP),
};

/* Every rule at every chunk size, and the pre-scan's code on the same bytes. */
static void
check_rules(void)
{
    static const size_t chunks[] = {1, 2, 5, 1 << 20};
    for (size_t i = 0; i < sizeof(RULES) / sizeof(RULES[0]); i++) {
        const rule_case *r = &RULES[i];
        for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
            int code = load((const unsigned char *)r->data, r->n, chunks[c], 0, NULL);
            if (code != r->code || (r->a && last_err.a != r->a)) {
                fprintf(stderr, "%s (chunk %zu): code %d a %llu, not %d a %llu\n", r->what,
                        chunks[c], code, (unsigned long long)last_err.a, r->code, r->a);
                failures++;
            }
            CHECK_EQ_U(live, 0);
        }
        tgc_ps_result scan;
        tgc_pickle_scan((const unsigned char *)r->data, r->n, &scan);
        if (scan.code != r->scan_code || (r->a && scan.code == r->code && scan.a != r->a)) {
            fprintf(stderr, "%s: the pre-scan's code %d a %llu, not %d\n", r->what, scan.code,
                    (unsigned long long)scan.a, r->scan_code);
            failures++;
        }
    }
    /* a frame longer than a chunk: the opcode crossing its end is found past the first refill */
    size_t k = 600000, n = 11 + 2 + 2 * k + 3 + 2;
    unsigned char *p = malloc(n);
    memcpy(p, "\x80\x04\x95", 3);
    uint64_t len = 2 + 2 * k + 2;
    for (int b = 0; b < 8; b++) {
        p[3 + b] = (unsigned char)(len >> (8 * b));
    }
    memcpy(p + 11, "](", 2);
    for (size_t j = 0; j < k; j++) {
        memcpy(p + 13 + 2 * j, "K\x01", 2);
    }
    memcpy(p + 13 + 2 * k, "M\x02\x00" "e.", 5);
    CHECK_EQ_U(load(p, n, 1 << 20, 0, NULL), TGC_PS_FRAME_CROSSED);
    CHECK_EQ_U(last_err.a, 11 + len);
    CHECK_EQ_U(load(p, n, 4093, 0, NULL), TGC_PS_FRAME_CROSSED);
    memcpy(p + 13 + 2 * k, "I1\ne.", 5);  /* the same with a text line */
    CHECK_EQ_U(load(p, n, 1 << 20, 0, NULL), TGC_PS_FRAME_CROSSED);
    p[3] = (unsigned char)(len + 1);  /* the frame holds the line: read, then APPENDS outside */
    CHECK_EQ_U(load(p, n, 1 << 20, 0, NULL), TGC_PS_OK);
    tgc_ps_result scan;
    tgc_pickle_scan(p, n, &scan);
    CHECK_EQ_U(scan.code, TGC_PS_OK);
    CHECK_EQ_U(live, 0);
    free(p);
    /* GLOBAL's names escaped for the message, cut at 200 characters */
    static const char glob[] = "\x80\x02" "cos\x1b[2J\nsy\\s\xc3\xa9\xe2\x80\xa8\n.";
    CHECK_EQ_U(load((const unsigned char *)glob, sizeof(glob) - 1, 3, 0, NULL), TGC_PS_LOOKUP);
    CHECK(strcmp(last_err.text, "os\\x1b[2J.sy\\\\s\\xe9\\u2028") == 0);
    char longname[300 + 8];
    memcpy(longname, "\x80\x02" "cm\n", 5);
    memset(longname + 5, 'n', 300);
    memcpy(longname + 305, "\n.", 2);
    CHECK_EQ_U(load((const unsigned char *)longname, 307, 64, 0, NULL), TGC_PS_LOOKUP);
    CHECK_EQ_U(strlen(last_err.text), 2 + 200 + 3);
    CHECK(strcmp(last_err.text + strlen(last_err.text) - 4, "n...") == 0);
}

int
main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "tests/data/h100_small_snapshot.pickle";
    size_t n;
    unsigned char *data = read_file(path, &n);
    if (data == NULL) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    uint64_t rows;
    if (argc > 2 && strcmp(argv[2], "--once") == 0) {  /* one load of the file, for a debugger */
        int code = load(data, n, 7, 0, NULL);
        printf("code %d, %ld nodes left\n", code, live);
        free(data);
        return live != 0;
    }
    static const size_t chunks[] = {1, 3, 64, 1 << 20};
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        CHECK_EQ_U(load(data, n, chunks[c], 0, &rows), TGC_PS_OK);
        CHECK_EQ_U(rows, 6);
        CHECK_EQ_U(live, 0);
    }
    CHECK_EQ_U(load(PROTO2, sizeof(PROTO2) - 1, 5, 0, &rows), TGC_PS_OK);
    CHECK_EQ_U(rows, 1);
    CHECK_EQ_U(live, 0);
    check_rules();
    /* every truncation: an error (truncated or declaring more than is left), nothing leaked */
    for (size_t cut = 0; cut < n; cut++) {
        int code = load(data, cut, 7, 0, NULL);
        CHECK(code == TGC_PS_TRUNCATED || code == TGC_PS_DECLARES);
        CHECK_EQ_U(live, 0);
    }
    CHECK_EQ_U(load(data, n - 1, 7, 0, NULL), TGC_PS_DECLARES);  /* its FRAME covers the rest */
    /* the builder failing at each of its first calls in turn */
    for (int k = 1; k < 400; k++) {
        int code = load(data, n, 4096, k, NULL);
        CHECK(code == TGC_PS_OK || code == TGC_PS_BUILDER);
        if (live != 0) {
            fprintf(stderr, "the builder failing at call %d leaves %ld nodes\n", k, live);
            failures++;
            live = 0;
        }
    }
    /* random byte flips (a fixed seed): never a crash, nothing leaked */
    unsigned char *copy = malloc(n);
    unsigned long long seed = 12345;
    int ok = 0, refused = 0;
    for (int t = 0; t < 4000; t++) {
        memcpy(copy, data, n);
        int flips = 1 + t % 4;
        for (int i = 0; i < flips; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t at = (size_t)(seed >> 33) % n;
            copy[at] = (unsigned char)(seed >> 17);
        }
        int code = load(copy, n, (size_t)(1 + t % 97), 0, NULL);
        ok += code == TGC_PS_OK;
        refused += code != TGC_PS_OK;
        if (live != 0) {
            fprintf(stderr, "flipped file %d (code %d) leaves %ld nodes\n", t, code, live);
            if (getenv("TGC_DUMP")) {
                FILE *out = fopen(getenv("TGC_DUMP"), "wb");
                fwrite(copy, 1, n, out);
                fclose(out);
                exit(2);
            }
            failures++;
            live = 0;
        }
    }
    CHECK(ok > 0 && refused > 0);
    free(copy);
    free(data);
    if (failures) {
        fprintf(stderr, "%d failed\n", failures);
        return 1;
    }
    printf("test_pickstream: all passed (%d flipped files loaded, %d refused)\n", ok, refused);
    return 0;
}
