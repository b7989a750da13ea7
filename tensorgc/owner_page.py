"""tensorgc.owner_page, a module path of the flat layout: importing it hands out the module
tensorgc.reporter.owner_page itself (the same object: what is set through one path is seen
through the other).
"""
import sys
from typing import TYPE_CHECKING

from .reporter import owner_page as _module

if TYPE_CHECKING:  # what a type checker reads at this path
    from .reporter.owner_page import *  # noqa: F401,F403

sys.modules[__name__] = _module
