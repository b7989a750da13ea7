/* infer.c: what an allocation stack says of its block (the phase it ran in, the kind of tensor it
 * makes or frees), and the phase spans a trace's stacks make (contract in
 * include/tensorgc/infer.h). timeline.c applies the rules; columns.c reads the frames out of
 * Python objects. Plain C: the names matched are torch's own (file suffixes and function names
 * of torch/nn, torch/optim, torch/autograd; C++ symbols of the autograd engine and cuBLAS). */
#include <stdlib.h>
#include <string.h>

#include "tensorgc/infer.h"

static int
inf__eq(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    return n == k && memcmp(s, lit, k) == 0;
}

static int
inf__ends(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    return n >= k && memcmp(s + n - k, lit, k) == 0;
}

static int
inf__has(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    if (k > n) {
        return 0;
    }
    for (const char *p = s, *end = s + n - k; p <= end; p++) {
        p = memchr(p, lit[0], (size_t)(end - p) + 1);
        if (p == NULL) {
            return 0;
        }
        if (memcmp(p, lit, k) == 0) {
            return 1;
        }
    }
    return 0;
}

/* name is one of the NULL-terminated list */
static int
inf__in(const char *s, size_t n, const char *const *names)
{
    for (; *names != NULL; names++) {
        if (inf__eq(s, n, *names)) {
            return 1;
        }
    }
    return 0;
}

/* A Python frame: a ".py" file or a "<...>" pseudo-file (exec'd code, a notebook cell). */
static int
inf__python(const tgc_frame *f)
{
    return inf__ends(f->file, f->file_len, ".py") ||
           (f->file_len >= 2 && f->file[0] == '<' && f->file[f->file_len - 1] == '>');
}

/* A file of torch under `sub` (torch/<sub>...): the path holds "/torch/<sub>", or begins with
 * "torch/<sub>". sub is not empty. */
static int
inf__torch(const tgc_frame *f, const char *sub)
{
    char want[96];
    size_t k = strlen(sub);
    if (k + 8 > sizeof(want)) {
        return 0;
    }
    memcpy(want, "/torch/", 7);
    memcpy(want + 7, sub, k + 1);
    return inf__has(f->file, f->file_len, want) ||
           (f->file_len >= k + 6 && memcmp(f->file, want + 1, k + 6) == 0);
}

/* Any file of the torch package: a "torch" directory under site-packages or dist-packages, or
 * one holding torch's own subpackages (a checkout) -- not any path through a directory named
 * torch (a virtual environment at /opt/torch holds every library). */
static int
inf__torch_package(const tgc_frame *f)
{
    static const char *const subs[] = {
        "nn/", "optim/", "autograd/", "utils/", "distributed/", "amp/", "cuda/", "fx/", "ao/",
        "jit/", "export/", "compiler/", "testing/", "multiprocessing/", "_", NULL};
    const char *s = f->file, *end = f->file + f->file_len;
    if (f->file_len >= 6 && memcmp(s, "torch/", 6) == 0) {
        return 1;
    }
    for (const char *p = s; end - p >= 7; p++) {
        p = memchr(p, '/', (size_t)(end - p));
        if (p == NULL || end - p < 7) {
            return 0;
        }
        if (memcmp(p, "/torch/", 7) != 0) {
            continue;
        }
        if (p - s >= 9 && memcmp(p - 9, "-packages", 9) == 0) {
            return 1;
        }
        for (const char *const *sub = subs; *sub != NULL; sub++) {
            size_t k = strlen(*sub);
            if ((size_t)(end - (p + 7)) >= k && memcmp(p + 7, *sub, k) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

/* A module file of torch.nn (a .py under torch/nn/modules). */
static int
inf__nn_module_file(const tgc_frame *f)
{
    return inf__torch(f, "nn/modules/");
}

static const char *const module_calls[] = {"_call_impl", "_wrapped_call_impl", "__call__", NULL};
static const char *const module_moves[] = {
    "_apply", "convert", "to", "cuda", "xpu", "half", "float", "double", "bfloat16", "type",
    "to_empty", NULL};
static const char *const module_inits[] = {
    "__init__", "reset_parameters", "_reset_parameters", "initialize_parameters", NULL};
static const char *const autograd_entries[] = {"backward", "grad", "_make_grads", NULL};
static const char *const recomputes[] = {"unpack_hook", "recompute_fn", NULL};
static const char *const scaler_steps[] = {"unscale_", "_unscale_grads_", "step", "update", NULL};

static uint16_t
inf__python_facts(const tgc_frame *f, int64_t *apply_line)
{
    const char *nm = f->name;
    size_t nn = f->name_len;
    uint16_t b = TGC_FF_PYTHON;
    if (inf__torch(f, "utils/checkpoint.py") && inf__in(nm, nn, recomputes)) {
        b |= TGC_FF_BACKWARD | TGC_FF_RECOMPUTE;
    }
    else if (inf__eq(nm, nn, "backward") ||
             (inf__torch(f, "autograd/__init__.py") && inf__in(nm, nn, autograd_entries)) ||
             (inf__torch(f, "autograd/graph.py") && inf__eq(nm, nn, "_engine_run_backward"))) {
        b |= TGC_FF_BACKWARD;
    }
    int module_py = inf__torch(f, "nn/modules/module.py");
    if (module_py && inf__in(nm, nn, module_calls)) {
        b |= TGC_FF_FORWARD;
    }
    else if ((inf__torch(f, "optim/") && !inf__eq(nm, nn, "zero_grad")) ||
             (inf__eq(nm, nn, "step") && inf__has(f->file, f->file_len, "optim")) ||
             inf__torch(f, "nn/utils/clip_grad.py") ||
             (inf__ends(f->file, f->file_len, "amp/grad_scaler.py") &&
              inf__in(nm, nn, scaler_steps))) {
        b |= TGC_FF_OPTIMIZER;
    }
    if (inf__eq(nm, nn, "zero_grad")) {
        b |= TGC_FF_UNGRAD;
    }
    else if (module_py && inf__eq(nm, nn, "register_buffer")) {
        b |= TGC_FF_BUFFER;
    }
    else if ((module_py && inf__in(nm, nn, module_moves)) ||
             (inf__nn_module_file(f) && inf__in(nm, nn, module_inits)) ||
             inf__torch(f, "nn/parameter.py") || inf__torch(f, "nn/init.py")) {
        b |= TGC_FF_PARAM;
    }
    else if (inf__eq(nm, nn, "__init__") && !inf__torch_package(f)) {
        b |= TGC_FF_USER_INIT;  /* a model's own constructor, if no phase is around it */
    }
    if (module_py && inf__eq(nm, nn, "_apply")) {
        b |= TGC_FF_APPLY;
        *apply_line = f->line;
    }
    return b;
}

/* C++ functions of torch that allocate a library's workspace, and nothing else: cuBLAS's per
 * handle and stream (setWorkspaceForHandle) and cuBLASLt's (getCUDABlasLtWorkspace), both kept
 * for the process's life; cuDNN's per call (the v7 convolution's Workspace struct, the v8
 * frontend's run_conv_plan). cuSOLVER's work buffers come from the at::native function that
 * also makes the results: no frame of their own. */
static const char *const workspaces[] = {
    "setWorkspaceForHandle", "BlasLtWorkspace", "::Workspace::Workspace(", "run_conv_plan", NULL};

/* some name of the NULL-terminated list occurs in s */
static int
inf__in_any(const char *s, size_t n, const char *const *names)
{
    for (; *names != NULL; names++) {
        if (inf__has(s, n, *names)) {
            return 1;
        }
    }
    return 0;
}

static uint16_t
inf__cpp_facts(const tgc_frame *f)
{
    const char *nm = f->name;
    size_t nn = f->name_len;
    uint16_t b = 0;
    if (inf__has(nm, nn, "torch::autograd::Engine::") ||
        inf__has(nm, nn, "PythonEngine::thread_init")) {
        b |= TGC_FF_BACKWARD;
    }
    if (inf__has(nm, nn, "AccumulateGrad::") ||
        inf__has(nm, nn, "c10d::Reducer::initialize_buckets")) {
        b |= TGC_FF_ACCUMULATE;
    }
    if (inf__in_any(nm, nn, workspaces)) {
        b |= TGC_FF_WORKSPACE;
    }
    if (inf__has(nm, nn, "THPVariable_set_grad")) {
        b |= TGC_FF_SET_GRAD;
    }
    return b;
}

void
tgc_frame_facts_of(const tgc_frame *f, tgc_frame_facts *out)
{
    out->bits = 0;
    out->apply_line = -1;
    if (f->file == NULL || f->name == NULL) {
        return;
    }
    out->bits = inf__python(f) ? inf__python_facts(f, &out->apply_line) : inf__cpp_facts(f);
}

uint8_t
tgc_stack_hint(const tgc_frame_facts *f, size_t nf, uint8_t frameless, int64_t *apply_line)
{
    int phase = -1, kind = -1, backward = 0, python = 0, user_init = 0, recompute = 0;
    uint16_t any = 0;  /* the C++ frames' facts, anywhere */
    int64_t line = -1;
    *apply_line = -1;
    if (nf == 0) {
        return frameless;
    }
    for (size_t i = 0; i < nf; i++) {
        uint16_t b = f[i].bits;
        backward |= (b & TGC_FF_BACKWARD) != 0;
        recompute |= (b & TGC_FF_RECOMPUTE) != 0;
        if (!(b & TGC_FF_PYTHON)) {
            any |= b;
            continue;
        }
        python++;
        /* Python frames go from the innermost out: the first of each sort decides */
        if (phase < 0 && (b & (TGC_FF_FORWARD | TGC_FF_OPTIMIZER))) {
            phase = b & TGC_FF_FORWARD ? TGC_HP_FORWARD : TGC_HP_OPTIMIZER;
        }
        if (kind < 0) {
            if (b & TGC_FF_UNGRAD) {
                kind = TGC_HK_UNGRAD;
            }
            else if (b & TGC_FF_BUFFER) {
                kind = TGC_HK_BUFFER;
            }
            else if (b & TGC_FF_PARAM) {
                kind = TGC_HK_PARAM;
            }
            else if (b & TGC_FF_USER_INIT) {
                user_init = 1;
            }
        }
        if ((b & TGC_FF_APPLY) && line < 0) {
            line = f[i].apply_line;  /* the innermost one: the loop that moved this tensor */
        }
    }
    if (any & TGC_FF_ACCUMULATE) {
        return TGC_HINT(TGC_HP_BACKWARD, TGC_HK_GRAD);
    }
    /* backward wins over every other phase: a recompute runs a forward inside it, the engine
     * runs Python hooks */
    int ph = backward ? TGC_HP_BACKWARD : phase >= 0 ? phase
             : python ? TGC_HP_OUTSIDE : TGC_HP_UNKNOWN;
    int k = any & TGC_FF_WORKSPACE ? TGC_HK_WORKSPACE : any & TGC_FF_SET_GRAD ? TGC_HK_UNGRAD
            : kind >= 0 ? kind : user_init && ph == TGC_HP_OUTSIDE ? TGC_HK_PARAM
            : recompute ? TGC_HK_RECOMPUTE : TGC_HK_PLAIN;
    if (k == TGC_HK_PARAM && kind == TGC_HK_PARAM) {
        *apply_line = line;
    }
    return (uint8_t)(TGC_HINT(ph, k) | (recompute ? TGC_HINT_RECOMPUTE : 0));
}

/* ---------------------------------------------------------------------- phase spans */

typedef struct {
    tgc_span *v;
    size_t n, cap;
} inf_spans;

static int
inf__push(inf_spans *s, uint8_t phase, int64_t t0, int64_t t1)
{
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 64;
        tgc_span *p = realloc(s->v, c * sizeof(tgc_span));
        if (p == NULL) {
            return -1;
        }
        s->v = p;
        s->cap = c;
    }
    s->v[s->n++] = (tgc_span){t0, t1 >= t0 ? t1 : t0, phase};
    return 0;
}

int
tgc_infer_spans(const tgc_event *ev, size_t n, tgc_span **out, size_t *nout)
{
    inf_spans s = {NULL, 0, 0};
    int cur = -1;            /* TGC_PHASE_* of the run open, -1: none */
    int64_t t0 = 0, last = 0;
    *out = NULL;
    *nout = 0;
    for (size_t i = 0; i < n; i++) {
        const tgc_event *e = &ev[i];
        if ((e->kind != TGC_EV_ALLOC && e->kind != TGC_EV_FREE) || e->time == TGC_TIME_NONE) {
            continue;
        }
        int64_t t = e->time;
        int want;            /* the phase this event belongs to, -1: it ends the run open */
        switch (TGC_HINT_PHASE(e->hint)) {
        case TGC_HP_FRAMELESS:
            if (cur == TGC_PHASE_BACKWARD || cur == TGC_PHASE_FORWARD) {
                want = TGC_PHASE_BACKWARD;
                break;
            }
            continue;        /* after a step or outside: a thread of its own, neutral */
        case TGC_HP_OUTSIDE:
            if (cur == TGC_PHASE_FORWARD) {
                continue;    /* kept open: what comes next decides */
            }
            want = -1;
            break;
        case TGC_HP_FORWARD:
            want = TGC_PHASE_FORWARD;
            break;
        case TGC_HP_BACKWARD:
            want = TGC_PHASE_BACKWARD;
            break;
        case TGC_HP_OPTIMIZER:
            want = TGC_PHASE_OPTIMIZER;
            break;
        default:
            continue;        /* UNKNOWN: neutral */
        }
        if (want == cur) {
            last = t;
            continue;
        }
        if (cur >= 0) {
            /* a forward's code outside modules before its backward (the loss) is the forward's */
            int64_t end = cur == TGC_PHASE_FORWARD && want == TGC_PHASE_BACKWARD && t - 1 > last
                          ? t - 1 : last;
            if (inf__push(&s, (uint8_t)cur, t0, end) < 0) {
                free(s.v);
                return -1;
            }
        }
        cur = want;
        t0 = last = t;
    }
    if (cur >= 0 && inf__push(&s, (uint8_t)cur, t0, last) < 0) {
        free(s.v);
        return -1;
    }
    *out = s.v;
    *nout = s.n;
    return 0;
}
