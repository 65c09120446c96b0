#!/usr/bin/env bash
# The native kernels of another revision against the working tree's, in one process,
# alternating (scripts/bench/kernels/ab.cc), on weight shapes of the demo model, GPT-2 small
# and a 1B Llama, for every kernel family this CPU runs (or those named). No libtorch needed.
#
#   bash scripts/bench/kernels-ab.sh BASE_REV [FAMILY ...]
#
# Example: bash scripts/bench/kernels-ab.sh HEAD~3 avx2
#          ATTEND_SHAPES="1000 3 1;1000 3 64" bash scripts/bench/kernels-ab.sh HEAD~1
#          KERNEL_SHAPES="8192 2048 4 2;2048 8192 5 2" bash scripts/bench/kernels-ab.sh HEAD avx2
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: bash scripts/bench/kernels-ab.sh BASE_REV [FAMILY ...]" >&2; exit 2; }
base=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
napi="-Inode_modules/node-addon-api -Inode_modules/node-api-headers/include"
# -fno-gnu-unique: a template's function-local static (attention's table of block kernels) is
# otherwise one object for the whole process, whichever library loaded first: both sides
# would attend with the base's kernels.
flags="-O3 -std=c++17 -fPIC -ffp-contract=fast -Wno-psabi -fno-gnu-unique"

mkdir -p "$work/base"
git archive "$base" native | tar -x -C "$work/base"
# One shared library per side from its kernels translation units (Kernels.cc, found where its
# revision keeps it: native/ before the layer folders, native/kernels/ after; and beside it
# QuantKernels.cc and ThreadTeam.cc where the revision has them), with the napi symbols its
# headers name stubbed.
build() {  # $1: root holding native/, $2: output .so
  local source include objects=()
  source=$(find "$1/native" -name Kernels.cc | head -1)
  include="-I$1/native -I$(dirname "$source")"
  # (and native/common/MappedFile.cc, which the weights' regrouping asks about mapped rows)
  for unit in "$(dirname "$source")"/*.cc "$1/native/common/MappedFile.cc"; do
    [ -f "$unit" ] || continue
    case "$(basename "$unit")" in Kernels.cc|QuantKernels.cc|ThreadTeam.cc|MappedFile.cc) ;; *) continue ;; esac
    g++ $flags $napi $include -c "$unit" -o "$2.$(basename "$unit").o"
    objects+=("$2.$(basename "$unit").o")
  done
  nm -u "${objects[@]}" | awk '/napi_/{print "void "$2"(void){}"}' | sort -u > "$2.stub.c"
  gcc -fPIC -c "$2.stub.c" -o "$2.stub.o"
  g++ -shared "${objects[@]}" "$2.stub.o" -o "$2"
  printf '%s\n' "${objects[@]}" > "$2.objects"
}
build "$work/base" "$work/base.so"
build "$PWD" "$work/head.so"
# shellcheck disable=SC2046
g++ -O2 -std=c++17 $napi -Inative scripts/bench/kernels/ab.cc $(cat "$work/head.so.objects") "$work/head.so.stub.o" -ldl -lpthread -o "$work/ab"
# shellcheck disable=SC2046
g++ -O2 -std=c++17 $napi -Inative scripts/bench/kernels/attend-ab.cc $(cat "$work/head.so.objects") "$work/head.so.stub.o" -ldl -lpthread -o "$work/attend-ab"

if [ $# -gt 0 ]; then families=("$@"); else
  families=()
  grep -qw amx_int8 /proc/cpuinfo && grep -qw avx512_bf16 /proc/cpuinfo && families+=(amx)
  grep -qw avx512_bf16 /proc/cpuinfo && families+=(avx512_bf16)
  grep -qw avx512f /proc/cpuinfo && families+=(avx512)
  grep -qw avx2 /proc/cpuinfo && families+=(avx2)
  families+=(baseline)
fi
# ATTEND_SHAPES: "POSITIONS GROUP QUERIES;..." times attention instead (kernels/attend-ab.cc), e.g.
# "1000 3 1;1000 3 64" (a decode step and a prefill chunk at 1,000 positions, 3 query heads a kv head).
# KERNEL_SHAPES: "N K TYPE COPIES;..." instead of the float shapes below (TYPE 3-5: Q8_0, Q4_K,
# Q6_K; see kernels/ab.cc), e.g. "8192 2048 4 2;2048 8192 4 2;2048 8192 5 2".
# AB_ROWS: only these row counts, e.g. AB_ROWS=1,4 (default 1, 2, 3, 4, 6, 8, 16, 32, 64, 500).
program=ab
IFS=';' read -ra shapes <<< "${KERNEL_SHAPES:-768 256 0 16;3072 768 0 4;3072 768 1 4;8192 2048 1 2;2048 8192 2 2}"
if [ -n "${ATTEND_SHAPES:-}" ]; then
  program=attend-ab
  IFS=';' read -ra shapes <<< "$ATTEND_SHAPES"
fi
for family in "${families[@]}"; do
  for shape in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    "$work/$program" "$work/base.so" "$work/head.so" "$family" $shape
  done
done
