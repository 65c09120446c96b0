// The one channel from a model's inference thread back to JavaScript: a typed
// ThreadSafeFunction carrying closures ("letters") that run on the JS thread, in the order
// they were posted. Token letters and the completion of the same job therefore arrive in
// order, and a job settles only after every token before it was delivered.
//
// The queue stays bounded without blocking the inference thread: each job has at most one
// token letter in flight (tokens coalesce in the job until JS drains them) plus its
// completion.
#pragma once

#include <napi.h>

#include <functional>
#include <memory>

namespace tsn {

class Mailbox {
 public:
  using Letter = std::function<void(Napi::Env)>;

  Mailbox(Napi::Env env, const char* name);

  // Any thread. False once the mailbox is closed (the letter is dropped).
  bool Post(Letter letter);

  // JS thread. While answers are outstanding the mailbox keeps the event loop alive.
  void Hold(Napi::Env env);
  void Settle(Napi::Env env);

  // JS thread. Letters already posted are still delivered; then `onClosed` runs. Idempotent.
  void Close(Letter onClosed);

  // JS thread, at teardown: drops undelivered letters.
  void Abort();

 private:
  struct Context {
    Letter onClosed;
  };
  static void Deliver(Napi::Env env, Napi::Function unused, Context* context, Letter* letter);
  static void Finalize(Napi::Env env, void* unused, Context* context);
  using Channel = Napi::TypedThreadSafeFunction<Context, Letter, Deliver>;

  Channel channel_;
  Context* context_;       // owned by the channel; deleted in Finalize
  int outstanding_ = 0;    // JS thread only
  bool closed_ = false;    // JS thread only
};

}  // namespace tsn
