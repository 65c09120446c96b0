#!/usr/bin/env bash
# GPU check: builds the addon against this machine's Python torch (pip, 2.x, with CUDA), runs
# the engine tests that take a device on CUDA (the TorchScript runtime: batch == alone,
# stream == batch, continuous joins, chunked prefill, cancellation, seeded sampling), then the
# Llama/Qwen/GPT checkpoints of test/native/llama.test.ts on CUDA (float32, bf16, fp16, Q8_0,
# Q4_K_M and Q5_K_M, which the GPU dequantizes once at load; greedy tokens against the Python reference's),
# then the decode benchmark on the GPU at batch 1 to 64 beside a plain Python TorchScript loop
# on the same GPU, and prints a table.
#
#   bash scripts/gpu-check.sh          on a CUDA host (needs nvcc/the CUDA toolkit, CMake, Node)
#   bash scripts/gpu-check.sh --cpu    the same steps on the CPU with the existing build and
#                                      Debian's torch, briefly (the test suite runs this)
#
# Environment: TORCHSERVE_PYTHON (default python3) picks the Python whose torch to build
# against; GPU_CHECK_CKPT the checkpoint to benchmark (default models/brown-gpt.pt; a bf16
# checkpoint, e.g. from scripts/model/export_hf.py --dtype bfloat16, is benchmarked in its own
# dtype); TEST_NATIVE_SET a folder where `test/model/python/make_hf_fixture.py DIR --native-set`
# already made the Llama set (otherwise this Python's torch makes it, in a few seconds).
# A CUDA host with no Node (and no network): `node scripts/gpu-bundle.mjs` here, copy the checkout
# with .gpu-bundle/ there, then `bash .gpu-bundle/unpack.sh && PATH="$PWD/.gpu-bundle/bin:$PATH"
# bash scripts/gpu-check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=cuda
case "${1:-}" in
  --cpu) mode=cpu ;;
  "") ;;
  *) echo "usage: bash scripts/gpu-check.sh [--cpu]" >&2; exit 2 ;;
esac
node_bin="${NODE:-node}"

if [ "$mode" = cuda ]; then
  python="${TORCHSERVE_PYTHON:-python3}"
  if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu-check: $python has no torch with a usable CUDA device (run with --cpu for the CPU mode)" >&2
    exit 1
  fi
  torch_dir="$("$python" -c 'import os, torch.utils; print(os.path.join(torch.utils.cmake_prefix_path, "Torch"))')"
  echo "gpu-check: building against $("$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)') ($torch_dir)"
  echo "gpu-check: device $("$python" -c 'import torch; print(torch.cuda.get_device_name(0))')"
  # Not --force: the build's stamp covers the sources and Torch_DIR, so a build made without
  # this Torch_DIR (npm install's) is redone, and a second run (another GPU_CHECK_CKPT) is not.
  Torch_DIR="$torch_dir" TORCHSERVE_PYTHON="$python" "$node_bin" scripts/build-native.mjs
  device=cuda
  batches=1,8,16,32,64
  tokens=64
  ckpt="${GPU_CHECK_CKPT:-models/brown-gpt.pt}"
  # The same run times a plain Python TorchScript loop on the GPU: the figures come with a ratio.
  baseline=--baseline
else
  python="${TORCHSERVE_PYTHON:-/usr/bin/python3}"   # the Python the test suite makes fixtures with
  "$node_bin" scripts/build-native.mjs   # the existing build when it is up to date
  device=cpu
  batches=1,4
  tokens=8
  ckpt="${GPU_CHECK_CKPT:-test/fixtures/tiny-gpt.pt}"
  baseline=
fi
if [ ! -f dist/test/native/llama.test.js ] || [ ! -f dist/test/engine/TorchEngine.test.js ] || [ ! -f dist/scripts/bench/device-decode.js ]; then
  "$node_bin" node_modules/typescript/bin/tsc -p tsconfig.json
fi

"$node_bin" -e '
  const addon = require("./build/Release/torchserve.node");
  console.log(`gpu-check: addon on libtorch ${addon.torchVersion}, CUDA available: ${addon.cudaAvailable()}`);
  if (process.argv[1] === "cuda" && !addon.cudaAvailable()) { console.error("gpu-check: this build has no CUDA"); process.exit(1); }
' "$device"

echo "gpu-check: engine tests on $device (TorchScript runtime)"
TEST_DEVICE="$device" "$node_bin" node_modules/mocha/bin/mocha.js --no-config --timeout 120000 \
  --grep "torchscript runtime" dist/test/engine/TorchEngine.test.js

if [ -z "${TEST_NATIVE_SET:-}" ]; then
  TEST_NATIVE_SET="$(mktemp -d)"
  trap 'rm -rf "$TEST_NATIVE_SET"' EXIT
  echo "gpu-check: making the Llama test set with $("$python" -c 'import torch; print("torch", torch.__version__)')"
  "$python" test/model/python/make_hf_fixture.py "$TEST_NATIVE_SET" --native-set
fi
echo "gpu-check: Llama, Qwen and 16-bit/quantized checkpoints on $device (TorchScript runtime)"
TEST_DEVICE="$device" TEST_NATIVE_SET="$TEST_NATIVE_SET" "$node_bin" node_modules/mocha/bin/mocha.js --no-config \
  --timeout 120000 --grep "torchscript: greedy agrees" dist/test/native/llama.test.js

echo "gpu-check: decode benchmark on $device"
TORCHSERVE_PYTHON="${python:-}" "$node_bin" dist/scripts/bench/device-decode.js --ckpt "$ckpt" --device "$device" \
  --batches "$batches" --tokens "$tokens" $baseline
echo "gpu-check: ok ($device)"
