#!/usr/bin/env bash
# Builds lazyfuse from source on a GPU machine that has torch 2.11+cu130, cmake, ninja and a C++
# compiler but no network, then runs the GPU checks, in one call:
#
#   bench/gpu/run.sh [tests|bench|opinfo|all] (default: all but opinfo)
#
#   tests   C++ tests, then the Python suite with CUDA as the hardware device (lazy vs eager
#           CUDA), again with every graph fused (LAZYFUSE_FUSION=always) for the training,
#           view and mutation tests
#   bench   bench/gpu_suite.py: W0-W6 on the GPU, lazyfuse vs eager CUDA vs torch.compile, then
#           W5 and W6 again without CUDA graph replay and without donation
#   opinfo  PyTorch's OpInfo tests on lazy with CUDA as the hardware device, against eager CUDA
#           (the ci subset)
#   lease   fitted to one device call of a 15-minute lease ($LEASE_SECONDS, default 540 s, after
#           the machine's start): build, C++ tests, the Python suite on CUDA spread over the
#           cores (pytest-xdist, one line per test so a cut run still names what passed), then
#           the benchmark with what time is left; each step under its own time limit.
#           LEASE_PARTS picks the steps after the build and C++ tests, in order (default
#           "pytest bench"; also "fused": the LAZYFUSE_FUSION=always subset, "opinfo": the ci
#           subset, "dynamic": bench/dynamic_shapes.py --device cuda, "pick": only the pytest
#           arguments in $LEASE_TESTS, for a rerun of what failed); LEASE_CTEST=0 skips the C++
#           tests
#
# Every log ends up in $OUT/logs.tgz (the device tool brings back at most 8 files).
# Needs .gpu-deps/ (bench/gpu/pack_deps.sh, run where the packages are installed) carried along.
# Logs and results go to $OUT (the device tool's output folder) or /tmp/lazyfuse-gpu.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=${1:-default}
OUT=${OUT:-/tmp/lazyfuse-gpu}
DEPS=$PWD/.gpu-deps
PY=${PYTHON:-python3}
BUILD=build-gpu
mkdir -p "$OUT"
DEADLINE=$((SECONDS + ${LEASE_SECONDS:-540}))
left() { echo $((DEADLINE - SECONDS - $1)); }  # seconds to the deadline, less a reserve
pack_logs() {
  (cd "$OUT" && ls *.log *.xml >/dev/null 2>&1 && tar czf logs.tgz *.log *.xml 2>/dev/null \
    && rm -f *.log *.xml)
  return 0
}
trap pack_logs EXIT
export PYTHONUNBUFFERED=1 LAZYFUSE_CACHE_DIR=/tmp/lazyfuse-cache
status=0
step() {  # step NAME COMMAND...: runs COMMAND, tees its log to $OUT/NAME.log, remembers failure
  local name=$1
  shift
  echo "=== $name: $*"
  local start=$SECONDS
  "$@" 2>&1 | tee "$OUT/$name.log" | tail -n 25
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc after $((SECONDS - start)) s"
  [ "$rc" -eq 0 ] || status=1
  return "$rc"
}

[ -d "$DEPS" ] || { echo "missing $DEPS: run bench/gpu/pack_deps.sh and carry .gpu-deps"; exit 2; }
$PY -m pip install -q --no-index --no-deps --target /tmp/lazyfuse-site "$DEPS"/wheels/*.whl
export PYTHONPATH=/tmp/lazyfuse-site:$PWD/python
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

torch_prefix=$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
step configure cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DLAZYFUSE_SPDLOG_INCLUDE_DIR="$DEPS/include" \
  -DGTEST_ROOT="$DEPS/gtest" -DLAZYFUSE_WERROR=OFF -DPython3_EXECUTABLE="$(command -v $PY)" || exit 1  # another compiler may warn more
step build cmake --build $BUILD -j "$(nproc)" || exit 1
install -D -m 0755 $BUILD/liblazyfuse.so python/lazyfuse/lib/liblazyfuse.so
install -D -m 0755 $BUILD/liblazyfuse_cuda_graphs.so python/lazyfuse/lib/liblazyfuse_cuda_graphs.so
[ -f $BUILD/liblazyfuse_python.so ] && install -D -m 0755 $BUILD/liblazyfuse_python.so python/lazyfuse/lib/
# The editable install registers the torch.backends autoload entry point (test_api.py uses it).
step pip_install $PY -m pip install -q --no-index --no-build-isolation --no-deps -e python

if [ "$MODE" = tests ] || [ "$MODE" = all ] || [ "$MODE" = default ]; then
  step ctest ctest --test-dir $BUILD --output-on-failure -j 8
  step pytest_cuda $PY -m pytest -q -p no:cacheprovider test/python \
    --junitxml="$OUT/pytest_cuda.xml"
  step pytest_cuda_fused env LAZYFUSE_FUSION=always $PY -m pytest -q -p no:cacheprovider \
    test/python/test_autograd_training.py test/python/test_views_mutation.py \
    test/python/test_view_metadata.py test/python/test_inference_mode.py
fi
if [ "$MODE" = bench ] || [ "$MODE" = all ] || [ "$MODE" = default ]; then
  step bench env LAZYFUSE_BENCH_OUT="$OUT" $PY bench/gpu_suite.py
  # The training steps again without CUDA graph replay and without donation: what each gives.
  mkdir -p "$OUT/no-replay" "$OUT/no-donation"
  step bench_no_replay env LAZYFUSE_CUDA_GRAPHS=0 LAZYFUSE_BENCH_OUT="$OUT/no-replay" \
    $PY bench/gpu_suite.py --only W5,W6 --no-compile
  step bench_no_donation env LAZYFUSE_DONATE=0 LAZYFUSE_BENCH_OUT="$OUT/no-donation" \
    $PY bench/gpu_suite.py --only W5,W6 --no-compile
  step trace_overhead $PY bench/trace_overhead.py
  cp bench/results/trace_overhead.* "$OUT"/ 2>/dev/null
fi
if [ "$MODE" = lease ]; then
  [ "${LEASE_CTEST:-1}" = 0 ] || step ctest timeout 90 ctest --test-dir $BUILD --output-on-failure -j "$(nproc)"
  workers=$(( $(nproc) > 12 ? 12 : $(nproc) ))
  xdist() {  # xdist NAME RESERVE ARGS...: pytest over the cores, within the deadline less RESERVE
    local name=$1 budget
    budget=$(left "$2")
    shift 2
    step "$name" timeout "$budget" $PY -m pytest -v -rfE -p no:cacheprovider -n "$workers" \
      --junitxml="$OUT/$name.xml" "$@"
    grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/$name.log" | tail -n 40
  }
  for part in ${LEASE_PARTS:-pytest bench}; do
    case $part in
      pytest) xdist pytest_cuda 170 test/python ;;
      pick) xdist pytest_pick 10 $LEASE_TESTS ;;
      fused)
        export LAZYFUSE_FUSION=always
        xdist pytest_cuda_fused 120 test/python/test_autograd_training.py \
          test/python/test_views_mutation.py test/python/test_view_metadata.py \
          test/python/test_inference_mode.py
        unset LAZYFUSE_FUSION ;;
      opinfo) xdist opinfo 15 test/opinfo --opinfo-subset=ci ;;
      bench) step bench timeout "$(left 10)" env LAZYFUSE_BENCH_OUT="$OUT" $PY bench/gpu_suite.py \
        --markdown "$OUT/gpu.md" ;;
      dynamic)  # shapes that vary (bench/dynamic_shapes.py) on CUDA, cold processes per side
        step dynamic timeout "$(left 10)" $PY bench/dynamic_shapes.py --device cuda --rounds 5
        cp bench/results/dynamic_shapes_cuda.json "$OUT"/ 2>/dev/null ;;
    esac
  done
fi
if [ "$MODE" = opinfo ] || [ "$MODE" = all ]; then
  step opinfo $PY -m pytest test/opinfo -q -p no:cacheprovider --opinfo-subset=ci
fi
exit $status
