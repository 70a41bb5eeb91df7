// Memory budget: the weights' resident bytes equal the safetensors data size (computed here from
// the file itself); the KV estimate equals what a session's cache really reserves when the
// context is full; a too-small budget fails with the numbers and the largest context that fits,
// which then really fits.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "audio/audio.h"
#include "core/error.h"
#include "engine/audio_prompt.h"
#include "engine/image_prompt.h"
#include "engine/memory_budget.h"
#include "session_test_util.h"
#include "vision/image.h"

namespace {

using sessiontest::model;

// Data bytes of a single-file safetensors checkpoint: file size - 8 - header length.
size_t safetensors_data_bytes(const std::string& path) {
  const std::string f = egtest::read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, f.data(), 8);
  return f.size() - 8 - n;
}

TEST(SessionBudget, WeightsResidentBytesEqualTheFilesData) {
  auto lm = model("tiny-gemma3");
  EXPECT_EQ(eg::weights_resident_bytes(lm->model()),
            safetensors_data_bytes(egtest::shared_dir() + "/models/tiny-gemma3/model.safetensors"));
  eg::Session s(lm);
  const eg::WarmupResult w = s.warmup();
  EXPECT_EQ(w.bytes_touched, eg::weights_resident_bytes(lm->model()));
}

// The KV part of the estimate equals the bytes the session's cache reserves once its context is
// full (F16 and INT8; sliding-window layers bounded, so not linear in the context).
TEST(SessionBudget, KVEstimateEqualsAllocationAtFullContext) {
  auto lm = model("tiny-gemma3");
  for (eg::KVType t : {eg::KVType::F16, eg::KVType::INT8}) {
    for (int ctx : {100, 300}) {
      SCOPED_TRACE(std::string(eg::kv_type_name(t)) + " ctx " + std::to_string(ctx));
      eg::SessionOptions o;
      o.chat = false;
      o.context_tokens = ctx;
      o.kv.type = t;
      o.kv.page_tokens = 32;
      eg::Session s(lm, o);
      std::vector<int32_t> ids(ctx);
      for (int i = 0; i < ctx; ++i) ids[i] = 10 + (i * 37) % 5000;
      s.append_tokens(ids);
      const eg::MemoryEstimate e = eg::estimate_memory(lm->model(), ctx, o.kv, eg::Session::kSyncChunkTokens);
      EXPECT_EQ(s.kv_bytes(), e.kv_bytes);
    }
  }
}

TEST(SessionBudget, TooSmallBudgetFailsWithNumbersAndLargestContext) {
  auto lm = model("tiny-gemma3");
  eg::SessionOptions o;
  o.context_tokens = 8192;
  const eg::MemoryEstimate need = eg::estimate_memory(lm->model(), 8192, o.kv, eg::Session::kSyncChunkTokens);
  o.memory_budget_bytes = need.weights_bytes + need.scratch_bytes + need.kv_bytes / 2;
  std::string msg;
  try {
    eg::Session s(lm, o);
  } catch (const eg::Error& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << "over budget must throw";
  EXPECT_NE(msg.find("8192 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(need.total()) + " bytes"), std::string::npos) << msg;
  const std::string key = "the largest context that fits is ";
  const size_t at = msg.find(key);
  ASSERT_NE(at, std::string::npos) << msg;
  const int fit = std::stoi(msg.substr(at + key.size()));
  EXPECT_GT(fit, 0);
  EXPECT_LT(fit, 8192);
  o.context_tokens = fit;
  EXPECT_NO_THROW(eg::Session(lm, o));
  o.context_tokens = fit + 1;
  EXPECT_THROW(eg::Session(lm, o), eg::Error);
  // Nothing fits: the weights alone are over budget.
  o.memory_budget_bytes = need.weights_bytes / 2;
  try {
    eg::Session s(lm, o);
    ADD_FAILURE() << "must throw";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not even a 1-token context fits"), std::string::npos) << e.what();
  }
  // A generous budget is fine.
  o.memory_budget_bytes = need.total() * 2;
  o.context_tokens = 8192;
  EXPECT_NO_THROW(eg::Session(lm, o));
}

}  // namespace

// The media towers count: decoder + vision tower + audio tower = the file's data (tiny-gemma4-mm,
// computed from the file), and a budget that fits the text model but not a tower refuses the
// session's first image / clip with the numbers, attaching nothing; one byte more fits.
TEST(SessionBudget, MediaTowersCountInTheBudget) {
  auto lm = model("tiny-gemma4-mm");
  const std::string dir = egtest::shared_dir() + "/models/tiny-gemma4-mm";
  const size_t vis = lm->image_encoder().weight_bytes(), aud = lm->audio_encoder().weight_bytes();
  EXPECT_GT(vis, 0u);
  EXPECT_GT(aud, 0u);
  EXPECT_EQ(eg::weights_resident_bytes(lm->model()) + vis + aud, safetensors_data_bytes(dir + "/model.safetensors"));
  eg::SessionOptions o;
  o.context_tokens = 256;
  o.kv.max_tokens = 256;
  const eg::MemoryEstimate e = eg::estimate_memory(lm->model(), 256, o.kv, eg::Session::kSyncChunkTokens);
  const auto img = eg::vision::load_image_file(dir + "/inputs/img_gradient_224x224.png");
  const eg::audio::Pcm clip{std::vector<float>(16000, 0.25f), 16000};
  {
    o.memory_budget_bytes = e.total() + vis - 1;
    eg::Session s(lm, o);  // the text model fits
    try {
      s.add_image(img);
      FAIL() << "no error";
    } catch (const eg::Error& err) {
      EXPECT_NE(std::string(err.what()).find("too small for the vision tower"), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find(std::to_string(e.total() + vis) + " bytes"), std::string::npos)
          << err.what();
    }
    EXPECT_EQ(s.pending_images(), 0u);
    if (aud < vis) {  // the audio tower alone fits the same budget
      s.add_audio(clip);
      EXPECT_EQ(s.pending_audio(), 1u);
    } else {
      EXPECT_THROW(s.add_audio(clip), eg::Error);
    }
  }
  {
    o.memory_budget_bytes = e.total() + vis;
    eg::Session s(lm, o);
    s.add_image(img);
    s.add_image(img);  // counted once
    EXPECT_EQ(s.pending_images(), 2u);
    EXPECT_THROW(s.add_audio(clip), eg::Error);  // vision + audio do not fit
    const std::vector<float> x(1600, 0.1f);
    EXPECT_THROW(s.append_audio(x.data(), x.size(), 16000), eg::Error);
    EXPECT_FALSE(s.streaming_audio());
    EXPECT_EQ(s.pending_audio(), 0u);
  }
  {
    o.memory_budget_bytes = e.total() + vis + aud;
    eg::Session s(lm, o);
    s.add_image(img);
    s.add_audio(clip);
    EXPECT_EQ(s.pending_images(), 1u);
    EXPECT_EQ(s.pending_audio(), 1u);
  }
}
