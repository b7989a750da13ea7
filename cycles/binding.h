/* binding.h: what module/module.c needs of cycles/'s binding (binding.c, testing.c): the method
 * tables it adds to the module, the life of the cycles part of the module state, and the visited
 * mark the detector lends the owner-chain search (graph/). The part's layout stays private to
 * cycles/ (cycles.h). Python.h, module/state.h and tensorgc/owners.h come first. */
#ifndef TGC_CYCLES_BINDING_H
#define TGC_CYCLES_BINDING_H

/* observe_garbage, observe_cycles, observe_tensor_cycles, render_svg, get/set_render_timeout. */
extern PyMethodDef tgc_cycles_methods[];
/* The detector's switches and counters, for tensorgc._tensorgc_testing only (testing.c). */
extern PyMethodDef tgc_cycles_testing_methods[];

/* Allocates and fills st->cycles (st->tensor must be set) and adds the CycleReport and Handle
 * types and GraphvizError to the module. 0, or -1 with an exception. */
int tgc_cycles_exec(PyObject *module, tgc_state *st);
/* Removes every observer and the hook, and stops the render worker (interpreter exit). 0, or -1
 * with an exception. */
int tgc_cycles_shutdown(tgc_cycles *c);
/* Adds the detector's features that depend on the interpreter to `features` (a dict): name ->
 * None where on, or a str saying why off (tensorgc.features() reads it). 0, or -1 with an
 * exception. */
int tgc_cycles_features(const tgc_cycles *c, PyObject *features);
/* The collector's header bit as a visited mark (young.h), usable once tgc_cycles_exec checked the
 * collector's layout; static storage. */
const tgc_heapmark *tgc_cycles_heapmark(void);
/* m_traverse / m_clear / m_free of the part; each takes NULL (no exec yet). */
int tgc_cycles_traverse(tgc_cycles *c, visitproc visit, void *arg);
void tgc_cycles_clear(tgc_cycles *c);
void tgc_cycles_free(tgc_cycles *c);

#endif /* TGC_CYCLES_BINDING_H */
