#include "binding/Mailbox.h"

namespace tsn {

Mailbox::Mailbox(Napi::Env env, const char* name) : context_(new Context()) {
  channel_ = Channel::New(env, name, 0, 1, context_, Finalize, static_cast<void*>(nullptr));
  channel_.Unref(env);
}

bool Mailbox::Post(Letter letter) {
  auto* boxed = new Letter(std::move(letter));
  if (channel_.NonBlockingCall(boxed) != napi_ok) {
    delete boxed;
    return false;
  }
  return true;
}

void Mailbox::Hold(Napi::Env env) {
  if (outstanding_++ == 0) channel_.Ref(env);
}

void Mailbox::Settle(Napi::Env env) {
  if (outstanding_ > 0 && --outstanding_ == 0) channel_.Unref(env);
}

void Mailbox::Close(Letter onClosed) {
  if (closed_) return;
  closed_ = true;
  context_->onClosed = std::move(onClosed);
  channel_.Release();
}

void Mailbox::Abort() {
  if (closed_) return;
  closed_ = true;
  channel_.Abort();
}

void Mailbox::Deliver(Napi::Env env, Napi::Function, Context*, Letter* letter) {
  std::unique_ptr<Letter> owned(letter);
  if (env == nullptr || !owned || !*owned) return;  // environment torn down
  try {
    (*owned)(env);
  } catch (const Napi::Error& error) {
    error.ThrowAsJavaScriptException();
  } catch (const std::exception& error) {
    Napi::Error::New(env, error.what()).ThrowAsJavaScriptException();
  }
}

void Mailbox::Finalize(Napi::Env env, void*, Context* context) {
  std::unique_ptr<Context> owned(context);
  if (owned->onClosed && env != nullptr) owned->onClosed(env);
}

}  // namespace tsn
