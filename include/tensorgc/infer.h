/* infer.h: the contract of the categories inferred from allocation stacks (allocator/infer.c),
 * plain C, no Python. For a snapshot torch recorded alone (no tensorgc.categorize marks), the
 * stacks of its trace entries are the evidence, as the ops are for torch's profiler: each
 * distinct stack is read once into a hint (tgc_stack_hint), the hints of a trace's events in
 * order make phase spans (tgc_infer_spans), and timeline.c's rules 8-14 (timeline.h) give each
 * allocation a category from its stacks' hints and its lifetime against those spans.
 *
 * A hint is one byte: bits 0-2 the phase the stack ran in (TGC_HP_*), bits 3-5 what it says of
 * the block it allocates or frees (TGC_HK_*), bit 6 (TGC_HINT_RECOMPUTE) whether it ran under a
 * checkpoint's recompute, whatever its kind (a workspace made there too). Frames are read as
 * torch records them: innermost first; with C++ frames (stacks="all") the C++ frames come
 * first, then the innermost Python frame, the interpreter's frames, and the other Python
 * frames -- so Python frames, taken in order, go from the innermost out. A frame is Python
 * when its file ends in ".py" or is a "<...>" pseudo-file (exec'd code, a notebook cell). */
#ifndef TENSORGC_INFER_H
#define TENSORGC_INFER_H

#include <stddef.h>
#include <stdint.h>

#include "tensorgc/timeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The phase a stack ran in. UNKNOWN: nothing known (no stack id, only unrecognised C++ frames):
 * neutral. FRAMELESS: no frames at all in a trace whose other stacks have Python frames: a
 * thread without Python, which in training is the autograd engine's (backward). OUTSIDE: Python
 * frames, none of a phase (the training loop's own code). FORWARD: under a module's __call__.
 * BACKWARD: on the autograd engine's thread (its C++ frames) or under backward()/autograd.grad/
 * a custom Function's backward/checkpoint's recompute. OPTIMIZER: under torch.optim (zero_grad
 * excepted), another library's optimizer step, grad clipping or GradScaler's unscale/step. */
enum {
    TGC_HP_UNKNOWN = 0, TGC_HP_FRAMELESS, TGC_HP_OUTSIDE, TGC_HP_FORWARD, TGC_HP_BACKWARD,
    TGC_HP_OPTIMIZER
};
/* What a stack says of its block. PARAM: Module.to/_apply (and .cuda, .half...), a torch
 * module's __init__/reset_parameters, torch.nn.init, Parameter; outside every phase, a user
 * __init__ too (a model's constructor). BUFFER: register_buffer, or _apply's buffer loop (see
 * tgc_stack_hint's apply_line). GRAD: what it allocates is a grad: AccumulateGrad's allocation,
 * DDP's gradient buckets (what AccumulateGrad frees is the incoming grad it summed: no grad).
 * WORKSPACE: a library's workspace: a cuBLAS/cuBLASLt handle's (kept for the process's life),
 * a cuDNN convolution's (freed after the call). UNGRAD: what it frees is a grad: zero_grad, a
 * grad's setter (p.grad = None). RECOMPUTE: run by a non-reentrant checkpoint's recompute
 * inside a backward (torch.utils.checkpoint's unpack hook), and of no other kind. */
enum {
    TGC_HK_PLAIN = 0, TGC_HK_PARAM, TGC_HK_BUFFER, TGC_HK_GRAD, TGC_HK_WORKSPACE, TGC_HK_UNGRAD,
    TGC_HK_RECOMPUTE
};

#define TGC_HINT(phase, kind) ((uint8_t)((phase) | ((kind) << 3)))
#define TGC_HINT_PHASE(h) ((uint8_t)((h) & 7))
#define TGC_HINT_KIND(h) ((uint8_t)(((h) >> 3) & 7))
#define TGC_HINT_RECOMPUTE 0x40

/* One frame's fields: UTF-8, not NUL-terminated; file or name NULL when the field is absent or
 * not a string (such a frame says nothing). */
typedef struct {
    const char *file, *name;
    size_t file_len, name_len;
    int64_t line;
} tgc_frame;

/* What one frame says (tgc_frame_facts_of), so that a frame shared by many stacks (torch's
 * pickles share them) is read once: TGC_FF_* bits and, with TGC_FF_APPLY, the line of its
 * torch.nn.Module._apply frame. */
enum {
    TGC_FF_PYTHON = 1 << 0,     /* a Python frame (else C++) */
    TGC_FF_BACKWARD = 1 << 1,   /* a backward frame, Python or the engine's C++ */
    TGC_FF_FORWARD = 1 << 2,    /* a module's __call__ */
    TGC_FF_OPTIMIZER = 1 << 3,  /* an optimizer's step, clipping, GradScaler's step */
    TGC_FF_PARAM = 1 << 4,      /* Module.to/_apply..., a torch module's constructor, nn.init */
    TGC_FF_BUFFER = 1 << 5,     /* register_buffer */
    TGC_FF_UNGRAD = 1 << 6,     /* zero_grad */
    TGC_FF_USER_INIT = 1 << 7,  /* an __init__ that is not torch's */
    TGC_FF_APPLY = 1 << 8,      /* Module._apply itself */
    TGC_FF_ACCUMULATE = 1 << 9, /* AccumulateGrad, DDP's bucket setup (C++) */
    TGC_FF_WORKSPACE = 1 << 10, /* a library's workspace: cuBLAS, cuDNN (C++) */
    TGC_FF_SET_GRAD = 1 << 11,  /* a grad's setter (C++) */
    TGC_FF_RECOMPUTE = 1 << 12  /* checkpoint's recompute (a backward frame too) */
};

typedef struct {
    uint16_t bits;
    int64_t apply_line;
} tgc_frame_facts;

/* Frames read from each end of a stack: its innermost C++ and Python frames are at the start,
 * the outer Python frames (the module call, the optimizer's step) at the end; a file may repeat
 * a stack of millions of frames. */
#define TGC_HINT_FRAMES 96

/* The frames of a stack to read: indices [0, head) and [tail, n). */
static inline void
tgc_hint_window(size_t n, size_t *head, size_t *tail)
{
    *head = n < TGC_HINT_FRAMES ? n : TGC_HINT_FRAMES;
    *tail = n - *head > TGC_HINT_FRAMES ? n - TGC_HINT_FRAMES : *head;
}

/* What one frame says; a frame without a file or a name says nothing (bits 0). */
void tgc_frame_facts_of(const tgc_frame *f, tgc_frame_facts *out);

/* The hint of one stack from the facts of its window's frames (tgc_hint_window, in order: the
 * head's then the tail's), nf of them; a stack without frames: `frameless` (TGC_HP_FRAMELESS
 * when the trace has Python frames elsewhere, else TGC_HP_UNKNOWN). *apply_line: for a PARAM
 * stack made under torch.nn.Module._apply, the line of its innermost _apply frame (parameters
 * are moved at one line, buffers at a later one: the caller marks BUFFER the stacks of a later
 * line than the first), else -1. Precedence: AccumulateGrad; then the phase (the engine's
 * thread or a backward frame anywhere; else the innermost Python frame of a phase; else OUTSIDE
 * with Python frames); the kind: a workspace, a grad's setter (UNGRAD), else the innermost
 * Python frame of a kind, else a user __init__ outside every phase (PARAM), else RECOMPUTE
 * under a checkpoint's recompute. */
uint8_t tgc_stack_hint(const tgc_frame_facts *f, size_t nf, uint8_t frameless,
                       int64_t *apply_line);

/* Phase spans from the hints of a trace's events (ev in order, hints in ev[i].hint; ALLOC and
 * FREE events count, others are skipped). A span is a run of events of one phase, from the first
 * one's time to the last one's; FRAMELESS events continue a backward, or start one right after
 * a forward; UNKNOWN ones are neutral; OUTSIDE ones end a backward or an optimizer run, and
 * inside a forward are kept for what comes next: another forward event continues the forward
 * (the loop's code between two module calls), a backward one ends it just before the backward
 * begins (the loss computed outside a module), an optimizer one ends it at its last event.
 * *out: malloc'd, *nout spans in time order (the caller frees it). 0, or -1 out of memory. */
int tgc_infer_spans(const tgc_event *ev, size_t n, tgc_span **out, size_t *nout);

#ifdef __cplusplus
}
#endif
#endif /* TENSORGC_INFER_H */
