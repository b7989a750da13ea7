/* owners_binding.h: what module/module.c needs of owners_binding.c: its method table
 * (_owner_search, _owner_labels, _thread_states; tensorgc/owners.py is their one user). */
#ifndef TGC_OWNERS_BINDING_H
#define TGC_OWNERS_BINDING_H

extern PyMethodDef tgc_owners_methods[];

#endif /* TGC_OWNERS_BINDING_H */
