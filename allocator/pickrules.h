/* pickrules.h: the rules of tensorgc's restricted pickle reader, one set for its two front ends:
 * pickscan.c (the pre-scan of a whole snapshot file before CPython's unpickler) and the
 * streaming machine (pickstream_machine.c). Private to allocator/.
 *
 * What is read (the opcode table), how the stack and marks may be used (nothing popped from
 * below the top MARK, a batch's container above the next mark, the result alone at STOP), the
 * FRAME rules (none inside another; a declared length within the data), the memo's (MEMOIZE and
 * PUT within the bytes read, a text index of digits) and how a GLOBAL's names reach a message.
 * A rule fills a tgc_ps_result's code and numbers (pickscan.h says what each code carries;
 * TGC_PS_OK when the rule holds) and returns the code; the front end records where. So both
 * readers refuse the same files for the same reasons (tests/test_snapshot_differential.py and
 * tests/c/test_pickstream.c hold them to it). The checks are static inline: the streaming
 * machine runs them on every opcode. Cross-file names are tgc_ps__name, as in
 * pickstream_int.h. */
#ifndef TENSORGC_PICKRULES_H
#define TENSORGC_PICKRULES_H

#include <stddef.h>
#include <stdint.h>

#include "tensorgc/pickscan.h"

/* What the reader does with each opcode byte: reads it; refuses it by the names it would fetch
 * (GLOBAL, STACK_GLOBAL, INST: TGC_PS_LOOKUP); refuses it for it calls or fetches something
 * (REDUCE, BUILD, OBJ, NEWOBJ*, persistent ids, extension codes, out-of-band buffers:
 * TGC_PS_REFUSED); or knows no such opcode (TGC_PS_UNKNOWN). Each front end has a case for
 * every opcode read or looked up; tests/c/test_pickstream.c holds both to this table. */
enum { TGC_PS_OP_UNKNOWN, TGC_PS_OP_READ, TGC_PS_OP_LOOKUP, TGC_PS_OP_REFUSED };
extern const uint8_t tgc_ps__opclass[256];

/* A rule's verdict in r (pos is the front end's to set), returned as its code. */
static inline int
tgc_ps__verdict(tgc_ps_result *r, int code, uint64_t a, uint64_t b, uint64_t c)
{
    r->code = code;
    r->pos = 0;
    r->a = a;
    r->b = b;
    r->c = c;
    return code;
}

/* A front end's answer to an opcode it has no case for. */
static inline int
tgc_ps__rule_other_op(unsigned op, tgc_ps_result *r)
{
    int refused = tgc_ps__opclass[op & 0xFF] == TGC_PS_OP_REFUSED;
    return tgc_ps__verdict(r, refused ? TGC_PS_REFUSED : TGC_PS_UNKNOWN, op, 0, 0);
}

/* An opcode taking k values: they must lie above the top mark (`above` of them do), for the
 * unpickler pops nothing from below it. */
static inline int
tgc_ps__rule_take(size_t above, size_t k, tgc_ps_result *r)
{
    return tgc_ps__verdict(r, above < k ? TGC_PS_UNDERFLOW : TGC_PS_OK, 0, 0, 0);
}

/* The top mark popped (TUPLE, LIST, DICT, FROZENSET, SETITEMS, APPENDS, ADDITEMS, POP_MARK): one
 * must be open, at most at the stack's height n. */
static inline int
tgc_ps__rule_popmark(const size_t *marks, size_t nmarks, size_t n, tgc_ps_result *r)
{
    int bad = nmarks == 0 || marks[nmarks - 1] > n;
    return tgc_ps__verdict(r, bad ? TGC_PS_UNDERFLOW : TGC_PS_OK, 0, 0, 0);
}

/* A batch from mark m (SETITEMS, APPENDS, ADDITEMS) onto the container below it: the container
 * must lie above the next mark, `fence` (0 without one). */
static inline int
tgc_ps__rule_batch(size_t m, size_t fence, tgc_ps_result *r)
{
    return tgc_ps__verdict(r, m <= fence ? TGC_PS_UNDERFLOW : TGC_PS_OK, 0, 0, 0);
}

/* STOP with nmarks marks open and n values on the stack: the result alone (pickle.dump never
 * leaves more, and unpicklers differ on what they do with the rest). */
static inline int
tgc_ps__rule_stop(size_t nmarks, size_t n, tgc_ps_result *r)
{
    if (nmarks > 0) {
        return tgc_ps__verdict(r, TGC_PS_STOP_MARK, nmarks, 0, 0);
    }
    if (n == 0) {
        return tgc_ps__verdict(r, TGC_PS_UNDERFLOW, 0, 0, 0);
    }
    return tgc_ps__verdict(r, n > 1 ? TGC_PS_STOP_STACK : TGC_PS_OK, n > 1 ? n - 1 : 0, 0, 0);
}

/* A FRAME whose opcode byte is at op_pos, read while in_frame: no FRAME inside another (an
 * unpickler reading a file and one reading bytes would see different opcodes). a: what is left
 * of the outer one. */
static inline int
tgc_ps__rule_frame(int in_frame, uint64_t frame_end, uint64_t op_pos, tgc_ps_result *r)
{
    if (in_frame) {
        return tgc_ps__verdict(r, TGC_PS_FRAME_NESTED, frame_end - op_pos, 0, 0);
    }
    return tgc_ps__verdict(r, TGC_PS_OK, 0, 0, 0);
}

/* A length k that opcode op declares (FRAME, strings, bytes, LONG4), `left` bytes of the data
 * after it: within the data, for the unpickler allocates it before reading; BINSTRING's and
 * LONG4's are signed, and a negative one is refused. */
static inline int
tgc_ps__rule_declared(unsigned op, uint64_t k, uint64_t left, tgc_ps_result *r)
{
    int negative = (op == 'T' || op == 0x8B) && (k & 0x80000000u);
    if (negative || k > left) {
        return tgc_ps__verdict(r, TGC_PS_DECLARES, op, negative ? UINT64_MAX : k, left);
    }
    return tgc_ps__verdict(r, TGC_PS_OK, 0, 0, 0);
}

/* MEMOIZE stores at the count of slots set (CPython's len(memo)), which must not pass the data's
 * size; read_at: the bytes read. */
static inline int
tgc_ps__rule_memoize(uint64_t count, uint64_t size, uint64_t read_at, tgc_ps_result *r)
{
    if (count > size) {
        return tgc_ps__verdict(r, TGC_PS_MEMO_PAST, count, read_at, 0);
    }
    return tgc_ps__verdict(r, TGC_PS_OK, 0, 0, 0);
}

/* PUT, BINPUT, LONG_BINPUT at idx after read_at bytes: the unpickler sizes its memo by the
 * index, so none may pass the bytes read. */
static inline int
tgc_ps__rule_put(uint64_t idx, uint64_t read_at, tgc_ps_result *r)
{
    if (idx > read_at) {
        return tgc_ps__verdict(r, TGC_PS_MEMO_PAST, idx, read_at, 0);
    }
    return tgc_ps__verdict(r, TGC_PS_OK, 0, 0, 0);
}

/* GET's and PUT's index: 1 to 19 decimal digits. */
static inline int
tgc_ps__rule_text_index(const unsigned char *p, size_t len, uint64_t *idx, tgc_ps_result *r)
{
    *idx = 0;
    if (len == 0 || len > 19) {
        return tgc_ps__verdict(r, TGC_PS_MEMO_NAN, 0, 0, 0);
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return tgc_ps__verdict(r, TGC_PS_MEMO_NAN, 0, 0, 0);
        }
        *idx = *idx * 10 + (uint64_t)(p[i] - '0');
    }
    return tgc_ps__verdict(r, TGC_PS_OK, 0, 0, 0);
}

/* A name of GLOBAL, INST or STACK_GLOBAL for a message (TGC_PS_LOOKUP's text): printable ASCII
 * kept, a backslash doubled, any other code point escaped as \xNN, \uNNNN or \UNNNNNNNN; cut
 * with "..." where the next piece would pass TGC_PS_NAME_LIMIT characters (snapshot._printable
 * writes the same from a str). p is UTF-8, lone surrogates allowed; a stray byte (never passed)
 * would read as its own code point. */
#define TGC_PS_NAME_LIMIT 200
#define TGC_PS_NAME_CAP (TGC_PS_NAME_LIMIT + 4)
void tgc_ps__escape_name(char out[TGC_PS_NAME_CAP], const unsigned char *p, size_t n);

#endif /* TENSORGC_PICKRULES_H */
