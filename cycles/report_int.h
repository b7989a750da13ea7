/* report_int.h: what the files of a report share (report_build.c, report_tensors.c,
 * report_text.c, report_dot.c, report_page.c): the bounds that keep a report small whatever the
 * garbage, the builder that carries one report's analysis from the build to the drawing of its
 * DOT, and the functions the files call in each other. Private to them; the report's contract
 * for the rest of cycles/ is report.h. Python.h and cycles.h come first. */
#ifndef TGC_REPORT_INT_H
#define TGC_REPORT_INT_H

#define TGC_DRAW_BUDGET 300     /* object nodes drawn per report, summary nodes aside */
#define TGC_DRAW_GROUPS 12      /* distinct leak shapes drawn; the rest are listed only */
#define TGC_STACK_LINES 6       /* frames shown on a tensor node */
/* What keeps a picture's layout quick, whatever the garbage looks like (the render worker's
 * deadline is the backstop, renderer.h). Graphviz's time grows with edges and crossings more
 * than with nodes: a star of 600 edges in one cluster ran for minutes. */
#define TGC_DRAW_SMALL 40       /* a group this small is drawn whole, classes and chains too */
#define TGC_CHAIN_KEEP 4        /* a long chain keeps this many nodes at each end */
#define TGC_DRAW_EDGES 450      /* references drawn per report, at most (build__emit_all) */
#define TGC_DRAW_BIG 200        /* edges (or nodes) from which the layout's effort is limited */
#define TGC_DRAW_STUBS 16       /* dashed links per group and direction to its "more" node */
/* What bounds the text and the page, whatever the garbage (each string in them is cut too). */
#define TGC_TEXT_GROUPS 40      /* leak shapes spelled out in the text; the rest summed up */
#define TGC_TEXT_PART 600       /* bytes of a shape's cycle or fix in the text */
#define TGC_TEXT_MAX 65536      /* bytes of the whole text */
#define TGC_TABLE_ROWS 200      /* leak shapes in the page's table */
#define TGC_PAGE_MAX (5u << 20) /* bytes of the page: a larger drawing is left out */

/* What a report needs of one tensor, in C form plus the dict that .tensors exposes. */
typedef struct {
    PyObject *info;        /* new reference: the dict of CycleReport.tensors */
    /* New reference: what the report's total counts once. One storage: its key (report_tensors.c);
     * several (multi): a tuple of (key or None, nbytes) pairs, None for bytes with no address. */
    PyObject *storage_key;
    /* New references to the values of info the text is made of, so that writing a tensor's line
     * looks nothing up; NULL exactly when info is. */
    PyObject *shape, *dtype_s, *device_s, *type_name;
    PyObject *stack;       /* new reference to info's "stack" when it is a str, else NULL */
    tgc_buf line;          /* "Tensor float32[4] on cpu (16 B)": made on first use
                              (tgc_report_line) */
    char dev_type[32];
    int dev_index;
    unsigned long long nbytes;
    const char *none;      /* why it holds no bytes ("meta", tensor/), NULL when it holds some */
    int is_cuda;
    int multi;
} tgc_rtensor;

/* Groups of identical leaks share a signature: node types, edge type pairs and tensor
 * shapes/dtypes, summed with two independent mixes so the order of discovery does not matter. */
typedef struct {
    uint32_t group;
    uint32_t nodes, edges, targets;
    uint64_t h1, h2;
    unsigned long long nbytes;
    uint32_t count;        /* on the representative: how many groups share the signature */
    unsigned long long total_bytes;
    uint32_t total_targets;
    int drawn;
} tgc_group;

/* An emitted (drawn, folded) edge. */
typedef struct {
    uint32_t src, dst;
    PyObject *label;   /* borrowed from the names tables, or the shared "?" */
} tgc_drawn_edge;

/* One report's analysis, from the build to the drawing of its DOT. */
typedef struct {
    tgc_cycles *c;                   /* borrowed: the cycles part of the module state */
    PyObject *objs;                  /* borrowed: the list that owns the garbage */
    PyObject **items;
    uint32_t n;
    tgc_graph g;
    tgc_analysis a;
    uint8_t *is_target;
    tgc_rtensor *ts;                 /* per node; .info NULL for non-targets */
    uint8_t *draw;                   /* per node: drawn */
    uint32_t *owner;                 /* per node: TGC_NONE, or the node it is folded into */
    tgc_names *names;                /* per node, only for drawn nodes (else zeroed) */
    PyObject **tname;                /* per node: new reference to its short type name, made on
                                        first use (tgc_report_tname), so drawn nodes only */
    PyObject **desc;                 /* per drawn node: new reference to tgc_describe's text, made
                                        at build: it may run a user __repr__, which must not run
                                        while the DOT is drawn, and shows the object as it was
                                        when the collector found it */
    tgc_drawn_edge *edges;
    size_t nedges, cap_edges;
    size_t edges_dropped;            /* references between drawn nodes over TGC_DRAW_EDGES */
    size_t ndrawn;                   /* object nodes drawn (not folded into an owner) */
    uint8_t *skip;                   /* per node: 1 class internals set aside, 2 in a shortened
                                        chain (both not drawn, and not linked to "more") */
    tgc_bridge *bridges;             /* shortened chains whose ends are drawn */
    size_t nbridges;
    PyObject *unknown;               /* "?" */
    tgc_ptrmap map;                  /* object address -> node */
    tgc_group *groups;               /* by signature; representatives carry counts */
    uint32_t ngroups;
} tgc_builder;

/* A report's DOT, not drawn yet (report.h's tgc_report.pending). */
struct tgc_pending {
    tgc_builder b;       /* b.objs and b.items borrow from the report's pending_objs */
    uint32_t *elided;    /* per drawn group: objects summarised, not drawn */
};


/* report_tensors.c */
/* The tensors of interest in b's garbage (filter f), read into b->ts and marked in b->is_target;
 * 0 when there are none. Runs the filter's predicate; errors are logged, not raised. */
int tgc_report_tensors(tgc_builder *b, const tgc_filter *f);
/* Allocation stacks from torch's CUDA memory history, when it is recording: for each CUDA tensor
 * of ts[0..n), torch's traceback of its storage's address (torch._C._cuda_allocationTraceback),
 * or, on a torch without it, the frames of the active block of torch.cuda.memory._snapshot()
 * that contains the storage. Never raises. */
void tgc_report_stacks(tgc_rtensor *ts, Py_ssize_t n);
/* Drops what reading a tensor made (the struct stays usable: info NULL, no line). */
void tgc_report_tensor_clear(tgc_rtensor *rt);
/* A new dict of n entries keys[i] -> vals[i] (the keys borrowed, interned; the values new
 * references, stolen, NULL where making one failed); NULL with an exception set. Py_BuildValue
 * would make every key string again for every tensor and group. */
PyObject *tgc_report_dict(PyObject *const *keys, PyObject **vals, int n);

/* report_build.c */
/* Node v's short type name (tgc_type_name), made once per node: the node label, the edges list,
 * the cycle and the hint all spell it. Borrowed, or NULL with an exception. */
PyObject *tgc_report_tname(tgc_builder *b, uint32_t v);
void tgc_report_builder_free(tgc_builder *b);
/* The buffer decoded as a str (new reference; NULL with MemoryError when the buffer ran out). */
PyObject *tgc_report_str(tgc_buf *o);

/* report_text.c */
/* The tensor's line, "Tensor float32[4] on cpu (16 B)", for the node label and the text alike:
 * made once, kept in rt->line. Borrowed; rt->info must be set. */
const tgc_buf *tgc_report_line(tgc_rtensor *rt);
/* Appends at most max bytes of s (n bytes), cut on a UTF-8 boundary, with an ellipsis and the
 * true length when cut. */
void tgc_report_add_cut(tgc_buf *o, const char *s, size_t n, size_t max);
/* The text (a header line, then a line and a fix per group of leaks, within TGC_TEXT_MAX bytes)
 * into text, and per group its dict appended to groups, its hint to hints and its row into
 * rows[k] (b->ngroups of them). 0, or -1 with an exception. */
int tgc_report_text(tgc_builder *b, int generation, uint32_t ntensors, unsigned long long total,
                    tgc_buf *text, tgc_report_row *rows, PyObject *groups, PyObject *hints);

/* report_sig.c */
/* The signature of each group b->groups[k], into sig[k] (b->ngroups of them): the shape of its
 * leak, independent of addresses, ids, tensor sizes, the number of instances and the order the
 * collector found them in. It hashes the set of distinct references between the objects of the
 * group's representative, each as (referrer's type name, label, referent's type name): for a
 * drawn group the references drawn (containers folded into their owner; in keys and indices
 * every run of digits and every 0x-number counts as one '#'), for a group not drawn every
 * reference, labelled "?" (so a shape has another signature on the rare report that does not
 * draw it). Type names are tp_name (a class's __name__), never addresses. Costs one pass over the
 * drawn edges, and over the edges of groups not drawn, and a sort. 0, or -1 with MemoryError. */
int tgc_report_signatures(tgc_builder *b, uint64_t *sig);
/* A signature as CycleReport.groups shows it: 16 lowercase hex digits (new reference). */
PyObject *tgc_report_signature_str(uint64_t sig);

/* report_dot.c */
/* Draws the report's DOT from its builder into dot. Runs no Python code; leaves no exception
 * set (running out of memory shows in dot->oom). */
void tgc_report_draw_dot(tgc_builder *b, const uint32_t *elided, tgc_buf *dot);

#endif /* TGC_REPORT_INT_H */
