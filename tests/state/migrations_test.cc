#include "state/migrations.h"

#include <sys/stat.h>

#include "common/url_password.h"
#include "gtest/gtest.h"
#include "state/postgres_db.h"
#include "tests/state/state_test_db.h"

namespace shardlm {
namespace {

TEST(StateDbUrlTest, AcceptsNoneAndAbsoluteSqlitePaths) {
  auto none = ParseStateDbUrl("none", "--state-db");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->kind, StateDbUrl::Kind::kNone);
  auto file = ParseStateDbUrl("sqlite:///var/lib/shardlm/state.db", "--state-db");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->kind, StateDbUrl::Kind::kSqlite);
  EXPECT_EQ(file->path, "/var/lib/shardlm/state.db");
}

TEST(StateDbUrlTest, RefusesRelativePathsAndOtherSchemesNamingTheFlag) {
  for (const char* bad :
       {"sqlite://state.db", "sqlite://", "sqlite:///dir/", "mysql://u:secret@h/db", "state.db"}) {
    auto url = ParseStateDbUrl(bad, "--state-db");
    ASSERT_FALSE(url.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(url.status()));
    EXPECT_NE(url.status().message().find("--state-db"), std::string::npos) << url.status();
    EXPECT_EQ(url.status().message().find("secret"), std::string::npos) << "a password was printed";
  }
}

TEST(StateDbUrlTest, AcceptsPostgresUrisAndNeverShowsTheirPassword) {
  for (const char* uri : {"postgresql://app:secret@db:5432/shardlm", "postgres://app@db/x?password=secret"}) {
    auto url = ParseStateDbUrl(uri, "--state-db");
    ASSERT_TRUE(url.ok()) << url.status();
    EXPECT_EQ(url->kind, StateDbUrl::Kind::kPostgres);
    EXPECT_EQ(url->path, uri);
    EXPECT_EQ(WithoutUrlPassword(uri).find("secret"), std::string::npos) << WithoutUrlPassword(uri);
  }
  EXPECT_EQ(
      WithoutUrlPassword("postgresql://app:secret@db:5432/x?sslmode=require&password=s2&connect_timeout=3"),
      "postgresql://app@db:5432/x?sslmode=require&connect_timeout=3");
  EXPECT_EQ(WithoutUrlPassword("postgresql://db/x?host=/run/pg"), "postgresql://db/x?host=/run/pg");
  EXPECT_EQ(WithoutUrlPassword("sqlite:///var/lib/state.db"), "sqlite:///var/lib/state.db");
}

TEST(PostgresDbTest, NumbersTheParametersOutsideQuotedText) {
  EXPECT_EQ(NumberedParameters("SELECT id FROM t WHERE a = ? AND b IN (?, ?)"),
            "SELECT id FROM t WHERE a = $1 AND b IN ($2, $3)");
  EXPECT_EQ(NumberedParameters("SELECT '?', \"a?\" FROM t WHERE s = 'it''s ?' AND x = ?"),
            "SELECT '?', \"a?\" FROM t WHERE s = 'it''s ?' AND x = $1");
}

TEST(MigrationsTest, MigratesAnEmptyDatabaseOnceAndKeepsTheFilePrivate) {
  TempStateDir dir;
  {
    auto store = OpenStore(dir);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->schema_version(), StateMigrations().back().version);
  }
  auto again = OpenStore(dir, 2000);  // already at the latest: nothing to apply, nothing fails
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->schema_version(), StateMigrations().back().version);
  if (dir.postgres()) return;  // the rest is the SQLite file's
  struct stat st;
  ASSERT_EQ(stat(dir.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string parent = dir.path().substr(0, dir.path().find_last_of('/'));
  ASSERT_EQ(stat(parent.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(MigrationsTest, RefusesADatabaseNewerThanThisBuild) {
  TempStateDir dir;
  { ASSERT_NE(OpenStore(dir), nullptr); }
  auto url = ParseStateDbUrl(dir.url(), "--state-db");
  auto db = OpenSqlDb(*url);
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(
      (*db)
          ->Write([](SqlTx& tx) {
            return tx.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'x', 0)")
                .status();
          })
          .ok());
  auto store = StateStore::Open(std::move(*db), 3000);
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
  EXPECT_NE(store.status().message().find("schema 999"), std::string::npos) << store.status();
}

TEST(SqlDbTest, AFailedWriteLeavesNothingBehind) {
  TempStateDir dir;
  auto store = OpenStore(dir);
  auto url = ParseStateDbUrl(dir.url(), "--state-db");
  auto db = OpenSqlDb(*url);
  ASSERT_TRUE(db.ok());
  absl::Status st = (*db)->Write([](SqlTx& tx) -> absl::Status {
    auto inserted = tx.Exec(
        "INSERT INTO threads (id, owner, seq, created_at, metadata, version) "
        "VALUES ('thread_a', '', 1, 0, '{}', 0)");
    if (!inserted.ok()) return inserted.status();
    return absl::AbortedError("changed my mind");
  });
  EXPECT_TRUE(absl::IsAborted(st));
  EXPECT_TRUE(absl::IsNotFound(store->GetThread("", "thread_a").status()));
  // A duplicate id is ALREADY_EXISTS, and the transaction it was in is undone.
  ThreadRow t;
  t.id = "thread_b";
  std::vector<MessageRow> none;
  ASSERT_TRUE(store->CreateThread(&t, &none).ok());
  ThreadRow dup = t;
  EXPECT_TRUE(absl::IsAlreadyExists(store->CreateThread(&dup, &none)));
}

}  // namespace
}  // namespace shardlm
