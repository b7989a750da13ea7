/* binding.h: what module/module.c needs of allocator/'s binding: its method table. The allocator
 * keeps no module state. Python.h comes first. */
#ifndef TGC_ALLOC_BINDING_H
#define TGC_ALLOC_BINDING_H

/* _alloc_attribute, _device_memory, _timeline, _segmap, _pickle_scan, _check_trace,
 * _pickle_stream. */
extern PyMethodDef tgc_alloc_methods[];

#endif /* TGC_ALLOC_BINDING_H */
