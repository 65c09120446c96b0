// The recommendations playground: GET /recommend/{user_id}?k=, shown as a ranked table, with
// titles from GET /movies?ids= and the user's recent ratings from GET /users/{id}/history.
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
const historySection = $("history-section");
const historySummary = $("history-summary");
const historyRows = $("history").tBodies[0];
const HISTORY_N = 10;

/** Display data is a nicety: a failure leaves ids without titles, never breaks the page. */
async function getJson(url) {
  try {
    const response = await fetch(url, { headers: { accept: "application/json" } });
    return response.ok ? await response.json() : null;
  } catch {
    return null;
  }
}

async function showTitles(ids) {
  if (ids.length === 0) return;
  const body = await getJson(`movies?ids=${ids.join(",")}`);
  if (!body) return;
  body.movies.forEach((movie, index) => {
    const row = rows.rows[index];
    if (!row || row.cells[1].textContent !== String(movie.id)) return;
    row.cells[2].textContent = movie.title ?? "(no title)";
    row.cells[3].textContent = movie.genres.join(", ");
  });
}

async function showHistory(id) {
  historyRows.replaceChildren();
  historySection.hidden = true;
  const body = await getJson(`users/${encodeURIComponent(id)}/history?n=${HISTORY_N}`);
  if (!body) return;
  for (const r of body.ratings) {
    const row = historyRows.insertRow();
    row.insertCell().textContent = new Date(r.timestamp * 1000).toISOString().slice(0, 10);
    row.insertCell().textContent = `${r.rating}★`;
    row.insertCell().textContent = r.title ?? `(no title: movie ${r.movie_id})`;
    row.insertCell().textContent = r.genres.join(", ");
  }
  historySummary.textContent = !body.known
    ? `User ${body.user_id} is not in the model's data: no ratings to show.`
    : body.ratings.length === 0
      ? `No ratings of user ${body.user_id} are stored with the model.`
      : `The ${body.ratings.length} most recent ratings of user ${body.user_id}, newest first.`;
  historySection.hidden = false;
}

function showResult(body, latencyMs) {
  rows.replaceChildren();
  body.items.forEach((item, index) => {
    const row = rows.insertRow();
    row.insertCell().textContent = String(index + 1);
    row.insertCell().textContent = String(item);
    row.insertCell();
    row.insertCell();
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
  historySection.hidden = true;
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
    const body = await response.json();
    showResult(body, latencyMs);
    await Promise.all([showTitles(body.items), showHistory(body.user_id)]);
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
