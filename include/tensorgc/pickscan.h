/* pickscan.h: the contract of tensorgc's pickle pre-scan (allocator/pickscan.c), plain C.
 *
 * Walks a pickle's opcodes without building anything, before the C unpickler runs on a snapshot
 * file (untrusted input), and refuses what would make the unpickler misbehave: declared lengths
 * past the end of the data (it allocates them first), memo indices past the bytes read (it sizes
 * its memo by them), dict keys and set members that are not plain scalars (hashing a tuple is
 * recursive and uncached: nested or memo-repeated tuples crash or hang it), and the opcodes that
 * call or fetch something (REDUCE, BUILD, OBJ, NEWOBJ*, persistent ids, extension codes,
 * out-of-band buffers). On the scan's stack an object is a cheap scalar, an unhashable
 * container, or costly to hash (tuple, frozenset, long int). O(n) time, n bytes of memory.
 *
 * It also refuses what is malformed though one unpickler or another reads it: an opcode (its
 * arguments, a text line) that crosses the end of its FRAME, a FRAME inside another, and a STOP
 * with a MARK still open or more than the result on the stack. CPython's unpickler reading a
 * file drops the rest of a frame when an opcode crosses its end and reads on from the file, so
 * such a file means something else to each reader; the streaming loader (pickstream.h) refuses
 * the same, so that both loaders refuse the same files. */
#ifndef TENSORGC_PICKSCAN_H
#define TENSORGC_PICKSCAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    TGC_PS_OK = 0,          /* end: the offset just past STOP */
    TGC_PS_LOOKUP,          /* GLOBAL / STACK_GLOBAL / INST at pos - 1: the unpickler's
                               find_class refuses it by name; everything before was scanned */
    TGC_PS_TRUNCATED,       /* ends before STOP */
    TGC_PS_UNDERFLOW,       /* stack underflow, or a mark missing */
    TGC_PS_BAD_KEY,         /* a dict key that is not a plain scalar */
    TGC_PS_BAD_MEMBER,      /* a set member that is not a plain scalar */
    TGC_PS_MEMO_PAST,       /* a = index, b = bytes read */
    TGC_PS_MEMO_UNSET,      /* a = index never stored */
    TGC_PS_MEMO_NAN,        /* a text memo index that is not a number */
    TGC_PS_DECLARES,        /* a = opcode, b = declared length, c = bytes left */
    TGC_PS_REFUSED,         /* a = opcode */
    TGC_PS_UNKNOWN,         /* a = opcode */
    TGC_PS_NOMEM,
    TGC_PS_FRAME_CROSSED,   /* an opcode crosses the end of its frame: a = where the frame ends */
    TGC_PS_FRAME_NESTED,    /* a FRAME inside another: a = bytes of the outer one left */
    TGC_PS_STOP_MARK,       /* STOP with a MARK open: a = marks open */
    TGC_PS_STOP_STACK       /* STOP with more than the result on the stack: a = values under it */
};

typedef struct {
    int code;
    uint64_t pos;           /* where the scan stood (for OK: the end offset) */
    uint64_t a, b, c;
} tgc_ps_result;

void tgc_pickle_scan(const unsigned char *data, size_t n, tgc_ps_result *out);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_PICKSCAN_H */
