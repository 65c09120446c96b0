// Every `code` the addon puts on an error. Each must be a key of the TypeScript catalogue
// (src/errors.ts), which maps it to an HTTP status; the addon exports the list
// (`errorCodes`) and a test checks it against the catalogue, so a typo cannot become a
// silent 500. Native code names codes only through these constants.
#pragma once

namespace tsn::ErrorCode {

inline constexpr const char kCheckpointNotFound[] = "ERR_CHECKPOINT_NOT_FOUND";
inline constexpr const char kCheckpointInvalid[] = "ERR_CHECKPOINT_INVALID";
inline constexpr const char kCheckpointInterface[] = "ERR_CHECKPOINT_INTERFACE";
inline constexpr const char kDevice[] = "ERR_DEVICE";
inline constexpr const char kDisposed[] = "ERR_DISPOSED";
inline constexpr const char kInference[] = "ERR_INFERENCE";
inline constexpr const char kInvalidArgument[] = "ERR_INVALID_ARGUMENT";
// The addon built without libtorch (TSN_NATIVE_ONLY) cannot serve this checkpoint so: the
// caller loads it with the libtorch addon instead (TorchEngine does).
inline constexpr const char kNeedsLibtorch[] = "ERR_NEEDS_LIBTORCH";

// In the order above; exported to JavaScript.
inline constexpr const char* kAll[] = {
    kCheckpointNotFound, kCheckpointInvalid, kCheckpointInterface, kDevice, kDisposed, kInference, kInvalidArgument,
    kNeedsLibtorch,
};

}  // namespace tsn::ErrorCode
