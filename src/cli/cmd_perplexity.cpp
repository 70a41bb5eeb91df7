// `edgegemma perplexity`: perplexity of a model over a text file, by our default method
// (../shared/models/README.md: documents as <bos> text <eos>, spans of ctx+1 tokens) or
// llama-perplexity's (--method llama: ../shared/models/gguf/README.md). See engine/perplexity.h.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/progress.h"
#include "engine/loaded_model.h"
#include "engine/perplexity.h"

namespace eg::cli {

namespace {

struct PplArgs {
  std::string model_dir;
  std::string file;
  int ctx = 512;
  std::string method = "default";
  bool json = false, quiet = false;
  int threads = 0;
  std::string save_top1;  // write the argmax id of every scored position (one per line)
  std::string top1_ref;   // compare with such a file: top-1 agreement
};

std::vector<int32_t> read_ids(const std::string& path) {
  const std::string text = read_file(path);
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == '\n' || text[i] == ' ')) ++i;
    if (i == text.size()) break;
    size_t used = 0;
    try {
      ids.push_back(std::stoi(text.substr(i, 12), &used));
    } catch (const std::exception&) {
      throw Error(path + ": not a list of token ids (one per line) at byte " + std::to_string(i));
    }
    i += used;
  }
  return ids;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot write " + path);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) throw Error("cannot write " + path);
}

int run_perplexity(const PplArgs& a) {
  apply_threads(a.threads);
  if (!std::filesystem::is_regular_file(a.file)) throw Error("cannot read " + a.file + ": no such file");
  const std::string text = read_file(a.file);
  const bool llama = a.method == "llama";
  const std::string dir = model_path(a.model_dir);
  auto lm = LoadedModel::load(dir);
  const int max_ctx = lm->model().config().max_position_embeddings;
  const int min_ctx = llama ? 4 : 1;
  if (a.ctx < min_ctx) throw Error("--ctx " + std::to_string(a.ctx) + " is too small (at least " + std::to_string(min_ctx) + ")");
  // The default method runs ctx+1 tokens per span, llama's ctx per chunk.
  const int run_len = llama ? a.ctx : a.ctx + 1;
  if (max_ctx > 0 && run_len > max_ctx)
    throw Error("--ctx " + std::to_string(a.ctx) + " is too large: the model's context is " + std::to_string(max_ctx) +
                " tokens");

  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer& tok = lm->tokenizer();
  const std::vector<int32_t> stream = llama ? llama_stream(tok, text) : document_stream(tok, text);
  if (!llama && stream.size() < static_cast<size_t>(a.ctx) + 1)
    throw Error(a.file + " has " + std::to_string(stream.size()) + " tokens, fewer than one span of ctx+1 = " +
                std::to_string(a.ctx + 1) + " (use a smaller --ctx)");
  if (llama && stream.size() < 2 * static_cast<size_t>(a.ctx))
    throw Error(a.file + " has " + std::to_string(stream.size()) + " tokens; --method llama needs at least 2 x ctx = " +
                std::to_string(2 * static_cast<int64_t>(a.ctx)) + " (as llama-perplexity; use a smaller --ctx)");
  std::vector<int32_t> ref;
  if (!a.top1_ref.empty()) {
    ref = read_ids(a.top1_ref);
    const size_t predictions = llama ? (stream.size() / a.ctx) * static_cast<size_t>(a.ctx - 1 - a.ctx / 2)
                                     : ((stream.size() - 1) / a.ctx) * static_cast<size_t>(a.ctx);
    if (ref.size() != predictions)
      throw Error(a.top1_ref + " has " + std::to_string(ref.size()) + " predictions, this run " +
                  std::to_string(predictions) + " (same file, --ctx and --method needed; a GGUF tokenizer that splits "
                  "the text differently also differs)");
  }
  ProgressReporter progress(ProgressReporter::stderr_options(a.quiet));
  if (!a.quiet)
    progress.message("perplexity: " + a.file + ", " + std::to_string(stream.size()) + " tokens, ctx " +
                     std::to_string(a.ctx) + ", method " + a.method);
  std::vector<int32_t> top1;
  std::vector<int32_t>* want_top1 = a.save_top1.empty() && a.top1_ref.empty() ? nullptr : &top1;
  const PerplexityResult r = llama ? perplexity_llama(lm->model(), stream, a.ctx, tok.bos_id(), &progress, want_top1)
                                   : perplexity(lm->model(), stream, a.ctx, &progress, want_top1);
  if (!a.save_top1.empty()) {
    std::string out;
    for (int32_t id : top1) out += std::to_string(id) + "\n";
    write_text_file(a.save_top1, out);
  }
  double agreement = -1;
  if (!a.top1_ref.empty()) {
    if (ref.size() != top1.size())
      throw Error(a.top1_ref + " has " + std::to_string(ref.size()) + " predictions, this run " +
                  std::to_string(top1.size()) + " (same file, --ctx and --method needed; a GGUF tokenizer that splits "
                  "the text differently also differs)");
    int64_t same = 0;
    for (size_t i = 0; i < ref.size(); ++i) same += ref[i] == top1[i];
    agreement = ref.empty() ? 0.0 : static_cast<double>(same) / static_cast<double>(ref.size());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.json) {
    const nlohmann::json j = {{"ppl", r.ppl},
                              {"mean_nll", r.mean_nll},
                              {"tokens", stream.size()},
                              {"ctx", a.ctx},
                              {"method", a.method},
                              {"chunks", r.spans},
                              {"predictions", r.tokens_predicted},
                              {"seconds", seconds},
                              {"model", dir},
                              {"file", a.file},
                              {"top1_agreement", agreement >= 0 ? nlohmann::json(agreement) : nlohmann::json(nullptr)}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("ppl %.4f (mean NLL %.6f) over %lld predictions in %d %s, %zu tokens, ctx %d, method %s, %.1f s\n",
                r.ppl, r.mean_nll, static_cast<long long>(r.tokens_predicted), r.spans, llama ? "chunks" : "spans",
                stream.size(), a.ctx, a.method.c_str(), seconds);
    if (agreement >= 0) std::printf("top-1 agreement with %s: %.4f\n", a.top1_ref.c_str(), agreement);
  }
  return 0;
}

}  // namespace

Action register_perplexity(CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  app.add_option("-m,--model", a->model_dir, "model directory or .gguf file (default: bundled tiny-gemma3)");
  app.add_option("-f,--file", a->file, "text file to score")->required();
  app.add_option("-c,--ctx", a->ctx, "tokens per span/chunk (default 512)");
  app.add_option("--method", a->method,
                 "default: documents as <bos> text <eos>, spans of ctx+1 tokens, every token scored "
                 "(transformers reference); llama: llama-perplexity's chunks, second half scored")
      ->check(CLI::IsMember({"default", "llama"}));
  app.add_flag("--json", a->json, "print one JSON object (ppl, tokens, ctx, method, chunks, predictions, seconds)");
  app.add_flag("-q,--quiet", a->quiet, "no progress on stderr (errors still)");
  app.add_option("-t,--threads", a->threads, "CPU threads, 1..1024 (default: all cores)")
      ->check(CLI::Range(0, 1024, "a thread count"));
  app.add_option("--save-top1", a->save_top1, "write the argmax id of every scored position to FILE (one per line)");
  app.add_option("--top1-ref", a->top1_ref,
                 "report the top-1 agreement with a --save-top1 file of another model (same text, ctx, method)");
  return [a] { return run_perplexity(*a); };
}

}  // namespace eg::cli
