// serve's state database (docs/stateful_apis.md section 8): --state-db and
// --state-dir to an open, migrated StateStore, for the stateful APIs.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "cli/commands.h"
#include "cli/serve_flags.h"
#include "state/store.h"

namespace shardlm {

// The store, or null for --state-db none. A database named by a flag that
// cannot be opened is an error naming the flag (exit 1; a bad URL exits 2);
// the default one (no flag given) that cannot be made, as in a container
// whose home is read-only, leaves the stateful APIs off with a warning.
// Prints "state in URL (schema N)".
absl::StatusOr<std::unique_ptr<StateStore>> OpenServeState(const ServeFlags& f, const CliEnv& env);

}  // namespace shardlm
