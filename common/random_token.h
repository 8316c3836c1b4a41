// Secrets and identifiers nobody can guess: ChunkResult handles and the
// internal token of a local group.
#pragma once

#include <string>

namespace shardlm {

// `bytes` bytes from the OS's CSPRNG (getrandom), as lower-case hex.
std::string RandomToken(int bytes = 32);

// An object id OpenAI's way: `prefix` and 24 characters of [A-Za-z0-9] from
// the same source ("thread_" + 24: 142 bits nobody can guess).
std::string RandomId(const std::string& prefix);

}  // namespace shardlm
