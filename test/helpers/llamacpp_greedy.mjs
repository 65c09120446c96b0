/**
 * Greedy continuations and tokenizations of GGUF models through llama.cpp (the npm package
 * node-llama-cpp, its prebuilt CPU binaries; nothing is built or downloaded), to check
 * export_gguf.py against the project's reference on the same weights.
 *
 *   node test/helpers/llamacpp_greedy.mjs JOBS.json
 *
 * JOBS.json: [{"gguf": path, "prompts": [[ids...]...], "maxNewTokens": n, "texts": [str...]}]
 * Prints one JSON array: per job {"outputs": [[ids...]...], "tokens": [[ids...]...]}, where
 * outputs stop before the first end-of-generation token and tokens are llama.cpp's
 * tokenization of each text (no BOS added, special tokens not parsed).
 */
import { readFileSync } from "node:fs";
import { getLlama } from "node-llama-cpp";

const jobs = JSON.parse(readFileSync(process.argv[2], "utf8"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const results = [];
for (const job of jobs) {
  const model = await llama.loadModel({ modelPath: job.gguf });
  const outputs = [];
  for (const prompt of job.prompts) {
    // A fresh context per prompt: nothing of an earlier prompt stays in the cache.
    const context = await model.createContext({ contextSize: Math.max(64, prompt.length + job.maxNewTokens + 8), threads: 1 });
    const sequence = context.getSequence();
    const out = [];
    if (job.maxNewTokens > 0) {
      for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
        if (model.isEogToken(token)) break;
        out.push(token);
        if (out.length >= job.maxNewTokens) break;
      }
    }
    outputs.push(out);
    await context.dispose();
  }
  const tokens = (job.texts ?? []).map((text) => Array.from(model.tokenize(text, false)));
  results.push({ outputs, tokens });
  await model.dispose();
}
await llama.dispose();
console.log(JSON.stringify(results));
