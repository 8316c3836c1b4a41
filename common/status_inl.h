// Template bodies for common/status.h.
#pragma once

#include <exception>

namespace shardlm {

template <typename Fn>
absl::Status CatchTorchErrors(const std::string& context, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    std::string what = e.what();
    // c10::Error appends a long backtrace; the first line is the message.
    auto nl = what.find('\n');
    if (nl != std::string::npos) what.resize(nl);
    return absl::InternalError(context + ": " + what);
  }
}

}  // namespace shardlm
