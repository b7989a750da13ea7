"""python -m tensorgc: the tensorgc command (see tensorgc/cli/)."""
import sys

from .cli import main

sys.exit(main())
