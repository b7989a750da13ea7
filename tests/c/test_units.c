/* test_units.c: the plain-C units (the graph engine, the byte buffer and its escapers, Graphviz
 * rendering, the HTML page, the line profiler's engine) as a standalone program, so `make
 * valgrind` checks them with no interpreter around. Exits non-zero on the first failed check;
 * prints both operands. */
#include "tensorgc/buf.h"
#include "tensorgc/graph.h"
#include "tensorgc/lineprof.h"
#include "page.h"
#include "render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK_EQ_U(a, b)                                                                   \
    do {                                                                                   \
        unsigned long long _a = (a), _b = (b);                                             \
        if (_a != _b) {                                                                    \
            fprintf(stderr, "%s:%d: %s == %s failed: %llu != %llu\n", __FILE__, __LINE__, #a, \
                    #b, _a, _b);                                                           \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

#define CHECK_STR(buf, want)                                                               \
    do {                                                                                   \
        const char *_g = (buf).data ? (buf).data : "";                                     \
        if (strcmp(_g, (want)) != 0) {                                                     \
            fprintf(stderr, "%s:%d: got \"%s\", want \"%s\"\n", __FILE__, __LINE__, _g, (want)); \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #cond);             \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

static void
test_ring(uint32_t n)
{
    uint32_t *src = malloc((n + 1) * sizeof(uint32_t)), *dst = malloc((n + 1) * sizeof(uint32_t));
    uint8_t *target = calloc(n + 1, 1), *draw = calloc(n + 1, 1);
    for (uint32_t v = 0; v < n; v++) {
        src[v] = v;
        dst[v] = (v + 1) % n;
    }
    src[n] = n / 2;  /* the ring holds one tensor */
    dst[n] = n;
    target[n] = 1;
    tgc_graph g;
    tgc_analysis a;
    CHECK_EQ_U(tgc_graph_build(&g, n + 1, n + 1, src, dst), 0);
    CHECK_EQ_U(tgc_analyze(&g, target, &a), 0);
    CHECK_EQ_U(a.nscc, 2);
    CHECK_EQ_U(a.kept, n + 1);
    CHECK_EQ_U(a.ngroups, 1);
    CHECK_EQ_U(a.role[n], TGC_ROLE_TARGET | TGC_ROLE_PATH);
    CHECK_EQ_U(a.role[0], TGC_ROLE_CYCLE);
    long picked = tgc_pick(&g, &a, 0, 50, NULL, NULL, 0, draw);
    CHECK_EQ_U((unsigned long long)picked, 50);
    CHECK(draw[n] && draw[n / 2]);
    tgc_analysis_free(&a);
    tgc_graph_free(&g);
    free(src);
    free(dst);
    free(target);
    free(draw);
}

/* tgc_ancestors: what torch's create_graph keeps, every node that reaches a target. A chain
 * 0 -> 1 -> 2 (target) with 3 -> 0, a node 4 that 2 reaches (not kept) and 5 alone. */
static void
test_ancestors(void)
{
    uint32_t src[] = {0, 1, 3, 2}, dst[] = {1, 2, 0, 4};
    uint8_t target[6] = {0, 0, 1, 0, 0, 0}, anc[6];
    tgc_graph g;
    CHECK_EQ_U(tgc_graph_build(&g, 6, 4, src, dst), 0);
    CHECK_EQ_U((unsigned long long)tgc_ancestors(&g, target, anc), 4);
    CHECK(anc[0] && anc[1] && anc[2] && anc[3] && !anc[4] && !anc[5]);
    tgc_graph_free(&g);
}

static void
test_escapes(void)
{
    tgc_buf b = {0};
    tgc_buf_dot(&b, "a\"b\\N&<x>\n\x01", 12);
    CHECK_STR(b, "a\\\"b\\\\N&amp;<x>\\l");
    tgc_buf_free(&b);
    tgc_buf_html(&b, "<script>\"'&", 11);
    CHECK_STR(b, "&lt;script&gt;&quot;&#39;&amp;");
    tgc_buf_free(&b);
    tgc_buf_bytes(&b, 1536);
    tgc_buf_puts(&b, "|");
    tgc_buf_bytes(&b, 100);
    tgc_buf_puts(&b, "|");
    tgc_buf_count(&b, 1234567);
    CHECK_STR(b, "1.5 KiB|100 B|1,234,567");
    tgc_buf_free(&b);
    for (int i = 0; i < 1000; i++) {
        tgc_buf_printf(&b, "%0300d", i);  /* past the printf fast path, many regrowths */
    }
    CHECK_EQ_U(b.len, 300000);
    tgc_buf_free(&b);
}

/* The hand-written number formats print what printf did before them. */
static void
test_numbers(void)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 200000; i++) {
        uint64_t n;
        if (i < 4096) {
            n = (uint64_t)i;
        }
        else if (i < 8192) {
            /* around every power of two and the round-to-tenths ties of each unit */
            int sh = (i / 8) % 64;
            n = ((1ULL << sh) + (uint64_t)(i % 8) - 4) & ((i / 512) % 2 ? ~0ULL : (1ULL << 60) - 1);
        }
        else if (i < 100000) {
            /* exact halves of a tenth: printf rounds them to even */
            uint64_t q = (uint64_t)(i - 8192) / 3, u = 1 + q % 5;
            uint64_t v = (2 * (q * 5 + 2) + 1) * (1ULL << (10 * u - 1)) / 10;
            n = v + (uint64_t)(i % 3) - 1;
        }
        else {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            n = x >> (x % 64);
        }
        char want[64];
        if (n < 1024) {
            snprintf(want, sizeof(want), "%llu B", (unsigned long long)n);
        }
        else {
            double v = (double)n;
            int u = 0;
            while (v >= 1024.0 && u < 5) {
                v /= 1024.0;
                u++;
            }
            snprintf(want, sizeof(want), "%.1f %s", v, units[u]);
        }
        tgc_buf b = {0};
        tgc_buf_bytes(&b, n);
        CHECK_STR(b, want);
        tgc_buf_free(&b);
        snprintf(want, sizeof(want), "%llu", (unsigned long long)n);
        tgc_buf_uint(&b, n);
        CHECK_STR(b, want);
        tgc_buf_free(&b);
        snprintf(want, sizeof(want), "%lld", (long long)n);
        tgc_buf_int(&b, (int64_t)n);
        CHECK_STR(b, want);
        tgc_buf_free(&b);
    }
    tgc_buf b = {0};
    tgc_buf_count(&b, 0);
    tgc_buf_puts(&b, "|");
    tgc_buf_count(&b, 999);
    tgc_buf_puts(&b, "|");
    tgc_buf_count(&b, 1000);
    tgc_buf_puts(&b, "|");
    tgc_buf_count(&b, UINT64_MAX);
    CHECK_STR(b, "0|999|1,000|18,446,744,073,709,551,615");
    tgc_buf_free(&b);
    /* escapers: runs copied in bulk, empty input allocates nothing */
    tgc_buf_dot(&b, "", 0);
    tgc_buf_html(&b, "", 0);
    CHECK(b.data == NULL);
    static const char dot_in[] = "\x01\x7f plain & \"q\" end\\";
    tgc_buf_dot(&b, dot_in, sizeof(dot_in) - 1);
    CHECK_STR(b, " plain &amp; \\\"q\\\" end\\\\");
    tgc_buf_free(&b);
    static const char html_in[] = "a\tb\x7f<i>\x02'z'";
    tgc_buf_html(&b, html_in, sizeof(html_in) - 1);
    CHECK_STR(b, "a\tb\x7f&lt;i&gt;&#39;z&#39;");
    tgc_buf_free(&b);
}

/* tgc_buf_add's inline path writes into room already there; the rest goes through reserve. */
static void
test_buf_paths(void)
{
    tgc_buf b = {0};
    char run[300];
    memset(run, 'x', sizeof(run));
    tgc_buf_add(&b, run, 1);                 /* the first append allocates: 256 bytes */
    CHECK_EQ_U(b.cap, 256);
    tgc_buf_add(&b, run, 254);               /* fills it but for the NUL: still inline */
    CHECK_EQ_U(b.len, 255);
    CHECK_EQ_U(b.cap, 256);
    CHECK(b.data[255] == '\0');
    tgc_buf_add(&b, "y", 1);                 /* one more byte needs room for its NUL: grows */
    CHECK_EQ_U(b.len, 256);
    CHECK(b.cap > 256 && b.data[255] == 'y' && b.data[256] == '\0');
    /* out of memory is sticky, inline path included */
    tgc_buf bad = {0};
    bad.oom = 1;
    tgc_buf_append(&b, &bad);
    CHECK(b.oom && b.cap == 0);
    size_t len = b.len;
    tgc_buf_puts(&b, "z");
    tgc_buf_add(&b, run, 0);
    CHECK_EQ_U(b.len, len);
    CHECK(tgc_buf_reserve(&b, 1) < 0);
    tgc_buf_reset(&b);                       /* keeps the memory and the verdict */
    tgc_buf_puts(&b, "z");
    CHECK(b.oom && b.len == 0);
    tgc_buf_free(&b);
    CHECK(!b.oom && b.data == NULL);
    tgc_buf_puts(&b, "ok");                  /* a freed buffer starts over */
    CHECK_STR(b, "ok");
    tgc_buf_free(&b);
}

static void
test_render(void)
{
    char *svg = NULL, err[256] = "";
    size_t len = 0;
    const char *dot = "digraph g { n0 [label=\"<script>alert(1)</script>\\l\"]; n0 -> n1 [label=\"x\"]; }";
    CHECK_EQ_U(tgc_render_svg(dot, strlen(dot), &svg, &len, err, sizeof(err)), 0);
    CHECK(svg != NULL && strncmp(svg, "<svg", 4) == 0);
    CHECK(svg != NULL && strstr(svg, "<script") == NULL && strstr(svg, "&lt;script&gt;") != NULL);
    tgc_buf page = {0};
    tgc_page p = {"t<", "text & more", "<table></table>", svg, NULL};
    tgc_html_page(&page, &p);
    CHECK(page.data && strstr(page.data, "<title>t&lt;</title>") != NULL);
    CHECK(page.data && strstr(page.data, "text &amp; more") != NULL);
    /* self-contained: nothing is fetched (xmlns URIs are names, not requests) */
    CHECK(page.data && strstr(page.data, "src=") == NULL && strstr(page.data, "<link") == NULL);
    tgc_buf_free(&page);
    free(svg);

    svg = NULL;
    CHECK_EQ_U(tgc_render_svg("digraph { a -> }", 16, &svg, &len, err, sizeof(err)), (unsigned long long)-1);
    CHECK(svg == NULL && strstr(err, "parse") != NULL);
    for (int i = 0; i < 20; i++) {  /* the shared context survives repeated use */
        CHECK_EQ_U(tgc_render_svg("digraph { a -> b }", 18, &svg, &len, err, sizeof(err)), 0);
        free(svg);
    }
    tgc_render_shutdown();
}

/* The line profiler's engine: a PEAK, a CURRENT and a COUNTER. f calls g on its line 11; g
 * peaks at 500 in between; f's line 11 must carry that peak and g's whole delta. A def line
 * (10, 20) gets no record: a call's readings up to its first line go to that line. */
static void
test_lineprof(void)
{
    uint8_t folds[3] = {TGC_LP_PEAK, TGC_LP_CURRENT, TGC_LP_COUNTER};
    tgc_lp p;
    CHECK_EQ_U(tgc_lp_init(&p, 3, folds), 0);
    static const char f_code = 0, g_code = 0;
    int f = tgc_lp_add_code(&p, &f_code, 10), g = tgc_lp_add_code(&p, &g_code, 20);
    CHECK_EQ_U(tgc_lp_add_code(&p, &f_code, 10), (unsigned long long)f);  /* idempotent */
    CHECK_EQ_U(tgc_lp_find(&p, &g_code), (unsigned long long)g);
    int64_t r0[3] = {100, 100, 0}, r1[3] = {100, 100, 1}, r2[3] = {500, 300, 5},
            r3[3] = {300, 100, 7}, r4[3] = {100, 100, 9};
    for (int run = 0; run < 2; run++) {
        tgc_lp_observe(&p, r0);
        CHECK_EQ_U(tgc_lp_enter(&p, (uint32_t)f, 1, 10, 0, r0), 0);
        tgc_lp_observe(&p, r1);
        CHECK_EQ_U(tgc_lp_line(&p, (uint32_t)f, 1, 11, r1), 0);       /* f: line 11 */
        tgc_lp_observe(&p, r1);
        CHECK_EQ_U(tgc_lp_enter(&p, (uint32_t)g, 1, 20, 0, r1), 0);   /* g called */
        tgc_lp_observe(&p, r2);
        CHECK_EQ_U(tgc_lp_line(&p, (uint32_t)g, 1, 21, r2), 0);
        tgc_lp_observe(&p, r3);
        CHECK_EQ_U(tgc_lp_leave(&p, (uint32_t)g, 1, r3), 0);          /* g returns */
        tgc_lp_observe(&p, r4);
        CHECK_EQ_U(tgc_lp_line(&p, (uint32_t)f, 1, 12, r4), 0);
        tgc_lp_observe(&p, r4);
        CHECK_EQ_U(tgc_lp_leave(&p, (uint32_t)f, 1, r4), 0);
    }
    CHECK_EQ_U(p.nframes, 0);
    const int64_t *s = tgc_lp_slot(&p, (uint32_t)f, 11);
    CHECK(s != NULL);
    if (s) {
        CHECK_EQ_U(s[0], 2);              /* hits */
        CHECK_EQ_U(s[1], 500);            /* the callee's peak, charged to the calling line */
        CHECK_EQ_U(s[2], 100);            /* current at the line's end */
        CHECK_EQ_U(s[4 + 1], 0);          /* CURRENT's delta summed: 100 -> 100, twice */
        CHECK_EQ_U(s[4 + 2], 18);         /* COUNTER summed from the call: (9 - 0) twice */
    }
    CHECK(tgc_lp_slot(&p, (uint32_t)f, 10) == NULL && tgc_lp_slot(&p, (uint32_t)g, 20) == NULL);
    s = tgc_lp_slot(&p, (uint32_t)g, 21);  /* from g's call (r1) to its return (r3) */
    CHECK(s != NULL && s[0] == 2 && s[1] == 500 && s[2] == 100 && s[5] == 0 && s[6] == 12);
    CHECK(tgc_lp_slot(&p, (uint32_t)g, 25) == NULL && tgc_lp_slot(&p, (uint32_t)f, 3) == NULL);

    /* a call that returns with no line event is charged to its def line, one hit */
    tgc_lp_reset(&p);
    CHECK_EQ_U(tgc_lp_enter(&p, (uint32_t)g, 1, 20, 0, r0), 0);
    CHECK_EQ_U(tgc_lp_leave(&p, (uint32_t)g, 1, r4), 0);
    s = tgc_lp_slot(&p, (uint32_t)g, 20);
    CHECK(s != NULL && s[0] == 1 && s[6] == 9);

    /* a resumed frame folds without counting; a missed leave is closed by the caller's line;
     * another thread's frame is left alone */
    tgc_lp_reset(&p);
    CHECK_EQ_U(tgc_lp_enter(&p, (uint32_t)g, 2, 21, 0, r0), 0);     /* thread 2 */
    CHECK_EQ_U(tgc_lp_enter(&p, (uint32_t)f, 1, 11, 1, r0), 0);     /* resumed on 11 */
    CHECK_EQ_U(tgc_lp_enter(&p, (uint32_t)g, 1, 20, 0, r0), 0);
    CHECK_EQ_U(tgc_lp_line(&p, (uint32_t)f, 1, 12, r1), 0);         /* g's leave was missed */
    CHECK_EQ_U(p.nframes, 2);
    s = tgc_lp_slot(&p, (uint32_t)f, 11);
    CHECK(s != NULL && s[0] == 1);    /* the first fold of a line counts even when resumed */
    CHECK_EQ_U(tgc_lp_line(&p, (uint32_t)f, 1, 11, r1), 0);
    CHECK_EQ_U(tgc_lp_enter(&p, (uint32_t)f, 1, 11, 1, r1), 0);     /* a second f, resumed */
    CHECK_EQ_U(tgc_lp_leave(&p, (uint32_t)f, 1, r1), 0);
    s = tgc_lp_slot(&p, (uint32_t)f, 11);
    CHECK(s != NULL && s[0] == 1);    /* ...but not again */
    tgc_lp_drop_frames(&p);
    CHECK_EQ_U(p.nframes, 0);

    /* a record per line that ran, whatever its number: before the code's first line, or far
     * after it (a table from the first line on dropped the one and grew to gigabytes for the
     * other) */
    tgc_lp_reset(&p);
    CHECK_EQ_U(tgc_lp_enter(&p, (uint32_t)f, 1, 10, 0, r0), 0);
    CHECK_EQ_U(tgc_lp_line(&p, (uint32_t)f, 1, 3, r1), 0);
    CHECK_EQ_U(tgc_lp_line(&p, (uint32_t)f, 1, INT32_MAX, r2), 0);
    CHECK_EQ_U(tgc_lp_line(&p, (uint32_t)f, 1, 1000000000, r3), 0);
    CHECK_EQ_U(tgc_lp_line(&p, (uint32_t)f, 1, 3, r3), 0);
    CHECK_EQ_U(tgc_lp_leave(&p, (uint32_t)f, 1, r4), 0);
    CHECK(tgc_lp_slot(&p, (uint32_t)f, 10) == NULL && tgc_lp_slot(&p, (uint32_t)f, 11) == NULL);
    s = tgc_lp_slot(&p, (uint32_t)f, 3);
    CHECK(s != NULL && s[0] == 2 && s[4 + 2] == 7);   /* COUNTER: (5 - 0) + (9 - 7) */
    s = tgc_lp_slot(&p, (uint32_t)f, INT32_MAX);
    CHECK(s != NULL && s[0] == 1 && s[1] == 300 && s[4 + 1] == -200);
    s = tgc_lp_slot(&p, (uint32_t)f, 1000000000);
    CHECK(s != NULL && s[0] == 1 && s[4 + 2] == 0);
    CHECK(tgc_lp_slot(&p, (uint32_t)f, INT32_MIN) == NULL);
    tgc_lp_free(&p);

    int64_t rss[2];
    CHECK_EQ_U(tgc_lp_rss_read(rss), 0);
    CHECK(rss[0] > 0 && rss[1] >= rss[0]);
}

int
main(void)
{
    test_ring(1000);
    test_ring(200000);
    test_ancestors();
    test_escapes();
    test_numbers();
    test_buf_paths();
    test_render();
    test_lineprof();
    if (failures) {
        fprintf(stderr, "%d failed\n", failures);
        return 1;
    }
    printf("test_units: all passed\n");
    return 0;
}
