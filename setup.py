"""Build of tensorgc's C extensions and its render worker. Metadata lives in setup.cfg; this file
finds Graphviz with pkg-config, lists the C sources (module/module.c assembles the extension from
common/, tensor/, graph/, cycles/, reporter/ and allocator/), builds the small tensorgc._tensorgc_testing
(module/testing.c: the detector's switches for tests, bound to the main module), and builds the
executable tensorgc/_tgc_render (Graphviz runs there, never in the user's process; see
cycles/renderer.h). The CUDA toolkit's headers are used when present (for the driver/NVML types;
both are dlopen'd at run time)."""
import glob
import os
import shlex
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


# One line, the same wherever pkg-config or Graphviz's development files are missing.
GRAPHVIZ_MISSING = (
    "tensorgc: building it needs Graphviz's C library and pkg-config, not found "
    "(`pkg-config libgvc libcgraph`); install them: Debian/Ubuntu `apt-get install libgraphviz-dev "
    "pkg-config`, Fedora `dnf install graphviz-devel pkgconf-pkg-config`, conda `conda install "
    "-c conda-forge graphviz pkg-config` (or install a tensorgc wheel, which bundles Graphviz)")


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        sys.exit(GRAPHVIZ_MISSING)
    return out.stdout.strip()


def graphviz():
    version = pkg_config("--modversion", "libgvc")
    major = int(version.split(".")[0])
    cflags = shlex.split(pkg_config("--cflags", "libgvc", "libcgraph"))
    libs = shlex.split(pkg_config("--libs", "libgvc", "libcgraph"))
    libdir = pkg_config("--variable=libdir", "libgvc")
    plugin_dir = os.path.join(libdir, "graphviz")
    include_dirs = [f[2:] for f in cflags if f.startswith("-I")]
    library_dirs = [f[2:] for f in libs if f.startswith("-L")] + [plugin_dir]
    libraries = [f[2:] for f in libs if f.startswith("-l")]
    # The dot layout and the core (SVG) renderer are linked in and registered through
    # gvContextPlugins, so no plugin configuration is read at run time.
    libraries += ["gvplugin_dot_layout", "gvplugin_core"]
    return dict(
        include_dirs=include_dirs,
        library_dirs=library_dirs,
        libraries=libraries,
        runtime_library_dirs=[libdir, plugin_dir],
        define_macros=[("TGC_GRAPHVIZ_MAJOR", str(major))],
    )


def nvml_include(cuda_incs):
    """Where nvml.h is: $TENSORGC_NVML_INCLUDE, the toolkit, or PyPI's nvidia-nvml-dev (which
    `make deps` installs, since CUDA 13 toolkits no longer ship the header)."""
    cands = [os.environ.get("TENSORGC_NVML_INCLUDE")] + list(cuda_incs)
    for path in sys.path:
        cands += sorted(glob.glob(os.path.join(path or ".", "nvidia", "cu*", "include")))
    for d in filter(None, cands):
        if os.path.exists(os.path.join(d, "nvml.h")):
            return d
    return None


def cuda_headers():
    """The CUDA toolkit's include directories and macros: cuda.h gives the driver's types, nvml.h
    NVML's. Types only: the driver and NVML are loaded with dlopen at run time, so nothing links
    against CUDA and the module imports on machines without it."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        incs = [os.path.join(root, "include"), os.path.join(root, "targets", "x86_64-linux", "include")]
        incs = [d for d in incs if os.path.isdir(d)]
        if any(os.path.exists(os.path.join(d, "cuda.h")) for d in incs):
            macros = [("TGC_HAVE_CUDA_HEADERS", "1")]
            nv = nvml_include(incs)
            if nv is not None:
                macros.append(("TGC_HAVE_NVML_HEADER", "1"))
                if nv not in incs:
                    incs.append(nv)
            return incs, macros
    return [], []


if sysconfig.get_config_var("Py_GIL_DISABLED"):
    # include/tensorgc/compat.h stops the compiler too; this says it before anything is built.
    sys.exit("tensorgc does not support free-threaded CPython builds (Py_GIL_DISABLED): the cycle "
             "detector edits gc.garbage in place and reads reference counts without per-object "
             "locks, which only the GIL makes safe. Build it with a standard (GIL) CPython.")
cuda_inc, cuda_macros = cuda_headers()
warnings = ["-Wall", "-Wextra", "-Wshadow", "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
if os.environ.get("TENSORGC_WERROR"):
    warnings.append("-Werror")
extra = shlex.split(os.environ.get("TENSORGC_CFLAGS", ""))
extra_link = shlex.split(os.environ.get("TENSORGC_LDFLAGS", ""))

# The worker's own sources: Graphviz is linked into the worker only.
WORKER_SOURCES = ["cycles/render_main.c", "cycles/render.c"]
SUBSYSTEMS = ["common", "tensor", "graph", "cycles", "reporter", "allocator"]
sources = sorted(set(sum((glob.glob(d + "/*.c") for d in SUBSYSTEMS), ["module/module.c"]))
                 - set(WORKER_SOURCES))
headers = sorted(sum((glob.glob(d + "/*.h") for d in SUBSYSTEMS + ["module", "include/tensorgc"]), []))
# "include" for the engines' contracts (tensorgc/*.h), "." for a binding's view of the module
# state (module/state.h) and module.c's of each subsystem's binding (cycles/binding.h...).
include_dirs = ["include", "."]
ext = Extension(
    "tensorgc._tensorgc",
    sources=sources,
    depends=headers,
    include_dirs=include_dirs + cuda_inc,
    libraries=["dl", "pthread"],
    define_macros=cuda_macros,
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE"] + warnings + extra,
    extra_link_args=extra_link,
)
testing = Extension(
    "tensorgc._tensorgc_testing",
    sources=["module/testing.c"],
    depends=["module/testing.h"],
    include_dirs=include_dirs,
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE"] + warnings + extra,
    extra_link_args=extra_link,
)


class build_ext_and_worker(build_ext):
    """build_ext, then the render worker executable beside the extension module.

    The test-only module tensorgc._tensorgc_testing is built when build_ext is the command run
    (`make build`, the tests' own builds), never by a build of a wheel or an install. With
    --testing-only, build_ext builds that module alone (no Graphviz needed), into --build-lib
    beside an installed tensorgc of the same sources."""

    user_options = build_ext.user_options + [
        ("testing-only", None, "build only tensorgc._tensorgc_testing (no extension, no worker)"),
    ]
    boolean_options = build_ext.boolean_options + ["testing-only"]

    def initialize_options(self):
        super().initialize_options()
        self.testing_only = False

    def finalize_options(self):
        super().finalize_options()
        if self.testing_only:
            self.extensions = [testing]
        elif "build_ext" not in self.distribution.commands:
            self.extensions = [e for e in self.extensions if e is not testing]

    def run(self):
        if self.testing_only:
            return super().run()
        gv = graphviz()  # before compiling anything: without Graphviz, stop at once
        super().run()
        mod_path = self.get_ext_fullpath(ext.name)
        out = os.path.join(os.path.dirname(mod_path), "_tgc_render")
        objects = self.compiler.compile(
            WORKER_SOURCES, output_dir=self.build_temp,
            include_dirs=include_dirs + gv["include_dirs"],
            macros=gv["define_macros"],
            extra_postargs=["-std=c11", "-D_GNU_SOURCE"] + warnings + extra)
        self.compiler.link_executable(
            objects, out, libraries=gv["libraries"] + ["pthread"],
            library_dirs=gv["library_dirs"], runtime_library_dirs=gv["runtime_library_dirs"],
            extra_postargs=extra_link)


setup(ext_modules=[ext, testing], cmdclass={"build_ext": build_ext_and_worker})
