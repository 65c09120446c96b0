/**
 * The Responses stream's output events, item by item: a message item (its output_text part and
 * text deltas) or a function_call item (its argument deltas), each opened with
 * response.output_item.added and closed with its done events before the next one opens, as
 * OpenAI streams them. Every event carries its type and the next sequence_number.
 */
import { messageItem, newItemId, outputText, type FunctionCallItem, type MessageItem, type OutputItem, type ResponseStatus } from "./objects.js";

export class OutputEvents {
  private sequence = 0;
  /** Every item opened so far, in output order. */
  readonly items: OutputItem[] = [];
  private current: { item: MessageItem; text: string } | { item: FunctionCallItem } | undefined;

  /** One server-sent event. */
  event(type: string, body: object): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, ...body, sequence_number: this.sequence++ })}\n\n`;
  }

  /** Text of the assistant's message, opening the message item first if need be. */
  text(delta: string): string {
    const events = this.current?.item.type === "message" ? "" : this.openMessage();
    const message = this.current as { item: MessageItem; text: string };
    message.text += delta;
    return events + this.event("response.output_text.delta", { item_id: message.item.id, output_index: this.index, content_index: 0, delta, logprobs: [] });
  }

  /** A new function call, its name known: the previous item closes. */
  call(callId: string, name: string): string {
    const events = this.close("completed");
    const item: FunctionCallItem = { id: newItemId("fc"), type: "function_call", status: "in_progress", call_id: callId, name, arguments: "" };
    this.open(item);
    this.current = { item };
    return events + this.event("response.output_item.added", { output_index: this.index, item: { ...item } });
  }

  /** A piece of the current call's arguments. */
  arguments(delta: string): string {
    if (this.current?.item.type !== "function_call" || delta === "") return "";
    const item = this.current.item as FunctionCallItem;
    item.arguments += delta;
    return this.event("response.function_call_arguments.delta", { item_id: item.id, output_index: this.index, delta });
  }

  /** The end: the open item closes (an empty message when nothing was written). */
  finish(status: ResponseStatus): string {
    const events = this.items.length === 0 ? this.openMessage() : "";
    return events + this.close(status);
  }

  private openMessage(): string {
    const events = this.close("completed");
    const item = messageItem(newItemId("msg"), undefined, "in_progress");
    this.open(item);
    this.current = { item, text: "" };
    return (
      events +
      this.event("response.output_item.added", { output_index: this.index, item: { ...item, content: [] } }) +
      this.event("response.content_part.added", { item_id: item.id, output_index: this.index, content_index: 0, part: outputText("") })
    );
  }

  private get index(): number {
    return this.items.length - 1;
  }

  private open(item: OutputItem): void {
    this.items.push(item);
  }

  private close(status: ResponseStatus): string {
    const current = this.current;
    if (!current) return "";
    this.current = undefined;
    const at = { item_id: current.item.id, output_index: this.index };
    if ("text" in current) {
      const item = messageItem(current.item.id, current.text, status);
      this.items[this.index] = item;
      return (
        this.event("response.output_text.done", { ...at, content_index: 0, text: current.text, logprobs: [] }) +
        this.event("response.content_part.done", { ...at, content_index: 0, part: outputText(current.text) }) +
        this.event("response.output_item.done", { output_index: this.index, item })
      );
    }
    const item: FunctionCallItem = { ...current.item, status };
    this.items[this.index] = item;
    return (
      this.event("response.function_call_arguments.done", { ...at, name: item.name, arguments: item.arguments }) +
      this.event("response.output_item.done", { output_index: this.index, item })
    );
  }
}
