#!/usr/bin/env bash
# Compares builds of liblazyfuse.so on one benchmark, one process per round, builds alternated:
#
#   bench/ab_libraries.sh ROUNDS LIB_A LIB_B [LIB ...] -- SCRIPT [ARGS ...]
#
# e.g. bench/ab_libraries.sh 4 /tmp/before.so build/liblazyfuse.so -- bench/models.py
#      --no-compile --only sgd_300_fused --no-memory --out /tmp/ab
#
# `import lazyfuse` loads the copy inside the package (python/lazyfuse/lib/) before
# $LAZYFUSE_LIBRARY, so setting that variable selects nothing while the package holds a copy:
# each round installs its build into the package first. The package's own copy is put back at
# the end, also when a round fails or the run is interrupted. Run it on an idle machine, never
# beside a build or a test suite (docs/benchmarks.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
target="$root/python/lazyfuse/lib/liblazyfuse.so"

usage() {
  echo "usage: $0 ROUNDS LIB_A LIB_B [LIB ...] -- SCRIPT [ARGS ...]" >&2
  exit 2
}
[[ $# -ge 5 && "$1" =~ ^[0-9]+$ && "$1" -gt 0 ]] || usage
rounds="$1"
shift
libs=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  [[ -f "$1" ]] || { echo "$0: no such library: $1" >&2; exit 2; }
  libs+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")")
  shift
done
[[ $# -ge 2 && "$1" == "--" && ${#libs[@]} -ge 2 ]] || usage
shift

saved="$(mktemp)"
had_copy=0
if [[ -f "$target" ]]; then
  cp "$target" "$saved"
  had_copy=1
fi
restore() {
  if [[ $had_copy -eq 1 ]]; then install -m 0755 "$saved" "$target"; else rm -f "$target"; fi
  rm -f "$saved"
}
trap restore EXIT

mkdir -p "$(dirname "$target")"
for ((r = 1; r <= rounds; r++)); do
  for lib in "${libs[@]}"; do
    install -m 0755 "$lib" "$target"
    echo "== round $r, $lib (load average $(cut -d' ' -f1 /proc/loadavg))"
    "$python" "$@"
  done
done
