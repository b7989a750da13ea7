/* test_units.c: the plain-C units of cycles/ (graph engine, escapers, Graphviz rendering, HTML
 * page) as a standalone program, so `make valgrind` checks them with no interpreter around.
 * Exits non-zero on the first failed check; prints both operands. */
#include "tgc.h"

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
    long picked = tgc_pick(&g, &a, 0, 50, draw);
    CHECK_EQ_U((unsigned long long)picked, 50);
    CHECK(draw[n] && draw[n / 2]);
    tgc_analysis_free(&a);
    tgc_graph_free(&g);
    free(src);
    free(dst);
    free(target);
    free(draw);
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

int
main(void)
{
    test_ring(1000);
    test_ring(200000);
    test_escapes();
    test_render();
    if (failures) {
        fprintf(stderr, "%d failed\n", failures);
        return 1;
    }
    printf("test_units: all passed\n");
    return 0;
}
