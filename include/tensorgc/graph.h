/* graph.h: the contract of tensorgc's graph algorithms (graph/graph.c), plain C with no Python.
 *
 * Nodes are dense indices 0..n-1, edges a list of (src, dst) pairs (parallel edges allowed: one per
 * reference). The engine finds the strongly connected components, keeps those that hold a cycle
 * and reach a target (a tensor), adds the shortest paths from those cycles to every target they
 * reach, splits what is kept into weakly connected components (one per leak instance), and picks
 * a bounded subset of a component to draw. Memory is malloc'd; every function returns 0 on
 * success and -1 when out of memory, leaving its outputs unspecified. No function recurses. */
#ifndef TENSORGC_GRAPH_H
#define TENSORGC_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TGC_NONE UINT32_MAX

/* Compressed adjacency in both directions. */
typedef struct {
    uint32_t n, m;
    uint32_t *out_off, *out_dst;  /* out-edges of v: out_dst[out_off[v] .. out_off[v+1]) */
    uint32_t *in_off, *in_src;    /* in-edges of v:  in_src[in_off[v] .. in_off[v+1]) */
} tgc_graph;

/* Roles, a bit set per node in tgc_analysis.role. */
enum {
    TGC_ROLE_CYCLE = 1,   /* in a strongly connected component with a cycle that reaches a target */
    TGC_ROLE_PATH = 2,    /* on a shortest path from such a cycle to a target */
    TGC_ROLE_TARGET = 4,  /* a target reached from such a cycle (may also be CYCLE) */
};

typedef struct {
    uint32_t *scc;        /* component of each node that reaches a target, TGC_NONE for the
                             rest (never analysed); components are numbered sinks first */
    uint32_t nscc;
    uint8_t *cyclic;      /* per scc: 1 when it holds a cycle (size > 1 or a self-loop) */
    uint8_t *role;        /* per node: TGC_ROLE_* bits; 0 = dropped */
    uint32_t *group;      /* per node: weakly connected component among kept nodes, or TGC_NONE */
    uint32_t ngroups;
    uint32_t kept;        /* number of nodes with a role */
} tgc_analysis;

/* Builds g from m edges. src/dst values must be < n. */
int tgc_graph_build(tgc_graph *g, uint32_t n, uint32_t m, const uint32_t *src, const uint32_t *dst);
void tgc_graph_free(tgc_graph *g);

/* Iterative Tarjan: scc[v] for every node, components numbered in reverse topological order
 * (a component's successors have smaller numbers). *nscc gets the count. */
int tgc_scc(const tgc_graph *g, uint32_t *scc, uint32_t *nscc);

/* The whole analysis: is_target[v] != 0 marks targets. Fills every field of *a. */
int tgc_analyze(const tgc_graph *g, const uint8_t *is_target, tgc_analysis *a);
void tgc_analysis_free(tgc_analysis *a);

/* anc[v] = 1 for every node that reaches a target (targets included), 0 for the rest: what
 * torch's create_graph keeps of a list of objects. anc must hold n bytes. Returns the number
 * kept, or -1 when out of memory. */
long tgc_ancestors(const tgc_graph *g, const uint8_t *is_target, uint8_t *anc);

/* keep[v] = 1 for every node that reaches a target, and everything those nodes reach: the part
 * of the garbage a report may look at. The rest can be freed before any report is built.
 * keep must hold n bytes. Returns the number kept, or -1 when out of memory. */
long tgc_relevant(const tgc_graph *g, const uint8_t *is_target, uint8_t *keep);

/* A shortened chain: `count` nodes skipped between `from` and `to` (both kept). */
typedef struct {
    uint32_t from, to, count;
} tgc_bridge;

/* Shortens long chains of kept group `group`, so that a ring of ten thousand objects draws as a
 * few nodes and one "... N more" edge. A chain is a maximal run of nodes that are neither
 * targets nor skip[v] != 0 on entry, each with exactly one in-edge and one out-edge from and to
 * the group's nodes not skipped on entry (so a chain is only found around nodes the caller has
 * already set aside, such as class objects). A chain of more than 2 * keep + 1 nodes keeps its
 * first and last `keep` nodes; the others get skip[v] = 2 and the chain one bridge. A ring made
 * only of such nodes has no first node and is left whole. *bridges is malloc'd (NULL when none;
 * the caller frees it). Returns the number of nodes skipped, or -1 when out of memory. */
long tgc_chains(const tgc_graph *g, const tgc_analysis *a, uint32_t group, uint32_t keep,
                uint8_t *skip, tgc_bridge **bridges, size_t *nbridges);

/* Picks at most budget nodes of kept group `group` to draw, breadth first over edges in both
 * directions starting from its targets (then its cycle), so targets and the edges that hold them
 * come first. Nodes with skip[v] != 0 (skip may be NULL) are never picked; a bridge whose end is
 * picked leads the search to its other end. Sets draw[v] = 1 for picked nodes (draw must be
 * zeroed by the caller over the group's nodes). Returns the number picked, or -1 when out of
 * memory. */
long tgc_pick(const tgc_graph *g, const tgc_analysis *a, uint32_t group, uint32_t budget,
              const uint8_t *skip, const tgc_bridge *bridges, size_t nbridges, uint8_t *draw);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_GRAPH_H */
