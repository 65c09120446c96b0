#!/usr/bin/env bash
# Installs what is missing, then builds. Idempotent, and quick when all is in place.
#   bash scripts/setup.sh          what `npm start` needs (run by `prestart`)
#   bash scripts/setup.sh --test   also what the test suite needs (run by `pretest`)
#   bash scripts/setup.sh --bench  also what the HTTP benchmarks need (docs/benchmarks.md)
#   bash scripts/setup.sh --sanitize  also the ASan/UBSan runtimes (npm run test:sanitize)
# System packages come from Debian/Ubuntu apt, as root (or through passwordless sudo);
# elsewhere it says what to install and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_bench=0
want_sanitize=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --bench) want_bench=1 ;;
    --sanitize) want_sanitize=1 ;;
    *) echo "usage: bash scripts/setup.sh [--test] [--bench] [--sanitize]" >&2; exit 2 ;;
  esac
done

say() { printf 'setup: %s\n' "$*"; }

# ---- system packages ------------------------------------------------------------------
# Runtime: libtorch and a fast BLAS (libtorch on the reference BLAS is ~50x slower), and the
# toolchain that builds the addon. Tests also run the Python model tooling, a real Redis,
# promtool, a headless browser and nginx (the deploy/ test runs the shipped proxy config).
packages=(libtorch-dev libopenblas0-pthread cmake g++ make)
if [ "$want_test" = 1 ]; then
  packages+=(python3-torch python3-numpy redis-server prometheus chromium nginx)
fi
if [ "$want_sanitize" = 1 ]; then
  # npm run test:sanitize: the ASan and UBSan runtimes that g++ links and node preloads.
  packages+=(libasan8 libubsan1)
fi
if [ "$want_bench" = 1 ]; then
  # wrk drives /recommend; the FastAPI baseline runs on Debian's Python stack (uvloop and
  # httptools: what `pip install uvicorn[standard]` would give it).
  packages+=(wrk python3-torch python3-fastapi python3-uvicorn python3-uvloop python3-httptools)
fi

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
fi

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt_run=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    apt_run=(sudo -n)
  else
    say "missing system packages: ${missing[*]}"
    say "install them as root, then run this again:"
    say "  sudo apt-get update && sudo apt-get install -y ${missing[*]}"
    exit 1
  fi
  say "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  "${apt_run[@]}" apt-get update -qq
  "${apt_run[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
elif ! command -v dpkg-query >/dev/null 2>&1; then
  say "not a Debian system: make sure libtorch (or a Python torch), cmake and a C++ compiler are installed"
fi

# ---- npm packages (npm ci also builds the addon through the install script) -----------------
lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
stamp=node_modules/.setup-lock-sha256
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_hash" ]; then
  say "installing npm packages (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_hash" >"$stamp"
fi

# ---- the addon and the TypeScript ---------------------------------------------------------
node scripts/build-native.mjs
if [ "$want_test" = 1 ] && [ "${TORCHSERVE_SKIP_GYP:-0}" != 1 ]; then
  # binding.gyp must keep building the same addon; the test suite loads both builds.
  node scripts/build-native.mjs --gyp
fi
node node_modules/typescript/bin/tsc -p tsconfig.json
say "ready"
