"""python -m tensorgc.cli: the tensorgc command, as python -m tensorgc."""
import sys

from . import main

sys.exit(main())
