/* pickstream_int.h: what the files of the streaming snapshot loader share (its contract with
 * callers is include/tensorgc/pickstream.h); included by them alone, never by a binding.
 *
 *   pickstream.c          construction, the tables' and columns' API
 *   pickstream_error.c    the error record every other file fills (it calls none of them)
 *   pickstream_intern.c   growable arrays, hashing, the interning of strings, frames, stacks and
 *                         sets of other fields
 *   pickstream_read.c     the chunked reader: the buffer, payloads past a chunk, text lines,
 *                         the slow paths of an opcode's bytes at a frame's end
 *   pickstream_values.c   the machine's values: open records, memo slots, boxing, dropping, how
 *                         a value reads as a field
 *   pickstream_rows.c     frame dicts and frames lists, the devices' rows and their faults
 *   pickstream_machine.c  the opcode machine (tgc_ps_run) and its stack
 *
 * They call one another one way: pickstream.c and the machine call the rows, values, reader
 * and tables; the rows call values and tables; values call tables; all fill the error record.
 *
 * Naming: a function one file defines and another calls is tgc_ps__name (two underscores: not
 * the public tgc_ps_ API) and is declared here; everything else is static to its file. The
 * types, enums and macros below keep short names, for nothing outside these files sees them.
 * The hot paths stay inlinable: the machine's push, next opcode and memo get/put live in
 * pickstream_machine.c, and the helpers they share with other files (growing an array, a memo
 * slot, a map's lookup, dropping a value, a value's type name, the reader's limit) are static
 * inline here, each with its slow path out of line.
 *
 * Errors: a function returning int gives 0, or -1 with s->err set (the first failure stands);
 * one returning a pointer gives NULL with s->err set, unless its declaration says otherwise.
 * Builder objects: a "new" reference is the
 * caller's to let go of; the stack, the memo, the caches and the sets of other fields each own
 * the references they hold. */
#ifndef TENSORGC_PICKSTREAM_INT_H
#define TENSORGC_PICKSTREAM_INT_H

#include <stddef.h>
#include <stdint.h>

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

/* An entry's checked fields, in check_snapshot's order, and how one is wrong. */
enum { F_ACTION, F_ADDR, F_SIZE, F_DEVFREE, F_TIME, F_FRAMES, NFIELD };
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

extern const size_t tgc_ps__col_size[TGC_PS_NCOLS];  /* bytes per row of each column */

struct tgc_ps_stream {
    tgc_ps_builder b;
    tgc_ps_read_fn read;
    void *read_ctx;
    uint64_t size, max_bytes, seed;
    tgc_ps_error err;
    /* the reader: unread bytes are buf[lo, hi); off is the file offset of buf[lo]. An opcode
     * reads up to flim: hi, or where the FRAME it is in ends when that comes first (so one
     * compare checks both; tgc_ps__set_flim after hi, off or frame_end change other than by
     * reading) */
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
/* Errors (pickstream.c)                                                                       */

/* Records the failure at pos (the first one stands). */
void tgc_ps__fail_at(S *s, int code, uint64_t pos, uint64_t a, uint64_t b, uint64_t c);
/* Records code with a message in err.text; returns -1. */
int tgc_ps__fail_text(S *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* At the end of the opcode being read. */
static inline void
tgc_ps__fail(S *s, int code, uint64_t a, uint64_t b, uint64_t c)
{
    tgc_ps__fail_at(s, code, s->op_end, a, b, c);
}

static inline int
tgc_ps__nomem(S *s)
{
    tgc_ps__fail(s, TGC_PS_NOMEM, 0, 0, 0);
    return -1;
}

/* The builder's own error (a Python exception) stands. */
static inline int
tgc_ps__builder_failed(S *s)
{
    tgc_ps__fail(s, TGC_PS_BUILDER, 0, 0, 0);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Growable arrays, hashing, interning (pickstream_intern.c)                                   */

int tgc_ps__grow_slow(void *pp, size_t *cap, size_t need, size_t size);

/* Room for `need` elements of `size` bytes in *pp (capacity *cap, doubling from 16). 0, or -1
 * when out of memory (*pp unchanged; no error set: the caller says nomem). */
static inline int
tgc_ps__grow(void *pp, size_t *cap, size_t need, size_t size)
{
    return need <= *cap ? 0 : tgc_ps__grow_slow(pp, cap, need, size);
}

static inline uint64_t
tgc_ps__mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
}

uint32_t *tgc_ps__map_add(map64 *m, uint64_t seed, uint64_t key, int *nomem_out);

/* The value slot of key, or NULL when absent (create: added with value 0). Out of memory: NULL
 * with *nomem_out set, no error recorded. The lookup is inline: an entry's every field asks
 * whether it had a fault. */
static inline uint32_t *
tgc_ps__map_get(map64 *m, uint64_t seed, uint64_t key, int create, int *nomem_out)
{
    if (create) {
        return tgc_ps__map_add(m, seed, key, nomem_out);
    }
    if (m->cap == 0) {
        return NULL;
    }
    size_t mask = m->cap - 1;
    for (size_t i = tgc_ps__mix64((key + 1) ^ seed) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == key + 1) {
            return &m->vals[i];
        }
        if (m->keys[i] == 0) {
            return NULL;
        }
    }
}
/* The id of each, added when new. 0, or -1. */
int tgc_ps__intern_str(S *s, const char *p, size_t n, uint32_t *sid);
int tgc_ps__intern_frame(S *s, frame_rec *f, uint32_t *id);  /* sets f->hash */
int tgc_ps__intern_stack(S *s, const uint32_t *ids, size_t n, uint32_t *id);
/* A set of (key, value) pairs of normalized values; a new set takes references to its objects. */
int tgc_ps__intern_extras(S *s, const pair *items, size_t n, uint32_t *id);

/* ------------------------------------------------------------------------------------------ */
/* The reader (pickstream_read.c)                                                              */

/* flim: hi, or where the FRAME being read ends when that comes first. */
static inline void
tgc_ps__set_flim(S *s)
{
    s->flim = s->hi;
    if (s->frame_end != NO_FRAME && s->frame_end - s->off < s->hi - s->lo) {
        s->flim = s->lo + (size_t)(s->frame_end - s->off);
    }
}

/* The file's length as known now (it may have grown since the caller measured it). */
static inline uint64_t
tgc_ps__known_size(const S *s)
{
    return s->size > s->total ? s->size : s->total;
}

/* At least `need` (<= TGC_PS_CHUNK) unread bytes in buf: 0, 1 when the file ends first, -1 on
 * a read error or past max_bytes. */
int tgc_ps__rd_fill(S *s, size_t need);
/* The next k bytes, k > TGC_PS_CHUNK, in a new buffer (the caller frees it), or NULL. */
unsigned char *tgc_ps__rd_big(S *s, size_t k);
/* A text line, the newline excluded (*line points into buf until the next read). 0, or -1. */
int tgc_ps__rd_line(S *s, const unsigned char **line, size_t *len);
/* The machine's NEED and next opcode when flim is reached. 0, or -1. */
int tgc_ps__need_slow(S *s, size_t k);
int tgc_ps__next_op_slow(S *s);

/* ------------------------------------------------------------------------------------------ */
/* The machine's values (pickstream_values.c)                                                  */

/* What a value holds as a field value (tgc_ps__look): ints (bools are ints, as for isinstance;
 * `boolean` says which were, for a column cannot give a bool back), strings (interned: sid), or
 * a type name. */
enum { L_INT, L_UINT, L_BIG, L_STR, L_NONE, L_LIST, L_DICT, L_OTHER };
typedef struct {
    int kind, boolean;
    int64_t i;
    uint64_t u;
    uint32_t sid;
    const char *type;
} look_t;

uint64_t *tgc_ps__memo_page(S *s, uint64_t idx);

/* Memo slot idx, or NULL when its page was never made (create: made, NULL only when out of
 * memory, the error set). */
static inline uint64_t *
tgc_ps__memo_slot(S *s, uint64_t idx, int create)
{
    uint64_t page = idx >> MEMO_PAGE_BITS;
    if (page < s->npages && s->memo[page] != NULL) {
        return &s->memo[page][idx & (MEMO_PAGE - 1)];
    }
    return create ? tgc_ps__memo_page(s, idx) : NULL;
}

/* The Python type a value has. */
static inline const char *
tgc_ps__kind_type(int kind)
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

int tgc_ps__open_new(S *s, int fdict, uint32_t *idx);
void tgc_ps__memo_adopt(S *s, uint32_t a, int tag, uint32_t id, void *obj);
/* An open frame dict or frames list read as its frame or stack (its record let go of). */
int tgc_ps__close_fdict(S *s, uint32_t idx, uint32_t *id);
int tgc_ps__close_frames(S *s, uint32_t idx, uint32_t *id);
int tgc_ps__settle(S *s, val *v);
void *tgc_ps__box(S *s, val *v);  /* new reference, or NULL */
int tgc_ps__drop_open(S *s, val *v);
int tgc_ps__look(S *s, val *v, look_t *out);
int tgc_ps__from_obj(S *s, void *o, val *out);  /* o borrowed; out holds its own reference */

/* Lets go of a value leaving the stack; an open record goes to tgc_ps__drop_open. */
static inline int
tgc_ps__drop(S *s, val *v)
{
    if (v->kind == V_OBJ) {
        s->b.decref(s->b.ctx, (void *)(uintptr_t)v->b);
    }
    else if (v->kind == V_FDICT || v->kind == V_FRAMES) {
        return tgc_ps__drop_open(s, v);
    }
    v->kind = V_NONE;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Frame dicts, frames lists, the devices' rows (pickstream_rows.c)                            */

int tgc_ps__frame_set(S *s, uint32_t idx, val *k, val *v);
int tgc_ps__frame_of(S *s, val *item, uint32_t *id);
int tgc_ps__new_device(S *s, uint32_t *d);
int tgc_ps__new_row(S *s, uint32_t d, uint32_t *row);
int tgc_ps__pend_begin(S *s, uint32_t d, uint32_t row);
int tgc_ps__pend_end(S *s);
int tgc_ps__row_set(S *s, uint32_t d, uint32_t row, val *k, val *v);
int tgc_ps__device_append(S *s, uint32_t d, val *item);
int tgc_ps__device_fault(S *s, uint32_t d);  /* after STOP: dv->error, or none */

/* ------------------------------------------------------------------------------------------ */
/* The machine (pickstream_machine.c)                                                          */

void tgc_ps__release_machine(S *s);  /* the stack and the memo let go of */

#endif /* TENSORGC_PICKSTREAM_INT_H */
