/* graph.c: the graph algorithms of tensorgc's reference-graph engine (contract in
 * include/tensorgc/graph.h). Plain C, no Python, so it is unit-tested through ctypes
 * (tests/test_graph_engine.py) and the C units (make units), and stays valgrind-clean.
 * Everything is iterative: a 10-million-node ring is fine, the C stack is never the limit. */
#include "tensorgc/graph.h"

#include <stdlib.h>
#include <string.h>

static int
graph__csr(uint32_t n, uint32_t m, const uint32_t *key, const uint32_t *val,
           uint32_t **off_out, uint32_t **val_out)
{
    uint32_t *off = calloc((size_t)n + 1, sizeof(uint32_t));
    uint32_t *out = malloc((m ? m : 1) * sizeof(uint32_t));
    if (off == NULL || out == NULL) {
        free(off);
        free(out);
        return -1;
    }
    /* off[v] counts v's edges, then (running sums) the end of v's run; placing the edges back to
     * front then moves each off[v] down to the start of v's run, without a second array. */
    for (uint32_t e = 0; e < m; e++) {
        off[key[e]]++;
    }
    for (uint32_t v = 1; v < n; v++) {
        off[v] += off[v - 1];
    }
    /* Stable placement keeps parallel edges in the caller's order (edge names depend on it). */
    for (uint32_t e = m; e-- > 0;) {
        out[--off[key[e]]] = val[e];
    }
    off[n] = m;
    *off_out = off;
    *val_out = out;
    return 0;
}

int
tgc_graph_build(tgc_graph *g, uint32_t n, uint32_t m, const uint32_t *src, const uint32_t *dst)
{
    memset(g, 0, sizeof(*g));
    g->n = n;
    g->m = m;
    if (graph__csr(n, m, src, dst, &g->out_off, &g->out_dst) < 0) {
        return -1;
    }
    if (graph__csr(n, m, dst, src, &g->in_off, &g->in_src) < 0) {
        tgc_graph_free(g);
        return -1;
    }
    return 0;
}

void
tgc_graph_free(tgc_graph *g)
{
    free(g->out_off);
    free(g->out_dst);
    free(g->in_off);
    free(g->in_src);
    memset(g, 0, sizeof(*g));
}

/* Tarjan over the nodes with mask[v] != 0 (all nodes when mask is NULL); the others get
 * scc[v] = TGC_NONE and are never entered. */
static int
graph__scc(const tgc_graph *g, const uint8_t *mask, uint32_t *scc, uint32_t *nscc)
{
    const uint32_t n = g->n;
    const size_t nn = n ? n : 1;
    /* One block for the scratch arrays: small graphs are the common case, where the number of
     * allocations, not their size, is the cost. */
    uint32_t *index = malloc(nn * (5 * sizeof(uint32_t) + 1));
    if (index == NULL) {
        return -1;
    }
    uint32_t *low = index + nn;
    uint32_t *stack = low + nn;     /* Tarjan's node stack */
    uint32_t *call_v = stack + nn;  /* the explicit call stack */
    uint32_t *call_e = call_v + nn; /* next edge to look at */
    uint8_t *on_stack = (uint8_t *)(call_e + nn);
    memset(on_stack, 0, nn);
    for (uint32_t v = 0; v < n; v++) {
        index[v] = TGC_NONE;
        scc[v] = TGC_NONE;
    }
    uint32_t next_index = 0, sp = 0, comps = 0;
    for (uint32_t root = 0; root < n; root++) {
        if (index[root] != TGC_NONE || (mask && !mask[root])) {
            continue;
        }
        uint32_t depth = 0;
        call_v[depth] = root;
        call_e[depth] = g->out_off[root];
        index[root] = low[root] = next_index++;
        stack[sp++] = root;
        on_stack[root] = 1;
        depth = 1;
        while (depth > 0) {
            uint32_t v = call_v[depth - 1];
            if (call_e[depth - 1] < g->out_off[v + 1]) {
                uint32_t w = g->out_dst[call_e[depth - 1]++];
                if (mask && !mask[w]) {
                    continue;
                }
                if (index[w] == TGC_NONE) {
                    index[w] = low[w] = next_index++;
                    stack[sp++] = w;
                    on_stack[w] = 1;
                    call_v[depth] = w;
                    call_e[depth] = g->out_off[w];
                    depth++;
                }
                else if (on_stack[w] && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            /* v is finished */
            if (low[v] == index[v]) {
                uint32_t w;
                do {
                    w = stack[--sp];
                    on_stack[w] = 0;
                    scc[w] = comps;
                } while (w != v);
                comps++;
            }
            depth--;
            if (depth > 0) {
                uint32_t u = call_v[depth - 1];
                if (low[v] < low[u]) {
                    low[u] = low[v];
                }
            }
        }
    }
    *nscc = comps;
    free(index);
    return 0;
}

int
tgc_scc(const tgc_graph *g, uint32_t *scc, uint32_t *nscc)
{
    return graph__scc(g, NULL, scc, nscc);
}

static uint32_t
graph__find(uint32_t *parent, uint32_t v)
{
    while (parent[v] != v) {
        parent[v] = parent[parent[v]];  /* path halving */
        v = parent[v];
    }
    return v;
}

/* anc[v] = 1 for every node that reaches a target (targets included), walking in-edges back
 * from the targets; queue is scratch space of n entries. */
static void
graph__ancestors(const tgc_graph *g, const uint8_t *is_target, uint8_t *anc, uint32_t *queue)
{
    uint32_t head = 0, tail = 0;
    for (uint32_t v = 0; v < g->n; v++) {
        anc[v] = is_target[v] != 0;
        if (anc[v]) {
            queue[tail++] = v;
        }
    }
    while (head < tail) {
        uint32_t v = queue[head++];
        for (uint32_t e = g->in_off[v]; e < g->in_off[v + 1]; e++) {
            uint32_t u = g->in_src[e];
            if (!anc[u]) {
                anc[u] = 1;
                queue[tail++] = u;
            }
        }
    }
}

void
tgc_analysis_free(tgc_analysis *a)
{
    free(a->scc);
    free(a->cyclic);
    free(a->role);
    free(a->group);
    memset(a, 0, sizeof(*a));
}

int
tgc_analyze(const tgc_graph *g, const uint8_t *is_target, tgc_analysis *a)
{
    const uint32_t n = g->n;
    const size_t nn = n ? n : 1;
    uint8_t *reach = NULL, *anc = NULL;
    uint32_t *order = NULL, *start = NULL, *fill = NULL, *queue = NULL, *parent = NULL, *uf = NULL;
    /* Scratch in two blocks, one sized by nodes and one by components: a report's graph is
     * usually a handful of nodes, where each allocation costs more than the work. */
    uint32_t *node_tmp = NULL, *comp_tmp = NULL;

    memset(a, 0, sizeof(*a));
    a->scc = malloc(nn * sizeof(uint32_t));
    a->role = calloc(nn, 1);
    a->group = malloc(nn * sizeof(uint32_t));
    if (!a->scc || !a->role || !a->group) {
        goto error;
    }
    /* Only nodes that reach a target matter: a cycle that holds a tensor, and every shortest
     * path from it to the tensor, consist of such nodes. Find them by walking in-edges back from
     * the targets, and leave everything else out of Tarjan (in a young collection that is most
     * of the garbage). */
    node_tmp = malloc(nn * (4 * sizeof(uint32_t) + 1));
    if (node_tmp == NULL) {
        goto error;
    }
    queue = node_tmp;
    order = queue + nn;
    parent = order + nn;
    uf = parent + nn;
    anc = (uint8_t *)(uf + nn);  /* every entry set by graph__ancestors */
    graph__ancestors(g, is_target, anc, queue);
    if (graph__scc(g, anc, a->scc, &a->nscc) < 0) {
        goto error;
    }
    const size_t nc = a->nscc ? a->nscc : 1;
    a->cyclic = calloc(nc, 1);
    comp_tmp = calloc(1, (2 * nc + 1) * sizeof(uint32_t) + nc);  /* all zeroed */
    if (!a->cyclic || !comp_tmp) {
        goto error;
    }
    start = comp_tmp;
    fill = start + nc + 1;
    reach = (uint8_t *)(fill + nc);

    /* Nodes bucketed by component (counting sort), so components can be visited sinks first. */
    for (uint32_t v = 0; v < n; v++) {
        if (a->scc[v] != TGC_NONE) {
            start[a->scc[v] + 1]++;
        }
    }
    for (uint32_t c = 0; c < a->nscc; c++) {
        start[c + 1] += start[c];
        if (start[c + 1] - start[c] > 1) {
            a->cyclic[c] = 1;
        }
    }
    memcpy(fill, start, nc * sizeof(uint32_t));
    for (uint32_t v = 0; v < n; v++) {
        if (a->scc[v] != TGC_NONE) {
            order[fill[a->scc[v]]++] = v;
        }
    }
    /* Self-loops make a one-node component cyclic; reach flows from successors (lower numbers). */
    for (uint32_t c = 0; c < a->nscc; c++) {
        for (uint32_t i = start[c]; i < start[c + 1]; i++) {
            uint32_t v = order[i];
            if (is_target[v]) {
                reach[c] = 1;
            }
            for (uint32_t e = g->out_off[v]; e < g->out_off[v + 1]; e++) {
                uint32_t w = g->out_dst[e];
                if (w == v) {
                    a->cyclic[c] = 1;
                }
                else if (a->scc[w] != c && a->scc[w] != TGC_NONE && reach[a->scc[w]]) {
                    reach[c] = 1;
                }
            }
        }
    }

    /* Multi-source BFS from every kept cycle: the BFS tree holds a shortest path from the
     * cycles to each target they reach. */
    uint32_t head = 0, tail = 0;
    for (uint32_t v = 0; v < n; v++) {
        parent[v] = TGC_NONE;
        uint32_t c = a->scc[v];
        if (c != TGC_NONE && a->cyclic[c] && reach[c]) {
            a->role[v] |= TGC_ROLE_CYCLE;
            parent[v] = v;
            queue[tail++] = v;
        }
    }
    while (head < tail) {
        uint32_t v = queue[head++];
        for (uint32_t e = g->out_off[v]; e < g->out_off[v + 1]; e++) {
            uint32_t w = g->out_dst[e];
            if (parent[w] == TGC_NONE && anc[w]) {
                parent[w] = v;
                queue[tail++] = w;
            }
        }
    }
    for (uint32_t t = 0; t < n; t++) {
        if (!is_target[t] || parent[t] == TGC_NONE) {
            continue;
        }
        a->role[t] |= TGC_ROLE_TARGET;
        for (uint32_t v = t; !(a->role[v] & TGC_ROLE_CYCLE); v = parent[v]) {
            if (v != t && (a->role[v] & TGC_ROLE_PATH)) {
                break;  /* the rest of this path is already marked */
            }
            a->role[v] |= TGC_ROLE_PATH;
        }
    }

    /* Groups: weakly connected components of the kept nodes (union-find). */
    for (uint32_t v = 0; v < n; v++) {
        uf[v] = v;
    }
    for (uint32_t v = 0; v < n; v++) {
        if (!a->role[v]) {
            continue;
        }
        for (uint32_t e = g->out_off[v]; e < g->out_off[v + 1]; e++) {
            uint32_t w = g->out_dst[e];
            if (a->role[w]) {
                uint32_t rv = graph__find(uf, v), rw = graph__find(uf, w);
                if (rv != rw) {
                    uf[rv] = rw;
                }
            }
        }
    }
    /* Number groups densely in node order; reuse parent[] as the root -> group map. */
    for (uint32_t v = 0; v < n; v++) {
        parent[v] = TGC_NONE;
    }
    a->ngroups = 0;
    a->kept = 0;
    for (uint32_t v = 0; v < n; v++) {
        if (!a->role[v]) {
            a->group[v] = TGC_NONE;
            continue;
        }
        a->kept++;
        uint32_t r = graph__find(uf, v);
        if (parent[r] == TGC_NONE) {
            parent[r] = a->ngroups++;
        }
        a->group[v] = parent[r];
    }

    free(node_tmp);
    free(comp_tmp);
    return 0;
error:
    free(node_tmp);
    free(comp_tmp);
    tgc_analysis_free(a);
    return -1;
}

long
tgc_chains(const tgc_graph *g, const tgc_analysis *a, uint32_t group, uint32_t keep,
           uint8_t *skip, tgc_bridge **bridges, size_t *nbridges)
{
    const uint32_t n = g->n;
    size_t cap = 0, nb = 0;
    tgc_bridge *out = NULL;
    long skipped = 0;
    uint8_t *chain = calloc(n ? n : 1, 1);  /* 1: a chain node; 2: already walked */
    uint32_t *run = malloc((n ? n : 1) * sizeof(uint32_t));
    *bridges = NULL;
    *nbridges = 0;
    if (chain == NULL || run == NULL) {
        goto oom;
    }
#define CHAIN_IN(v) (a->group[v] == group && !skip[v])
    for (uint32_t v = 0; v < n; v++) {
        if (!CHAIN_IN(v) || (a->role[v] & TGC_ROLE_TARGET)) {
            continue;
        }
        uint32_t din = 0, dout = 0;
        for (uint32_t e = g->in_off[v]; e < g->in_off[v + 1] && din < 2; e++) {
            din += CHAIN_IN(g->in_src[e]);
        }
        for (uint32_t e = g->out_off[v]; e < g->out_off[v + 1] && dout < 2; e++) {
            dout += CHAIN_IN(g->out_dst[e]);
        }
        chain[v] = din == 1 && dout == 1;
    }
    for (uint32_t v = 0; v < n; v++) {
        if (chain[v] != 1) {
            continue;
        }
        uint32_t pred = TGC_NONE;
        for (uint32_t e = g->in_off[v]; e < g->in_off[v + 1]; e++) {
            if (CHAIN_IN(g->in_src[e])) {
                pred = g->in_src[e];
            }
        }
        if (pred != TGC_NONE && chain[pred] == 1) {
            continue;  /* not the first node of its chain */
        }
        uint32_t len = 0, w = v;
        while (w != TGC_NONE && chain[w] == 1) {
            chain[w] = 2;
            run[len++] = w;
            uint32_t next = TGC_NONE;
            for (uint32_t e = g->out_off[w]; e < g->out_off[w + 1]; e++) {
                if (CHAIN_IN(g->out_dst[e])) {
                    next = g->out_dst[e];
                }
            }
            w = next;
        }
        if (len <= 2 * keep + 1) {
            continue;
        }
        if (nb == cap) {
            size_t c = cap ? cap * 2 : 8;
            tgc_bridge *p = realloc(out, c * sizeof(*p));
            if (p == NULL) {
                goto oom;
            }
            out = p;
            cap = c;
        }
        for (uint32_t k = keep; k < len - keep; k++) {
            skip[run[k]] = 2;
        }
        /* keep == 0: the bridge runs from the chain's predecessor to its successor. */
        out[nb].from = keep ? run[keep - 1] : pred;
        out[nb].to = keep ? run[len - keep] : w;
        out[nb].count = len - 2 * keep;
        if (out[nb].from != TGC_NONE && out[nb].to != TGC_NONE) {
            nb++;
        }
        skipped += len - 2 * keep;
    }
#undef CHAIN_IN
    free(chain);
    free(run);
    *bridges = out;
    *nbridges = nb;
    return skipped;
oom:
    free(chain);
    free(run);
    free(out);
    return -1;
}

long
tgc_pick(const tgc_graph *g, const tgc_analysis *a, uint32_t group, uint32_t budget,
         const uint8_t *skip, const tgc_bridge *bridges, size_t nbridges, uint8_t *draw)
{
    const uint32_t n = g->n;
    uint32_t *queue = malloc((n ? n : 1) * sizeof(uint32_t));
    /* The bridges by end: both ends lead to each other. */
    uint32_t *boff = calloc((size_t)n + 1, sizeof(uint32_t));
    uint32_t *badj = malloc((nbridges > 0 ? 2 * nbridges : 1) * sizeof(uint32_t));
    if (queue == NULL || boff == NULL || badj == NULL) {
        free(queue);
        free(boff);
        free(badj);
        return -1;
    }
    for (size_t i = 0; i < nbridges; i++) {
        boff[bridges[i].from + 1]++;
        boff[bridges[i].to + 1]++;
    }
    for (uint32_t v = 0; v < n; v++) {
        boff[v + 1] += boff[v];
    }
    for (size_t i = 0; i < nbridges; i++) {
        badj[boff[bridges[i].from]++] = bridges[i].to;
        badj[boff[bridges[i].to]++] = bridges[i].from;
    }
    for (uint32_t v = n; v > 0; v--) {  /* the fill moved each start to the next one's */
        boff[v] = boff[v - 1];
    }
    boff[0] = 0;
#define PICKABLE(w) (a->group[w] == group && !draw[w] && !(skip && skip[w]))
    uint32_t head = 0, tail = 0;
    /* Seeds: the group's targets first, then (if there is room) one cycle node so a ring whose
     * targets are all far apart still shows its cycle. */
    for (int pass = 0; pass < 2 && tail < budget; pass++) {
        for (uint32_t v = 0; v < n && tail < budget; v++) {
            if (!PICKABLE(v)) {
                continue;
            }
            int seed = pass == 0 ? (a->role[v] & TGC_ROLE_TARGET) != 0
                                 : (a->role[v] & TGC_ROLE_CYCLE) != 0;
            if (seed) {
                draw[v] = 1;
                queue[tail++] = v;
                if (pass == 1) {
                    break;
                }
            }
        }
    }
    while (head < tail && tail < budget) {
        uint32_t v = queue[head++];
        for (int dir = 0; dir < 3 && tail < budget; dir++) {
            const uint32_t *off = dir == 0 ? g->in_off : dir == 1 ? g->out_off : boff;
            const uint32_t *adj = dir == 0 ? g->in_src : dir == 1 ? g->out_dst : badj;
            for (uint32_t e = off[v]; e < off[v + 1] && tail < budget; e++) {
                uint32_t w = adj[e];
                if (PICKABLE(w)) {
                    draw[w] = 1;
                    queue[tail++] = w;
                }
            }
        }
    }
#undef PICKABLE
    free(queue);
    free(boff);
    free(badj);
    return (long)tail;
}

long
tgc_ancestors(const tgc_graph *g, const uint8_t *is_target, uint8_t *anc)
{
    uint32_t *queue = malloc((g->n ? g->n : 1) * sizeof(uint32_t));
    if (queue == NULL) {
        return -1;
    }
    graph__ancestors(g, is_target, anc, queue);
    long kept = 0;
    for (uint32_t v = 0; v < g->n; v++) {
        kept += anc[v];
    }
    free(queue);
    return kept;
}

long
tgc_relevant(const tgc_graph *g, const uint8_t *is_target, uint8_t *keep)
{
    const uint32_t n = g->n;
    uint32_t *queue = malloc((n ? n : 1) * sizeof(uint32_t));
    uint8_t *anc = calloc(n ? n : 1, 1);
    if (queue == NULL || anc == NULL) {
        free(queue);
        free(anc);
        return -1;
    }
    graph__ancestors(g, is_target, anc, queue);
    uint32_t head = 0, tail = 0;
    for (uint32_t v = 0; v < n; v++) {
        keep[v] = 0;
        if (anc[v]) {
            keep[v] = 1;
            queue[tail++] = v;
        }
    }
    while (head < tail) {  /* forward: whatever a kept object refers to stays intact too */
        uint32_t v = queue[head++];
        for (uint32_t e = g->out_off[v]; e < g->out_off[v + 1]; e++) {
            uint32_t w = g->out_dst[e];
            if (!keep[w]) {
                keep[w] = 1;
                queue[tail++] = w;
            }
        }
    }
    free(queue);
    free(anc);
    return (long)tail;
}
