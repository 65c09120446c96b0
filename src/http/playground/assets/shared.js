// What the playground pages share: showing an error answer, formatting durations, reading
// server-sent events.

const TITLES = {
  400: "Invalid request",
  401: "API key required",
  404: "Not found",
  413: "Request too large",
  422: "Invalid request",
  429: "Rate limited",
  500: "Server error",
  503: "Not serving right now",
};

/** An error to show: a title, the server's detail (a string or a list of violations), its code. */
export function errorInfo(title, detail, code, raw) {
  return { title, detail, code, raw };
}

/** Reads a non-2xx answer: its JSON body (or text), the status and any Retry-After. */
export async function errorFromResponse(response) {
  const text = await response.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON (a proxy's page, say): show the text as it came.
  }
  const retryAfter = response.headers.get("retry-after");
  let title = `${response.status} ${TITLES[response.status] ?? (response.statusText || "Error")}`;
  if (retryAfter) title += `: retry after ${retryAfter} s`;
  // The project's {detail, code}, or OpenAI's {error: {message, code}} from the /v1 routes.
  const openAi = body && typeof body === "object" && body.error && typeof body.error === "object" ? body.error : null;
  const detail = openAi ? openAi.message : body && typeof body === "object" && "detail" in body ? body.detail : text;
  const code = openAi ? (openAi.code ?? undefined) : body && typeof body === "object" && typeof body.code === "string" ? body.code : undefined;
  return errorInfo(title, detail, code, body ? JSON.stringify(body, null, 2) : text);
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Fills the alert region; 422 violations become a list of "where: what". */
export function showError(container, info) {
  container.replaceChildren();
  container.append(element("p", "error-title", info.title));
  if (Array.isArray(info.detail)) {
    const list = element("ul", "violations");
    for (const issue of info.detail) {
      const item = element("li");
      const where = Array.isArray(issue?.loc) ? issue.loc.join(".") : "request";
      item.append(element("code", "", where), `: ${issue?.msg ?? JSON.stringify(issue)}`);
      list.append(item);
    }
    container.append(list);
  } else if (info.detail !== undefined && info.detail !== "") {
    container.append(element("p", "error-detail", typeof info.detail === "string" ? info.detail : JSON.stringify(info.detail)));
  }
  if (info.code) {
    const code = element("p", "error-code", "Code: ");
    code.append(element("code", "", info.code));
    container.append(code);
  }
  if (info.raw) {
    const raw = element("details");
    raw.append(element("summary", "", "Response body"), element("pre", "", info.raw));
    container.append(raw);
  }
  container.hidden = false;
}

export function clearError(container) {
  container.hidden = true;
  container.replaceChildren();
}

export function formatMs(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

/** Shows what the page is doing; data-state drives the colour (and the tests). */
export function setStatus(node, state, text) {
  node.dataset.state = state;
  node.textContent = text;
}

/** Server-sent events from a response body: `{ event, data }` per blank-line-separated block. */
export async function* serverSentEvents(body, signal) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buffer += decoder.decode(value, { stream: !done });
      const blocks = buffer.split(/\r?\n\r?\n/);
      buffer = done ? "" : blocks.pop();
      for (const block of blocks) {
        const event = parseEvent(block);
        if (event) yield event;
      }
      if (done || signal.aborted) return;
    }
  } finally {
    reader.releaseLock();
  }
}

function parseEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  return data.length > 0 ? { event, data: data.join("\n") } : null;
}
