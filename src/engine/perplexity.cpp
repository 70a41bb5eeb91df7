#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/progress.h"

namespace eg {

double token_nll(const float* row, int V, int32_t target) {
  const float mx = *std::max_element(row, row + V);
  double se = 0.0;
  for (int i = 0; i < V; ++i) se += std::exp(static_cast<double>(row[i]) - mx);
  return -(static_cast<double>(row[target]) - mx - std::log(se));
}

namespace {
int32_t argmax(const float* row, int V) { return static_cast<int32_t>(std::max_element(row, row + V) - row); }

std::string step_detail(const char* what, int done, int total, double ppl) {
  char b[96];
  std::snprintf(b, sizeof b, "%s %d/%d, ppl %.4f", what, done, total, ppl);
  return b;
}
}  // namespace

PerplexityResult perplexity(const Model& model, const std::vector<int32_t>& stream, int ctx,
                            ProgressSink* sink, std::vector<int32_t>* top1) {
  if (ctx < 1) throw Error("perplexity: ctx must be >= 1");
  if (stream.size() < 2) throw Error("perplexity: need at least 2 tokens");
  const int V = model.config().vocab_size;
  PerplexityResult r;
  double nll_sum = 0.0;
  ForwardScratch scratch;
  std::vector<float> logits;
  // Full spans only (the trailing remainder is not scored), unless the stream is shorter than one
  // span: then the whole stream is one span.
  const size_t span = static_cast<size_t>(ctx) + 1;
  const size_t n_spans = stream.size() >= span ? (stream.size() - 1) / ctx : 1;
  const int64_t to_score = stream.size() >= span ? static_cast<int64_t>(n_spans) * ctx : static_cast<int64_t>(stream.size()) - 1;
  ProgressTask progress(sink, "perplexity", to_score, ProgressUnit::Tokens);
  for (size_t k = 0; k < n_spans; ++k) {
    const size_t start = k * ctx;
    const int len = static_cast<int>(std::min(span, stream.size() - start));
    KVCache kv(model.config(), len);
    model.forward(stream.data() + start, len, kv, scratch, LogitsMode::All, logits);
    for (int t = 0; t + 1 < len; ++t) {
      const float* row = logits.data() + static_cast<size_t>(t) * V;
      nll_sum += token_nll(row, V, stream[start + t + 1]);
      if (top1) top1->push_back(argmax(row, V));
      ++r.tokens_predicted;
    }
    ++r.spans;
    r.running_ppl.push_back(std::exp(nll_sum / static_cast<double>(r.tokens_predicted)));
    progress.update(r.tokens_predicted, step_detail("span", r.spans, static_cast<int>(n_spans), r.running_ppl.back()));
  }
  progress.finish();
  r.mean_nll = nll_sum / static_cast<double>(r.tokens_predicted);
  r.ppl = std::exp(r.mean_nll);
  return r;
}

PerplexityResult perplexity_llama(const Model& model, const std::vector<int32_t>& stream, int ctx,
                                  int32_t bos_id, ProgressSink* sink, std::vector<int32_t>* top1) {
  if (ctx < 4) throw Error("perplexity: --method llama needs ctx >= 4, got " + std::to_string(ctx));
  if (stream.size() < 2 * static_cast<size_t>(ctx))
    throw Error("perplexity: the text has " + std::to_string(stream.size()) + " tokens; --method llama needs at least " +
                std::to_string(2 * static_cast<int64_t>(ctx)) + " (2 x ctx " + std::to_string(ctx) + ")");
  if (bos_id < 0) throw Error("perplexity: the tokenizer has no BOS token");
  const int V = model.config().vocab_size;
  const int n_chunks = static_cast<int>(stream.size() / ctx);
  const int first = ctx / 2;
  PerplexityResult r;
  double nll_sum = 0.0;
  ForwardScratch scratch;
  std::vector<float> logits;
  std::vector<int32_t> chunk(ctx);
  ProgressTask progress(sink, "perplexity", static_cast<int64_t>(n_chunks) * (ctx - 1 - first), ProgressUnit::Tokens);
  for (int c = 0; c < n_chunks; ++c) {
    const size_t start = static_cast<size_t>(c) * ctx;
    std::copy(stream.begin() + start, stream.begin() + start + ctx, chunk.begin());
    chunk[0] = bos_id;
    KVCache kv(model.config(), ctx);
    model.forward(chunk.data(), ctx, kv, scratch, LogitsMode::All, logits);
    for (int t = first; t + 1 < ctx; ++t) {
      const float* row = logits.data() + static_cast<size_t>(t) * V;
      nll_sum += token_nll(row, V, stream[start + t + 1]);
      if (top1) top1->push_back(argmax(row, V));
      ++r.tokens_predicted;
    }
    ++r.spans;
    r.running_ppl.push_back(std::exp(nll_sum / static_cast<double>(r.tokens_predicted)));
    progress.update(r.tokens_predicted, step_detail("chunk", r.spans, n_chunks, r.running_ppl.back()));
  }
  progress.finish();
  r.mean_nll = nll_sum / static_cast<double>(r.tokens_predicted);
  r.ppl = std::exp(r.mean_nll);
  return r;
}

std::vector<int32_t> document_stream(const Tokenizer& tok, const std::string& text) {
  if (tok.bos_id() < 0 || tok.eos_id() < 0) throw Error("perplexity: the tokenizer has no <bos>/<eos> token");
  std::vector<int32_t> stream;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find("\n\n\n", start);
    if (end == std::string::npos) end = text.size();
    if (end > start) {
      const std::vector<int32_t> ids = tok.encode(std::string_view(text).substr(start, end - start), true);
      stream.insert(stream.end(), ids.begin(), ids.end());
      stream.push_back(tok.eos_id());
    }
    start = end + 3;
  }
  return stream;
}

std::vector<int32_t> llama_stream(const Tokenizer& tok, std::string text) {
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return tok.encode(text, /*add_bos=*/true, /*parse_special=*/false);
}

}  // namespace eg
