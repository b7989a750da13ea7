"""The reference-cycle detector's Python half: observe_tensor_cycles and warn_tensor_cycles
(observe.py), the counting of repeated leaks by cycle signature (dedup.py: CycleDedup,
cycle_totals) and torch's _cycles functions create_graph, to_dot and to_html (object_graph.py).
The detector itself is C (cycles/ at the repository's root, in tensorgc._tensorgc).
"""
