// SHA-1 (FIPS 180-4) of a byte string, as 40 lowercase hex digits: the names of remembered
// verdicts and layout files, and archive digests. Not for security (a verdict file holds its
// whole key and is taken only where the key matches). Here rather than libtorch's c10::sha1 so
// that the addon built without libtorch names the files as the libtorch addon does; c10::sha1
// is not standard SHA-1 (it gives df2b37... for the empty string, not da39a3...), so files
// named by earlier builds are not found again: a checkpoint is checked once more, and its
// layout file written anew.
#pragma once

#include <string>

namespace tsn {

std::string Sha1Hex(const std::string& bytes);

}  // namespace tsn
