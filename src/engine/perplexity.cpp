#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace eg {

PerplexityResult perplexity(const Model& model, const std::vector<int32_t>& stream, int ctx) {
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
  for (size_t k = 0; k < n_spans; ++k) {
    const size_t start = k * ctx;
    const int len = static_cast<int>(std::min(span, stream.size() - start));
    KVCache kv(model.config(), len);
    model.forward(stream.data() + start, len, kv, scratch, LogitsMode::All, logits);
    for (int t = 0; t + 1 < len; ++t) {
      const float* row = logits.data() + static_cast<size_t>(t) * V;
      const float mx = *std::max_element(row, row + V);
      double se = 0.0;
      for (int i = 0; i < V; ++i) se += std::exp(static_cast<double>(row[i]) - mx);
      const double logp = static_cast<double>(row[stream[start + t + 1]]) - mx - std::log(se);
      nll_sum -= logp;
      ++r.tokens_predicted;
    }
    ++r.spans;
  }
  r.mean_nll = nll_sum / static_cast<double>(r.tokens_predicted);
  r.ppl = std::exp(r.mean_nll);
  return r;
}

}  // namespace eg
