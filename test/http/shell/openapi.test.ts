/** /openapi.json is generated from the schemas that validation enforces. */
import { Ajv2020 } from "ajv/dist/2020.js";
import { expect } from "chai";
import { createApp, createRecsysApp, schemas } from "../../../src/http/index.js";
import { BatchEngine } from "../../helpers/engines.js";
import { listen, postJson, serve, type Running } from "../../helpers/http.js";
import { RecordingLimiter } from "../../helpers/limiters.js";

interface Operation {
  requestBody?: { content: Record<string, { schema: { $ref: string } }> };
  parameters?: { name: string; in: string; required: boolean; schema: Record<string, unknown> }[];
  responses: Record<string, { content?: Record<string, { schema: unknown }>; headers?: Record<string, unknown> }>;
}
interface Document {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Record<string, unknown>> };
}

/** Resolves a local $ref into an ajv validator of the document's own schema. */
function validatorFor(doc: Document, name: string) {
  const ajv = new Ajv2020({ strict: false, allowUnionTypes: true });
  ajv.addSchema({ $id: "doc", components: doc.components }, "doc");
  return ajv.compile({ $ref: `doc#/components/schemas/${name}` });
}

describe("GET /openapi.json", function () {
  const toClose: Running[] = [];
  afterEach(async () => {
    for (const running of toClose.splice(0)) await running.close();
  });

  it("text app: OpenAPI 3.1 with every route, the request body schema, and 200/413/422/429/503", async () => {
    const running = await serve(createApp(new BatchEngine({ auto: true }), { maxWaitMs: 1, rateLimiter: new RecordingLimiter() }));
    toClose.push(running);
    const response = await fetch(`${running.base}/openapi.json`);
    expect(response.status).to.equal(200);
    const doc = (await response.json()) as Document;
    expect(doc.openapi).to.equal("3.1.0");
    expect(Object.keys(doc.paths).sort()).to.deep.equal([
      "/generate", "/generate/stream", "/health", "/metrics", "/openapi.json", "/ready", "/v1/chat/completions", "/v1/completions", "/v1/models",
      "/v1/responses", "/v1/responses/{id}",
    ]);
    for (const path of ["/generate", "/generate/stream"]) {
      const post = doc.paths[path]!["post"]!;
      expect(post.requestBody!.content["application/json"]!.schema).to.deep.equal({ $ref: "#/components/schemas/GenerateRequest" });
      expect(Object.keys(post.responses)).to.include.members(["200", "413", "422", "429", "500", "503"]);
      expect(post.responses["429"]!.headers).to.have.property("Retry-After");
      expect(post.responses["503"]!.headers).to.have.property("Retry-After");
    }
    expect(doc.paths["/generate/stream"]!["post"]!.responses["200"]!.content).to.have.property("text/event-stream");
    // The very schema validation compiles, not a copy that could drift.
    expect(doc.components.schemas["GenerateRequest"]).to.deep.equal(JSON.parse(JSON.stringify(schemas.generateRequestSchema)));
    // The spec's fields, then the documented sampling extensions and structured output.
    expect(doc.components.schemas["GenerateRequest"]!["properties"]).to.have.keys(
      "prompt", "max_new_tokens", "temperature", "top_k",
      "seed", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "stop",
      "response_format",
      "structured_outputs",
      "guided_json",
      "guided_regex",
      "guided_choice",
      "guided_grammar",
    );
  });

  it("documents what the app answers: real responses validate against the document's schemas", async () => {
    const running = await serve(createApp(new BatchEngine({ auto: true }), { maxWaitMs: 1 }));
    toClose.push(running);
    const doc = (await (await fetch(`${running.base}/openapi.json`)).json()) as Document;
    const ok = await (await postJson(running.base, "/generate", { prompt: "hi" })).json();
    expect(validatorFor(doc, "GenerateResponse")(ok)).to.equal(true);
    const invalid = await (await postJson(running.base, "/generate", { prompt: 3 })).json();
    expect(validatorFor(doc, "ValidationError")(invalid)).to.equal(true);
    const missing = await (await fetch(`${running.base}/nope`)).json();
    expect(validatorFor(doc, "Error")(missing)).to.equal(true);
    const health = await (await fetch(`${running.base}/health`)).json();
    expect(validatorFor(doc, "HealthResponse")(health)).to.equal(true);
    // Without a limiter there is no 429 to document.
    expect(doc.paths["/generate"]!["post"]!.responses).to.not.have.property("429");
  });

  it("recsys app: /recommend/{user_id} with its path and query parameters", async () => {
    const running = await listen(createRecsysApp({ recommend: () => ({ items: [1, 2], fallback: false }) }, { rateLimiter: new RecordingLimiter() }));
    toClose.push(running);
    const doc = (await (await fetch(`${running.base}/openapi.json`)).json()) as Document;
    expect(Object.keys(doc.paths).sort()).to.deep.equal([
      "/health",
      "/metrics",
      "/movies",
      "/openapi.json",
      "/ready",
      "/recommend/{user_id}",
      "/users/{user_id}/history",
    ]);
    const get = doc.paths["/recommend/{user_id}"]!["get"]!;
    const byName = Object.fromEntries(get.parameters!.map((p) => [p.name, p]));
    expect(byName["user_id"]).to.deep.include({ in: "path", required: true });
    expect(byName["user_id"]!.schema).to.deep.include({ type: "integer" });
    expect(byName["k"]).to.deep.include({ in: "query", required: false });
    expect(byName["k"]!.schema).to.deep.include({ type: "integer", minimum: 1, maximum: 100, default: 10 });
    expect(Object.keys(get.responses)).to.include.members(["200", "422", "429", "503"]);
    const body = await (await fetch(`${running.base}/recommend/4?k=2`)).json();
    expect(validatorFor(doc, "RecommendResponse")(body)).to.equal(true);
  });

  it("recsys app: the read-only display routes /movies and /users/{user_id}/history", async () => {
    const running = await listen(createRecsysApp({ recommend: () => ({ items: [1, 2], fallback: false }) }, { rateLimiter: new RecordingLimiter() }));
    toClose.push(running);
    const doc = (await (await fetch(`${running.base}/openapi.json`)).json()) as Document;
    const movies = doc.paths["/movies"]!["get"]!;
    expect(movies.parameters![0]).to.deep.include({ name: "ids", in: "query", required: true });
    expect(movies.parameters![0]!.schema).to.deep.include({ type: "array", minItems: 1, maxItems: 100 });
    expect(Object.keys(movies.responses)).to.include.members(["200", "422", "429"]);
    const history = doc.paths["/users/{user_id}/history"]!["get"]!;
    expect(history.parameters!.map((p) => [p.name, p.in])).to.deep.equal([["user_id", "path"], ["n", "query"]]);
    expect(Object.keys(history.responses)).to.include.members(["200", "422", "429", "503"]);
    // Without a catalogue the answers still fit their documented shapes.
    expect(validatorFor(doc, "MoviesResponse")(await (await fetch(`${running.base}/movies?ids=3,4`)).json())).to.equal(true);
    expect(validatorFor(doc, "HistoryResponse")(await (await fetch(`${running.base}/users/3/history`)).json())).to.equal(true);
  });
});
