/**
 * Chat messages to a prompt: the checkpoint's chat template (tokenizer_config.json or
 * config.json `chat_template`, as transformers' apply_chat_template renders it) run by
 * @huggingface/jinja, or DEFAULT_CHAT_TEMPLATE for checkpoints without one (the byte-level
 * demo model).
 */
import { Template } from "@huggingface/jinja";
import { ServingError } from "../../../errors.js";
import type { ChatTemplate } from "../../../types.js";
import { invalid } from "../../shell/validation.js";

/**
 * For checkpoints without a template: one `role: content` line per message, then
 * `assistant:` for the model to continue. Plain text, so a model trained on prose (the demo)
 * reads it as a dialogue.
 */
export const DEFAULT_CHAT_TEMPLATE =
  "{% for message in messages %}{{ message.role }}: {{ message.content }}\n{% endfor %}" +
  "{% if add_generation_prompt %}assistant:{% endif %}";

export interface ChatMessage {
  role: string;
  content: string | { type: string; text?: string }[] | null;
  name?: string;
  tool_calls?: { id?: string; type?: string; function: { name: string; arguments: string } }[] | null;
  tool_call_id?: string;
}

/** What a template is rendered with besides the messages: the tools, as transformers passes them. */
export interface ChatRenderOptions {
  tools?: { type: "function"; function: object }[];
  /** The template has no tool support: calls and results are written into the messages' text (the default tool format). */
  inlineTools?: boolean;
}

/** Arguments as an object, which templates print with tojson; text that is not JSON stays text. */
function argumentsObject(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Templates compiled once per text. */
const compiled = new Map<string, Template>();

function compile(source: string): Template {
  let template = compiled.get(source);
  if (!template) {
    try {
      template = new Template(source);
    } catch (err) {
      throw new ServingError("ERR_INTERNAL", `the checkpoint's chat template does not parse: ${(err as Error).message}`);
    }
    compiled.set(source, template);
  }
  return template;
}

/** The prompt for `messages`; a template that rejects them (raise_exception) is the client's 400. */
export function renderChat(messages: readonly ChatMessage[], template: ChatTemplate | undefined, options: ChatRenderOptions = {}): string {
  const source = template?.template ?? DEFAULT_CHAT_TEMPLATE;
  // Text parts joined: templates expect string content.
  const plain = messages.map((message) => {
    let content = Array.isArray(message.content) ? message.content.map((part) => part.text ?? "").join("") : (message.content ?? "");
    const rendered: Record<string, unknown> = { ...message, content };
    if (message.tool_calls && message.tool_calls.length > 0) {
      if (options.inlineTools) {
        const calls = message.tool_calls.map((call) => `<tool_call>\n${JSON.stringify({ name: call.function.name, arguments: argumentsObject(call.function.arguments) })}\n</tool_call>`);
        content = [content, ...calls].filter((part) => part !== "").join("\n");
        rendered.content = content;
        delete rendered.tool_calls;
      } else {
        // transformers' form: arguments as an object (templates print them with tojson).
        rendered.tool_calls = message.tool_calls.map((call) => ({
          ...(call.id ? { id: call.id } : {}),
          type: "function",
          function: { name: call.function.name, arguments: argumentsObject(call.function.arguments) },
        }));
      }
    } else {
      delete rendered.tool_calls;
    }
    if (options.inlineTools && message.role === "tool") rendered.content = `<tool_response>\n${content}\n</tool_response>`;
    return rendered;
  });
  try {
    return compile(source).render({
      messages: plain,
      add_generation_prompt: true,
      bos_token: template?.bosToken ?? "",
      eos_token: template?.eosToken ?? "",
      ...(options.tools && !options.inlineTools ? { tools: options.tools } : {}),
    });
  } catch (err) {
    throw invalid([{ loc: ["body", "messages"], msg: `chat template: ${(err as Error).message}`, type: "chat_template" }]);
  }
}
