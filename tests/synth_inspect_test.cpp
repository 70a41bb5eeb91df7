// Known model configs, size arithmetic (model_stats), the streaming safetensors writer,
// `edgegemma synth` and `edgegemma inspect`.
//
// Expected numbers: ../shared/docs/gemma-architectures.md §5.2 (parameter counts, which include
// Gemma 4's layer_scalar) and §5.3 (parameters streamed per token, KV bytes per token);
// ../shared/models/README.md (tiny fixtures: unique parameters, + layer_scalar buffers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "model/known_models.h"
#include "model/model_stats.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

eg::ModelConfig known(const std::string& name, int layers = 0) {
  json c = eg::known_model_config(name);
  if (layers > 0) c = eg::truncate_layers(c, layers);
  return eg::parse_hf_config(c.dump(), eg::known_model_generation_config(name).dump(), name);
}

struct Expected {
  const char* name;
  int64_t embedding, ple_table, blocks, total, active;
  int64_t streamed_without_head, streamed;
  int64_t kv16;  // -1: not in the doc (checked against the per-layer sum only)
};

// §5.2 / §5.3. For dense models active = total and streamed = total minus the PLE table.
const Expected kExpected[] = {
    {"gemma-2-2b", 589'824'000, 0, 2'024'517'888, 2'614'341'888, 2'614'341'888, 2'024'517'888, 2'614'341'888, -1},
    {"gemma-3-270m", 167'772'160, 0, 100'326'016, 268'098'176, 268'098'176, 100'326'016, 268'098'176, -1},
    {"gemma-3-1b", 301'989'888, 0, 697'896'064, 999'885'952, 999'885'952, 697'896'064, 999'885'952, -1},
    {"gemma-3-4b", 671'252'480, 0, 3'209'010'688, 3'880'263'168, 3'880'263'168, 3'209'010'688, 3'880'263'168, -1},
    {"gemma-4-e2b", 402'653'184, 2'348'810'240, 1'877'105'955, 4'628'569'379, 4'628'569'379, 1'877'105'955,
     2'279'759'139, 18'432},
    {"gemma-4-e4b", 671'088'640, 2'818'572'288, 3'973'352'490, 7'463'013'418, 7'463'013'418, 3'973'352'490,
     4'644'441'130, 57'344},
    {"gemma-4-26b-a4b", 738'197'504, 0, 24'494'944'286, 25'233'141'790, 3'822'530'590, 3'084'333'086,
     3'822'530'590, 225'280},
    {"gemma-4-31b", 1'409'286'144, 0, 29'288'059'196, 30'697'345'340, 30'697'345'340, 29'288'059'196,
     30'697'345'340, 901'120},
};

TEST(KnownModels, NamesAndConfigs) {
  const auto& names = eg::known_model_names();
  ASSERT_EQ(names.size(), std::size(kExpected));
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(names[i], kExpected[i].name);
  try {
    eg::known_model_config("gemma-9");
    FAIL() << "no error";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model 'gemma-9' (known: gemma-2-2b, "), std::string::npos) << e.what();
  }
  // Released eos ids (generation_config.json).
  EXPECT_EQ(known("gemma-2-2b").eos_token_ids, (std::vector<int>{1, 107}));
  EXPECT_EQ(known("gemma-3-1b").eos_token_ids, (std::vector<int>{1, 106}));
  EXPECT_EQ(known("gemma-4-e2b").eos_token_ids, (std::vector<int>{1, 106, 50}));
  // Geometry spot checks (§3.2, §5.1).
  const eg::ModelConfig e2b = known("gemma-4-e2b");
  EXPECT_EQ(eg::layer_pattern_string(e2b), "(SSSSF)x7");
  EXPECT_EQ(e2b.n_kv_layers(), 15);
  EXPECT_EQ(e2b.layers[20].kv_source, 13);
  EXPECT_EQ(e2b.layers[34].kv_source, 14);
  EXPECT_EQ(e2b.layers[15].intermediate_size, 12288);
  EXPECT_EQ(e2b.layers[14].intermediate_size, 6144);
  EXPECT_EQ(e2b.layers[4].head_dim, 512);
  EXPECT_EQ(e2b.layers[4].rope_pairs, 64);
  const eg::ModelConfig e4b = known("gemma-4-e4b");
  EXPECT_EQ(e4b.layers[29].kv_source, 23);
  EXPECT_EQ(e4b.layers[24].kv_source, 22);
  const eg::ModelConfig moe = known("gemma-4-26b-a4b");
  EXPECT_TRUE(moe.layers[5].k_eq_v);
  EXPECT_EQ(moe.layers[5].n_kv_heads, 2);
  EXPECT_EQ(moe.layers[4].n_kv_heads, 8);
  EXPECT_EQ(moe.n_experts, 128);
  EXPECT_EQ(eg::layer_pattern_string(known("gemma-3-1b")), "(SSSSSF)x4 SS");
  EXPECT_EQ(eg::layer_pattern_string(known("gemma-2-2b")), "(SF)x13");
  EXPECT_EQ(known("gemma-3-4b").layers[5].rope_linear_factor, 8.0f);
}

TEST(ModelStats, ReleasedSizesMatchTheSpec) {
  for (const Expected& x : kExpected) {
    SCOPED_TRACE(x.name);
    const eg::ModelConfig c = known(x.name);
    const eg::ModelStats s = eg::compute_model_stats(c);
    EXPECT_EQ(s.params.embedding, x.embedding);
    EXPECT_EQ(s.params.ple_table, x.ple_table);
    EXPECT_EQ(s.params.blocks, x.blocks);
    EXPECT_EQ(s.params.total, x.total);
    EXPECT_EQ(s.params.active, x.active);
    EXPECT_EQ(s.params.streamed_without_head, x.streamed_without_head);
    EXPECT_EQ(s.params.lm_head, x.embedding);
    EXPECT_EQ(s.params.streamed, x.streamed);
    EXPECT_EQ(s.streamed_bytes_bf16, 2 * x.streamed);
    EXPECT_EQ(c.parameter_count(), x.total);
    int64_t sum = 0;
    for (const auto& t : eg::checkpoint_tensors(c)) sum += t.numel();
    EXPECT_EQ(sum, x.total);
    if (x.kv16 >= 0) {
      EXPECT_EQ(s.kv_bytes16, x.kv16);
    }
    EXPECT_EQ(s.kv_bytes32, 2 * s.kv_bytes16);
    int64_t per_layer = 0;
    for (int64_t b : s.kv_bytes16_per_layer) per_layer += b;
    EXPECT_EQ(per_layer, s.kv_bytes16);
    EXPECT_FALSE(s.have_weights);
  }
  // KV per layer type (§5.3): E2B 12 sliding × 1 KiB + 3 full × 2 KiB, shared layers store none.
  const eg::ModelStats e2b = eg::compute_model_stats(known("gemma-4-e2b"));
  const eg::KVTypeStats& sl = e2b.kv_by_type.at(eg::LayerType::Sliding);
  const eg::KVTypeStats& fu = e2b.kv_by_type.at(eg::LayerType::Full);
  EXPECT_EQ(sl.layers, 28);
  EXPECT_EQ(sl.kv_layers, 12);
  EXPECT_EQ(sl.shared_layers, 16);
  EXPECT_EQ(sl.bytes16, 12 * 1024);
  EXPECT_EQ(fu.kv_layers, 3);
  EXPECT_EQ(fu.shared_layers, 4);
  EXPECT_EQ(fu.bytes16, 3 * 2048);
  EXPECT_EQ(e2b.kv_bytes16_per_layer[20], 0);
  EXPECT_EQ(e2b.kv_bytes16_per_layer[14], 2048);
}

// The tiny trained fixtures: counts as in shared/models/README.md, and checkpoint_tensors() names
// exactly the tensors their files hold.
TEST(ModelStats, TinyFixtures) {
  struct Tiny {
    const char* dir;
    int64_t total, active;
  };
  const Tiny tiny[] = {{"tiny-gemma2", 6'033'664, 6'033'664},
                       {"tiny-gemma3", 7'805'952, 7'805'952},
                       {"tiny-gemma4", 12'168'576 + 8, 12'168'576 + 8},
                       {"tiny-gemma4-moe", 5'358'496 + 4, 4'178'848 + 4}};
  for (const Tiny& t : tiny) {
    SCOPED_TRACE(t.dir);
    const std::string dir = egtest::shared_dir() + "/models/" + t.dir;
    eg::ModelConfig c = eg::load_hf_config(dir);
    const eg::TensorStore st = eg::TensorStore::open_dir(dir);
    EXPECT_EQ(c.parameter_count(), t.total);
    const eg::ModelStats s = eg::compute_model_stats(c, &st);
    EXPECT_EQ(s.params.total, t.total);
    EXPECT_EQ(s.params.active, t.active);
    EXPECT_TRUE(s.missing_tensors.empty());
    EXPECT_TRUE(s.checkpoint_dtypes_known);
    EXPECT_EQ(s.streamed_bytes_checkpoint, s.streamed_bytes_bf16);  // stored in bf16
    EXPECT_EQ(s.disk_bytes, static_cast<int64_t>(st.total_bytes()));
    EXPECT_EQ(s.decoder_disk_bytes, s.disk_bytes);
    EXPECT_EQ(s.disk_bytes_by_dtype.at("BF16"), s.disk_bytes);
    std::set<std::string> want;
    for (const auto& ct : eg::checkpoint_tensors(c)) want.insert(ct.name);
    EXPECT_EQ(want, std::set<std::string>(st.names().begin(), st.names().end()));
  }
}

// --layers N for every N: the loader accepts the truncated config and keeps the written layer types
// (Gemma 4 forces the last layer full: the written list already says so).
TEST(KnownModels, TruncationIsAcceptedForEveryDepth) {
  for (const std::string& name : eg::known_model_names()) {
    const json full = eg::known_model_config(name);
    const int L = full["num_hidden_layers"];
    const eg::ModelConfig ref = known(name);
    for (int n = 1; n <= L; ++n) {
      SCOPED_TRACE(name + " --layers " + std::to_string(n));
      const json t = eg::truncate_layers(full, n);
      eg::ModelConfig c;
      ASSERT_NO_THROW(c = eg::parse_hf_config(t.dump(), "", name));
      ASSERT_EQ(c.n_layers, n);
      if (t.contains("layer_types")) {
        ASSERT_EQ(t["layer_types"].size(), static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) EXPECT_EQ(t["layer_types"][i], eg::layer_type_name(c.layers[i].type));
      }
      for (int i = 0; i < n; ++i) {
        // Same geometry as the full model, apart from the forced last layer of Gemma 4.
        if (i < n - 1 || c.family != eg::ModelFamily::Gemma4) {
          EXPECT_EQ(c.layers[i].type, ref.layers[i].type);
          EXPECT_EQ(c.layers[i].kv_source, ref.layers[i].kv_source) << i;
          EXPECT_EQ(c.layers[i].intermediate_size, ref.layers[i].intermediate_size);
        }
      }
      if (c.family == eg::ModelFamily::Gemma4) {
        EXPECT_EQ(c.layers[n - 1].type, eg::LayerType::Full);
        const int shared = t["num_kv_shared_layers"];
        EXPECT_EQ(shared, std::max(0, full["num_kv_shared_layers"].get<int>() - (L - n)));
      }
    }
    EXPECT_THROW(eg::truncate_layers(full, 0), eg::Error);
    EXPECT_THROW(eg::truncate_layers(full, L + 1), eg::Error);
  }
}

// ---------------------------------------------------------------------------------------------
// SafetensorsWriter

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const eg::Error& e) {
    return e.what();
  }
  return "";
}

size_t entries_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += !e.path().empty();
  return n;
}

TEST(SafetensorsWriter, StreamsInAnyPiecesLikeWriteSafetensors) {
  const std::string dir = egtest::make_temp_dir();
  std::vector<float> a(1000), b(37);
  std::vector<uint16_t> c(513);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * i;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -1.0f * i;
  for (size_t i = 0; i < c.size(); ++i) c[i] = eg::f32_to_bf16(0.25f * i);
  eg::write_safetensors(dir + "/ref.safetensors", {{"a", eg::DType::F32, {10, 100}, a.data()},
                                                   {"b", eg::DType::F32, {37}, b.data()},
                                                   {"c", eg::DType::BF16, {513}, c.data()}},
                        {{"format", "pt"}});
  std::string bytes;
  bytes.append(reinterpret_cast<const char*>(a.data()), a.size() * 4);
  bytes.append(reinterpret_cast<const char*>(b.data()), b.size() * 4);
  bytes.append(reinterpret_cast<const char*>(c.data()), c.size() * 2);
  {
    eg::SafetensorsWriter w(dir + "/s.safetensors",
                            {{"a", eg::DType::F32, {10, 100}}, {"b", eg::DType::F32, {37}}, {"c", eg::DType::BF16, {513}}},
                            {{"format", "pt"}});
    EXPECT_EQ(w.remaining(), bytes.size());
    size_t off = 0, step = 1;
    while (off < bytes.size()) {  // pieces of growing odd sizes, crossing tensor boundaries
      const size_t n = std::min(step, bytes.size() - off);
      w.append(bytes.data() + off, n);
      off += n;
      step = step * 3 + 1;
      if (off < 4000) {
        EXPECT_EQ(w.current_tensor(), 0u);
      }
    }
    EXPECT_EQ(w.current_tensor(), 3u);
    w.finish();
  }
  EXPECT_EQ(egtest::read_file(dir + "/s.safetensors"), egtest::read_file(dir + "/ref.safetensors"));
  EXPECT_EQ(entries_in(dir), 2u);
}

TEST(SafetensorsWriter, ErrorsLeaveNoFile) {
  const std::string dir = egtest::make_temp_dir();
  const std::string path = dir + "/m.safetensors";
  const float v[4] = {1, 2, 3, 4};
  std::string msg = error_of([&] {
    eg::SafetensorsWriter w(path, {{"x", eg::DType::F32, {2}}, {"y", eg::DType::F32, {1}}});
    w.append(v, 8);
    w.append(v, 8);  // y holds only 4 bytes
  });
  EXPECT_NE(msg.find("'y': more data than its shape and dtype hold"), std::string::npos) << msg;
  msg = error_of([&] {
    eg::SafetensorsWriter w(path, {{"x", eg::DType::F32, {2}}, {"y", eg::DType::F32, {1}}});
    w.append(v, 4);
    w.finish();
  });
  EXPECT_NE(msg.find("'x': data incomplete"), std::string::npos) << msg;
  {
    eg::SafetensorsWriter w(path, {{"x", eg::DType::F32, {2}}});
    w.append(v, 8);
    // destroyed without finish(): abandoned
  }
  msg = error_of([&] { eg::SafetensorsWriter w(path, {{"x", eg::DType::F32, {2}}, {"x", eg::DType::F32, {2}}}); });
  EXPECT_NE(msg.find("duplicate"), std::string::npos) << msg;
  msg = error_of([&] { eg::SafetensorsWriter w(dir + "/no/such/dir.safetensors", {{"x", eg::DType::F32, {2}}}); });
  EXPECT_NE(msg.find("cannot write"), std::string::npos) << msg;
  EXPECT_EQ(entries_in(dir), 0u);  // no target, no temporary file
}

// ---------------------------------------------------------------------------------------------
// synth and inspect through the CLI

const std::string& cli() {
  static const std::string p = egtest::cli_path();
  return p;
}

egtest::CmdResult cmd(std::vector<std::string> args) {
  args.insert(args.begin(), cli());
  return egtest::run_cmd(args);
}

void expect_one_line_error(const std::vector<std::string>& args, const std::string& needle) {
  const egtest::CmdResult r = cmd(args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.rfind("edgegemma: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

float first_value(const eg::TensorStore& st, const std::string& name) {
  const eg::TensorInfo* t = st.find(name);
  if (!t) throw std::runtime_error("missing " + name);
  uint16_t h;
  std::memcpy(&h, t->data, 2);
  return eg::bf16_to_f32(h);
}

class SynthEveryModel : public testing::TestWithParam<std::string> {};

TEST_P(SynthEveryModel, TwoLayersLoadRunAndInspect) {
  const std::string name = GetParam();
  const std::string dir = egtest::make_temp_dir() + "/m";
  egtest::CmdResult r = cmd({"synth", "--like", name, "--layers", "2", "-o", dir, "--seed", "7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2 layers"), std::string::npos) << r.out;
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                        "tokenizer_config.json"})
    EXPECT_TRUE(fs::exists(dir + "/" + f)) << f;

  r = cmd({"run", "-m", dir, "-p", "hi", "-n", "2", "--ignore-eos", "--json", "--seed", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json run = json::parse(r.out);
  EXPECT_EQ(run["generated_ids"].size(), 2u);

  const eg::ModelConfig want = known(name, 2);
  const eg::ModelStats ws = eg::compute_model_stats(want);
  r = cmd({"inspect", "-m", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["family"], eg::family_name(want.family));
  EXPECT_EQ(j["n_layers"], 2);
  EXPECT_EQ(j["vocab_size"], want.vocab_size);
  EXPECT_EQ(j["hidden_size"], want.hidden_size);
  EXPECT_EQ(j["layer_types"].size(), 2u);
  EXPECT_EQ(j["parameters"]["total"], ws.params.total);
  EXPECT_EQ(j["parameters"]["embedding"], ws.params.embedding);
  EXPECT_EQ(j["parameters"]["ple_table"], ws.params.ple_table);
  EXPECT_EQ(j["parameters"]["active_per_token"], ws.params.active);
  EXPECT_EQ(j["weights_on_disk"]["bytes"], 2 * ws.params.total);
  EXPECT_EQ(j["weights_on_disk"]["by_dtype"]["BF16"], 2 * ws.params.total);
  EXPECT_EQ(j["weights_on_disk"]["decoder_bytes"], 2 * ws.params.total);
  EXPECT_TRUE(j["weights_on_disk"]["missing_tensors"].empty());
  EXPECT_EQ(j["per_token"]["params_streamed"], ws.params.streamed);
  EXPECT_EQ(j["per_token"]["bytes_bf16"], 2 * ws.params.streamed);
  EXPECT_EQ(j["per_token"]["bytes_checkpoint"], 2 * ws.params.streamed);
  EXPECT_EQ(j["kv_cache_per_token"]["bytes_16bit"], ws.kv_bytes16);
  EXPECT_EQ(j["kv_cache_per_token"]["bytes_f32"], 2 * ws.kv_bytes16);
  EXPECT_EQ(j["ple"].is_null(), want.ple_dim <= 0);
  EXPECT_EQ(j["moe"].is_null(), want.n_experts == 0);
  EXPECT_TRUE(j["kv_sharing"].is_null());  // two layers: none of the shared tail is kept
  EXPECT_TRUE(j.contains("layer_geometry"));

  // Norm weights are the identity scale for the family; layer_scalar is 1.
  const eg::TensorStore st = eg::TensorStore::open_dir(dir);
  const float norm = want.family == eg::ModelFamily::Gemma4 ? 1.0f : 0.0f;
  EXPECT_EQ(first_value(st, "model.norm.weight"), norm);
  EXPECT_EQ(first_value(st, "model.layers.1.input_layernorm.weight"), norm);
  if (want.family == eg::ModelFamily::Gemma4) {
    EXPECT_EQ(first_value(st, "model.layers.0.layer_scalar"), 1.0f);
  }
  EXPECT_EQ(st.find("model.layers.0.self_attn.q_norm.weight") != nullptr, want.family != eg::ModelFamily::Gemma2);

  // Tokenizer: the real Gemma 3 one, or for Gemma 2 a synthetic one of exactly 256000 tokens.
  const eg::Tokenizer tok = eg::Tokenizer::load_dir(dir);
  if (want.family == eg::ModelFamily::Gemma2) {
    EXPECT_EQ(tok.vocab_size(), 256000);
    EXPECT_EQ(tok.token_id("<start_of_turn>"), 106);
    EXPECT_EQ(tok.token_id("<end_of_turn>"), 107);
    EXPECT_EQ(tok.encode("hello", true), (std::vector<int32_t>{2, tok.token_id("hello")}));
    EXPECT_GE(tok.token_id("<0xFF>"), 0);
    r = cmd({"tokenize", "-m", dir, "hello"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("\"hello\""), std::string::npos) << r.out;
  } else {
    EXPECT_TRUE(egtest::read_file(dir + "/tokenizer.json") ==
                egtest::read_file(egtest::shared_dir() + "/tokenizers/gemma3/tokenizer.json"));
  }
  const json gen = json::parse(egtest::read_file(dir + "/generation_config.json"));
  EXPECT_EQ(gen["eos_token_id"], eg::known_model_generation_config(name)["eos_token_id"]);
  fs::remove_all(dir);  // free the disk early (these are GBs)
}

// One model per family (Gemma 4 E2B: PLE, KV sharing, proportional RoPE), keeping the files a
// test writes to ~1.5 GB; the larger models' 2-layer checkpoints are 2–5 GB each (their shapes
// and tensor lists are checked above without writing anything).
INSTANTIATE_TEST_SUITE_P(Known, SynthEveryModel,
                         testing::Values("gemma-3-270m", "gemma-2-2b", "gemma-4-e2b"),
                         [](const testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

// The synth'd config of a truncated Gemma 4 with KV sharing keeps the shared tail consistent.
TEST(Synth, TruncatedGemma4KeepsKvSharing) {
  const std::string dir = egtest::make_temp_dir();
  json c = eg::truncate_layers(eg::known_model_config("gemma-4-e2b"), 17);
  egtest::write_file(dir + "/config.json", c.dump());
  const egtest::CmdResult r = cmd({"inspect", "-m", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["n_layers"], 17);
  EXPECT_EQ(j["kv_sharing"]["shared_layers"], 2);
  EXPECT_EQ(j["kv_sharing"]["first_shared"], 15);
  EXPECT_EQ(j["kv_sharing"]["sources"]["sliding_attention"], 13);
  EXPECT_EQ(j["kv_sharing"]["sources"]["full_attention"], 14);  // layer 16, forced full
  EXPECT_EQ(j["layer_types"][16], "full_attention");
  EXPECT_TRUE(j["weights_on_disk"].is_null());
}

TEST(Inspect, ConfigOnlyAndKnownNames) {
  const std::string dir = egtest::make_temp_dir();
  egtest::write_file(dir + "/config.json", eg::known_model_config("gemma-4-31b").dump());
  egtest::CmdResult r = cmd({"inspect", "-m", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_TRUE(j["weights_on_disk"].is_null());
  EXPECT_TRUE(j["per_token"]["bytes_checkpoint"].is_null());
  EXPECT_EQ(j["parameters"]["total"], 30'697'345'340);
  EXPECT_EQ(j["kv_cache_per_token"]["bytes_16bit"], 901'120);
  EXPECT_EQ(j["layer_geometry"]["full_attention"]["kv_heads"], 4);
  EXPECT_EQ(j["layer_geometry"]["full_attention"]["k_eq_v"], true);
  EXPECT_EQ(j["layer_geometry"]["full_attention"]["rope"]["rotated_pairs"], 64);
  // Text form: the headline numbers.
  r = cmd({"inspect", "--like", "gemma-4-e2b"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"4,628,569,379", "2,348,810,240", "1,877,105,955", "2,279,759,139", "18,432", "(SSSSF)x7",
                        "layers 15-34 (20) store no K/V", "sliding -> layer 13", "full -> layer 14"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  r = cmd({"inspect", "--like", "gemma-4-26b-a4b"});
  EXPECT_NE(r.out.find("active per token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3,822,530,590"), std::string::npos) << r.out;
  // --like with --layers: as synth --layers would write it.
  r = cmd({"inspect", "--like", "gemma-4-31b", "--layers", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["n_layers"], 2);
  EXPECT_EQ(j["per_token"]["bytes_bf16"], eg::compute_model_stats(known("gemma-4-31b", 2)).streamed_bytes_bf16);
  // A real (tiny) checkpoint with weights.
  r = cmd({"inspect", "-m", egtest::shared_dir() + "/models/tiny-gemma4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["parameters"]["total"], 12'168'576 + 8);
  EXPECT_EQ(j["kv_sharing"]["shared_layers"], 2);
  EXPECT_EQ(j["ple"]["dim"], 64);
}

TEST(Synth, BadInputsGiveOneLineErrors) {
  const std::string dir = egtest::make_temp_dir();
  expect_one_line_error({"synth", "--like", "gemma-9", "-o", dir + "/a"}, "unknown --like 'gemma-9' (known: gemma-2-2b");
  expect_one_line_error({"synth", "--like", "gemma-4-e2b", "--layers", "36", "-o", dir + "/a"},
                        "--layers 36 exceeds the 35 layers of gemma-4-e2b");
  expect_one_line_error({"synth", "--like", "gemma-3-270m", "--dtype", "f16", "-o", dir + "/a"}, "--dtype");
  expect_one_line_error({"synth", "--like", "gemma-3-270m", "--tokenizer", dir, "-o", dir + "/a"},
                        "no tokenizer.json");
  egtest::write_file(dir + "/file", "x");
  expect_one_line_error({"synth", "--like", "gemma-3-270m", "--layers", "1", "-o", dir + "/file/sub"},
                        "Not a directory");
  expect_one_line_error({"synth", "--like", "gemma-3-270m", "--layers", "1", "-o", dir + "/file"}, "file");
  EXPECT_FALSE(fs::exists(dir + "/a"));  // nothing written before the arguments were checked
  expect_one_line_error({"inspect", "-m", dir + "/missing"}, "does not exist");
  expect_one_line_error({"inspect", "-m", dir}, "missing config.json");
  expect_one_line_error({"inspect", "--like", "gemma-9"}, "unknown --like");
  expect_one_line_error({"inspect", "-m", dir, "--layers", "2"}, "--layers needs --like");
  expect_one_line_error({"inspect", "--like", "gemma-3-1b", "--layers", "27"}, "--layers 27 is outside 1..26");
}

}  // namespace
