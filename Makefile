# tensorgc: a self-documenting Makefile. `make help` lists the targets.
PYTHON ?= python3
PYTEST_ARGS ?= -q
# pytest-xdist workers for `make test` (0: one process); the suite's tests are independent.
# loadgroup: test by test, except that a module's tests sharing a module fixture (a build, a
# browser, a mypy cache) run on one worker (tests/conftest.py groups them and orders the long first)
PYTEST_WORKERS ?= 2
# "none": the torch-free run (a Python for which the registry has no CPU build of torch)
TORCH_VERSION ?= 2.13.0
NVML_DEV_VERSION ?= 13.0.87
MEMLAB_VERSION ?= 0.3.2
MYPY_VERSION ?= 2.4.1
PLAYWRIGHT_VERSION ?= 1.65.2
XDIST_VERSION ?= 3.8.0
COVERAGE_VERSION ?= 7.16.2
# The training-loop integrations' tests (tests/test_integration*.py, tests/test_notebooks.py); not
# installed with TORCH_VERSION=none. transformers 5.21+ and ipykernel 7 need Python 3.11+: 3.10
# takes the last releases that install there.
PY_MINOR := $(shell $(PYTHON) -c "import sys; print(sys.version_info[1])" 2>/dev/null)
ifeq ($(PY_MINOR),10)
INTEG_PINS ?= lightning==2.6.6 transformers==5.20.2 accelerate==1.15.0 tensorboard==2.21.0 \
  nbclient==0.11.0 ipykernel==6.31.0 nbformat==5.11.1
else
INTEG_PINS ?= lightning==2.6.6 transformers==5.24.0 accelerate==1.15.0 tensorboard==2.21.0 \
  nbclient==0.11.0 ipykernel==7.4.0 nbformat==5.11.1
endif
EXT_SUFFIX := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null)
SO := tensorgc/_tensorgc$(EXT_SUFFIX)
SO_TESTING := tensorgc/_tensorgc_testing$(EXT_SUFFIX)
SUBSYSTEMS := common tensor graph cycles reporter allocator module
SOURCES := $(foreach d,$(SUBSYSTEMS),$(wildcard $(d)/*.c $(d)/*.h)) $(wildcard include/tensorgc/*.h) setup.py
SUDO := $(shell [ "$$(id -u)" = 0 ] || command -v sudo)

GV_MAJOR = $(shell pkg-config --modversion libgvc 2>/dev/null | cut -d. -f1)
GV_LIBDIR = $(shell pkg-config --variable=libdir libgvc 2>/dev/null)
UNIT_CFLAGS = -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -Wno-missing-field-initializers \
  -Iinclude -Icycles $(shell pkg-config --cflags libgvc) \
  $(shell $(PYTHON) -c "import sysconfig; print('-I' + sysconfig.get_paths()['include'])") \
  -DTGC_GRAPHVIZ_MAJOR=$(GV_MAJOR)
UNIT_LIBS = $(shell pkg-config --libs libgvc libcgraph) -L$(GV_LIBDIR)/graphviz \
  -lgvplugin_dot_layout -lgvplugin_core -Wl,-rpath,$(GV_LIBDIR):$(GV_LIBDIR)/graphviz -lpthread
# The device query's types: cuda.h from the toolkit, nvml.h from it or from nvidia-nvml-dev.
DEVICE_CFLAGS = $(shell $(PYTHON) tools/cuda_flags.py 2>/dev/null)
REAL_PYTHON = $(shell $(PYTHON) -c "import sys; print(sys.executable)")

.DEFAULT_GOAL := build
.PHONY: help deps build test wheel smoke demo bench units valgrind asan phases clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-10s %s\n", $$1, $$2}'

deps: ## Install what is missing: Graphviz headers, ccache and chromium (apt); torch==2.13.0 CPU build (TORCH_VERSION=none: no torch), pytest, pytest-xdist, coverage, IPython, mypy, playwright, the integrations' libraries (INTEG_PINS), nvml.h (pip)
	@if ! pkg-config --exists libgvc libcgraph 2>/dev/null; then \
	  echo "tensorgc: installing Graphviz's C library (libgraphviz-dev, pkg-config)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libgraphviz-dev pkg-config; \
	fi
	@# ccache: rebuilds after an edit (make build, the tests' variant builds) compile only what changed; optional
	@command -v ccache >/dev/null 2>&1 || { echo "tensorgc: installing ccache"; \
	  $(SUDO) apt-get install -y -qq ccache || echo "tensorgc: no ccache; every build compiles every file"; }
	@# headless Chromium: the timeline page's screenshot test
	@command -v chromium >/dev/null 2>&1 || { echo "tensorgc: installing chromium"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }
	@# pip: what is missing or not at its pin, found in one interpreter (tools/deps_missing.py;
	@# torch and IPython looked for, not imported), installed step by step in this order; the
	@# steps: torch; pytest; pytest-xdist (the pytest plugin run under it, tests/test_pytest_plugin.py);
	@# coverage.py (the line profiler beside another tracer, tests/test_guest.py); IPython (the
	@# %mlrun magics); mypy (the typed API's tests: a user's script checked strictly, stubtest);
	@# playwright (the real-browser tests; it drives Debian's chromium, no browser download); the
	@# integrations' libraries at their pins (the torch-free run skips their tests); setuptools and
	@# wheel; nvml.h for the device view (CUDA 13 toolkits do not ship it; headers only, 124 KB)
	@set -e; due=" $$($(PYTHON) tools/deps_missing.py --torch "$(TORCH_VERSION)" --xdist "$(XDIST_VERSION)" \
	  --coverage "$(COVERAGE_VERSION)" --mypy "$(MYPY_VERSION)" --playwright "$(PLAYWRIGHT_VERSION)" \
	  --integ "$(INTEG_PINS)" || echo all) "; \
	step() { case "$$due" in *" $$1 "*|*" all "*) return 0;; *) return 1;; esac; }; \
	if [ "$(TORCH_VERSION)" != none ] && step torch; then $(PYTHON) -m pip install -q "torch==$(TORCH_VERSION)"; fi; \
	if step pytest; then $(PYTHON) -m pip install -q pytest; fi; \
	if step xdist; then $(PYTHON) -m pip install -q "pytest-xdist==$(XDIST_VERSION)"; fi; \
	if step coverage; then $(PYTHON) -m pip install -q "coverage==$(COVERAGE_VERSION)"; fi; \
	if step ipython; then $(PYTHON) -m pip install -q ipython; fi; \
	if step mypy; then $(PYTHON) -m pip install -q "mypy==$(MYPY_VERSION)"; fi; \
	if step playwright; then $(PYTHON) -m pip install -q "playwright==$(PLAYWRIGHT_VERSION)"; fi; \
	if [ "$(TORCH_VERSION)" != none ] && step integ; then $(PYTHON) -m pip install -q $(INTEG_PINS); fi; \
	if step setuptools; then $(PYTHON) -m pip install -q setuptools wheel; fi; \
	if step nvml; then $(PYTHON) -m pip install -q --no-deps "nvidia-nvml-dev==$(NVML_DEV_VERSION)"; fi

# ccache where it is installed and CC is not set: --force below has setuptools compile every file,
# ccache answers for those an edit left unchanged (its key holds the flags: asan's objects stay apart)
PY_CC = $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('CC') or 'cc')")
BUILD_CC = $(if $(and $(filter default,$(origin CC)),$(shell command -v ccache 2>/dev/null)),CC="ccache $(PY_CC)")

$(SO): $(SOURCES)
	TENSORGC_WERROR=1 $(BUILD_CC) $(PYTHON) setup.py -q build_ext --inplace --force  # --force: never reuse objects of another flavour (asan)

build: $(SO) ## Build the extensions in place (warnings are errors)

# The bytecode of the suite's interpreters (its workers, and the pytest runs, demos, benchmarks and
# CLI calls its tests start) and of pytest's assertion rewriting, kept beside the suite's other
# caches (tests/_util.py's _test_cache), never in the tree. Where PYTHONDONTWRITEBYTECODE is set,
# each of them compiles again what it imports: a worker's collection takes 7 s instead of 1.5, a
# pytest run of tests/data/plugin_project 6.8 s instead of 5. TEST_PYCACHE= (empty): the
# environment's own setting. The bytecode of the files tests write into temporary folders is
# never read again: each run drops the last run's.
TEST_CACHE ?= $(or $(TENSORGC_TEST_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tensorgc-tests)
TEST_PYCACHE ?= $(TEST_CACHE)/pycache
TEST_ENV = $(if $(TEST_PYCACHE),env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(TEST_PYCACHE))
TEST_TMP = $(TEST_PYCACHE)$(shell $(PYTHON) -c "import tempfile; print(tempfile.gettempdir())")

test: deps build ## Run the test suite (TENSORGC_TEST_DEVICE=cuda for CUDA tensors)
	@$(if $(TEST_PYCACHE),[ ! -d "$(TEST_TMP)" ] || find "$(TEST_TMP)" -depth \( -name '*.pyc' -o -type d -empty \) -delete)
	$(TEST_ENV) $(PYTHON) -m pytest tests -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

wheel: ## Build the sdist and a manylinux wheel per CPython 3.10-3.13 into dist/, Graphviz bundled (auditwheel; tools pinned in tools/build_wheels.py)
	$(PYTHON) tools/build_wheels.py $(WHEEL_ARGS)

smoke: ## Install a wheel from dist/ into fresh venvs, Graphviz hidden, as root and as nobody, and run what a user runs (tools/wheel_smoke.sh)
	bash tools/wheel_smoke.sh $(SMOKE_ARGS)

demo: deps build ## Run a leak with the detector on: prints the summary and the HTML page's path
	$(PYTHON) demos/run_all.py

bench: deps build ## Run the benchmarks (B1 overhead, B2 report cost, B3 reporter, B4 timeline, B5 line profiler, B6 pages, B7 owners, B8 gather_report, B10 growth); see docs/benchmarks.md
	@# pytorch_memlab for B3's side-by-side; --no-deps: it would pull pandas and an unpinned torch
	@$(PYTHON) -c "import importlib.util as u; exit(u.find_spec('pytorch_memlab') is None)" || \
	  $(PYTHON) -m pip install -q --no-deps "pytorch_memlab==$(MEMLAB_VERSION)" "calmsize==0.1.3"
	@# objgraph for B7's side-by-side (pure Python, no dependencies)
	@$(PYTHON) -c "import importlib.util as u; exit(u.find_spec('objgraph') is None)" || \
	  $(PYTHON) -m pip install -q --no-deps "objgraph==3.7.0"
	$(PYTHON) bench/run_all.py

UNIT_SOURCES := graph/graph.c common/buf.c cycles/render.c cycles/page.c reporter/lineprof.c
build/test_units: tests/c/test_units.c $(UNIT_SOURCES) $(wildcard graph/*.h cycles/*.h include/tensorgc/*.h)
	@mkdir -p build
	$(CC) $(UNIT_CFLAGS) tests/c/test_units.c $(UNIT_SOURCES) -o $@ $(UNIT_LIBS)

# The streaming loader's engine and the pre-scan, with the rules they share (plain C;
# pickstream_py.c, the loader's Python builder, is not in it).
PICKSTREAM_SOURCES := allocator/pickstream.c allocator/pickstream_error.c allocator/pickstream_intern.c \
  allocator/pickstream_read.c allocator/pickstream_values.c allocator/pickstream_rows.c allocator/pickstream_machine.c \
  allocator/pickscan.c allocator/pickrules.c
build/test_pickstream: tests/c/test_pickstream.c $(PICKSTREAM_SOURCES) allocator/pickstream_int.h \
  allocator/pickrules.h include/tensorgc/pickstream.h include/tensorgc/pickscan.h
	@mkdir -p build
	$(CC) -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -Wno-missing-field-initializers -Iinclude \
	  tests/c/test_pickstream.c $(PICKSTREAM_SOURCES) -o $@

build/test_device: tests/c/test_device.c allocator/device.c include/tensorgc/device.h
	@mkdir -p build
	$(CC) -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -Iinclude $(DEVICE_CFLAGS) \
	  tests/c/test_device.c allocator/device.c -o $@ -ldl -lpthread

units: build/test_units build/test_device build/test_pickstream ## Build and run the plain-C unit tests (graph engine, escapers, Graphviz, line-profiler engine, device query, streaming snapshot loader)
	./build/test_units
	./build/test_device
	./build/test_pickstream

valgrind: deps build/test_units build/test_device build/test_pickstream ## Run the plain-C units under valgrind memcheck (errors and definite leaks fail)
	valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --quiet ./build/test_units
	valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --quiet ./build/test_device
	valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --quiet ./build/test_pickstream

ASAN_TESTS ?= tests
asan: deps ## Build the extension and the render worker with AddressSanitizer+UBSan and run the Python tests (ASAN_TESTS=files for fewer); Graphviz runs under them too
	rm -f $(SO) $(SO_TESTING); TENSORGC_WERROR=1 TENSORGC_CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  TENSORGC_LDFLAGS="-fsanitize=address,undefined" $(PYTHON) setup.py -q build_ext --inplace --force \
	  --build-temp build/asan-temp --build-lib build/asan-lib
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  TENSORGC_UNDER_ASAN=1 $(REAL_PYTHON) -m pytest $(ASAN_TESTS) -q -x
	rm -f $(SO) $(SO_TESTING) tensorgc/_tgc_render

phases: deps build ## Build a copy with phase timers (build/phases-lib) and show where B1's overhead goes (SHAPE=dict...: B1's --shape)
	TENSORGC_WERROR=1 TENSORGC_CFLAGS="-DTGC_PHASE_TIMES" $(PYTHON) setup.py -q build_ext --force \
	  --build-temp build/phases-temp --build-lib build/phases-lib
	$(PYTHON) bench/b1_inprocess.py --rounds $(or $(ROUNDS),20) --modes plain,floor --shape $(or $(SHAPE),slots) \
	  --variant timed=build/phases-lib/tensorgc/_tensorgc$(EXT_SUFFIX)

clean: ## Remove build products
	rm -rf build dist *.egg-info tensorgc/*.so tensorgc/_tgc_render tensorgc.libs
