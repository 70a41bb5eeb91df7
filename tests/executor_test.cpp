// The backend boundary (exec/executor.h): the CPU executor gives exactly Model::forward /
// Model::forward_batch (bit for bit), decode_argmax equals an independent argmax of the logits, the
// device choice parses and fails clearly for a device this build lacks (library, C API and CLI).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "edgegemma/edgegemma.h"
#include "engine/loaded_model.h"
#include "exec/executor.h"
#include "model/model.h"
#include "test_util.h"

namespace {

using namespace eg;

std::string tiny(const std::string& name) { return egtest::shared_dir() + "/models/" + name; }

// Lowest index of the maximum, written independently of argmax_row (NaN-free input).
int32_t first_max(const std::vector<float>& v, size_t off, size_t n) {
  size_t best = off;
  for (size_t i = off; i < off + n; ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int32_t>(best - off);
}

class CpuExecutorEquals : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuExecutorEquals, ModelForwardAndForwardBatchBitForBit) {
  auto lm = LoadedModel::load(tiny(GetParam()), parse_device("cpu"));
  const Model& m = lm->model();
  const StepExecutor& e = lm->executor();
  ASSERT_EQ(e.device(), Device::CPU);
  EXPECT_NE(e.description().find("cpu"), std::string::npos);
  const int V = m.config().vocab_size;

  // Prefill (all logits) + one decode step through the executor and through Model directly.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back(2 + (i * 131 + 7) % (V - 2));
  KVCacheOptions ko;
  ko.type = KVType::F16;
  ko.page_tokens = 16;
  ko.max_tokens = 64;
  auto kv_e = e.new_kv_cache(ko);
  KVCache kv_m(m.config(), ko);
  auto ws = e.new_workspace();
  ForwardScratch s;
  std::vector<float> le, lmod;
  e.prefill(prompt.data(), static_cast<int>(prompt.size()), *kv_e, *ws, LogitsMode::All, le);
  m.forward(prompt.data(), static_cast<int>(prompt.size()), kv_m, s, LogitsMode::All, lmod);
  ASSERT_EQ(le.size(), lmod.size());
  ASSERT_EQ(le.size(), prompt.size() * static_cast<size_t>(V));
  EXPECT_EQ(std::memcmp(le.data(), lmod.data(), le.size() * sizeof(float)), 0);
  EXPECT_EQ(kv_e->n_past(), static_cast<int>(prompt.size()));

  // Batched decode of 3 sequences of different lengths == forward_batch; argmax == first max.
  std::vector<std::unique_ptr<KVCache>> ce;
  std::vector<KVCache> cm;
  cm.reserve(3);
  std::vector<KVCache*> pe, pm;
  for (int b = 0; b < 3; ++b) {
    ce.push_back(e.new_kv_cache(ko));
    cm.emplace_back(m.config(), ko);
    const int n = 5 + 9 * b;
    std::vector<float> tmp;
    e.prefill(prompt.data(), n, *ce.back(), *ws, LogitsMode::None, tmp);
    m.forward(prompt.data(), n, cm.back(), s, LogitsMode::None, tmp);
  }
  for (int b = 0; b < 3; ++b) {
    pe.push_back(ce[b].get());
    pm.push_back(&cm[b]);
  }
  const int32_t next[3] = {3, 100 % V, 7};
  e.decode(next, 3, pe.data(), *ws, le);
  m.forward_batch(next, 3, pm.data(), s, lmod);
  ASSERT_EQ(le.size(), 3u * V);
  EXPECT_EQ(std::memcmp(le.data(), lmod.data(), le.size() * sizeof(float)), 0);

  // decode_argmax on fresh copies of the same state: the ids of the logits' maxima.
  std::vector<std::unique_ptr<KVCache>> ca;
  std::vector<KVCache*> pa;
  for (int b = 0; b < 3; ++b) {
    ca.push_back(e.new_kv_cache(ko));
    std::vector<float> tmp;
    e.prefill(prompt.data(), 5 + 9 * b, *ca.back(), *ws, LogitsMode::None, tmp);
    pa.push_back(ca.back().get());
  }
  int32_t ids[3] = {-1, -1, -1};
  e.decode_argmax(next, 3, pa.data(), *ws, ids);
  for (int b = 0; b < 3; ++b) EXPECT_EQ(ids[b], first_max(lmod, static_cast<size_t>(b) * V, V)) << "row " << b;
}

INSTANTIATE_TEST_SUITE_P(TinyModels, CpuExecutorEquals,
                         ::testing::Values("tiny-gemma2", "tiny-gemma3", "tiny-gemma4", "tiny-gemma4-moe"));

TEST(Executor, ErrorsLeaveTheCacheUnchanged) {
  auto lm = LoadedModel::load(tiny("tiny-gemma3"));
  const StepExecutor& e = lm->executor();
  KVCacheOptions ko;
  ko.max_tokens = 4;
  auto kv = e.new_kv_cache(ko);
  auto ws = e.new_workspace();
  std::vector<float> logits;
  const int32_t bad = e.config().vocab_size;  // one past the vocabulary
  EXPECT_THROW(e.prefill(&bad, 1, *kv, *ws, LogitsMode::Last, logits), Error);
  EXPECT_EQ(kv->n_past(), 0);
  const int32_t five[5] = {2, 3, 4, 5, 6};
  EXPECT_THROW(e.prefill(five, 5, *kv, *ws, LogitsMode::Last, logits), Error);  // beyond max_tokens
  EXPECT_EQ(kv->n_past(), 0);
  KVCache* one[1] = {kv.get()};
  EXPECT_THROW(e.decode(&bad, 1, one, *ws, logits), Error);
  EXPECT_EQ(kv->n_past(), 0);
}

TEST(Executor, ArgmaxRow) {
  const float a[5] = {1.0f, 3.0f, -2.0f, 3.0f, 0.0f};
  EXPECT_EQ(argmax_row(a, 5), 1);  // lowest index on ties
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float b[4] = {nan, -5.0f, nan, -1.0f};
  EXPECT_EQ(argmax_row(b, 4), 3);  // NaN never wins
  const float c[3] = {-INFINITY, -INFINITY, -1e30f};
  EXPECT_EQ(argmax_row(c, 3), 2);
}

TEST(Executor, ParseDevice) {
  EXPECT_TRUE(parse_device("auto").automatic);
  EXPECT_FALSE(parse_device("CPU").automatic);
  EXPECT_EQ(parse_device("cpu").device, Device::CPU);
  EXPECT_EQ(parse_device("Cuda").device, Device::CUDA);
  try {
    parse_device("tpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tpu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("auto, cpu or cuda"), std::string::npos) << e.what();
  }
  EXPECT_STREQ(device_name(Device::CPU), "cpu");
  EXPECT_STREQ(device_name(Device::CUDA), "cuda");
  EXPECT_TRUE(device_compiled_in(Device::CPU));
}

// Media (an mmproj, images or audio in the prompt) keep the request: the CPU and the CUDA
// executor both take media embeddings, so auto stays auto and an explicit device stays.
TEST(Executor, MediaKeepTheDeviceRequest) {
  EXPECT_TRUE(device_for_media(parse_device("auto"), true).automatic);
  EXPECT_TRUE(device_for_media(parse_device("auto"), false).automatic);
  const DeviceRequest p = device_for_media(parse_device("cpu"), true);
  EXPECT_FALSE(p.automatic);
  EXPECT_EQ(p.device, Device::CPU);
  const DeviceRequest c = device_for_media(parse_device("cuda"), true);
  EXPECT_FALSE(c.automatic);
  EXPECT_EQ(c.device, Device::CUDA);
}

// The span rules every executor's prefill_media shares (model.h): the check and each row's last key.
TEST(Executor, EmbedSpansAreCheckedAndGiveEachRowsLastKey) {
  const std::vector<float> rows(16, 0.5f);
  const std::vector<EmbedSpan> ok = {{2, 3, rows.data(), true}, {6, 2, rows.data(), false}};
  EXPECT_NO_THROW(check_embed_spans(ok, 9));
  EXPECT_EQ(embed_key_end(ok, 10, 9), (std::vector<int32_t>{10, 11, 14, 14, 14, 15, 16, 17, 18}));
  EXPECT_TRUE(embed_key_end({{6, 2, rows.data(), false}}, 10, 9).empty());  // all causal
  const std::vector<std::vector<EmbedSpan>> bad = {
      {{7, 3, rows.data(), false}},                             // past the call's 9 tokens
      {{2, 3, rows.data(), false}, {4, 2, rows.data(), false}},  // overlapping
      {{4, 2, rows.data(), false}, {1, 1, rows.data(), false}},  // out of order
      {{1, 0, rows.data(), false}},                             // empty
      {{-1, 2, rows.data(), false}},                            // before the call
      {{1, 2, nullptr, false}}};                                // no rows
  for (const auto& b : bad) {
    try {
      check_embed_spans(b, 9);
      ADD_FAILURE() << "accepted a bad span at " << b.back().begin;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("embedding span"), std::string::npos) << e.what();
    }
  }
}

TEST(Executor, UnavailableDeviceIsAClearError) {
  // Without a CUDA executor in the build: "no cuda executor". With one: tiny-gemma3's safetensors
  // are F32, which the CUDA executor refuses (and without a GPU, "no CUDA device").
  const bool cuda_built = device_compiled_in(Device::CUDA);
  auto lm = LoadedModel::load(tiny("tiny-gemma3"));
  try {
    lm->use_device(parse_device("cuda"));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (cuda_built)
      EXPECT_TRUE(msg.find("no CUDA device") != std::string::npos || msg.find("F32") != std::string::npos) << msg;
    else
      EXPECT_NE(msg.find("no cuda executor"), std::string::npos) << msg;
  }
  EXPECT_EQ(lm->executor().device(), Device::CPU);  // the old executor stays
  lm->use_device(parse_device("auto"));
  EXPECT_EQ(lm->executor().device(), Device::CPU);

  // C API.
  eg_model* m = nullptr;
  EXPECT_EQ(eg_model_load_device(tiny("tiny-gemma3").c_str(), "cuda", &m), EG_ERR_FAILED);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(eg_last_error()).find("cuda"), std::string::npos) << eg_last_error();
  EXPECT_EQ(eg_model_load_device(tiny("tiny-gemma3").c_str(), "gpu9", &m), EG_ERR_FAILED);
  ASSERT_EQ(eg_model_load_device(tiny("tiny-gemma3").c_str(), "cpu", &m), EG_OK) << eg_last_error();
  EXPECT_STREQ(eg_model_device(m), "cpu");
  eg_model_free(m);
  EXPECT_STREQ(eg_model_device(nullptr), "");

  // CLI: run / bench / serve refuse before doing anything.
  for (const char* cmd : {"run", "bench", "serve"}) {
    std::vector<std::string> args = {egtest::cli_path(), cmd, "-m", tiny("tiny-gemma3"), "--device", "cuda"};
    if (std::string(cmd) == "run") args.insert(args.end(), {"-p", "Hello", "-n", "2"});
    if (std::string(cmd) == "serve") args.insert(args.end(), {"--port", "0"});
    const auto r = egtest::run_cmd(args);
    EXPECT_NE(r.exit_code, 0) << cmd;
    if (cuda_built)
      EXPECT_TRUE(r.err.find("no CUDA device") != std::string::npos || r.err.find("F32") != std::string::npos)
          << cmd << ": " << r.err;
    else
      EXPECT_NE(r.err.find("no cuda executor"), std::string::npos) << cmd << ": " << r.err;
  }
}

TEST(Executor, CliRejectsGarbageDeviceAndKvType) {
  // A device name that does not exist, and bench's new --kv-type with garbage: one clear error, exit
  // non-zero, nothing on stdout.
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"run", "-p", "Hello", "-n", "2", "--device", "tpu"},
        std::vector<std::string>{"bench", "-p", "8", "-n", "2", "-r", "1", "--device", ""},
        std::vector<std::string>{"bench", "-p", "8", "-n", "2", "-r", "1", "--kv-type", "fp8"},
        std::vector<std::string>{"serve", "--port", "0", "--device", "cuda:7"}}) {
    std::vector<std::string> args = {egtest::cli_path(), extra[0], "-m", tiny("tiny-gemma3")};
    args.insert(args.end(), extra.begin() + 1, extra.end());
    const auto r = egtest::run_cmd(args);
    EXPECT_NE(r.exit_code, 0) << extra[0];
    EXPECT_NE(r.exit_code, -1) << extra[0] << ": crashed";
    EXPECT_TRUE(r.out.empty() || r.out.find("listening") == std::string::npos) << r.out;
    const bool named = r.err.find("unknown device") != std::string::npos ||
                       r.err.find("fp8") != std::string::npos;
    EXPECT_TRUE(named) << extra[0] << ": " << r.err;
  }
}

TEST(Executor, CliReportsTheDevice) {
  const auto r = egtest::run_cmd({egtest::cli_path(), "bench", "-m", tiny("tiny-gemma3"), "-p", "8", "-n", "4", "-r",
                                  "1", "--device", "cpu", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_EQ(j.at("kv_type"), "f16");
  EXPECT_NE(j.at("executor").get<std::string>().find("cpu"), std::string::npos);
  const auto s = egtest::run_cmd({egtest::cli_path(), "run", "-m", tiny("tiny-gemma3"), "-p", "Hello", "-n", "2",
                                  "--device", "cpu", "--json"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(nlohmann::json::parse(s.out).at("stats").at("device"), "cpu");
}

}  // namespace
