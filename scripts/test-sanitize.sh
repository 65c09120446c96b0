#!/usr/bin/env bash
# npm run test:sanitize: the native and engine suites against an addon built with
# AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/, loaded through TORCHSERVE_ADDON).
# node itself is not instrumented, so the ASan runtime is preloaded into it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --sanitize
node scripts/build-native.mjs --sanitize
npx tsc -p tsconfig.json

asan=$(g++ -print-file-name=libasan.so)
ubsan=$(g++ -print-file-name=libubsan.so)
for lib in "$asan" "$ubsan"; do
  [ -f "$lib" ] || { echo "test:sanitize: $lib not found (install g++: bash scripts/setup.sh --sanitize)" >&2; exit 1; }
done

# detect_leaks=0: LeakSanitizer would report node's and V8's own never-freed start-up
#   allocations (node is not built with ASan); the suites check native leaks themselves
#   (threads, handles, dispose).
# halt_on_error / abort_on_error: any report fails the run.
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:suppressions=$PWD/scripts/sanitize/asan.supp"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/scripts/sanitize/ubsan.supp"
export TORCHSERVE_ADDON="$PWD/build-asan/Release/torchserve.node"
# "addon builds", "libtorch discovery" and "scripts/gpu-check.sh --cpu" build and load the
# regular addons (build/, build-gyp/), not this one: left out. (gpu-check also runs Python
# under the preloaded ASan runtime, where making its Llama set alone takes ~105 s of its
# 110 s limit.)
LD_PRELOAD="$asan $ubsan" npx mocha --no-config --timeout 300000 \
  --grep "addon builds|libtorch discovery|scripts/gpu-check.sh --cpu" --invert \
  'dist/test/native/**/*.test.js' dist/test/engine/TorchEngine.test.js dist/test/engine/kvCache.test.js "$@"
