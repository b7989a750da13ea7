/* pickscan.c: the pickle pre-scan of snapshot files (see pickscan.h). A loop over opcodes with
 * a byte-per-object stack, a mark stack and a byte-per-index memo. Plain C. */
#include <stdlib.h>
#include <string.h>

#include "tensorgc/pickscan.h"

enum { CHEAP = 0, UNHASHABLE = 1, COSTLY = 2, UNSET = 0xFF };
#define NO_FRAME SIZE_MAX

typedef struct {
    uint8_t *v;
    size_t n, cap;
} ps_bytes;

typedef struct {
    size_t *v;
    size_t n, cap;
} ps_marks;

/* A growable array of *cap elements of `size` bytes, full: the array grown (doubling, from
 * `first`) with *cap updated, or NULL when out of memory (v and *cap left as they were). */
static void *
ps_grow(void *v, size_t *cap, size_t size, size_t first)
{
    size_t c = *cap ? *cap * 2 : first;
    void *p = realloc(v, c * size);
    if (p != NULL) {
        *cap = c;
    }
    return p;
}

static int
ps_push(ps_bytes *s, uint8_t k)
{
    if (s->n == s->cap) {
        uint8_t *p = ps_grow(s->v, &s->cap, 1, 256);
        if (p == NULL) {
            return -1;
        }
        s->v = p;
    }
    s->v[s->n++] = k;
    return 0;
}

static int
ps_mark(ps_marks *m, size_t at)
{
    if (m->n == m->cap) {
        size_t *p = ps_grow(m->v, &m->cap, sizeof(size_t), 64);
        if (p == NULL) {
            return -1;
        }
        m->v = p;
    }
    m->v[m->n++] = at;
    return 0;
}

static uint64_t
ps_le(const unsigned char *p, int width)
{
    uint64_t x = 0;
    for (int i = width - 1; i >= 0; i--) {
        x = (x << 8) | p[i];
    }
    return x;
}

static int
ps_refused(unsigned op)
{
    switch (op) {
    case 'R': case 'b': case 'o': case 0x81: case 0x92: case 'P': case 'Q':
    case 0x82: case 0x83: case 0x84: case 0x97: case 0x98:
        return 1;
    default:
        return 0;
    }
}

#define FAIL(code_, x_, y_, z_) do { out->code = (code_); out->a = (x_); out->b = (y_); \
                                     out->c = (z_); goto done; } while (0)
/* k more bytes of the opcode: inside a frame they must be in it (checked first: a frame lies
 * within the data), else in the data */
#define NEED(k) do { if (frame_end != NO_FRAME && (size_t)(k) > frame_end - pos) { \
                         FAIL(TGC_PS_FRAME_CROSSED, frame_end, 0, 0); } \
                     if ((size_t)(k) > n - pos) { FAIL(TGC_PS_TRUNCATED, 0, 0, 0); } } while (0)
/* The values above the top mark: the unpickler pops none below it (its fence). */
#define ABOVE() (st.n - (mk.n ? mk.v[mk.n - 1] : 0))
#define HAVE(k) do { if (ABOVE() < (size_t)(k)) { FAIL(TGC_PS_UNDERFLOW, 0, 0, 0); } } while (0)
#define POPN(k) do { HAVE(k); st.n -= (k); } while (0)
#define PUSH(k) do { if (ps_push(&st, (k)) < 0) { FAIL(TGC_PS_NOMEM, 0, 0, 0); } } while (0)
#define POPMARK(m) do { if (mk.n == 0 || mk.v[mk.n - 1] > st.n) { \
                            FAIL(TGC_PS_UNDERFLOW, 0, 0, 0); } (m) = mk.v[--mk.n]; } while (0)

void
tgc_pickle_scan(const unsigned char *data, size_t n, tgc_ps_result *out)
{
    ps_bytes st = {0};
    ps_marks mk = {0};
    uint8_t *memo = malloc(n + 2);  /* indices never exceed the bytes read (checked below) */
    size_t memo_count = 0, pos = 0;  /* memo_count: the slots set, MEMOIZE's index (CPython's) */
    size_t frame_end = NO_FRAME;  /* the end of the frame the scan is in */
    memset(out, 0, sizeof(*out));
    if (memo == NULL) {
        out->code = TGC_PS_NOMEM;
        return;
    }
    memset(memo, UNSET, n + 2);
    for (;;) {
        out->pos = pos;
        if (pos == frame_end) {
            frame_end = NO_FRAME;
        }
        NEED(1);
        unsigned op = data[pos++];
        out->pos = pos;
        uint64_t k, idx;
        size_t m;
        switch (op) {
        case 0x68:  /* BINGET */
        case 0x6A:  /* LONG_BINGET */
            NEED(op == 0x68 ? 1 : 4);
            idx = ps_le(data + pos, op == 0x68 ? 1 : 4);
            pos += op == 0x68 ? 1 : 4;
            if (idx > n || memo[idx] == UNSET) {
                FAIL(TGC_PS_MEMO_UNSET, idx, 0, 0);
            }
            PUSH(memo[idx]);
            break;
        case 0x94:  /* MEMOIZE */
            if (memo_count > n) {
                FAIL(TGC_PS_MEMO_PAST, memo_count, pos, 0);
            }
            HAVE(1);
            idx = memo_count;  /* the count of slots set: not past the ones PUT set */
            if (memo[idx] == UNSET) {
                memo_count++;
            }
            memo[idx] = st.v[st.n - 1];
            break;
        case 0x71:  /* BINPUT */
        case 0x72:  /* LONG_BINPUT */
            NEED(op == 0x71 ? 1 : 4);
            idx = ps_le(data + pos, op == 0x71 ? 1 : 4);
            pos += op == 0x71 ? 1 : 4;
            if (idx > pos) {  /* the unpickler sizes its memo to twice the largest index */
                out->pos = pos;
                FAIL(TGC_PS_MEMO_PAST, idx, pos, 0);
            }
            HAVE(1);
            if (memo[idx] == UNSET) {
                memo_count++;
            }
            memo[idx] = st.v[st.n - 1];
            break;
        case 0x8C:  /* SHORT_BINUNICODE */
        case 0x43:  /* SHORT_BINBYTES */
        case 0x55:  /* SHORT_BINSTRING */
            NEED(1);
            k = data[pos];
            pos += 1;
            NEED(k);
            pos += k;
            PUSH(CHEAP);
            break;
        case 0x4B:  /* BININT1 */
        case 0x4D:  /* BININT2 */
        case 0x4A:  /* BININT */
        case 0x47:  /* BINFLOAT */
            k = op == 0x4B ? 1 : op == 0x4D ? 2 : op == 0x4A ? 4 : 8;
            NEED(k);
            pos += k;
            PUSH(CHEAP);
            break;
        case 0x4E: case 0x88: case 0x89:  /* NONE, NEWTRUE, NEWFALSE */
            PUSH(CHEAP);
            break;
        case 0x28:  /* MARK */
            if (ps_mark(&mk, st.n) < 0) {
                FAIL(TGC_PS_NOMEM, 0, 0, 0);
            }
            break;
        case 0x7D: case 0x5D: case 0x8F:  /* EMPTY_DICT, EMPTY_LIST, EMPTY_SET */
            PUSH(UNHASHABLE);
            break;
        case 0x29:  /* EMPTY_TUPLE */
            PUSH(COSTLY);
            break;
        case 0x75:  /* SETITEMS */
        case 0x64:  /* DICT */
            POPMARK(m);
            if (op == 0x75 && m <= st.n - ABOVE()) {  /* the dict must be above the next mark */
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            for (size_t i = m; i < st.n; i += 2) {
                if (st.v[i] != CHEAP) {
                    FAIL(TGC_PS_BAD_KEY, 0, 0, 0);
                }
            }
            st.n = m;
            if (op == 0x64) {
                PUSH(UNHASHABLE);
            }
            break;
        case 0x73:  /* SETITEM */
            HAVE(3);
            if (st.v[st.n - 2] != CHEAP) {
                FAIL(TGC_PS_BAD_KEY, 0, 0, 0);
            }
            st.n -= 2;
            break;
        case 0x65:  /* APPENDS */
        case 0x31:  /* POP_MARK */
            POPMARK(m);
            if (op == 0x65 && m <= st.n - ABOVE()) {  /* the list must be above the next mark */
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            st.n = m;
            break;
        case 0x61:  /* APPEND: an item onto the list below it */
            HAVE(2);
            st.n -= 1;
            break;
        case 0x74:  /* TUPLE */
        case 0x6C:  /* LIST */
            POPMARK(m);
            st.n = m;
            PUSH(op == 0x74 ? COSTLY : UNHASHABLE);
            break;
        case 0x85: case 0x86: case 0x87:  /* TUPLE1..3 */
            POPN(op - 0x84);
            PUSH(COSTLY);
            break;
        case 0x90:  /* ADDITEMS */
        case 0x91:  /* FROZENSET */
            POPMARK(m);
            if (op == 0x90 && m <= st.n - ABOVE()) {  /* the set must be above the next mark */
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            for (size_t i = m; i < st.n; i++) {
                if (st.v[i] != CHEAP) {
                    FAIL(TGC_PS_BAD_MEMBER, 0, 0, 0);
                }
            }
            st.n = m;
            if (op == 0x91) {
                PUSH(COSTLY);
            }
            break;
        case 0x8A:  /* LONG1 */
            NEED(1);
            k = data[pos];
            pos += 1;
            NEED(k);
            pos += k;
            PUSH(k <= 8 ? CHEAP : COSTLY);
            break;
        case 'X': case 'B': case 'T': case 0x8B:        /* 4-byte lengths */
        case 0x8D: case 0x8E: case 0x96: case 0x95: {   /* 8-byte lengths, FRAME */
            int width = (op == 'X' || op == 'B' || op == 'T' || op == 0x8B) ? 4 : 8;
            if (op == 0x95 && frame_end != NO_FRAME) {
                FAIL(TGC_PS_FRAME_NESTED, frame_end - (pos - 1), 0, 0);
            }
            NEED(width);
            k = ps_le(data + pos, width);
            pos += width;
            int negative = (op == 'T' || op == 0x8B) && (k & 0x80000000u);
            if (negative || k > n - pos) {
                out->pos = pos;
                FAIL(TGC_PS_DECLARES, op, negative ? (uint64_t)-1 : k, n - pos);
            }
            if (op == 0x95) {  /* FRAME: only a length; the opcodes inside are scanned */
                frame_end = pos + k;
                break;
            }
            if (frame_end != NO_FRAME && k > frame_end - pos) {
                FAIL(TGC_PS_FRAME_CROSSED, frame_end, 0, 0);
            }
            pos += k;
            PUSH(op == 0x96 ? UNHASHABLE : op == 0x8B ? (k > 8 ? COSTLY : CHEAP) : CHEAP);
            break;
        }
        case 0x80:  /* PROTO */
            NEED(1);
            pos += 1;
            break;
        case 0x2E:  /* STOP: the result alone on the stack (pickle.dump never leaves more) */
            if (mk.n > 0) {
                FAIL(TGC_PS_STOP_MARK, mk.n, 0, 0);
            }
            if (st.n == 0) {
                FAIL(TGC_PS_UNDERFLOW, 0, 0, 0);
            }
            if (st.n > 1) {
                FAIL(TGC_PS_STOP_STACK, st.n - 1, 0, 0);
            }
            out->code = TGC_PS_OK;
            out->pos = pos;
            goto done;
        case 0x30:  /* POP: the item, or the mark when nothing is above it */
            if (mk.n > 0 && mk.v[mk.n - 1] == st.n) {
                mk.n--;
            }
            else {
                POPN(1);
            }
            break;
        case 0x32:  /* DUP */
            HAVE(1);
            PUSH(st.v[st.n - 1]);
            break;
        case 'I': case 'L': case 'F': case 'S': case 'V': case 'g': case 'p': {
            /* protocol 0: an argument up to the newline, which a frame must hold */
            size_t limit = frame_end != NO_FRAME ? frame_end : n;
            const unsigned char *nl = memchr(data + pos, '\n', limit - pos);
            if (nl == NULL) {
                if (frame_end != NO_FRAME) {
                    FAIL(TGC_PS_FRAME_CROSSED, frame_end, 0, 0);
                }
                FAIL(TGC_PS_TRUNCATED, 0, 0, 0);
            }
            size_t len = (size_t)(nl - (data + pos)), start = pos;
            pos += len + 1;
            if (op == 'g' || op == 'p') {
                if (len == 0 || len > 19) {
                    FAIL(TGC_PS_MEMO_NAN, 0, 0, 0);
                }
                idx = 0;
                for (size_t i = 0; i < len; i++) {
                    if (data[start + i] < '0' || data[start + i] > '9') {
                        FAIL(TGC_PS_MEMO_NAN, 0, 0, 0);
                    }
                    idx = idx * 10 + (data[start + i] - '0');
                }
                if (op == 'g') {
                    if (idx > n || memo[idx] == UNSET) {
                        FAIL(TGC_PS_MEMO_UNSET, idx, 0, 0);
                    }
                    PUSH(memo[idx]);
                }
                else {
                    out->pos = pos;
                    if (idx > pos) {
                        FAIL(TGC_PS_MEMO_PAST, idx, pos, 0);
                    }
                    HAVE(1);
                    if (memo[idx] == UNSET) {
                        memo_count++;
                    }
                    memo[idx] = st.v[st.n - 1];
                }
            }
            else {
                PUSH((op == 'I' || op == 'L') && len > 18 ? COSTLY : CHEAP);
            }
            break;
        }
        case 'c': case 0x93: case 'i':  /* GLOBAL, STACK_GLOBAL, INST */
            out->code = TGC_PS_LOOKUP;
            goto done;
        default:
            if (ps_refused(op)) {
                FAIL(TGC_PS_REFUSED, op, 0, 0);
            }
            FAIL(TGC_PS_UNKNOWN, op, 0, 0);
        }
    }
done:
    free(memo);
    free(st.v);
    free(mk.v);
}
