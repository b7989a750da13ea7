#!/bin/sh
# Run the tensorgc benchmarks (B1 to B6, see bench/run_all.py); markdown on stdout, progress on stderr.
# Usage: bench/run_all.sh [--repeat N] [--timeout S] [--json-dir DIR] [--quick] ...
# (all arguments go to bench/run_all.py; PYTHON overrides the interpreter)
exec "${PYTHON:-python3}" "$(dirname "$0")/run_all.py" "$@"
