// The one logging header of shardlm.
//
// Debian's libtorch is built with glog and exposes glog's LOG/CHECK through
// c10/util/Logging.h; PyTorch's own libtorch (GPU machines) defines c10's own
// LOG/CHECK there instead. Including glog directly beside torch headers breaks
// one of the two builds, so every file logs through this header and nothing
// else.
//
//   #include "common/logging.h"
//   LOG(INFO) << "loaded " << n << " tensors";
//   CHECK(rank >= 0) << "programmer error";   // CHECK alone: c10 has no CHECK_EQ/GT/...
#pragma once

#include <c10/util/Logging.h>

namespace shardlm {

// Call first in main: log lines go to stderr only (no files), each with its
// time, thread and source line, and without glog's "Logging before
// InitGoogleLogging" warning.
void InitLogging(const char* argv0);

// 0 = INFO and up, 1 = WARNING and up, 2 = ERROR and up.
void SetMinLogLevel(int level);

}  // namespace shardlm
