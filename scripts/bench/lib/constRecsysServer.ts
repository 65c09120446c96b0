/**
 * A diagnostic arm for recommend-http: our recsys app (createRecsysApp: validation, metrics,
 * error handling) around a hand-written recommender that answers a constant at once. Set
 * between the real app and a bare Express route, it splits the gap between them into the
 * HTTP layer's share and the model call's share.
 */
import type { AddressInfo } from "node:net";

import { createRecsysApp } from "../../../src/http/recsys/createRecsysApp.js";

const ITEMS = [318, 858, 50, 527, 1221, 2571, 260, 1196, 2959, 296];
const app = createRecsysApp({ recommend: (_userId: number, k: number) => ({ items: ITEMS.slice(0, k), fallback: false }) });
await app.start();
const server = app.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ ready: true, port: (server.address() as AddressInfo).port }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
