// The only file that touches the logging backend directly: glog when
// libtorch was built with it (Debian), c10's own logging otherwise.
#include <c10/macros/Macros.h>

#ifdef C10_USE_GLOG
#include <glog/logging.h>
#else
#include <c10/util/Logging.h>
#endif

namespace shardlm {

void InitLogging(const char* argv0) {
#ifdef C10_USE_GLOG
  FLAGS_logtostderr = true;
  if (!google::IsGoogleLoggingInitialized()) google::InitGoogleLogging(argv0);
#else
  (void)argv0;  // c10's own logging needs no set-up, but shows INFO only when asked
  FLAGS_caffe2_log_level = 0;
#endif
}

void SetMinLogLevel(int level) {
#ifdef C10_USE_GLOG
  FLAGS_minloglevel = level;
#else
  FLAGS_caffe2_log_level = level;
#endif
}

}  // namespace shardlm
