#!/usr/bin/env bash
# Packs what the GPU machine lacks into .gpu-deps/ (git-ignored) at the repository root, for the
# device tool to carry there: spdlog and fmt headers (header-only use, see cmake/Spdlog.cmake),
# GoogleTest headers and static libraries, the expecttest wheel the OpInfo tests import, the
# pytest-xdist wheels (with execnet) that spread the tests over the cores, and
# matplotlib's wheels for the benchmark charts.
# Run here (where `make deps` installed them); then carry `.gpu-deps` and run bench/gpu/run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEPS=.gpu-deps
rm -rf "$DEPS"
mkdir -p "$DEPS/include" "$DEPS/gtest/include" "$DEPS/gtest/lib" "$DEPS/wheels"
cp -r /usr/include/spdlog /usr/include/fmt "$DEPS/include/"
cp -r /usr/include/gtest /usr/include/gmock "$DEPS/gtest/include/"
for lib in libgtest.a libgtest_main.a libgmock.a libgmock_main.a; do
  cp "/usr/lib/$(gcc -print-multiarch)/$lib" "$DEPS/gtest/lib/"
done
PY=${PY:-.venv/bin/python}
$PY -m pip download --quiet --no-deps --only-binary=:all: -d "$DEPS/wheels" expecttest \
  pytest-xdist execnet  # bench/gpu/run.sh lease spreads the tests over the cores
# matplotlib and what it needs besides numpy, for the GPU machine's Python 3.12: the charts.
$PY -m pip download --quiet --no-deps --only-binary=:all: -d "$DEPS/wheels" \
  --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --implementation cp \
  matplotlib pillow kiwisolver contourpy fonttools cycler pyparsing python-dateutil six packaging
du -sh "$DEPS"
