/**
 * The server entry (dist/src/server.js) for the soak, run with --expose-gc: on SIGUSR2 it
 * runs a full garbage collection and prints the memory after it as one JSON line. The V8
 * heap is a sawtooth; only its size after a full collection says whether it grows. Nothing
 * else differs from `npm start`.
 */
process.on("SIGUSR2", () => {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  const m = process.memoryUsage();
  console.log(JSON.stringify({ benchGc: gc !== undefined, heapUsed: m.heapUsed, heapTotal: m.heapTotal, rss: m.rss, external: m.external }));
});
await import("../../../src/server.js");
