"""tensorgc's version: one place, read by the package, the command line and setup.cfg."""
__version__ = "0.1.0"
