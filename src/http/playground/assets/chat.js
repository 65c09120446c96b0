// The chat tab: a conversation through the OpenAI-compatible POST /v1/chat/completions,
// streamed (chat.completion.chunk deltas, the role first), the reply growing as it arrives.
import { clearError, errorFromResponse, errorInfo, serverSentEvents, setStatus, showError } from "./shared.js";

const $ = (id) => document.getElementById(id);
const tabs = { generate: $("tab-generate"), chat: $("tab-chat") };
const panels = { generate: $("panel-generate"), chat: $("panel-chat") };
const form = $("chat-form");
const input = $("chat-input");
const log = $("chat-log");
const errorBox = $("chat-error");
const status = $("chat-status");
const sendButton = $("chat-send");
const resetButton = $("chat-reset");
const fields = {
  maxTokens: $("chat-max-tokens"),
  temperature: $("chat-temperature"),
  stop: $("chat-stop"),
  schema: $("chat-schema"),
  tools: $("chat-tools"),
  toolChoice: $("chat-tool-choice"),
};

/** A JSON field's value; undefined when empty; an error naming the field when it is not JSON. */
function jsonField(element, name) {
  const raw = element.value.trim();
  if (raw === "") return undefined;
  try {
    return JSON.parse(raw);
  } catch (err) {
    throw errorInfo(`${name} is not JSON`, String(err?.message ?? err), undefined, raw);
  }
}

/** Tool calls as the reply shows them: one line per call, name(arguments). */
function showCalls(calls) {
  return calls.map((call) => `→ ${call.function.name}(${call.function.arguments})`).join("\n");
}

/** The conversation so far, as the API takes it. */
let messages = [];
let model = null;
let busy = false;

function select(name) {
  for (const [key, tab] of Object.entries(tabs)) {
    const on = key === name;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    panels[key].hidden = !on;
  }
  tabs[name].focus();
}

function bubble(role, text) {
  const item = document.createElement("li");
  item.className = `message ${role}`;
  const who = document.createElement("span");
  who.className = "role";
  who.textContent = role;
  const content = document.createElement("span");
  content.className = "content";
  content.textContent = text;
  item.append(who, content);
  log.append(item);
  return content;
}

async function servedModel() {
  if (model) return model;
  const response = await fetch("v1/models");
  if (!response.ok) throw await errorFromResponse(response);
  model = (await response.json()).data[0].id;
  return model;
}

function number(inputElement) {
  const raw = inputElement.value.trim();
  if (raw === "") return undefined;
  const value = Number(raw);
  return Number.isNaN(value) ? raw : value;
}

async function send() {
  const text = input.value;
  if (text.trim() === "" || busy) return;
  busy = true;
  sendButton.disabled = true;
  clearError(errorBox);
  setStatus(status, "waiting", "Waiting for the reply…");
  const pending = [...messages, { role: "user", content: text }];
  const userBubble = bubble("user", text);
  let reply = null;
  let content = "";
  const calls = [];
  let finished = false;
  try {
    const body = { model: await servedModel(), messages: pending, stream: true };
    const maxTokens = number(fields.maxTokens);
    const temperature = number(fields.temperature);
    if (maxTokens !== undefined) body.max_tokens = maxTokens;
    if (temperature !== undefined) body.temperature = temperature;
    if (fields.stop.value !== "") body.stop = fields.stop.value.replace(/\\n/g, "\n");
    const schema = jsonField(fields.schema, "JSON Schema");
    if (schema !== undefined) body.response_format = { type: "json_schema", json_schema: { name: "playground", schema } };
    const tools = jsonField(fields.tools, "Tools");
    if (tools !== undefined) {
      body.tools = (Array.isArray(tools) ? tools : [tools]).map((tool) => (tool.function ? tool : { type: "function", function: tool }));
      body.tool_choice = fields.toolChoice.value;
    }
    const response = await fetch("v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json", accept: "text/event-stream" },
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      userBubble.parentElement.remove();
      showError(errorBox, await errorFromResponse(response));
      setStatus(status, "error", `Failed: HTTP ${response.status}`);
      return;
    }
    const never = new AbortController().signal;
    for await (const event of serverSentEvents(response.body, never)) {
      if (event.data === "[DONE]") {
        finished = true;
        break;
      }
      const chunk = JSON.parse(event.data);
      if (chunk.error) {
        showError(errorBox, errorInfo("The reply failed after it started", chunk.error.message, chunk.error.code, event.data));
        setStatus(status, "error", "Failed during the reply");
        return;
      }
      const delta = chunk.choices?.[0]?.delta ?? {};
      if (delta.role) {
        reply ??= bubble(delta.role, "");
        setStatus(status, "streaming", "Streaming…");
      }
      if (delta.content) {
        reply ??= bubble("assistant", "");
        content += delta.content;
        reply.textContent = [content, showCalls(calls)].filter(Boolean).join("\n");
      }
      for (const call of delta.tool_calls ?? []) {
        // The name comes first, then the arguments in pieces.
        reply ??= bubble("assistant", "");
        calls[call.index] ??= { id: call.id, type: "function", function: { name: call.function?.name ?? "", arguments: "" } };
        calls[call.index].function.arguments += call.function?.arguments ?? "";
        reply.textContent = [content, showCalls(calls)].filter(Boolean).join("\n");
        reply.parentElement.classList.add("tool-calls");
      }
    }
    if (finished) {
      messages = [...pending, calls.length > 0 ? { role: "assistant", content: content || null, tool_calls: calls } : { role: "assistant", content }];
      input.value = "";
      setStatus(status, "done", "Done");
    } else {
      showError(errorBox, errorInfo("The reply ended early", "The connection closed before [DONE].", undefined, ""));
      setStatus(status, "error", "Ended early");
    }
  } catch (err) {
    const info = err && typeof err === "object" && "title" in err ? err : errorInfo("Could not reach the server", String(err?.message ?? err), undefined, "");
    showError(errorBox, info);
    setStatus(status, "error", "Failed");
  } finally {
    busy = false;
    sendButton.disabled = false;
  }
}

tabs.generate.addEventListener("click", () => select("generate"));
tabs.chat.addEventListener("click", () => select("chat"));
for (const tab of Object.values(tabs)) {
  tab.addEventListener("keydown", (event) => {
    if (event.key === "ArrowRight" || event.key === "ArrowLeft") select(tab === tabs.chat ? "generate" : "chat");
  });
}
form.addEventListener("submit", (event) => {
  event.preventDefault();
  void send();
});
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    form.requestSubmit();
  }
});
resetButton.addEventListener("click", () => {
  messages = [];
  log.replaceChildren();
  clearError(errorBox);
  setStatus(status, "idle", "Ready");
});
