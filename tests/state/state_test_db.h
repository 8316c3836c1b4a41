// A state database in a fresh temporary directory, for the state tests.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "state/sql_db.h"
#include "state/store.h"

namespace shardlm {

// The state tests' database: a SQLite file in a fresh temporary directory, or, when
// SHARDLM_TEST_POSTGRES_URL is set (tests/testing/postgres_server.py sets it), that PostgreSQL
// database, emptied first (its public schema dropped and made again).
class TempStateDir {
 public:
  TempStateDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "shardlm-state-XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
    const char* pg = getenv("SHARDLM_TEST_POSTGRES_URL");
    if (pg != nullptr && *pg != 0) {
      postgres_ = pg;
      auto url = ParseStateDbUrl(postgres_, "SHARDLM_TEST_POSTGRES_URL");
      EXPECT_TRUE(url.ok()) << url.status();
      auto db = OpenSqlDb(*url);
      EXPECT_TRUE(db.ok()) << db.status();
      if (db.ok()) {
        absl::Status st = (*db)->Exclusive([](SqlTx& tx) -> absl::Status {
          absl::Status dropped = tx.Exec("DROP SCHEMA public CASCADE").status();
          if (!dropped.ok()) return dropped;
          return tx.Exec("CREATE SCHEMA public").status();
        });
        EXPECT_TRUE(st.ok()) << st;
      }
    }
  }
  ~TempStateDir() { std::filesystem::remove_all(dir_); }
  bool postgres() const { return !postgres_.empty(); }
  std::string path() const { return dir_ + "/sub/state.db"; }
  std::string url() const { return postgres() ? postgres_ : "sqlite://" + path(); }

 private:
  std::string dir_;
  std::string postgres_;
};

inline std::unique_ptr<StateStore> OpenStore(const TempStateDir& dir, int64_t now_s = 1000) {
  auto url = ParseStateDbUrl(dir.url(), "--state-db");
  EXPECT_TRUE(url.ok()) << url.status();
  auto db = OpenSqlDb(*url);
  EXPECT_TRUE(db.ok()) << db.status();
  auto store = StateStore::Open(std::move(*db), now_s);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

}  // namespace shardlm
