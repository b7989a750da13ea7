/* report_sig.c: the signature of each group of leaks (contract in report_write.h), the shape of
 * its cycle as a short string that is the same for every instance of that shape, in every
 * collection and every process. report_lists.c puts it into the group's dict;
 * tensorgc/cycles/dedup.py counts repeated leaks by it. Reads the model only, and of Python
 * objects no more than type names and edge labels: no user code. */
#include "cycles.h"
#include "report_write.h"

#define SIG_FNV_BASIS 0xcbf29ce484222325ULL
#define SIG_FNV_PRIME 0x100000001b3ULL

static uint64_t
sig__mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static uint64_t
sig__bytes(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (unsigned char)s[i]) * SIG_FNV_PRIME;
    }
    return h;
}

static int
sig__hex(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* A label's hash. Keys and indices ("[3]", "['step 12']", "(<Foo object at 0x7f...>)") have
 * every run of digits, and every hexadecimal number after "0x", hashed as one '#': list
 * positions, ids and addresses differ from one instance to the next, the shape does not.
 * Attribute, closure and local names are hashed as they are. */
static uint64_t
sig__label(PyObject *label)
{
    Py_ssize_t n = 0;
    const char *s = PyUnicode_AsUTF8AndSize(label, &n);  /* borrowed buffer */
    if (s == NULL) {
        PyErr_Clear();  /* a label that is not valid UTF-8 (lone surrogates): one for all */
        return sig__bytes(SIG_FNV_BASIS, "?", 1);
    }
    uint64_t h = SIG_FNV_BASIS;
    if (n == 0 || (s[0] != '[' && s[0] != '(')) {
        return sig__bytes(h, s, (size_t)n);
    }
    for (Py_ssize_t i = 0; i < n;) {
        if (s[i] == '0' && i + 2 < n && (s[i + 1] == 'x' || s[i + 1] == 'X') &&
            sig__hex(s[i + 2])) {
            i += 2;
            while (i < n && sig__hex(s[i])) {
                i++;
            }
            h = sig__bytes(h, "0x#", 3);
        }
        else if (s[i] >= '0' && s[i] <= '9') {
            while (i < n && s[i] >= '0' && s[i] <= '9') {
                i++;
            }
            h = sig__bytes(h, "#", 1);
        }
        else {
            h = sig__bytes(h, s + i, 1);
            i++;
        }
    }
    return h;
}

/* A type's hash, by its tp_name (a class's __name__, "function", "Tensor"), never its address. */
static uint64_t
sig__type(PyObject *obj)
{
    const char *name = Py_TYPE(obj)->tp_name;
    return sig__bytes(SIG_FNV_BASIS ^ 0x74, name, strlen(name));
}

/* One reference: referrer type, label, referent type; the order matters. */
static uint64_t
sig__edge(uint64_t src, uint64_t label, uint64_t dst)
{
    return sig__mix(sig__mix(src) + 0x9e3779b97f4a7c15ULL * sig__mix(label ^ 0x5bd1e995) + dst);
}

typedef struct {
    uint32_t k;     /* index in m->groups */
    uint64_t h;     /* one reference's hash */
} sig_item;

static int
sig__cmp(const void *a, const void *b)
{
    const sig_item *x = a, *y = b;
    if (x->k != y->k) {
        return x->k < y->k ? -1 : 1;
    }
    return x->h < y->h ? -1 : x->h > y->h;
}

int
tgc_report_signatures(const tgc_report_model *m, uint64_t *sig)
{
    uint32_t *rep = NULL;   /* per analysis group: the index k of the group it represents */
    sig_item *items = NULL;
    size_t n = 0, cap = m->nedges;
    for (uint32_t k = 0; k < m->ngroups; k++) {
        sig[k] = 0;
    }
    if (m->ngroups == 0) {
        return 0;
    }
    rep = malloc((m->a.ngroups ? m->a.ngroups : 1) * sizeof(uint32_t));
    if (rep == NULL) {
        goto nomem;
    }
    for (uint32_t g = 0; g < m->a.ngroups; g++) {
        rep[g] = TGC_NONE;
    }
    int undrawn = 0;
    for (uint32_t k = 0; k < m->ngroups; k++) {
        rep[m->groups[k].group] = k;
        undrawn |= !m->groups[k].drawn;
    }
    if (undrawn) {
        for (uint32_t v = 0; v < m->n; v++) {
            uint32_t g = m->a.group[v];
            if (g != TGC_NONE && rep[g] != TGC_NONE && !m->groups[rep[g]].drawn) {
                cap += m->g.out_off[v + 1] - m->g.out_off[v];
            }
        }
    }
    items = malloc((cap ? cap : 1) * sizeof(sig_item));
    if (items == NULL) {
        goto nomem;
    }
    /* A drawn group: the references the page draws between its representative's objects, with
     * their labels (containers folded into their owner, as drawn). */
    for (size_t e = 0; e < m->nedges; e++) {
        const tgc_drawn_edge *de = &m->edges[e];
        uint32_t g = m->a.group[de->src];
        if (g == TGC_NONE || rep[g] == TGC_NONE || m->a.group[de->dst] != g) {
            continue;
        }
        items[n].k = rep[g];
        items[n].h = sig__edge(sig__type(m->items[de->src]), sig__label(de->label),
                               sig__type(m->items[de->dst]));
        n++;
    }
    /* A group not drawn has no labels: its references between the representative's objects,
     * each labelled "?". */
    if (undrawn) {
        uint64_t unknown = sig__bytes(SIG_FNV_BASIS, "?", 1);
        for (uint32_t v = 0; v < m->n; v++) {
            uint32_t g = m->a.group[v];
            if (g == TGC_NONE || rep[g] == TGC_NONE || m->groups[rep[g]].drawn) {
                continue;
            }
            uint64_t tv = sig__type(m->items[v]);
            for (uint32_t e = m->g.out_off[v]; e < m->g.out_off[v + 1]; e++) {
                uint32_t w = m->g.out_dst[e];
                if (m->a.group[w] != g) {
                    continue;
                }
                items[n].k = rep[g];
                items[n].h = sig__edge(tv, unknown, sig__type(m->items[w]));
                n++;
            }
        }
    }
    /* Each group's set of distinct references, folded in sorted order: a ring of ten objects and
     * a ring of ten thousand of the same kind share a signature, as do two instances discovered
     * in different orders. */
    qsort(items, n, sizeof(sig_item), sig__cmp);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && items[i].k == items[i - 1].k && items[i].h == items[i - 1].h) {
            continue;
        }
        sig[items[i].k] = sig__mix(sig[items[i].k] ^ items[i].h) + items[i].h;
    }
    for (uint32_t k = 0; k < m->ngroups; k++) {
        if (sig[k] == 0) {  /* no reference inside the group was seen (not expected) */
            sig[k] = sig__mix(0x6e6f6e65ULL);
        }
    }
    free(rep);
    free(items);
    return 0;
nomem:
    free(rep);
    free(items);
    PyErr_NoMemory();
    return -1;
}

PyObject *
tgc_report_signature_str(uint64_t sig)
{
    char s[17];
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) {
        s[i] = digits[sig & 0xf];
        sig >>= 4;
    }
    s[16] = '\0';
    return PyUnicode_FromStringAndSize(s, 16);
}
