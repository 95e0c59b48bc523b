# lazyfuse: build, test and demo from a fresh Debian 12 machine.
#
#   make demo    apt packages, .venv with torch, C++ build, then examples/train_mlp.py
#   make test    the same setup, then C++ tests, Python tests and the C++ example
#
# Stamp files record the slow one-time steps (apt, venv); ninja makes the rest incremental.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

TORCH_VERSION := 2.11.0
BUILD_TYPE    ?= Release
JOBS          ?= $(shell nproc)

BUILD       := build
INSTALL_DIR := $(CURDIR)/$(BUILD)/install
EXAMPLE_DIR := $(BUILD)/examples-cpp
VENV        := .venv
PY          := $(VENV)/bin/python
PIP         := $(PY) -m pip
LIB_COPY    := python/lazyfuse/lib/liblazyfuse.so

# libspdlog/fmt/gtest/gmock for the C++ build and tests; g++, python3-venv: what a bare Debian 12
# image lacks to compile and to create the venv.
APT_PACKAGES := libspdlog-dev libfmt-dev libgtest-dev libgmock-dev ccache ninja-build cmake \
                g++ python3 python3-venv python3-dev clang-format
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

DEPS_STAMP    := $(BUILD)/.stamp-deps
VENV_STAMP    := $(VENV)/.stamp-venv
PYPKG_STAMP   := $(VENV)/.stamp-lazyfuse
NINJA_FILE    := $(BUILD)/build.ninja

# Anything that imports torch only to ask it something must not autoload lazyfuse.
TORCH_QUERY := TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) -c

.PHONY: deps venv build install test test-cpp test-python test-opinfo test-opinfo-fused opinfo \
        example-cpp demo bench sanitize format format-check \
        clean distclean

# ---- one-time setup ----------------------------------------------------------------------------

deps: $(DEPS_STAMP)
$(DEPS_STAMP):
	@mkdir -p $(BUILD)
	@if dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
	  echo "apt packages already installed"; \
	else \
	  $(SUDO) apt-get update; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y $(APT_PACKAGES); \
	fi
	touch $@

# setuptools>=70.1 builds editable wheels by itself (older ones need `wheel`); torch 2.11 wants <82.
venv: $(VENV_STAMP)
$(VENV_STAMP): | $(DEPS_STAMP)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install "setuptools>=70.1,<82" "torch==$(TORCH_VERSION)" numpy pytest expecttest
	touch $@

# ---- C++ build -----------------------------------------------------------------------------------

# Configure once; afterwards ninja re-runs cmake by itself when a CMakeLists.txt changes.
$(NINJA_FILE): | $(VENV_STAMP) $(DEPS_STAMP)
	cmake -S . -B $(BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DCMAKE_PREFIX_PATH="$$($(TORCH_QUERY) 'import torch; print(torch.utils.cmake_prefix_path)')" \
	  -DPython3_EXECUTABLE=$(CURDIR)/$(PY) \
	  $$(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# The Python package loads its own copy of the library (python/lazyfuse/lib/, git-ignored).
# `install` unlinks before writing, so a process that has the old copy mapped keeps working.
build: $(NINJA_FILE) $(PYPKG_STAMP)
	cmake --build $(BUILD) -j $(JOBS)
	install -D -m 0755 $(BUILD)/liblazyfuse.so $(LIB_COPY)
	for plugin in liblazyfuse_cuda_graphs.so liblazyfuse_python.so; do \
	  if [ -f $(BUILD)/$$plugin ]; then install -D -m 0755 $(BUILD)/$$plugin $(dir $(LIB_COPY)); fi; \
	done

# The editable install does not need the library, only the package sources.
$(PYPKG_STAMP): python/pyproject.toml | $(VENV_STAMP)
	$(PIP) install --no-build-isolation --no-deps -e python
	touch $@

# Headers, library and CMake package (lazyfuse::lazyfuse) under build/install.
install: build
	cmake --install $(BUILD) --prefix $(INSTALL_DIR)

# ---- tests -------------------------------------------------------------------------------------

# In this order: the source format, C++ unit tests, Python tests against eager PyTorch, the C++
# example, PyTorch's own OpInfo tests on the lazy device (test/opinfo/README.md), then the C++
# tests again built with AddressSanitizer and UndefinedBehaviorSanitizer (about 8 minutes cold).
test: install
	@$(MAKE) --no-print-directory format-check
	@$(MAKE) --no-print-directory test-cpp
	@$(MAKE) --no-print-directory test-python
	@$(MAKE) --no-print-directory example-cpp
	@$(MAKE) --no-print-directory test-opinfo
	@$(MAKE) --no-print-directory sanitize

test-cpp: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Then the training-parity and view/mutation tests again with every graph compiled into fused
# kernels (by default only graphs with enough work are; test_fusion.py forces it itself).
# LAZYFUSE_NVRTC_CHECK: every kernel fused on the CPU is also rendered as CUDA and compiled by
# NVRTC for sm_90 (H100), so the GPU target is checked without a GPU.
# Last, the fusion and donation tests once more with the CUDA rendering of each kernel run on
# the CPU (LAZYFUSE_CUDA_EMULATION, Note [CUDA emulation]): the GPU kernels' numbers against
# eager.
NVRTC_CHECK ?= 90
test-python: build
	LAZYFUSE_NVRTC_CHECK=$(NVRTC_CHECK) $(PY) -m pytest test/python -q
	LAZYFUSE_NVRTC_CHECK=$(NVRTC_CHECK) LAZYFUSE_FUSION=always $(PY) -m pytest -q \
	  test/python/test_autograd_training.py test/python/test_views_mutation.py \
	  test/python/test_view_metadata.py test/python/test_inference_mode.py
	LAZYFUSE_CUDA_EMULATION=1 $(PY) -m pytest -q test/python/test_fusion.py test/python/test_fused_rows.py \
	  test/python/test_donation.py test/python/test_dynamic_shapes.py test/python/test_region_writes.py \
	  test/python/test_position_plans.py -k "not test_dumps_plan_and_source"

# OPINFO_SUBSET=ci runs the smaller fixed subset (every OpInfo at least once in float32).
OPINFO_SUBSET ?= full
test-opinfo: build
	$(PY) -m pytest test/opinfo -q -p no:cacheprovider --opinfo-subset=$(OPINFO_SUBSET)

# The ci subset with every graph compiled into fused kernels (about an hour cold on 2 cores,
# minutes with a warm kernel cache): the lowerings against PyTorch's own samples.
test-opinfo-fused: build
	LAZYFUSE_FUSION=always $(PY) -m pytest test/opinfo -q -p no:cacheprovider --opinfo-subset=ci

# The full sweep, resuming after a crash, then docs/op_coverage.md.
opinfo: build
	$(PY) test/opinfo/make_coverage.py

# LibTorch programs that only link lazyfuse::lazyfuse from the installed CMake package: the
# smallest one, then an ahead-of-time package exported from Python and run in C++ with no C++
# compiler on PATH and an empty kernel cache (its kernels come from the package).
example-cpp: install
	cmake -S examples/cpp -B $(EXAMPLE_DIR) -G Ninja -DCMAKE_PREFIX_PATH=$(INSTALL_DIR)
	cmake --build $(EXAMPLE_DIR)
	$(EXAMPLE_DIR)/lazyfuse_example
	$(PY) examples/aot/export_model.py $(EXAMPLE_DIR)/aot
	rm -rf $(EXAMPLE_DIR)/aot/kernel-cache
	env -u CXX -u LAZYFUSE_CXX PATH=/nonexistent LAZYFUSE_CACHE_DIR=$(CURDIR)/$(EXAMPLE_DIR)/aot/kernel-cache \
	  $(EXAMPLE_DIR)/lazyfuse_aot_example $(EXAMPLE_DIR)/aot/model.lfpkg \
	  $(EXAMPLE_DIR)/aot/inputs.pt $(EXAMPLE_DIR)/aot/expected.pt

# The C++ tests built with AddressSanitizer and UndefinedBehaviorSanitizer, in a folder of
# their own (Note [Sanitizer build] in CMakeLists.txt). Torch is not instrumented: its
# one-time allocations are not leaks of ours, so leak detection is off.
SANITIZE_BUILD := build-sanitize
sanitize: | $(VENV_STAMP) $(DEPS_STAMP)
	cmake -S . -B $(SANITIZE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DLAZYFUSE_SANITIZE=ON \
	  -DCMAKE_PREFIX_PATH="$$($(TORCH_QUERY) 'import torch; print(torch.utils.cmake_prefix_path)')" \
	  -DPython3_EXECUTABLE=$(CURDIR)/$(PY) \
	  $$(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
	cmake --build $(SANITIZE_BUILD) -j $(JOBS) --target lazyfuse_cpp_tests
	ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(SANITIZE_BUILD) --output-on-failure -j $(JOBS)

# The C++ sources follow .clang-format (clang-format 14, Debian 12's); test/golden holds generated
# code and is left as the renderers write it. `make format` rewrites, `make format-check` fails on
# any difference (the first step of `make test`).
FORMAT_FILES = $(shell git ls-files '*.cpp' '*.h' | grep -v '^test/golden/')
format: | $(DEPS_STAMP)
	clang-format -i $(FORMAT_FILES)
format-check: | $(DEPS_STAMP)
	clang-format --dry-run --Werror $(FORMAT_FILES)

# ---- what a user runs ----------------------------------------------------------------------------

demo: build
	$(PY) examples/train_mlp.py

# matplotlib draws the benchmarks' charts; only the benchmarks need it.
bench: build
	$(PY) -c "import matplotlib" 2>/dev/null || $(PIP) install -q matplotlib
	$(PY) bench/trace_overhead.py
	$(PY) bench/fusion_cpu.py
	$(PY) bench/models.py

# ---- cleaning ------------------------------------------------------------------------------------

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) python/lazyfuse/lib
	rm -f $(PYPKG_STAMP)

distclean: clean
	rm -rf $(VENV) python/*.egg-info
