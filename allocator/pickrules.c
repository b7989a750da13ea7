/* pickrules.c: the restricted pickle reader's opcode table and its escaping of the names a
 * GLOBAL would fetch (the rest of its rules are inline in pickrules.h). Plain C. */
#include <stdio.h>
#include <string.h>

#include "pickrules.h"

/* Every opcode of pickle's protocols 0 to 5; any other byte is TGC_PS_OP_UNKNOWN (0). */
const uint8_t tgc_ps__opclass[256] = {
    /* read: the stack, marks and memo, scalars, containers, frames */
    [0x80] = TGC_PS_OP_READ,  /* PROTO */
    [0x95] = TGC_PS_OP_READ,  /* FRAME */
    ['.'] = TGC_PS_OP_READ,  /* STOP */
    ['('] = TGC_PS_OP_READ,  /* MARK */
    ['0'] = TGC_PS_OP_READ,  /* POP */
    ['1'] = TGC_PS_OP_READ,  /* POP_MARK */
    ['2'] = TGC_PS_OP_READ,  /* DUP */
    ['N'] = TGC_PS_OP_READ,  /* NONE */
    [0x88] = TGC_PS_OP_READ,  /* NEWTRUE */
    [0x89] = TGC_PS_OP_READ,  /* NEWFALSE */
    ['K'] = TGC_PS_OP_READ,  /* BININT1 */
    ['M'] = TGC_PS_OP_READ,  /* BININT2 */
    ['J'] = TGC_PS_OP_READ,  /* BININT */
    ['G'] = TGC_PS_OP_READ,  /* BINFLOAT */
    [0x8A] = TGC_PS_OP_READ,  /* LONG1 */
    [0x8B] = TGC_PS_OP_READ,  /* LONG4 */
    [0x8C] = TGC_PS_OP_READ,  /* SHORT_BINUNICODE */
    ['X'] = TGC_PS_OP_READ,  /* BINUNICODE */
    [0x8D] = TGC_PS_OP_READ,  /* BINUNICODE8 */
    ['C'] = TGC_PS_OP_READ,  /* SHORT_BINBYTES */
    ['B'] = TGC_PS_OP_READ,  /* BINBYTES */
    [0x8E] = TGC_PS_OP_READ,  /* BINBYTES8 */
    ['U'] = TGC_PS_OP_READ,  /* SHORT_BINSTRING */
    ['T'] = TGC_PS_OP_READ,  /* BINSTRING */
    [0x96] = TGC_PS_OP_READ,  /* BYTEARRAY8 */
    ['}'] = TGC_PS_OP_READ,  /* EMPTY_DICT */
    [']'] = TGC_PS_OP_READ,  /* EMPTY_LIST */
    [0x8F] = TGC_PS_OP_READ,  /* EMPTY_SET */
    [')'] = TGC_PS_OP_READ,  /* EMPTY_TUPLE */
    [0x85] = TGC_PS_OP_READ,  /* TUPLE1 */
    [0x86] = TGC_PS_OP_READ,  /* TUPLE2 */
    [0x87] = TGC_PS_OP_READ,  /* TUPLE3 */
    ['t'] = TGC_PS_OP_READ,  /* TUPLE */
    ['l'] = TGC_PS_OP_READ,  /* LIST */
    ['d'] = TGC_PS_OP_READ,  /* DICT */
    [0x91] = TGC_PS_OP_READ,  /* FROZENSET */
    ['u'] = TGC_PS_OP_READ,  /* SETITEMS */
    ['s'] = TGC_PS_OP_READ,  /* SETITEM */
    ['e'] = TGC_PS_OP_READ,  /* APPENDS */
    ['a'] = TGC_PS_OP_READ,  /* APPEND */
    [0x90] = TGC_PS_OP_READ,  /* ADDITEMS */
    ['h'] = TGC_PS_OP_READ,  /* BINGET */
    ['j'] = TGC_PS_OP_READ,  /* LONG_BINGET */
    [0x94] = TGC_PS_OP_READ,  /* MEMOIZE */
    ['q'] = TGC_PS_OP_READ,  /* BINPUT */
    ['r'] = TGC_PS_OP_READ,  /* LONG_BINPUT */
    ['g'] = TGC_PS_OP_READ,  /* GET */
    ['p'] = TGC_PS_OP_READ,  /* PUT */
    ['I'] = TGC_PS_OP_READ,  /* INT */
    ['L'] = TGC_PS_OP_READ,  /* LONG */
    ['F'] = TGC_PS_OP_READ,  /* FLOAT */
    ['S'] = TGC_PS_OP_READ,  /* STRING */
    ['V'] = TGC_PS_OP_READ,  /* UNICODE */
    /* refused by the names they would fetch */
    ['c'] = TGC_PS_OP_LOOKUP,  /* GLOBAL */
    [0x93] = TGC_PS_OP_LOOKUP,  /* STACK_GLOBAL */
    ['i'] = TGC_PS_OP_LOOKUP,  /* INST */
    /* refused: they call or fetch something */
    ['R'] = TGC_PS_OP_REFUSED,  /* REDUCE */
    ['b'] = TGC_PS_OP_REFUSED,  /* BUILD */
    ['o'] = TGC_PS_OP_REFUSED,  /* OBJ */
    [0x81] = TGC_PS_OP_REFUSED,  /* NEWOBJ */
    [0x92] = TGC_PS_OP_REFUSED,  /* NEWOBJ_EX */
    ['P'] = TGC_PS_OP_REFUSED,  /* PERSID */
    ['Q'] = TGC_PS_OP_REFUSED,  /* BINPERSID */
    [0x82] = TGC_PS_OP_REFUSED,  /* EXT1 */
    [0x83] = TGC_PS_OP_REFUSED,  /* EXT2 */
    [0x84] = TGC_PS_OP_REFUSED,  /* EXT4 */
    [0x97] = TGC_PS_OP_REFUSED,  /* NEXT_BUFFER */
    [0x98] = TGC_PS_OP_REFUSED,  /* READONLY_BUFFER */
};

void
tgc_ps__escape_name(char out[TGC_PS_NAME_CAP], const unsigned char *p, size_t n)
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
        if (used + len > TGC_PS_NAME_LIMIT) {
            memcpy(out + used, "...", 3);
            used += 3;
            break;
        }
        memcpy(out + used, piece, len);
        used += len;
    }
    out[used] = 0;
}
