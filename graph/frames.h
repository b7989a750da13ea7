/* frames.h: the contract of frames.c, private to graph/ (its one user is binding.c's
 * _frame_locals, which tensorgc/reporter/owner_chains.py calls for the running frames' roots).
 * Python.h comes first; GIL. */
#ifndef TGC_GRAPH_FRAMES_H
#define TGC_GRAPH_FRAMES_H

/* A running (or finished) function frame's local variables, cells read through, as a new dict
 * that no one else holds: the frame and its f_locals are not touched. None for a frame whose
 * locals are a namespace (a module's or a class body's: read frame.f_locals); NotImplemented
 * where this interpreter's frame layout is unknown here (3.13+: frame.f_locals is a proxy that
 * keeps nothing, so a copy of it serves). New reference, or NULL with an exception. */
PyObject *tgc_frame_snapshot(PyObject *frame);

#endif /* TGC_GRAPH_FRAMES_H */
