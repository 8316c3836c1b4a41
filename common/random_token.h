// Secrets and identifiers nobody can guess: ChunkResult handles and the
// internal token of a local group.
#pragma once

#include <string>

namespace shardlm {

// `bytes` bytes from the OS's CSPRNG (getrandom), as lower-case hex.
std::string RandomToken(int bytes = 32);

}  // namespace shardlm
