/* report_build.h: the contract of the builder, which makes one collection's garbage into a
 * report's model (report_model.h) once: report_build.c (the reference graph, the groups of
 * identical leaks, what fits in a bounded drawing), report_tensors.c (the tensors of interest),
 * report_hint.c (each group's cycle and fix), and report_objects.c, which builds the graph of
 * any list of objects from the same parts. The builder calls no writer; report.c calls it.
 * Python.h and cycles.h come first; everything here needs the GIL. */
#ifndef TGC_REPORT_BUILD_H
#define TGC_REPORT_BUILD_H

#include "report_model.h"

/* report_build.c */
/* Fills m (zeroed by the caller) from the garbage objs (a list owning it, borrowed by the model
 * from then on) for observers with filter f: 1 when it holds tensors of interest in a cycle, 0
 * when not (m may hold parts), -1 with an exception (m may hold parts); the caller frees m
 * (tgc_report_model_free) in every case. Runs the user's reprs and the filter's predicate; what
 * they raise is logged. */
int tgc_report_model_build(tgc_cycles *c, PyObject *objs, const tgc_filter *f,
                           tgc_report_model *m);

/* report_tensors.c */
/* The tensors of interest in m's garbage (filter f), read into m->ts and marked in
 * m->is_target; 0 when there are none. Runs the filter's predicate; errors are logged, not
 * raised. */
int tgc_report_tensors(tgc_report_model *m, const tgc_filter *f);
/* Allocation stacks from torch's CUDA memory history, when it is recording: for each CUDA tensor
 * of ts[0..n), torch's traceback of its storage's address (torch._C._cuda_allocationTraceback),
 * or, on a torch without it, the frames of the active block of torch.cuda.memory._snapshot()
 * that contains the storage. Never raises. */
void tgc_report_stacks(tgc_rtensor *ts, Py_ssize_t n);
/* Makes the tensor's line, "Tensor float32[4] on cpu (16 B)", into rt->line, once (no memory
 * shows in rt->line.oom). rt->info must be set. Leaves no exception set. */
void tgc_report_tensor_line(tgc_rtensor *rt);

/* report_hint.c */
/* Each group's cycle and fix, as strs into m->groups[k].cycle and .hint: for a drawn group the
 * shortest cycle in the drawn references, spelled with type names and labels, and the
 * reference most likely meant to be weak (a self-reference, a suspended generator, a kept
 * traceback, a closure, a bound method, else the back-reference to an owner); for a group not
 * drawn, that it is not. 0, or -1 with an exception. */
int tgc_report_hints(tgc_report_model *m);

#endif /* TGC_REPORT_BUILD_H */
