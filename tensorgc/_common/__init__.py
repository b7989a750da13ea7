"""What every part of tensorgc uses and nothing of tensorgc below it: the device syntax and the
no-CUDA checks (devices.py), the errors (errors.py), the output directory and the rank in file
names (output.py), this process's rank and its log filter (rank.py), the size format and
memlab's table row (units.py), the snapshot's types (types.py) and what this interpreter
supports (features.py). They import one another and the C module only (devices.py errors.py,
output.py rank.py, features.py tensorgc._tensorgc), so any part may import them.
"""
