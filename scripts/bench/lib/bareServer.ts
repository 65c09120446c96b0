/**
 * The /recommend baseline: a bare Express 5 app whose route answers a constant of the same
 * shape as a real recommendation (no validation, metrics or model). It also measures its own
 * event-loop delay (GET /lag, reset on each read) so the real app's lag has a reference.
 */
import express from "express";
import { monitorEventLoopDelay } from "node:perf_hooks";
import type { AddressInfo } from "node:net";

const ITEMS = [318, 858, 50, 527, 1221, 2571, 260, 1196, 2959, 296];
const lag = monitorEventLoopDelay({ resolution: 10 });
lag.enable();

const app = express();
app.disable("x-powered-by");
app.set("etag", false);
app.get("/recommend/:user_id", (req, res) => {
  res.json({ user_id: Number(req.params.user_id), items: ITEMS, fallback: false });
});
app.get("/lag", (_req, res) => {
  res.json({ p99_ms: lag.percentile(99) / 1e6, max_ms: lag.max / 1e6, mean_ms: lag.mean / 1e6 });
  lag.reset();
});

const server = app.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ ready: true, port: (server.address() as AddressInfo).port }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
