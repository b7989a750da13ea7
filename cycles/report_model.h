/* report_model.h: the contract of a report's model, what one collection's garbage is made into,
 * once: the builder fills it (report_build.h), the writers only read it (report_write.h), and
 * report.c, the CycleReport object, owns it and frees it in one place (tgc_report_model_free).
 * It says what the model holds, who owns each reference, and the bounds that keep a report small
 * whatever the garbage; report_model.c adds the helpers every side uses (strings, cutting, dicts),
 * which depend on nothing else of a report. Private to cycles/. Python.h and cycles.h come first;
 * everything here needs the GIL. */
#ifndef TGC_REPORT_MODEL_H
#define TGC_REPORT_MODEL_H

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

/* What a report knows of one tensor, in C form plus the dict that .tensors exposes. Every
 * reference is new and released by tgc_report_tensor_clear. */
typedef struct {
    PyObject *info;        /* the dict of CycleReport.tensors */
    /* What the report's total counts once. One storage: its key (report_tensors.c); several
     * (multi): a tuple of (key or None, nbytes) pairs, None for bytes with no address. */
    PyObject *storage_key;
    /* The values of info the text is made of, so that writing a tensor's line looks nothing up;
     * NULL exactly when info is. */
    PyObject *shape, *dtype_s, *device_s, *type_name;
    PyObject *stack;       /* info's "stack" when it is a str, else NULL */
    PyTypeObject *type;    /* drawn tensors only: the tensor's class, for the tooltip's full name */
    /* "Tensor float32[4] on cpu (16 B)", for the node label and the text alike: made by the
     * builder (tgc_report_tensor_line) for the tensors a writer shows (drawn ones, each group's
     * largest), empty for the others. */
    tgc_buf line;
    char dev_type[32];
    int dev_index;
    unsigned long long nbytes;
    const char *none;      /* why it holds no bytes ("meta", tensor/), NULL when it holds some */
    int is_cuda;
    int multi;
} tgc_rtensor;

/* A group of identical leaks: the groups the analysis found share a signature (node types, edge
 * type pairs and tensor shapes/dtypes, summed with two independent mixes so the order of
 * discovery does not matter), and one representative stands for all of them. */
typedef struct {
    uint32_t group;        /* the representative's group in the analysis (tgc_analysis.group) */
    uint32_t nodes, edges, targets;
    uint64_t h1, h2;
    unsigned long long nbytes;
    uint32_t count;        /* how many groups share the signature */
    unsigned long long total_bytes;
    uint32_t total_targets;
    int drawn;
    uint32_t elided;       /* drawn: objects summed up in its "more" node, not drawn */
    uint32_t best;         /* the representative's largest tensor of interest, or TGC_NONE */
    /* New references, set by the builder (report_hint.c): the shortest drawn cycle, spelled out
     * ("" when the cycle is not drawn whole), and the fix that names the reference most likely
     * meant to be weak. */
    PyObject *cycle, *hint;
    /* elided > 0: new reference, the "more" node's text: how many, and the first types' counts. */
    PyObject *more;
} tgc_group;

/* A drawn reference (containers folded into their owner). */
typedef struct {
    uint32_t src, dst;
    PyObject *label;   /* borrowed from the names tables (names), or the model's unknown */
    int32_t cell;      /* src a function, dst a closure variable: its index in __closure__; else -1 */
} tgc_drawn_edge;

/* One report's model. Per-node arrays have n entries. Objects of the garbage are borrowed: the
 * model lives only while the list that owns them does (report.c keeps that list alive with the
 * model, and frees the model before the garbage goes, tgc_report_settle). Only the builder reads
 * the objects: a user's callback can reach that list and empty it before the writers run, so
 * what they show (names, descriptions, types, closure cells, signatures) is taken at build. */
typedef struct tgc_report_model {
    tgc_cycles *c;                   /* borrowed: the cycles part of the module state */
    PyObject *objs;                  /* borrowed: the list that owns the garbage */
    PyObject **items;                /* the garbage's objects (borrowed), snapshot of objs: the
                                        list may grow while objects are named */
    uint32_t n;
    tgc_graph g;                     /* references among the garbage (tp_traverse) */
    tgc_analysis a;                  /* cycles holding tensors, and their groups (graph.c) */
    tgc_ptrmap map;                  /* object address -> node */
    uint8_t *is_target;              /* per node: a tensor of interest */
    tgc_rtensor *ts;                 /* per node; .info NULL for non-targets */
    /* What the picture shows */
    uint8_t *draw;                   /* per node: drawn */
    uint32_t *owner;                 /* per node: TGC_NONE, or the node it is folded into */
    uint8_t *skip;                   /* per node: 1 class internals set aside, 2 in a shortened
                                        chain (both not drawn, and not linked to "more") */
    tgc_names *names;                /* per node, only for drawn nodes (else zeroed); the edges'
                                        labels are theirs */
    PyObject **tname;                /* per drawn node: new reference to its short type name (the
                                        node label, the edges list, the cycle and the hint all
                                        spell it); NULL for the others */
    PyObject **desc;                 /* per drawn node: new reference to tgc_describe's text,
                                        taken at build: it may run a user __repr__, which must
                                        not run while the DOT is drawn, and shows the object as
                                        it was when the collector found it; NULL for tensors,
                                        nodes not drawn, and when describing failed */
    tgc_drawn_edge *edges;           /* at most TGC_DRAW_EDGES */
    size_t nedges, cap_edges;
    size_t edges_dropped;            /* references between drawn nodes over the cap */
    size_t ndrawn;                   /* object nodes drawn (not folded into an owner):
                                        CycleReport.objects */
    tgc_bridge *bridges;             /* shortened chains whose ends are drawn */
    size_t nbridges;
    PyObject *unknown;               /* new reference: "?", the label of an unnamed reference */
    /* The groups of identical leaks, largest first (total_bytes); at most TGC_DRAW_GROUPS of
     * them drawn, within TGC_DRAW_BUDGET nodes. */
    tgc_group *groups;
    uint32_t ngroups;
    /* The totals: tensors of interest held by cycles, and their bytes, each storage once. */
    uint32_t ntensors;
    unsigned long long total;
} tgc_report_model;

/* report_model.c */
/* Releases everything the model holds, its per-node arrays and their references included, and
 * zeroes it; a model that was never filled (zeroed) is fine. Not the struct itself. */
void tgc_report_model_free(tgc_report_model *m);
/* The buffer decoded as a str (new reference; NULL with MemoryError when the buffer ran out). */
PyObject *tgc_report_str(const tgc_buf *o);
/* Appends at most max bytes of s (n bytes), cut on a UTF-8 boundary, with an ellipsis and the
 * true length when cut. */
void tgc_report_add_cut(tgc_buf *o, const char *s, size_t n, size_t max);
/* A new dict of n entries keys[i] -> vals[i] (the keys borrowed, interned; the values new
 * references, stolen, NULL where making one failed); NULL with an exception set. Py_BuildValue
 * would make every key string again for every tensor and group. */
PyObject *tgc_report_dict(PyObject *const *keys, PyObject **vals, int n);
/* Drops what reading a tensor made (the struct stays usable: info NULL, no line). */
void tgc_report_tensor_clear(tgc_rtensor *rt);

#endif /* TGC_REPORT_MODEL_H */
