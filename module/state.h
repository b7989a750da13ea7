/* state.h: the module state of tensorgc._tensorgc, as the bindings see it (module.c owns it).
 *
 * Why a table of parts: each subsystem keeps its own state struct, declared in its own header
 * next to the engine that uses it (tensor/: include/tensorgc/tensor.h, cycles/: cycles.h,
 * reporter/: reporter.h), and the module state only points at them. So a subsystem's binding
 * reaches its part through this header without including any other subsystem's header (the part
 * types are incomplete here), and engines are handed their own part, never the module. The
 * tensor part is shared: cycles/ and reporter/ keep a borrowed pointer to it in their own parts.
 *
 * Lifetime: module exec makes the tensor part, then each subsystem's exec allocates its own part
 * (zeroed) and fills it; m_clear clears each part's references and keeps its memory, since
 * objects that outlive the clear (a report, a handle, a thread's tracer) may still look at it;
 * m_free frees the memory. A part is NULL before its exec and after m_free. All of it is used
 * with the GIL held. Python.h comes first. */
#ifndef TGC_MODULE_STATE_H
#define TGC_MODULE_STATE_H

#include "tensorgc/tensor.h"

typedef struct tgc_cycles tgc_cycles;          /* cycles/cycles.h */
typedef struct tgc_reporter tgc_reporter;      /* reporter/reporter.h */

typedef struct {
    tgc_tensor_state *tensor;   /* include/tensorgc/tensor.h */
    tgc_cycles *cycles;
    tgc_reporter *reporter;
} tgc_state;

/* The state of a module made from tensorgc._tensorgc's definition (borrowed; NULL for NULL). */
static inline tgc_state *
tgc_state_of(PyObject *module)
{
    return module ? (tgc_state *)PyModule_GetState(module) : NULL;
}

#endif /* TGC_MODULE_STATE_H */
