/* binding.h: what module/module.c needs of graph/binding.c: its method tables (_owner_search,
 * _owner_labels, _thread_states, _frame_locals, whose one user is
 * tensorgc/reporter/owner_chains.py; and _owner_marks, for tensorgc._tensorgc_testing only) and
 * the visited mark the search borrows, which module.c lends from the cycle detector (the graph
 * engine includes nothing of it). Python.h and tensorgc/owners.h come first. */
#ifndef TGC_GRAPH_BINDING_H
#define TGC_GRAPH_BINDING_H

extern PyMethodDef tgc_owners_methods[];
extern PyMethodDef tgc_owners_testing_methods[];

/* Every later owner search borrows mark (borrowed: static storage; NULL: none, each search keeps
 * its own visited map). Process-wide; call at module exec, GIL held. */
void tgc_owners_lend_mark(const tgc_heapmark *mark);

#endif /* TGC_GRAPH_BINDING_H */
