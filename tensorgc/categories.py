"""tensorgc.categories, a module path of the flat layout: importing it hands out the module
tensorgc.allocator.categories itself (the same object: what is set through one path is seen
through the other).
"""
import sys
from typing import TYPE_CHECKING

from .allocator import categories as _module

if TYPE_CHECKING:  # what a type checker reads at this path
    from .allocator.categories import *  # noqa: F401,F403

sys.modules[__name__] = _module
