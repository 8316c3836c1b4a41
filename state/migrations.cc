#include "state/migrations.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace shardlm {

namespace {

// Migration 4 (the Conversations API).
Migration ConversationsMigration() {
  return {
      4,
      "conversations and their items",
      {
          "CREATE TABLE conversations (id TEXT PRIMARY KEY, owner TEXT NOT NULL, seq BIGINT NOT NULL, "
          "created_at BIGINT NOT NULL, metadata TEXT NOT NULL)",
          "CREATE TABLE conversation_items (id TEXT PRIMARY KEY, owner TEXT NOT NULL, seq BIGINT NOT NULL, "
          "created_at BIGINT NOT NULL, "
          "conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE, "
          "item TEXT NOT NULL)",
          "CREATE INDEX conversation_items_conversation ON conversation_items (conversation_id, seq)",
      }};
}

// Migration 5 (function tools): a run's prompt reads its thread's tool-call steps in order.
Migration ToolStepsMigration() {
  return {5, "run steps by thread", {"CREATE INDEX run_steps_thread_seq ON run_steps (thread_id, seq)"}};
}

}  // namespace

const std::vector<Migration>& StateMigrations() {
  // Every table: id, owner (a hash of the API key; "" without keys), seq (one
  // counter over all tables: list and history order) and created_at (Unix s).
  static const std::vector<Migration> kMigrations = {
      {1,
       "assistants, threads and messages",
       {
           "CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
           "INSERT INTO counters (name, value) VALUES ('seq', 0)",
           "CREATE TABLE assistants (id TEXT PRIMARY KEY, owner TEXT NOT NULL, seq BIGINT NOT NULL, "
           "created_at BIGINT NOT NULL, model TEXT NOT NULL, name TEXT, description TEXT, instructions TEXT, "
           "tools TEXT NOT NULL, response_format TEXT, temperature DOUBLE PRECISION, top_p DOUBLE PRECISION, "
           "metadata TEXT NOT NULL)",
           "CREATE INDEX assistants_owner_seq ON assistants (owner, seq)",
           "CREATE TABLE threads (id TEXT PRIMARY KEY, owner TEXT NOT NULL, seq BIGINT NOT NULL, "
           "created_at BIGINT NOT NULL, metadata TEXT NOT NULL, version BIGINT NOT NULL)",
           "CREATE TABLE messages (id TEXT PRIMARY KEY, owner TEXT NOT NULL, seq BIGINT NOT NULL, "
           "created_at BIGINT NOT NULL, thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE, "
           "role TEXT NOT NULL, content TEXT NOT NULL, status TEXT NOT NULL, assistant_id TEXT, run_id TEXT, "
           "metadata TEXT NOT NULL, completed_at BIGINT, incomplete_at BIGINT, incomplete_reason TEXT)",
           "CREATE INDEX messages_thread_seq ON messages (thread_id, seq)",
           "CREATE INDEX messages_run ON messages (run_id)",
       }},
      {2,
       "runs, run steps and the serve instances that run them",
       {
           // config: what the run runs with, fixed at creation (model, instructions, tools, sampling,
           // budgets).
           "CREATE TABLE runs (id TEXT PRIMARY KEY, owner TEXT NOT NULL, seq BIGINT NOT NULL, "
           "created_at BIGINT NOT NULL, thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE, "
           "assistant_id TEXT NOT NULL, status TEXT NOT NULL, runner TEXT, config TEXT NOT NULL, "
           "metadata TEXT NOT NULL, required_action TEXT, last_error TEXT, incomplete_reason TEXT, usage "
           "TEXT, "
           "started_at BIGINT, expires_at BIGINT, cancelled_at BIGINT, failed_at BIGINT, completed_at "
           "BIGINT)",
           "CREATE INDEX runs_thread_seq ON runs (thread_id, seq)",
           // One active run per thread, as OpenAI: a second one is refused by the database itself.
           "CREATE UNIQUE INDEX runs_one_active ON runs (thread_id) "
           "WHERE status IN ('queued', 'in_progress', 'requires_action', 'cancelling')",
           "CREATE INDEX runs_active_runner ON runs (runner) "
           "WHERE status IN ('queued', 'in_progress', 'requires_action', 'cancelling')",
           "CREATE TABLE run_steps (id TEXT PRIMARY KEY, owner TEXT NOT NULL, seq BIGINT NOT NULL, "
           "created_at BIGINT NOT NULL, run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE, "
           "thread_id TEXT NOT NULL, assistant_id TEXT NOT NULL, type TEXT NOT NULL, status TEXT NOT NULL, "
           "step_details TEXT NOT NULL, last_error TEXT, usage TEXT, completed_at BIGINT, cancelled_at "
           "BIGINT, "
           "failed_at BIGINT, expired_at BIGINT)",
           "CREATE INDEX run_steps_run_seq ON run_steps (run_id, seq)",
           "CREATE TABLE instances (id TEXT PRIMARY KEY, host TEXT NOT NULL, pid BIGINT NOT NULL, "
           "started_at BIGINT NOT NULL, heartbeat_at BIGINT NOT NULL)",
       }},
      {3,
       "responses and their input and output items",
       {
           // config: what it was asked with (model, instructions, sampling, text, metadata, store, ...).
           "CREATE TABLE responses (id TEXT PRIMARY KEY, owner TEXT NOT NULL, seq BIGINT NOT NULL, "
           "created_at BIGINT NOT NULL, status TEXT NOT NULL, runner TEXT, previous_response_id TEXT, "
           "conversation_id TEXT, config TEXT NOT NULL, usage TEXT, error TEXT, incomplete_reason TEXT, "
           "completed_at BIGINT)",
           "CREATE INDEX responses_active_runner ON responses (runner) WHERE status IN ('queued', "
           "'in_progress')",
           "CREATE TABLE response_items (id TEXT PRIMARY KEY, owner TEXT NOT NULL, seq BIGINT NOT NULL, "
           "created_at BIGINT NOT NULL, response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE "
           "CASCADE, "
           "kind TEXT NOT NULL, item TEXT NOT NULL)",
           "CREATE INDEX response_items_response ON response_items (response_id, kind, seq)",
       }},
      ConversationsMigration(),
      ToolStepsMigration(),
  };
  return kMigrations;
}

absl::StatusOr<int64_t> Migrate(SqlDb& db, int64_t now_s) {
  const std::vector<Migration>& all = StateMigrations();
  const int64_t latest = all.empty() ? 0 : all.back().version;
  int64_t version = 0;
  SHARDLM_RETURN_IF_ERROR(db.Exclusive([&](SqlTx& tx) -> absl::Status {
    SHARDLM_RETURN_IF_ERROR(
        tx.Exec("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at BIGINT NOT NULL)")
            .status());
    SHARDLM_ASSIGN_OR_RETURN(std::vector<SqlRow> rows,
                             tx.Query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"));
    version = SqlInt(rows.at(0).at(0));
    if (version > latest) {
      return absl::FailedPreconditionError(absl::StrCat("the state database has schema ", version,
                                                        ", newer than this shardlm's ", latest,
                                                        ": run a newer shardlm, or give another --state-db"));
    }
    for (const Migration& m : all) {
      if (m.version <= version) continue;
      for (const std::string& sql : m.statements) SHARDLM_RETURN_IF_ERROR(tx.Exec(sql).status());
      SHARDLM_RETURN_IF_ERROR(
          tx.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                  {m.version, m.name, now_s})
              .status());
    }
    version = latest;
    return absl::OkStatus();
  }));
  return version;
}

}  // namespace shardlm
