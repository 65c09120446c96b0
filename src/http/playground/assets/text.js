// The text-generation playground: POST /generate/stream, read as server-sent events with
// fetch + ReadableStream (EventSource cannot POST), the pieces appended as they arrive.
import { clearError, errorFromResponse, errorInfo, formatMs, serverSentEvents, setStatus, showError } from "./shared.js";

const $ = (id) => document.getElementById(id);
const form = $("generate-form");
const prompt = $("prompt");
const promptCount = $("prompt-count");
const fields = { maxNewTokens: $("max-new-tokens"), temperature: $("temperature"), topK: $("top-k"), seed: $("seed") };
const generateButton = $("generate");
const stopButton = $("stop");
const status = $("status");
const errorBox = $("error");
const output = $("output");
const outputPrompt = $("output-prompt");
const continuation = $("continuation");
const requestBody = $("request-body");
const stats = { pieces: $("stat-pieces"), first: $("stat-first"), total: $("stat-total"), rate: $("stat-rate") };

/** The fetch in progress; Stop aborts it, and the server then cancels the generation. */
let controller = null;

/** A number field as the API wants it: empty is `empty`, anything else is sent as typed
 * (a browser gives "" for text it cannot parse, so that is sent as the raw text and the
 * server's 422 says what is wrong). */
function numberField(input, empty) {
  const raw = input.value.trim();
  if (raw === "") return input.validity.badInput ? "" : empty;
  const value = Number(raw);
  return Number.isNaN(value) ? raw : value;
}

function requestFromForm() {
  const body = { prompt: prompt.value };
  const maxNewTokens = numberField(fields.maxNewTokens, undefined);
  const temperature = numberField(fields.temperature, undefined);
  const seed = numberField(fields.seed, undefined);
  if (maxNewTokens !== undefined) body.max_new_tokens = maxNewTokens;
  if (temperature !== undefined) body.temperature = temperature;
  body.top_k = numberField(fields.topK, null);
  if (seed !== undefined) body.seed = seed;
  return body;
}

function resetOutput(body) {
  clearError(errorBox);
  outputPrompt.textContent = body.prompt;
  continuation.textContent = "";
  requestBody.textContent = JSON.stringify(body, null, 2);
  for (const node of Object.values(stats)) node.textContent = "–";
}

function showStats(pieces, firstMs, totalMs) {
  stats.pieces.textContent = String(pieces);
  stats.first.textContent = firstMs === null ? "–" : formatMs(firstMs);
  stats.total.textContent = formatMs(totalMs);
  const streamingMs = firstMs === null ? 0 : totalMs - firstMs;
  stats.rate.textContent = pieces > 1 && streamingMs > 0 ? `${((pieces - 1) / (streamingMs / 1000)).toFixed(1)} pieces/s` : "–";
}

function setRunning(running) {
  generateButton.disabled = running;
  stopButton.disabled = !running;
  output.setAttribute("aria-busy", String(running));
}

/** Keeps the newest text in view unless the reader has scrolled up. */
function appendPiece(text) {
  const atBottom = output.scrollHeight - output.scrollTop - output.clientHeight < 8;
  continuation.append(text);
  if (atBottom) output.scrollTop = output.scrollHeight;
}

async function generate() {
  const body = requestFromForm();
  resetOutput(body);
  controller = new AbortController();
  const { signal } = controller;
  setRunning(true);
  setStatus(status, "waiting", "Waiting for the first piece…");
  const started = performance.now();
  let firstMs = null;
  let pieces = 0;
  let finished = false;
  try {
    const response = await fetch("generate/stream", {
      method: "POST",
      headers: { "content-type": "application/json", accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal,
    });
    if (!response.ok) {
      showError(errorBox, await errorFromResponse(response));
      setStatus(status, "error", `Failed: HTTP ${response.status}`);
      return;
    }
    for await (const event of serverSentEvents(response.body, signal)) {
      if (event.event === "error") {
        let detail = event.data;
        let code;
        try {
          ({ detail, code } = JSON.parse(event.data));
        } catch {
          // Not JSON: show it as it came.
        }
        showError(errorBox, errorInfo("The stream failed after it started", detail, code, event.data));
        setStatus(status, "error", "Failed during the stream");
        return;
      }
      if (event.data === "[DONE]") {
        finished = true;
        break;
      }
      const { token } = JSON.parse(event.data);
      if (firstMs === null) {
        firstMs = performance.now() - started;
        setStatus(status, "streaming", "Streaming…");
      }
      pieces += 1;
      appendPiece(token);
      showStats(pieces, firstMs, performance.now() - started);
    }
    if (signal.aborted) {
      setStatus(status, "stopped", "Stopped");
    } else if (finished) {
      setStatus(status, "done", "Done");
    } else {
      showError(errorBox, errorInfo("The stream ended early", "The connection closed before [DONE].", undefined, ""));
      setStatus(status, "error", "Ended early");
    }
  } catch (err) {
    if (signal.aborted) {
      setStatus(status, "stopped", "Stopped");
    } else {
      showError(errorBox, errorInfo("Could not reach the server", String(err?.message ?? err), undefined, ""));
      setStatus(status, "error", "Network error");
    }
  } finally {
    if (pieces > 0 || finished) showStats(pieces, firstMs, performance.now() - started);
    controller = null;
    setRunning(false);
  }
}

function countPrompt() {
  // The API counts Unicode code points, not UTF-16 units.
  promptCount.textContent = String([...prompt.value].length);
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  if (!controller) void generate();
});
stopButton.addEventListener("click", () => controller?.abort());
prompt.addEventListener("input", countPrompt);
prompt.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    form.requestSubmit();
  }
});
countPrompt();
