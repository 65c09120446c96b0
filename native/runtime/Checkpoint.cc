#include "runtime/Checkpoint.h"

#include <filesystem>
#include <set>
#include <utility>

#include "common/Device.h"
#include "common/ErrorCodes.h"
#include "common/Errors.h"

namespace tsn {

namespace {

void RequireMethod(const torch::jit::Module& module, const std::string& name, const std::string& path) {
  if (!module.find_method(name)) {
    throw CodedError(ErrorCode::kCheckpointInterface,
                     "Checkpoint " + path + " has no method `" + name +
                         "`: it does not implement the serving interface (see docs/checkpoint.md).");
  }
}

}  // namespace

LoadedModel LoadCheckpoint(const std::string& path, const std::string& deviceName,
                           const std::vector<std::string>& extraFileNames, bool languageModel) {
  LoadedModel loaded;
  loaded.device = ResolveDevice(deviceName);

  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw CodedError(ErrorCode::kCheckpointNotFound, "Checkpoint not found: " + path);
  }

  // torch fills only the names present in the archive; a sentinel tells them apart.
  static const std::string kAbsent("\x01<absent>");
  torch::jit::ExtraFilesMap extra;
  for (const auto& name : extraFileNames) extra[name] = kAbsent;
  if (languageModel) extra["config.json"] = kAbsent;
  try {
    loaded.module = std::make_shared<torch::jit::Module>(torch::jit::load(path, loaded.device, extra));
  } catch (const c10::Error& e) {
    throw CodedError(ErrorCode::kCheckpointInvalid, "Checkpoint " + path +
                                                   " is not a readable TorchScript archive "
                                                   "(corrupt or truncated?): " +
                                                   e.what_without_backtrace());
  }
  loaded.module->eval();
  for (auto& [name, content] : extra) {
    if (content != kAbsent) loaded.extraFiles[name] = std::move(content);
  }

  if (languageModel) {
    RequireMethod(*loaded.module, "forward", path);
    RequireMethod(*loaded.module, "cache_shape", path);
    RequireMethod(*loaded.module, "interface_version", path);
    int64_t version = -1;
    try {
      version = loaded.module->run_method("interface_version").toInt();
    } catch (const c10::Error& e) {
      throw CodedError(ErrorCode::kCheckpointInterface,
                       std::string("interface_version() failed: ") + e.what_without_backtrace());
    }
    if (version != kLanguageModelInterfaceVersion) {
      throw CodedError(ErrorCode::kCheckpointInterface,
                       "Checkpoint " + path + " implements serving interface version " +
                           std::to_string(version) + "; this server supports version " +
                           std::to_string(kLanguageModelInterfaceVersion) + ".");
    }
    if (!loaded.extraFiles.count("config.json")) {
      throw CodedError(ErrorCode::kCheckpointInterface,
                       "Checkpoint " + path + " carries no config.json extra file (see docs/checkpoint.md).");
    }
  }
  return loaded;
}

int64_t ModuleWeightBytes(const torch::jit::Module& module) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  const auto count = [&](const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.has_storage()) return;
    const c10::Storage& storage = tensor.storage();
    if (seen.insert(storage.unsafeGetStorageImpl()).second) bytes += static_cast<int64_t>(storage.nbytes());
  };
  for (const auto& p : module.named_parameters(true)) count(p.value);
  for (const auto& b : module.named_buffers(true)) count(b.value);
  return bytes;
}

void ReleaseParameters(torch::jit::Module& module) {
  for (const auto& sub : module.modules()) {
    std::vector<std::pair<std::string, at::TensorOptions>> names;
    for (const auto& p : sub.named_parameters(false)) names.emplace_back(p.name, p.value.options());
    torch::jit::Module handle = sub;  // setattr is not const; the handle is the same object
    for (const auto& [name, options] : names) handle.setattr(name, at::empty({0}, options));
  }
}

}  // namespace tsn
