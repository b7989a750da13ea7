/* pickstream.h: the contract of tensorgc's streaming snapshot loader (allocator/pickstream.c),
 * plain C. The binding's builder, which makes Python objects, is allocator/pickstream_py.c.
 *
 * A restricted pickle machine for untrusted snapshot files (protocols 2 to 5). It reads the file
 * through a callback in chunks of TGC_PS_CHUNK bytes, never the whole file, takes the opcodes
 * pickscan.h accepts and refuses the others with pickscan's codes (GLOBAL, STACK_GLOBAL and INST
 * are TGC_PS_LOOKUP with the names in `text`; REDUCE, BUILD, OBJ, NEWOBJ*, persistent ids,
 * extension codes and out-of-band buffers TGC_PS_REFUSED), with the same checks of declared
 * lengths, memo indices and dict keys, and the same rules of form: every opcode inside its
 * FRAME, no FRAME inside another, nothing taken from below the top MARK (CPython's fence), the
 * result alone on the stack at STOP (TGC_PS_FRAME_*, TGC_PS_UNDERFLOW, TGC_PS_STOP_*). Names
 * of GLOBAL, INST and STACK_GLOBAL reach `text` escaped (printable ASCII; \xNN, \uNNNN,
 * \UNNNNNNNN otherwise) and cut at 200 characters each.
 *
 * It builds the snapshot through a builder (tgc_ps_builder), except the trace entries at
 * snap["device_traces"][d][i]. Those it follows by their path: the top-level dict, its key
 * "device_traces" (pickle pushes a key before its value, so the key is on the stack when the
 * value's list opens), that list's lists, their dicts. Each entry dict becomes a row of columns
 * (tgc_ps_take_column); its "frames" list is interned: frames by (filename, name, line) into a
 * table of frames, frames lists (sequences of frame ids) into a table of stacks. So memory grows
 * with the distinct strings, frames and stacks, not with the entries: per entry it is 50 bytes
 * of columns, and 8 bytes per memo slot the file fills (pickle memoizes each entry dict and
 * each frames list). The memo holds handles (row, stack, frame, string id), not objects. A
 * handle used off the trace's path is made into an object: a stack into its list, a frame into
 * its dict (the same object each time, from the builder), a device's list into the object that
 * stands for it; a trace entry is refused (below). A builder dict or list used as a frame or an
 * entry's frames (a file sharing them with a block) is read once, its memo slot rewritten to
 * the handle. Strings up to TGC_PS_STR_INTERN bytes are interned (one copy, one object each).
 *
 * An entry's fields are checked as snapshot.check_snapshot checks them, and the first faulty
 * entry of each device is kept as a message (tgc_ps_device_error) rather than stopping the load:
 * a fault the pre-scan would find later in the file is reported first, as the plain loader does.
 * An entry keeps every field: those the columns do not hold (compile_context, user_metadata, a
 * stream that is not an int64, ...) are interned as sets of (key, value) pairs, one id per
 * entry; a frame's keys other than filename, name and line likewise. A bool where an int is
 * read (check_snapshot takes it: addr, size, device_free and time_us, whose column holds it as
 * an int for the readers, and a frame's line) is kept as the bool with the other fields too, so
 * the entry or frame reads back a bool, as the plain loader gives it.
 *
 * What it refuses with TGC_PS_UNSUPPORTED (the plain loader reads it): a trace entry referred to
 * from outside its device's list through the memo, a frame dict or frames list changed after it
 * was read (or after an entry used it), or referred to before it is complete; none of these is
 * in a file pickle.dump writes. Bounds (TGC_PS_BOUND beyond): the TGC_PS_MAX_*
 * below, a text argument (protocol 0 opcodes) longer than a chunk, 256 distinct actions per
 * device. Time: O(bytes + entries + frames read); hash tables are seeded by the caller. */
#ifndef TENSORGC_PICKSTREAM_H
#define TENSORGC_PICKSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "tensorgc/pickscan.h"  /* the result codes are shared */

#ifdef __cplusplus
extern "C" {
#endif

#define TGC_PS_CHUNK (1u << 20)          /* bytes read at a time; also the longest text line */
#define TGC_PS_STR_INTERN (64u << 10)    /* longer strings are boxed at once, not interned */
#define TGC_PS_MAX_STACK (1u << 24)      /* values on the machine's stack */
#define TGC_PS_MAX_MARKS (1u << 16)      /* nested marks */
#define TGC_PS_MAX_DEVICES (1u << 16)
#define TGC_PS_MAX_ROWS 0xFFFFFFF0u      /* trace entries per device */
#define TGC_PS_MAX_STRINGS (1u << 30)
#define TGC_PS_MAX_FRAMES (1u << 24)     /* distinct frames */
#define TGC_PS_MAX_STACKS (1u << 24)     /* distinct stacks */
#define TGC_PS_MAX_STACK_IDS (1u << 28)  /* frame ids held by all distinct stacks */
#define TGC_PS_MAX_EXTRAS (1u << 20)     /* distinct sets of an entry's other fields */

enum {  /* codes past pickscan.h's */
    TGC_PS_LIMIT = 32,      /* more than max_bytes read (the file grew while read): a = max_bytes */
    TGC_PS_TRAILING,        /* a = bytes after STOP */
    TGC_PS_READ,            /* the source failed: its own error stands (errno, an exception) */
    TGC_PS_BUILDER,         /* a builder call failed: its own error stands */
    TGC_PS_CORRUPT,         /* an operation the unpickler refuses; text says which */
    TGC_PS_BOUND,           /* past a bound above; text says which */
    TGC_PS_UNSUPPORTED      /* a layout the streaming loader does not read; text says which */
};

typedef struct {
    int code;               /* TGC_PS_OK, or pickscan's and the codes above */
    uint64_t pos;           /* the offset, as pickscan's (after the opcode for REFUSED) */
    uint64_t a, b, c;       /* as pickscan's */
    uint64_t size;          /* the file's length as known then: for "byte N of M" */
    char text[512];         /* LOOKUP: "module.name"; CORRUPT, BOUND, UNSUPPORTED: why */
} tgc_ps_error;

/* A scalar handed to the builder, or read back from one of its objects (unbox). */
enum {
    TGC_PSS_NONE, TGC_PSS_TRUE, TGC_PSS_FALSE,
    TGC_PSS_INT,            /* i */
    TGC_PSS_UINT,           /* u >= 2**63 */
    TGC_PSS_FLOAT,          /* f */
    TGC_PSS_STR,            /* p, n: UTF-8 (lone surrogates allowed); sid its string id or
                               UINT32_MAX */
    TGC_PSS_BYTES, TGC_PSS_BYTEARRAY,
    TGC_PSS_BIGINT,         /* p, n: little-endian two's complement, beyond int64 and uint64 */
    TGC_PSS_DICT, TGC_PSS_LIST,  /* unbox only: a container, type_name set */
    TGC_PSS_OTHER           /* unbox only: anything else (an int out of range says BIGINT) */
};

typedef struct {
    int kind;
    int64_t i;
    uint64_t u;
    double f;
    const char *p;
    size_t n;
    uint32_t sid;
    const char *type_name;  /* unbox: the object's type's name, for messages (static storage) */
} tgc_ps_scalar;

enum { TGC_PSB_LIST, TGC_PSB_DICT, TGC_PSB_SET, TGC_PSB_TUPLE, TGC_PSB_FROZENSET };
enum { TGC_PSB_APPENDS, TGC_PSB_SETITEMS, TGC_PSB_ADDITEMS };
enum { TGC_PSK_CHEAP, TGC_PSK_UNHASHABLE, TGC_PSK_COSTLY };  /* as dict keys (pickscan's) */

/* The builder: objects are opaque pointers, aligned to 8 bytes (the machine keeps a tag in the
 * low three bits of its memo slots). Calls that make an object return a new reference, NULL on
 * failure; the others 0 or -1. A failure ends the load with TGC_PS_BUILDER, the builder's own
 * error standing. Item arrays are borrowed. */
typedef struct {
    void *ctx;
    void *(*scalar)(void *ctx, const tgc_ps_scalar *s);
    /* a protocol-0 scalar opcode (I L F S V) with its argument, the newline excluded */
    void *(*text)(void *ctx, unsigned op, const char *arg, size_t n);
    /* a container of kind TGC_PSB_* holding items (DICT: n items, key and value alternating) */
    void *(*make)(void *ctx, int kind, void *const *items, size_t n);
    /* APPENDS, SETITEMS (pairs) or ADDITEMS onto target, as the unpickler does */
    int (*extend)(void *ctx, void *target, int op, void *const *items, size_t n);
    void *(*device)(void *ctx, uint32_t dev);   /* what stands for device dev's trace list */
    void *(*frame)(void *ctx, uint32_t id);     /* frame id as a dict (the same object each time) */
    void *(*stack)(void *ctx, uint32_t id);     /* stack id as a list (the same object each time) */
    void (*incref)(void *ctx, void *obj);
    void (*decref)(void *ctx, void *obj);
    int (*classify)(void *ctx, void *obj);      /* TGC_PSK_* */
    /* obj's value into *out; a str's p stays valid until the next unbox call */
    int (*unbox)(void *ctx, void *obj, tgc_ps_scalar *out);
    /* a dict's items in order (*pos starts at 0): 1 with borrowed *key, *value; 0 at the end */
    int (*dict_next)(void *ctx, void *dict, size_t *pos, void **key, void **value);
    /* a list's item i, borrowed: 1, or 0 past its end */
    int (*list_item)(void *ctx, void *list, size_t i, void **item);
    /* obj (a dict: TGC_PSB_DICT, or a list) was read as frame (stack) id: from now on it is
     * what frame(id) (stack(id)) returns, unless one was made already */
    void (*adopt)(void *ctx, int kind, uint32_t id, void *obj);
} tgc_ps_builder;

/* The source: up to n bytes into buf; the count, 0 at the end, -1 on failure (its error). */
typedef long long (*tgc_ps_read_fn)(void *ctx, unsigned char *buf, size_t n);

typedef struct tgc_ps_stream tgc_ps_stream;

/* size: the file's length (checks of declared lengths and messages); max_bytes: the most it may
 * read; seed: for the hash tables. NULL when out of memory. */
tgc_ps_stream *tgc_ps_new(const tgc_ps_builder *b, tgc_ps_read_fn read, void *read_ctx,
                          uint64_t size, uint64_t max_bytes, uint64_t seed);
/* Runs the file to STOP, then reads on to its end (trailing bytes are an error). 0 with
 * *result the top-level object (new reference), or -1 (tgc_ps_last_error says why). */
int tgc_ps_run(tgc_ps_stream *s, void **result);
const tgc_ps_error *tgc_ps_last_error(const tgc_ps_stream *s);
/* Releases everything, the builder objects it holds included. */
void tgc_ps_free(tgc_ps_stream *s);

/* The tables, after a successful run (the builder reads them too while it runs). */
#define TGC_PS_ABSENT UINT32_MAX
typedef struct {
    uint32_t filename, name;  /* string ids, or TGC_PS_ABSENT */
    int line_kind;            /* 0 absent, 1 line is an int64, 2 line holds a uint64's bits */
    int64_t line;
    uint32_t extra;           /* the set of its other keys (tgc_ps_extras_*) */
} tgc_ps_frame;

int tgc_ps_string(const tgc_ps_stream *s, uint32_t sid, const char **p, size_t *n);
uint32_t tgc_ps_nframes(const tgc_ps_stream *s);
int tgc_ps_get_frame(const tgc_ps_stream *s, uint32_t id, tgc_ps_frame *out);
uint32_t tgc_ps_nstacks(const tgc_ps_stream *s);  /* stack 0 is the empty stack */
const uint32_t *tgc_ps_get_stack(const tgc_ps_stream *s, uint32_t id, uint32_t *n);
/* The sets of other fields: set 0 is empty. Item k's key or value as a new builder reference. */
uint32_t tgc_ps_nextras(const tgc_ps_stream *s);
uint32_t tgc_ps_extras_len(const tgc_ps_stream *s, uint32_t id);
void *tgc_ps_extras_item(tgc_ps_stream *s, uint32_t id, uint32_t k, int value);

/* The devices' traces: one element per entry, in list order. */
enum {
    TGC_PS_COL_ACTION,      /* uint8: the action's code (tgc_ps_device_action) */
    TGC_PS_COL_ADDR,        /* uint64 */
    TGC_PS_COL_SIZE,        /* uint64 */
    TGC_PS_COL_TIME,        /* int64, INT64_MIN where absent */
    TGC_PS_COL_STREAM,      /* int64 */
    TGC_PS_COL_DEVFREE,     /* uint64 */
    TGC_PS_COL_STACK,       /* uint32: a stack id */
    TGC_PS_COL_PRESENT,     /* uint8: TGC_PS_P_* */
    TGC_PS_COL_EXTRA,       /* uint32: a set of other fields */
    TGC_PS_NCOLS
};
enum {  /* which fields an entry has (a column's 0 may be absent or 0) */
    TGC_PS_P_ADDR = 1, TGC_PS_P_SIZE = 2, TGC_PS_P_STREAM = 4, TGC_PS_P_TIME = 8,
    TGC_PS_P_DEVFREE = 16, TGC_PS_P_FRAMES = 32, TGC_PS_P_FRAMES_NONE = 64, TGC_PS_P_ACTION = 128
};
uint32_t tgc_ps_ndevices(const tgc_ps_stream *s);
uint64_t tgc_ps_device_len(const tgc_ps_stream *s, uint32_t d);
uint32_t tgc_ps_device_nactions(const tgc_ps_stream *s, uint32_t d);
uint32_t tgc_ps_device_action(const tgc_ps_stream *s, uint32_t d, uint32_t code);  /* a sid */
/* The first faulty entry of device d, in check_snapshot's words ("trace entry 3 of device 0:
 * 'addr' is str, not int"), or NULL. */
const char *tgc_ps_device_error(const tgc_ps_stream *s, uint32_t d);
/* Hands over column col of device d (malloc'd, the caller frees it; *n elements), each column
 * once: the machine keeps no copy, so at most one column is held twice. -1 when out of memory
 * (or taken already). */
int tgc_ps_take_column(tgc_ps_stream *s, uint32_t d, int col, void **data, size_t *n);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_PICKSTREAM_H */
