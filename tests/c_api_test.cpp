// The C API: status codes and messages for bad arguments and failures, results equal to an
// independent greedy run, cancellation from the callback and from another thread, stats.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "edgegemma/edgegemma.h"
#include "session_test_util.h"

namespace {

struct Text {
  std::string s;
  int pieces = 0;
  int stop_after = -1;  // return non-zero after this many pieces
};

int collect(const char* piece, void* user) {
  auto* t = static_cast<Text*>(user);
  t->s += piece;
  ++t->pieces;
  return t->stop_after >= 0 && t->pieces >= t->stop_after ? 1 : 0;
}

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(eg_model_load((egtest::shared_dir() + "/models/tiny-gemma3").c_str(), &model), EG_OK) << eg_last_error();
  }
  void TearDown() override { eg_model_free(model); }
  eg_session* make(bool chat, int ctx = 256) {
    eg_session_params p;
    eg_session_params_default(&p);
    p.kv_type = EG_KV_F32;
    p.context_tokens = ctx;
    p.chat = chat ? 1 : 0;
    eg_session* s = nullptr;
    EXPECT_EQ(eg_session_create(model, &p, &s), EG_OK) << eg_last_error();
    return s;
  }
  eg_model* model = nullptr;
};

TEST_F(CApi, BadArgumentsAreCodesWithMessages) {
  eg_session* s = nullptr;
  EXPECT_EQ(eg_session_create(nullptr, nullptr, &s), EG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(eg_last_error()).find("eg_session_create"), std::string::npos);
  EXPECT_EQ(eg_session_chat(nullptr, "x", nullptr, nullptr, nullptr, nullptr), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_save(nullptr, "x"), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_stats(nullptr, nullptr), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_cancel(nullptr), EG_ERR_INVALID_ARGUMENT);
  eg_session_params p;
  eg_session_params_default(&p);
  p.context_tokens = 1 << 30;
  EXPECT_EQ(eg_session_create(model, &p, &s), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("exceeds the model's"), std::string::npos) << eg_last_error();
  eg_session_params_default(&p);
  p.memory_budget_bytes = 1000;
  EXPECT_EQ(eg_session_create(model, &p, &s), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("memory budget"), std::string::npos) << eg_last_error();
  eg_session_params_default(&p);
  p.top_p = 3;
  EXPECT_EQ(eg_session_create(model, &p, &s), EG_ERR_FAILED);
  EXPECT_EQ(s, nullptr);

  s = make(false);
  EXPECT_EQ(eg_session_add_message(s, "user", "x"), EG_ERR_FAILED);  // raw mode
  EXPECT_EQ(eg_session_generate(s, nullptr, nullptr, nullptr, nullptr), EG_ERR_FAILED);  // empty
  eg_generate_params g{-1, nullptr, 0};
  EXPECT_EQ(eg_session_generate(s, &g, nullptr, nullptr, nullptr), EG_ERR_FAILED);
  const char* empty_stop[] = {""};
  ASSERT_EQ(eg_session_append_text(s, "Hello"), EG_OK);
  g = {4, empty_stop, 1};
  EXPECT_EQ(eg_session_generate(s, &g, nullptr, nullptr, nullptr), EG_ERR_FAILED);
  eg_session_free(s);
}

TEST_F(CApi, RawGenerateEqualsGreedyReference) {
  eg_session* s = make(false);
  ASSERT_EQ(eg_session_append_text(s, "In the beginning God created"), EG_OK);
  Text t;
  eg_generate_params g{16, nullptr, 0};
  eg_result r{};
  ASSERT_EQ(eg_session_generate(s, &g, collect, &t, &r), EG_OK) << eg_last_error();
  auto lm = sessiontest::model("tiny-gemma3");
  std::vector<int32_t> want = sessiontest::greedy(*lm, lm->encode_prompt("In the beginning God created", false), 16);
  EXPECT_EQ(r.generated_tokens, static_cast<int>(want.size()));
  if (r.finish_reason == EG_FINISH_STOP) want.pop_back();
  EXPECT_EQ(t.s, lm->tokenizer().decode(want));
  eg_stats st{};
  ASSERT_EQ(eg_session_stats(s, &st), EG_OK);
  EXPECT_EQ(st.generated_tokens, r.generated_tokens);
  EXPECT_EQ(st.context_size, 256);
  EXPECT_GT(st.kv_bytes, 0u);
  eg_session_free(s);
}

TEST_F(CApi, CancelFromCallbackAndFromAnotherThread) {
  eg_session* s = make(true, 2048);
  Text t;
  t.stop_after = 2;
  eg_generate_params g{100, nullptr, 0};
  eg_result r{};
  ASSERT_EQ(eg_session_chat(s, "Tell me a long story.", &g, collect, &t, &r), EG_OK);
  EXPECT_EQ(r.finish_reason, EG_FINISH_CANCELLED);
  EXPECT_EQ(t.pieces, 2);

  // Another thread cancels until generation returns (generate() clears earlier cancels).
  eg_session_params p;
  eg_session_params_default(&p);
  p.context_tokens = 2048;
  p.ignore_eos = 1;
  eg_session* u = nullptr;
  ASSERT_EQ(eg_session_create(model, &p, &u), EG_OK);
  std::atomic<bool> done{false};
  std::thread canceller([&] {
    while (!done) {
      eg_session_cancel(u);
      std::this_thread::yield();
    }
  });
  g.max_new_tokens = 1500;
  ASSERT_EQ(eg_session_chat(u, "Tell me a long story.", &g, nullptr, nullptr, &r), EG_OK);
  done = true;
  canceller.join();
  EXPECT_EQ(r.finish_reason, EG_FINISH_CANCELLED);
  EXPECT_LT(r.generated_tokens, 1500);
  eg_session_free(s);
  eg_session_free(u);
}

}  // namespace
