// `edgegemma perplexity` (both methods) and `edgegemma bench`, end to end on tiny-gemma3:
// the CLI's number equals the engine function's and an independent float64 recomputation from
// the logits of Model::forward (LogitsMode::All); llama-perplexity's chunking on crafted token
// counts; clear errors. Bench: runs and its JSON has the fields (never timed here).
#include <gtest/gtest.h>

#include <fstream>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/perplexity.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using nlohmann::json;

namespace {

std::string tiny() { return egtest::shared_dir() + "/models/tiny-gemma3"; }

// The first ~n bytes of valid.txt, cut at a line end, keeping two documents (a "\n\n\n" separator).
std::string short_text(size_t n) {
  const std::string t = egtest::read_file(egtest::shared_dir() + "/data/corpus/valid.txt");
  const size_t sep = t.find("\n\n\n");
  std::string a = t.substr(0, std::min(n / 2, sep));
  a = a.substr(0, a.rfind('\n') + 1);
  std::string b = t.substr(sep + 3, n / 2);
  b = b.substr(0, b.rfind('\n') + 1);
  return a + "\n\n\n" + b;
}

// log-softmax of one row, entirely in double (max subtraction, then sum).
double nll64(const float* row, int V, int target) {
  double mx = row[0];
  for (int i = 1; i < V; ++i) mx = std::max(mx, static_cast<double>(row[i]));
  double se = 0;
  for (int i = 0; i < V; ++i) se += std::exp(static_cast<double>(row[i]) - mx);
  return std::log(se) + mx - static_cast<double>(row[target]);
}

// Runs `ids` as one fresh sequence; returns the summed NLL of positions [first, ids.size()-1).
double span_nll(const eg::Model& m, const std::vector<int32_t>& ids, int first, const std::vector<int32_t>& targets,
                int64_t* count, std::vector<int32_t>* top1 = nullptr) {
  eg::KVCache kv(m.config(), static_cast<int>(ids.size()));
  eg::ForwardScratch s;
  std::vector<float> logits;
  m.forward(ids.data(), static_cast<int>(ids.size()), kv, s, eg::LogitsMode::All, logits);
  const int V = m.config().vocab_size;
  double sum = 0;
  for (size_t t = first; t + 1 < ids.size(); ++t) {
    const float* row = logits.data() + t * V;
    sum += nll64(row, V, targets[t + 1]);
    if (top1) {
      int best = 0;
      for (int i = 1; i < V; ++i)
        if (row[i] > row[best]) best = i;
      top1->push_back(best);
    }
    ++*count;
  }
  return sum;
}

json cli_json(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {egtest::cli_path()};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back("--json");
  const egtest::CmdResult r = egtest::run_cmd(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

void expect_error(const std::vector<std::string>& extra, const std::string& needle) {
  std::vector<std::string> args = {egtest::cli_path()};
  args.insert(args.end(), extra.begin(), extra.end());
  const egtest::CmdResult r = egtest::run_cmd(args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("edgegemma: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << r.err;
}

TEST(PerplexityCli, DefaultMethodEqualsEngineAndFloat64Recomputation) {
  const std::string dir = egtest::make_temp_dir();
  const std::string text = short_text(2400);
  egtest::write_file(dir + "/t.txt", text);
  const int ctx = 64;
  const json j = cli_json({"perplexity", "-m", tiny(), "-f", dir + "/t.txt", "--ctx", std::to_string(ctx),
                           "--save-top1", dir + "/top1.txt"});

  auto model = eg::Model::load_dir(tiny());
  model->repack_for_cpu();  // as the CLI's LoadedModel does: the same kernels, the same bits
  const eg::Tokenizer tok = eg::Tokenizer::load_dir(tiny());
  // Independent stream: two documents, each <bos> text <eos>.
  const size_t sep = text.find("\n\n\n");
  std::vector<int32_t> stream;
  for (const std::string& doc : {text.substr(0, sep), text.substr(sep + 3)}) {
    const std::vector<int32_t> ids = tok.encode(doc, true);
    ASSERT_EQ(ids[0], tok.bos_id());
    stream.insert(stream.end(), ids.begin(), ids.end());
    stream.push_back(tok.eos_id());
  }
  ASSERT_EQ(eg::document_stream(tok, text), stream);
  const int spans = static_cast<int>((stream.size() - 1) / ctx);
  ASSERT_GE(spans, 3);
  double sum = 0;
  int64_t n = 0;
  std::vector<int32_t> top1;
  for (int k = 0; k < spans; ++k) {
    const std::vector<int32_t> ids(stream.begin() + k * ctx, stream.begin() + k * ctx + ctx + 1);
    sum += span_nll(*model, ids, 0, ids, &n, &top1);
  }
  std::string top1_text;
  for (int32_t id : top1) top1_text += std::to_string(id) + "\n";
  EXPECT_EQ(egtest::read_file(dir + "/top1.txt"), top1_text);
  // Agreement with itself is 1; with a file where 3 ids differ, 1 - 3/n.
  EXPECT_EQ(cli_json({"perplexity", "-m", tiny(), "-f", dir + "/t.txt", "--ctx", std::to_string(ctx), "--top1-ref",
                      dir + "/top1.txt"})["top1_agreement"],
            1.0);
  std::vector<int32_t> other = top1;
  for (int i : {0, 5, 9}) other[i] = other[i] == 7 ? 8 : 7;
  std::string other_text;
  for (int32_t id : other) other_text += std::to_string(id) + "\n";
  egtest::write_file(dir + "/other.txt", other_text);
  EXPECT_NEAR(cli_json({"perplexity", "-m", tiny(), "-f", dir + "/t.txt", "--ctx", std::to_string(ctx), "--top1-ref",
                        dir + "/other.txt"})["top1_agreement"].get<double>(),
              1.0 - 3.0 / static_cast<double>(top1.size()), 1e-12);
  egtest::write_file(dir + "/few.txt", "1\n2\n");
  expect_error({"perplexity", "-m", tiny(), "-f", dir + "/t.txt", "--ctx", std::to_string(ctx), "--top1-ref",
                dir + "/few.txt"}, "has 2 predictions");
  const double want = std::exp(sum / n);
  const eg::PerplexityResult r = eg::perplexity(*model, stream, ctx);

  EXPECT_EQ(j["method"], "default");
  EXPECT_EQ(j["ctx"], ctx);
  EXPECT_EQ(j["tokens"], stream.size());
  EXPECT_EQ(j["chunks"], spans);
  EXPECT_EQ(j["predictions"], n);
  EXPECT_EQ(r.tokens_predicted, n);
  EXPECT_DOUBLE_EQ(j["ppl"].get<double>(), r.ppl);          // same code, deterministic
  EXPECT_NEAR(r.ppl, want, 1e-9 * want);                      // independent float64 log-softmax
  EXPECT_TRUE(j.contains("seconds"));
}

TEST(PerplexityCli, LlamaMethodEqualsEngineAndFloat64Recomputation) {
  const std::string dir = egtest::make_temp_dir();
  const std::string text = short_text(2400) + "<bos> and <eos> stay text\n";
  egtest::write_file(dir + "/t.txt", text);
  const int ctx = 48;
  const json j = cli_json({"perplexity", "-m", tiny(), "-f", dir + "/t.txt", "--ctx", std::to_string(ctx),
                           "--method", "llama"});

  auto model = eg::Model::load_dir(tiny());
  model->repack_for_cpu();  // as the CLI's LoadedModel does: the same kernels, the same bits
  const eg::Tokenizer tok = eg::Tokenizer::load_dir(tiny());
  // Independent: drop one trailing newline, one BOS, special-token text not parsed.
  const std::vector<int32_t> stream = tok.encode(text.substr(0, text.size() - 1), true, false);
  EXPECT_EQ(std::count(stream.begin(), stream.end(), tok.bos_id()), 1);
  ASSERT_EQ(eg::llama_stream(tok, text), stream);
  const int chunks = static_cast<int>(stream.size() / ctx);
  double sum = 0;
  int64_t n = 0;
  for (int c = 0; c < chunks; ++c) {
    std::vector<int32_t> ids(stream.begin() + c * ctx, stream.begin() + (c + 1) * ctx);
    const std::vector<int32_t> targets = ids;
    ids[0] = tok.bos_id();
    sum += span_nll(*model, ids, ctx / 2, targets, &n);
  }
  EXPECT_EQ(n, chunks * (ctx - 1 - ctx / 2));
  const double want = std::exp(sum / n);
  const eg::PerplexityResult r = eg::perplexity_llama(*model, stream, ctx, tok.bos_id());
  EXPECT_EQ(j["method"], "llama");
  EXPECT_EQ(j["tokens"], stream.size());
  EXPECT_EQ(j["chunks"], chunks);
  EXPECT_EQ(j["predictions"], n);
  EXPECT_DOUBLE_EQ(j["ppl"].get<double>(), r.ppl);
  EXPECT_NEAR(r.ppl, want, 1e-9 * want);
}

// llama-perplexity's own running PPL after each chunk (llamacpp-reference.json, F32 GGUF) on
// tiny-gemma4, whose GGUF tokenizer splits valid.txt exactly as HF does: our first 6 chunks over
// the start of valid.txt must agree to 1e-4 (llama.cpp's F16 KV cache and F16 GELU table remain).
// (Gemma 2/3 cannot be compared chunk by chunk: llama.cpp splits runs of 3+ spaces differently, the
// first at byte 82, so its chunk boundaries shift.)
TEST(PerplexityCli, LlamaMethodMatchesLlamaCppRunningPpl) {
  const std::string model = egtest::shared_dir() + "/models/tiny-gemma4";
  const json ref = json::parse(egtest::read_file(egtest::shared_dir() + "/models/gguf/tiny-gemma4/llamacpp-reference.json"));
  const json& run = ref["files"]["tiny-gemma4-f32.gguf"]["perplexity_valid_c512"];
  ASSERT_EQ(run["n_ctx"], 512);
  const std::string text = egtest::read_file(egtest::shared_dir() + "/data/corpus/valid.txt");
  std::string head = text.substr(0, 16000);  // bytes (mostly 3-byte CJK at the start)
  head = head.substr(0, head.rfind('\n') + 1);
  auto m = eg::Model::load_dir(model);
  m->repack_for_cpu();  // as the CLI's LoadedModel does
  const eg::Tokenizer tok = eg::Tokenizer::load_dir(model);
  const std::vector<int32_t> all = eg::llama_stream(tok, text), part = eg::llama_stream(tok, head);
  ASSERT_GE(part.size(), 6u * 512);
  ASSERT_TRUE(std::equal(part.begin(), part.begin() + 6 * 512, all.begin()));  // same chunks as the whole file
  EXPECT_EQ(all.size(), 75162u);  // ../shared/models/gguf/README.md (146 chunks)
  EXPECT_EQ(run["n_chunks"], 146);
  const std::vector<double> running =
      eg::perplexity_llama(*m, std::vector<int32_t>(part.begin(), part.begin() + 6 * 512), 512, tok.bos_id()).running_ppl;
  ASSERT_EQ(running.size(), 6u);
  for (int c = 0; c < 6; ++c) {
    const double want = run["running_ppl_after_each_chunk"][c];
    EXPECT_NEAR(running[c], want, 1e-4 * want) << "after chunk " << c + 1;
  }
}

// Crafted token counts: floor(n / ctx) chunks, ctx - 1 - ctx/2 predictions each (255 at 512),
// the first token of each chunk replaced by BOS, the tail dropped; fewer than 2·ctx tokens refused.
TEST(PerplexityLlama, ChunkingOnCraftedCounts) {
  auto model = eg::Model::load_dir(tiny());
  model->repack_for_cpu();  // as the CLI's LoadedModel does: the same kernels, the same bits
  const int ctx = 16, bos = 2;
  std::vector<int32_t> stream(3 * ctx + 7);
  for (size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<int32_t>(400 + (i * 37) % 3000);
  const eg::PerplexityResult r = eg::perplexity_llama(*model, stream, ctx, bos);
  EXPECT_EQ(r.spans, 3);
  EXPECT_EQ(r.tokens_predicted, 3 * 7);
  // The first token of each chunk is not looked at (it becomes BOS), the tail is not scored.
  std::vector<int32_t> changed = stream;
  for (int c = 0; c < 3; ++c) changed[c * ctx] = 777;
  for (size_t i = 3 * ctx; i < changed.size(); ++i) changed[i] = 999;
  EXPECT_EQ(eg::perplexity_llama(*model, changed, ctx, bos).mean_nll, r.mean_nll);
  // A scored target changes the result.
  changed[ctx - 1] = 1234;
  EXPECT_NE(eg::perplexity_llama(*model, changed, ctx, bos).mean_nll, r.mean_nll);
  // Manual: chunk c runs [BOS, s[c·ctx+1 .. (c+1)·ctx)), scores positions 8..14 → targets 9..15.
  double sum = 0;
  int64_t n = 0;
  for (int c = 0; c < 3; ++c) {
    std::vector<int32_t> ids(stream.begin() + c * ctx, stream.begin() + (c + 1) * ctx);
    const std::vector<int32_t> targets = ids;
    ids[0] = bos;
    sum += span_nll(*model, ids, ctx / 2, targets, &n);
  }
  EXPECT_NEAR(r.mean_nll, sum / n, 1e-9);
  EXPECT_EQ(eg::perplexity_llama(*model, std::vector<int32_t>(stream.begin(), stream.begin() + 2 * ctx), ctx, bos).spans, 2);
  EXPECT_THROW(eg::perplexity_llama(*model, std::vector<int32_t>(stream.begin(), stream.begin() + 2 * ctx - 1), ctx, bos),
               eg::Error);
  EXPECT_THROW(eg::perplexity_llama(*model, stream, 3, bos), eg::Error);
}

TEST(PerplexityCli, ClearErrors) {
  const std::string dir = egtest::make_temp_dir();
  egtest::write_file(dir + "/short.txt", "Hello there.\n");
  egtest::write_file(dir + "/t.txt", short_text(2400));
  expect_error({"perplexity", "-m", tiny(), "-f", dir + "/missing.txt"}, dir + "/missing.txt");
  expect_error({"perplexity", "-m", tiny(), "-f", dir + "/t.txt", "--ctx", "0"}, "too small");
  expect_error({"perplexity", "-m", tiny(), "-f", dir + "/t.txt", "--ctx", "3", "--method", "llama"}, "too small");
  expect_error({"perplexity", "-m", tiny(), "-f", dir + "/t.txt", "--ctx", "100000000"}, "too large");
  expect_error({"perplexity", "-m", tiny(), "-f", dir + "/short.txt", "--ctx", "64"}, "fewer than one span");
  expect_error({"perplexity", "-m", tiny(), "-f", dir + "/short.txt", "--ctx", "64", "--method", "llama"},
               "needs at least 2 x ctx = 128");
  const egtest::CmdResult bad = egtest::run_cmd({egtest::cli_path(), "perplexity", "-m", tiny(), "-f", dir + "/t.txt",
                                                 "--method", "nope"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

TEST(BenchCli, JsonHasTheFields) {
  const json j = cli_json({"bench", "-m", tiny(), "-p", "16", "-n", "4", "-r", "2", "-t", "1", "--depth", "8"});
  for (const char* k : {"model", "size_bytes", "params", "threads", "load_ms", "ttft_ms", "peak_rss_bytes", "tests"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["params"], 7805952);  // ../shared/models/README.md
  EXPECT_EQ(j["threads"], 1);
  ASSERT_EQ(j["tests"].size(), 2u);
  EXPECT_EQ(j["tests"][0]["name"], "pp16 @ d8");
  EXPECT_EQ(j["tests"][1]["name"], "tg4 @ d8");
  for (const auto& t : j["tests"]) {
    EXPECT_EQ(t["samples_tok_s"].size(), 2u);
    EXPECT_GT(t["tok_s"]["median"].get<double>(), 0);
    EXPECT_LE(t["tok_s"]["min"].get<double>(), t["tok_s"]["median"].get<double>());
    EXPECT_GE(t["tok_s"]["max"].get<double>(), t["tok_s"]["median"].get<double>());
  }
  EXPECT_GT(j["peak_rss_bytes"].get<double>(), 0);
  // From the process start to the end of the first (cold) prefill: at least the load and that
  // prefill (the warm-up, itself not faster than the slowest timed repetition by much).
  ASSERT_TRUE(j["ttft_from_process_start_ms"].is_number()) << j.dump();
  EXPECT_GT(j["ttft_from_process_start_ms"].get<double>(), j["load_ms"].get<double>());
  const egtest::CmdResult table = egtest::run_cmd({egtest::cli_path(), "bench", "-m", tiny(), "-p", "8", "-n", "2", "-r", "1"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("| model"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("pp8"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("tg2"), std::string::npos) << table.out;
  expect_error({"bench", "-m", tiny(), "-p", "0", "-n", "0"}, "nothing to measure");
  // Garbage: a missing model and a file that is not a model give one clear line, no crash.
  expect_error({"bench", "-m", "/nonexistent/model"}, "does not exist");
  const std::string junk = egtest::make_temp_dir() + "/junk.gguf";
  std::ofstream(junk) << "this is not a gguf file";
  const egtest::CmdResult r = egtest::run_cmd({egtest::cli_path(), "bench", "-m", junk, "-p", "4", "-n", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("edgegemma: error:"), std::string::npos) << r.err;
}

}  // namespace
