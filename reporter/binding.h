/* binding.h: what module/module.c needs of reporter/'s binding: the method tables it adds to the
 * module (binding.c's, and the line profiler's event sources'), and the life of the reporter part
 * of the module state. The part's layout stays private to reporter/ (reporter.h). Python.h and
 * module/state.h come first. */
#ifndef TGC_REPORTER_BINDING_H
#define TGC_REPORTER_BINDING_H

/* _live_tensors, _track_tensors, _index_hold, _index_release, _storage_keys, _tensor_rows,
 * _is_tensor. */
extern PyMethodDef tgc_reporter_methods[];
/* The line profiler's event sources: sys.monitoring callbacks (lineprof_monitoring.c) and the C
 * tracer's switch (lineprof_trace.c). */
extern PyMethodDef tgc_lineprof_monitoring_methods[];
extern PyMethodDef tgc_lineprof_trace_methods[];

/* Allocates and fills st->reporter (st->tensor must be set) and adds the _LineProfiler type and
 * _lp_thread_hook to the module. 0, or -1 with an exception. */
int tgc_reporter_exec(PyObject *module, tgc_state *st);
/* Turns the tensor index off (interpreter exit). 0, or -1 with an exception. */
int tgc_reporter_shutdown(tgc_reporter *r);
/* Adds the reporter's features that depend on the interpreter to `features`, as
 * tgc_cycles_features does. 0, or -1 with an exception. */
int tgc_reporter_features(const tgc_reporter *r, PyObject *features);
/* m_traverse / m_clear / m_free of the part; each takes NULL (no exec yet). */
int tgc_reporter_traverse(tgc_reporter *r, visitproc visit, void *arg);
void tgc_reporter_clear(tgc_reporter *r);
void tgc_reporter_free(tgc_reporter *r);

#endif /* TGC_REPORTER_BINDING_H */
