// Crash safety of the model store (docs/model-store.md): the real CLI is killed (SIGKILL, via the
// test-only EDGEGEMMA_STORE_CRASH_AT hook, src/store/durable.h) at every step of add, use,
// rollback, rm and gc; after each kill `models verify` must say the store is consistent, the
// current pointer must be the old or the new version (and load), and gc must leave no garbage.
// The steps are not listed here: a traced run (EDGEGEMMA_STORE_TRACE) of each command reports
// them, so a step added to the store is covered without touching this test.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "store/store.h"
#include "test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string hf_dir() { return egtest::shared_dir() + "/models/tiny-gemma3"; }
std::string gguf_path() { return egtest::shared_dir() + "/models/gguf/tiny-gemma3/tiny-gemma3-q4_0.gguf"; }

std::string q8() { return egtest::shared_dir() + "/models/gguf/tiny-gemma3/tiny-gemma3-q8_0.gguf"; }

// Runs `edgegemma models ARGS --store S` with extra environment variables (through env(1)).
egtest::CmdResult models(const std::string& store, const std::vector<std::string>& args,
                         const std::vector<std::string>& env = {}) {
  std::vector<std::string> cmd = {"/usr/bin/env"};
  cmd.insert(cmd.end(), env.begin(), env.end());
  cmd.push_back(egtest::cli_path());
  cmd.push_back("models");
  cmd.insert(cmd.end(), args.begin(), args.end());
  cmd.insert(cmd.end(), {"--store", store});
  return egtest::run_cmd(cmd);
}

std::vector<std::string> traced_steps(const std::string& store, const std::vector<std::string>& args) {
  const auto r = models(store, args, {"EDGEGEMMA_STORE_TRACE=1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> steps;
  std::istringstream in(r.err);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("store-step: ", 0) == 0) steps.push_back(line.substr(12));
  return steps;
}

// The base store of every scenario: tiny:v1 (HF) and tiny:v2 (GGUF), v2 current.
std::string base_store() {
  static std::string dir;
  if (dir.empty()) {
    dir = egtest::make_temp_dir() + "/base";
    EXPECT_EQ(models(dir, {"add", hf_dir(), "--name", "tiny"}).exit_code, 0);
    EXPECT_EQ(models(dir, {"add", gguf_path(), "--name", "tiny"}).exit_code, 0);
  }
  return dir;
}

std::string fresh_copy() {
  const std::string d = egtest::make_temp_dir() + "/store";
  // cp -a keeps the hard links between blobs and trees.
  EXPECT_EQ(egtest::run_cmd({"/bin/cp", "-a", base_store(), d}).exit_code, 0);
  return d;
}

// Kills `args` at every step it goes through; checks the store after each kill.
void kill_at_every_step(const std::vector<std::string>& args, const std::set<std::string>& allowed_current) {
  const auto steps = traced_steps(fresh_copy(), args);
  ASSERT_GE(steps.size(), 2u);
  for (const std::string& step : steps) {
    SCOPED_TRACE("killed at " + step);
    const std::string s = fresh_copy();
    const auto r = models(s, args, {"EDGEGEMMA_STORE_CRASH_AT=" + step});
    EXPECT_EQ(r.exit_code, -1) << "not killed: " << r.err;
    auto v = models(s, {"verify", "--json"});
    ASSERT_EQ(v.exit_code, 0) << v.out << v.err;
    EXPECT_TRUE(json::parse(v.out)["consistent"].get<bool>()) << v.out;
    eg::store::Store st(s, false);
    const auto cur = st.pointers("tiny").current;
    EXPECT_TRUE(allowed_current.count(cur)) << "current is '" << cur << "'";
    if (!cur.empty()) EXPECT_NO_THROW(st.check_version(st.resolve("tiny"), false));
    ASSERT_EQ(models(s, {"gc"}).exit_code, 0);
    v = models(s, {"verify", "--json"});
    const json j = json::parse(v.out);
    EXPECT_TRUE(j["consistent"].get<bool>()) << v.out;
    EXPECT_TRUE(j["garbage"].empty()) << v.out;
    // The interrupted command can be run again (or a new one succeeds) after a crash.
    EXPECT_EQ(models(s, {"add", gguf_path(), "--name", "tiny", "--version", "after"}).exit_code, 0);
  }
}

}  // namespace

TEST(StoreCrash, Add) {
  const auto steps = traced_steps(fresh_copy(), {"add", hf_dir(), "--name", "tiny", "--version", "v3"});
  // One copy and one blob step per file, then the tree, the checks, the manifest, the pointers.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(hf_dir())) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(steps.size(), 2 * files + 2 + 2 + 2) << steps.size();
  kill_at_every_step({"add", hf_dir(), "--name", "tiny", "--version", "v3"}, {"v2", "v3"});
}

TEST(StoreCrash, Use) { kill_at_every_step({"use", "tiny:v1"}, {"v1", "v2"}); }

TEST(StoreCrash, Rollback) { kill_at_every_step({"rollback", "tiny"}, {"v1", "v2"}); }

TEST(StoreCrash, RemoveCurrent) { kill_at_every_step({"rm", "tiny:v2", "--force"}, {"v1", "v2"}); }

TEST(StoreCrash, Gc) {
  // Garbage to collect: an abandoned add of new bytes (a blob and a tree without a manifest) and
  // a temp file.
  const std::string base = base_store();
  const auto steps = traced_steps(fresh_copy(), {"gc"});
  EXPECT_TRUE(steps.empty()) << "nothing to collect in the base store";
  const std::string s = fresh_copy();
  const auto r = models(s, {"add", q8(), "--name", "tiny", "--version", "x"}, {"EDGEGEMMA_STORE_CRASH_AT=add.checked"});
  ASSERT_EQ(r.exit_code, -1);
  egtest::write_file(s + "/tmp/blob-9-9", "partial");
  std::vector<std::string> gc_steps = traced_steps(s, {"gc"});
  EXPECT_EQ(gc_steps, (std::vector<std::string>{"gc.temp#1", "gc.tree#1", "gc.blob#1"}));
  // Kill gc at each step of a store prepared the same way.
  for (const auto& step : gc_steps) {
    SCOPED_TRACE(step);
    const std::string t = fresh_copy();
    ASSERT_EQ(models(t, {"add", q8(), "--name", "tiny", "--version", "x"}, {"EDGEGEMMA_STORE_CRASH_AT=add.checked"}).exit_code, -1);
    egtest::write_file(t + "/tmp/blob-9-9", "partial");
    EXPECT_EQ(models(t, {"gc"}, {"EDGEGEMMA_STORE_CRASH_AT=" + step}).exit_code, -1);
    const auto v = models(t, {"verify", "--json"});
    EXPECT_TRUE(json::parse(v.out)["consistent"].get<bool>()) << v.out;
    eg::store::Store st(t, false);
    EXPECT_EQ(st.pointers("tiny").current, "v2");
    EXPECT_NO_THROW(st.check_version(st.resolve("tiny"), false));
  }
}
