// The recommendations playground: GET /recommend/{user_id}?k=, shown as a ranked table.
import { clearError, errorFromResponse, errorInfo, formatMs, setStatus, showError } from "./shared.js";

const $ = (id) => document.getElementById(id);
const form = $("recommend-form");
const userId = $("user-id");
const k = $("k");
const button = $("recommend");
const status = $("status");
const errorBox = $("error");
const result = $("result");
const summary = $("summary");
const rows = $("items").tBodies[0];
const stats = { source: $("stat-source"), count: $("stat-count"), latency: $("stat-latency") };

function showResult(body, latencyMs) {
  rows.replaceChildren();
  body.items.forEach((item, index) => {
    const row = rows.insertRow();
    row.insertCell().textContent = String(index + 1);
    row.insertCell().textContent = String(item);
  });
  summary.textContent = body.fallback
    ? `User ${body.user_id}: fallback (the most popular movies), not personalised.`
    : `User ${body.user_id}: personalised recommendations, best first.`;
  summary.dataset.fallback = String(body.fallback);
  stats.source.textContent = body.fallback ? "Fallback" : "Model";
  stats.count.textContent = String(body.items.length);
  stats.latency.textContent = `${formatMs(latencyMs)} (round trip)`;
  result.hidden = false;
}

async function recommend() {
  clearError(errorBox);
  result.hidden = true;
  const id = userId.value.trim();
  if (id === "") {
    showError(errorBox, errorInfo("Enter a user id", "The user id is part of the path: /recommend/{user_id}.", undefined, ""));
    setStatus(status, "error", "No user id");
    userId.focus();
    return;
  }
  // Empty k: the server's default. Text the browser cannot parse is sent as is (its 422 explains).
  const kText = k.value.trim();
  const sendK = kText !== "" || k.validity.badInput;
  const query = sendK ? `?k=${encodeURIComponent(kText)}` : "";
  // Shareable: the address bar keeps what was asked.
  history.replaceState(null, "", `?user=${encodeURIComponent(id)}${sendK ? `&k=${encodeURIComponent(kText)}` : ""}`);
  button.disabled = true;
  setStatus(status, "waiting", "Asking…");
  const started = performance.now();
  try {
    const response = await fetch(`recommend/${encodeURIComponent(id)}${query}`, { headers: { accept: "application/json" } });
    const latencyMs = performance.now() - started;
    if (!response.ok) {
      showError(errorBox, await errorFromResponse(response));
      setStatus(status, "error", `Failed: HTTP ${response.status}`);
      return;
    }
    showResult(await response.json(), latencyMs);
    setStatus(status, "done", "Done");
  } catch (err) {
    showError(errorBox, errorInfo("Could not reach the server", String(err?.message ?? err), undefined, ""));
    setStatus(status, "error", "Network error");
  } finally {
    button.disabled = false;
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  void recommend();
});

const params = new URLSearchParams(location.search);
if (params.has("user")) {
  userId.value = params.get("user");
  if (params.has("k")) k.value = params.get("k");
  void recommend();
}
