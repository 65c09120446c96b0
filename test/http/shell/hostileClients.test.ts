/**
 * Clients that trickle, against the real engine: a slowloris crowd does not keep a normal
 * request out. (Clients that leave: test/e2e/disconnectStorm.test.ts, against the server
 * as its own process.)
 */
import { expect } from "chai";
import { connect, type Socket } from "node:net";

import { startTargets, type Targets } from "../../../scripts/fuzz/targets.js";
import { postJson } from "../../helpers/http.js";

describe("hostile clients (real engine)", function () {
  this.timeout(120_000);
  let targets: Targets;
  let text: string;

  before(async () => {
    targets = await startTargets();
    text = `http://127.0.0.1:${targets.text.port}`;
  });
  after(async () => {
    await targets?.close();
  });

  it("hundreds of slowloris connections do not keep a normal request from being served, and are cut off at the headers timeout", async () => {
    const crowd: Socket[] = [];
    const closed: Promise<void>[] = [];
    const trickle = setInterval(() => {
      for (const socket of crowd) if (!socket.destroyed) socket.write(`X-Slow-${crowd.indexOf(socket) % 10}: a\r\n`);
    }, 200);
    try {
      for (let i = 0; i < 300; i += 1) {
        const socket = connect(targets.text.port, "127.0.0.1");
        socket.on("error", () => {});
        closed.push(new Promise((resolve) => socket.once("close", () => resolve())));
        socket.write("POST /generate HTTP/1.1\r\nHost: x\r\n");
        crowd.push(socket);
      }
      await Promise.all(crowd.map((socket) => (socket.connecting ? new Promise((r) => socket.once("connect", r)) : null)));
      const answer = await postJson(text, "/generate", { prompt: "Once", max_new_tokens: 4, seed: 2 });
      expect(answer.status).to.equal(200);
      expect(((await answer.json()) as { text: string }).text).to.be.a("string");
      // The headers timeout (2 s in the test server) ends every trickler, however busy it keeps.
      await Promise.all(closed);
    } finally {
      clearInterval(trickle);
      for (const socket of crowd) socket.destroy();
    }
  });
});
