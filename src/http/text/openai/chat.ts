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
export function renderChat(messages: readonly ChatMessage[], template: ChatTemplate | undefined): string {
  const source = template?.template ?? DEFAULT_CHAT_TEMPLATE;
  // Text parts joined: templates expect string content.
  const plain = messages.map((message) => ({
    ...message,
    content: Array.isArray(message.content)
      ? message.content.map((part) => part.text ?? "").join("")
      : (message.content ?? ""),
  }));
  try {
    return compile(source).render({
      messages: plain,
      add_generation_prompt: true,
      bos_token: template?.bosToken ?? "",
      eos_token: template?.eosToken ?? "",
    });
  } catch (err) {
    throw invalid([{ loc: ["body", "messages"], msg: `chat template: ${(err as Error).message}`, type: "chat_template" }]);
  }
}
