/* report_text.c: the words of a report (contract in report_write.h): a header line, then per
 * group of leaks its cycle, what it holds and its fix, within the text's bounds. Reads the model
 * only: the cycles, fixes and tensor lines were made by the builder. */
#include "cycles.h"
#include "report_write.h"

/* Appends at most TGC_TEXT_PART bytes of str s, cut. 0, or -1 with an exception. */
static int
text__part(tgc_buf *o, PyObject *s)
{
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);  /* lives as long as s */
    if (u == NULL) {
        return -1;
    }
    tgc_report_add_cut(o, u, (size_t)n, TGC_TEXT_PART);
    return 0;
}

int
tgc_report_write_text(const tgc_report_model *m, int generation, tgc_buf *text)
{
    uint64_t unlisted_bytes = 0, unlisted_tensors = 0;
    tgc_buf_puts(text, "tensorgc: garbage collection (generation ");
    tgc_buf_int(text, generation);
    tgc_buf_puts(text, ") found ");
    tgc_buf_count(text, m->a.kept);
    tgc_buf_puts(text, " objects in reference cycles keeping ");
    tgc_buf_count(text, m->ntensors);
    tgc_buf_puts(text, m->ntensors == 1 ? " tensor (" : " tensors (");
    tgc_buf_bytes(text, m->total);
    tgc_buf_puts(text, ") alive until the collector ran; they are freed now.\n");
    for (uint32_t k = 0; k < m->ngroups; k++) {
        const tgc_group *gi = &m->groups[k];
        if (k >= TGC_TEXT_GROUPS) {
            /* the shapes past the text's bound are summed up (report.groups has each) */
            unlisted_bytes += gi->total_bytes;
            unlisted_tensors += gi->total_targets;
            continue;
        }
        tgc_buf_puts(text, "  #");
        tgc_buf_uint(text, k + 1);
        tgc_buf_puts(text, " ");
        if (gi->count > 1) {
            tgc_buf_puts(text, "\xc3\x97");
            tgc_buf_count(text, gi->count);
            tgc_buf_puts(text, " ");
        }
        tgc_buf_puts(text, "cycle ");
        if (PyUnicode_GET_LENGTH(gi->cycle) > 0) {
            if (text__part(text, gi->cycle) < 0) {
                return -1;
            }
        }
        else {
            tgc_buf_puts(text, "(too large to spell out)");
        }
        tgc_buf_puts(text, " (");
        tgc_buf_count(text, gi->nodes);
        tgc_buf_puts(text, gi->count > 1 ? " objects each) holds " : " objects) holds ");
        tgc_buf_count(text, gi->targets);
        tgc_buf_puts(text, gi->targets == 1 ? " tensor" : " tensors");
        if (gi->count > 1) {
            tgc_buf_puts(text, " each");
        }
        /* the largest tensor of the representative */
        if (gi->best != TGC_NONE) {
            tgc_buf_puts(text, gi->targets > 1 ? ", largest " : ": ");
            tgc_buf_append(text, &m->ts[gi->best].line);
        }
        tgc_buf_puts(text, "; ");
        tgc_buf_bytes(text, gi->total_bytes);
        tgc_buf_puts(text, " in all\n      fix: ");
        if (text__part(text, gi->hint) < 0) {
            return -1;
        }
        tgc_buf_puts(text, "\n");
    }
    if (m->ngroups > TGC_TEXT_GROUPS) {
        tgc_buf_puts(text, "  \xe2\x80\xa6 ");
        tgc_buf_count(text, m->ngroups - TGC_TEXT_GROUPS);
        tgc_buf_puts(text, " more leak shapes holding ");
        tgc_buf_count(text, unlisted_tensors);
        tgc_buf_puts(text, unlisted_tensors == 1 ? " tensor (" : " tensors (");
        tgc_buf_bytes(text, unlisted_bytes);
        tgc_buf_puts(text, ") are not listed here; report.groups has every one\n");
    }
    if (text->len > TGC_TEXT_MAX - 128) {
        size_t n = TGC_TEXT_MAX - 128;
        while (n > 0 && ((unsigned char)text->data[n] & 0xC0) == 0x80) {
            n--;
        }
        text->len = n;
        text->data[n] = '\0';
        tgc_buf_puts(text, "\n  \xe2\x80\xa6 the text is cut at 64 KiB; report.groups has every leak\n");
    }
    return 0;
}
