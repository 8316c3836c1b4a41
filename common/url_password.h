// A URL as it may be printed: "postgresql://app:secret@db/x?password=s&sslmode=require" ->
// "postgresql://app@db/x?sslmode=require". Used wherever a database URL reaches a log, an error
// or --print-config.
#pragma once

#include <string>

namespace shardlm {

std::string WithoutUrlPassword(const std::string& url);

}  // namespace shardlm
