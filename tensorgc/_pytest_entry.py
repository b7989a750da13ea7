"""The pytest11 entry point: it loads tensorgc's pytest plugin (tensorgc.pytest_plugin) by its
module name. pytest registers a plugin once per name; had the entry point named the plugin's
module itself, the module would be registered under the entry point's name too, and a run that
also names it (``-p tensorgc.pytest_plugin``, a conftest's ``pytest_plugins``) would fail with
"Plugin already registered under a different name". This way every route asks for the one name
and the later ones find it registered; ``-p no:tensorgc`` still turns the plugin off."""

pytest_plugins = ["tensorgc.pytest_plugin"]
