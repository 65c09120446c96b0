#!/usr/bin/env node
// Packs what scripts/gpu-check.sh needs on a CUDA host that has no Node and no network (the
// image has Python torch with CUDA, nvcc and CMake): this Node binary, the built JavaScript
// (dist/) and only the node_modules the addon's build and the engine tests load, with their
// dependencies. Into .gpu-bundle/ (git-ignored), about 30 MB:
//   node scripts/gpu-bundle.mjs
// On the CUDA host, from a copy of the repository with .gpu-bundle/ beside it:
//   bash .gpu-bundle/unpack.sh && PATH="$PWD/.gpu-bundle/bin:$PATH" bash scripts/gpu-check.sh
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, ".gpu-bundle");
// The build (cmake-js, the Node-API headers), the test runner, and what the engine tests and
// dist/scripts/bench/device-decode.js import (read off an strace of `gpu-check.sh --cpu`).
const roots = ["cmake-js", "node-addon-api", "node-api-headers", "mocha", "chai", "ajv", "@huggingface/tokenizers"];

/** The package folder Node would resolve `name` to from `from` (a package folder or root). */
function locate(name, from) {
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, "node_modules", name);
    if (existsSync(join(candidate, "package.json"))) return candidate;
    if (dir === root || dirname(dir) === dir) return null;
  }
}

const folders = new Set();
const queue = roots.map((name) => {
  const found = locate(name, root);
  if (!found) throw new Error(`gpu-bundle: ${name} is not installed (run npm install)`);
  return found;
});
while (queue.length > 0) {
  const folder = queue.pop();
  if (folders.has(folder)) continue;
  folders.add(folder);
  const pkg = JSON.parse(readFileSync(join(folder, "package.json"), "utf8"));
  const deps = { ...pkg.dependencies, ...pkg.optionalDependencies, ...pkg.peerDependencies };
  for (const name of Object.keys(deps)) {
    const found = locate(name, folder);
    if (found) queue.push(found);
    else if (pkg.dependencies?.[name]) throw new Error(`gpu-bundle: ${name} (needed by ${folder}) is not installed`);
  }
}
if (!existsSync(join(root, "dist/test/native/llama.test.js"))) {
  execFileSync(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"], { cwd: root, stdio: "inherit" });
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const paths = [...folders].map((folder) => folder.slice(root.length + 1)).sort();
writeFileSync(join(out, "files.txt"), ["dist", ...paths].join("\n") + "\n");
execFileSync("tar", ["-cJf", join(out, "tree.tar.xz"), "-C", root, "-T", join(out, "files.txt")], { stdio: "inherit", env: { ...process.env, XZ_OPT: "-6 -T0" } });
execFileSync("sh", ["-c", `xz -6 -T0 -c "${process.execPath}" > "${join(out, "node.xz")}"`], { stdio: "inherit" });
writeFileSync(join(out, "unpack.sh"), `#!/usr/bin/env bash
# Unpacks the bundle into the repository above it: dist/, node_modules/ and .gpu-bundle/bin/node.
set -euo pipefail
cd "$(dirname "$0")"
unxz() { if command -v xz >/dev/null; then xz -dc "$1"; else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; fi; }
mkdir -p bin && unxz node.xz > bin/node && chmod +x bin/node
unxz tree.tar.xz | tar -x -C ..
echo "gpu-bundle: node $(bin/node --version), $(wc -l < files.txt) folders unpacked"
`);
const size = execFileSync("du", ["-sh", out], { encoding: "utf8" }).split("\t")[0];
console.log(`gpu-bundle: ${paths.length} packages, dist/ and node in ${out} (${size})`);
