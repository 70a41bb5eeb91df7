// Session save/restore: a restored session continues exactly as the uninterrupted one (sampling
// with a seed, F16 and F32 KV, chat and raw mode, Gemma 4 KV sharing); damaged, truncated,
// foreign and wrong-version files are refused with clear errors and leave the session unchanged;
// a crash in the middle of save keeps the previous file intact.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "session_test_util.h"

namespace fs = std::filesystem;

namespace {

using sessiontest::model;

eg::GenerateParams n_tokens(int n) {
  eg::GenerateParams g;
  g.max_new_tokens = n;
  return g;
}

eg::SessionOptions sampled(eg::KVType t) {
  eg::SessionOptions o;
  o.context_tokens = 512;
  o.kv.type = t;
  o.kv.page_tokens = 16;
  o.sampling.temperature = 0.9f;
  o.sampling.top_k = 40;
  o.sampling.seed = 1234;
  o.sampling.repeat_penalty = 1.1f;
  return o;
}

std::string expect_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const eg::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no eg::Error";
  return "";
}

void continue_equals_uninterrupted(const std::string& name, eg::KVType t) {
  SCOPED_TRACE(name);
  auto lm = model(name);
  const std::string path = egtest::make_temp_dir() + "/s.egsession";
  eg::Session a(lm, sampled(t));
  a.set_system("Tell stories.");
  a.chat("Tell me about the sea.", n_tokens(12));
  a.save(path);
  const eg::TurnResult want2 = a.chat("And the night?", n_tokens(12));
  const eg::TurnResult want3 = a.chat("Why?", n_tokens(12));

  eg::SessionOptions other;  // different options: restore replaces them
  other.context_tokens = 64;
  eg::Session b(lm, other);
  b.restore(path);
  EXPECT_EQ(b.context_size(), 512);
  EXPECT_EQ(b.options().kv.type, t);
  const eg::TurnResult got2 = b.chat("And the night?", n_tokens(12));
  const eg::TurnResult got3 = b.chat("Why?", n_tokens(12));
  EXPECT_EQ(got2.ids, want2.ids);
  EXPECT_EQ(got3.ids, want3.ids);
  EXPECT_EQ(got2.stats.reused_tokens, want2.stats.reused_tokens) << "the KV cache was restored, not recomputed";
}

TEST(SessionFile, ContinueEqualsUninterruptedF16) { continue_equals_uninterrupted("tiny-gemma3", eg::KVType::F16); }
TEST(SessionFile, ContinueEqualsUninterruptedF32) { continue_equals_uninterrupted("tiny-gemma3", eg::KVType::F32); }
TEST(SessionFile, ContinueEqualsUninterruptedGemma4) { continue_equals_uninterrupted("tiny-gemma4", eg::KVType::F16); }

TEST(SessionFile, RawModeRoundTrip) {
  auto lm = model("tiny-gemma3");
  const std::string path = egtest::make_temp_dir() + "/raw.egsession";
  eg::SessionOptions o = sampled(eg::KVType::INT8);
  o.chat = false;
  eg::Session a(lm, o);
  a.append_text("In the beginning");
  a.generate(n_tokens(5));
  a.save(path);
  const eg::TurnResult want = a.generate(n_tokens(10));
  eg::Session b(lm, o);
  b.restore(path);
  EXPECT_EQ(b.generate(n_tokens(10)).ids, want.ids);
}

class SessionFileErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    lm = model("tiny-gemma3");
    dir = egtest::make_temp_dir();
    good = dir + "/good.egsession";
    eg::Session s(lm, sampled(eg::KVType::F16));
    s.chat("Hello.", n_tokens(6));
    s.save(good);
    bytes = egtest::read_file(good);
  }
  // A session in a known state; after a failed restore it must continue as if nothing happened.
  void check_unchanged_after(const std::string& bad_path, const std::string& expect_in_message) {
    eg::Session s(lm, sampled(eg::KVType::F16));
    s.chat("Something else.", n_tokens(5));
    eg::Session twin(lm, sampled(eg::KVType::F16));
    twin.chat("Something else.", n_tokens(5));
    const std::string msg = expect_error([&] { s.restore(bad_path); });
    EXPECT_NE(msg.find(expect_in_message), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad_path), std::string::npos) << "names the file: " << msg;
    EXPECT_EQ(s.messages().size(), twin.messages().size());
    EXPECT_EQ(s.chat("Go on.", n_tokens(6)).ids, twin.chat("Go on.", n_tokens(6)).ids);
  }
  std::shared_ptr<const eg::LoadedModel> lm;
  std::string dir, good, bytes;
};

TEST_F(SessionFileErrors, Truncated) {
  for (size_t n : {size_t{0}, size_t{5}, size_t{12}, size_t{20}, bytes.size() / 3, bytes.size() - 1}) {
    SCOPED_TRACE(n);
    const std::string p = dir + "/trunc" + std::to_string(n);
    egtest::write_file(p, bytes.substr(0, n));
    eg::Session s(lm, sampled(eg::KVType::F16));
    const std::string msg = expect_error([&] { s.restore(p); });
    EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("bad magic") != std::string::npos) << msg;
  }
  const std::string p = dir + "/trunc";
  egtest::write_file(p, bytes.substr(0, bytes.size() / 2));
  check_unchanged_after(p, "truncated");
}

TEST_F(SessionFileErrors, Corrupt) {
  for (size_t at : {size_t{30}, bytes.size() / 2, bytes.size() - 9}) {
    std::string b = bytes;
    b[at] ^= 0x5a;
    const std::string p = dir + "/corrupt" + std::to_string(at);
    egtest::write_file(p, b);
    check_unchanged_after(p, "checksum");
  }
}

TEST_F(SessionFileErrors, WrongVersionAndMagic) {
  std::string b = bytes;
  b[8] = 99;
  egtest::write_file(dir + "/v99", b);
  check_unchanged_after(dir + "/v99", "version 99");
  b = bytes;
  b[0] = 'X';
  egtest::write_file(dir + "/magic", b);
  check_unchanged_after(dir + "/magic", "not an edgegemma session file");
  check_unchanged_after(dir + "/missing", "cannot open");
}

TEST_F(SessionFileErrors, ForeignModel) {
  // A session of another model (tiny-gemma2) cannot be restored into this one, and vice versa.
  auto other = model("tiny-gemma2");
  eg::Session s2(other, sampled(eg::KVType::F16));
  s2.chat("Hello.", n_tokens(3));
  s2.save(dir + "/gemma2.egsession");
  check_unchanged_after(dir + "/gemma2.egsession", "different model");
}

// A crash in the middle of save (an exception thrown after half the file is written, and a
// process killed at that point) leaves the previous file intact and no temporary file behind.
TEST_F(SessionFileErrors, CrashDuringSaveKeepsPreviousFile) {
  eg::Session s(lm, sampled(eg::KVType::F16));
  s.chat("A longer conversation now.", n_tokens(8));
  s.save_fault_hook = [] { throw eg::Error("simulated crash"); };
  EXPECT_THROW(s.save(good), eg::Error);
  EXPECT_EQ(egtest::read_file(good), bytes);
  s.save_fault_hook = [] { _exit(3); };  // only runs in the child below
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      s.save(good);
    } catch (...) {
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_EQ(egtest::read_file(good), bytes);
  // The killed child leaves its temporary file (a real crash would too); the previous file is
  // intact and still restores.
  eg::Session r(lm, sampled(eg::KVType::F16));
  r.restore(good);
  EXPECT_EQ(r.messages().size(), 2u);
  s.save_fault_hook = nullptr;
  s.save(good);
  EXPECT_NE(egtest::read_file(good), bytes);
}

}  // namespace
