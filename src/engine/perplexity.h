// Perplexity over a token stream, as ../shared/models/README.md defines it: the stream is cut into
// consecutive spans of ctx+1 tokens (span k starts at token ctx·k; neighbours share one token);
// each span runs as one sequence (no extra BOS) and its ctx next-token predictions are scored.
// Only full spans are scored (the trailing remainder is dropped, as in the reference and llama.cpp);
// a stream shorter than one span is scored as a single span.
// ppl = exp(mean NLL), NLL from a log-softmax computed in double.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace eg {

struct PerplexityResult {
  double ppl = 0;
  double mean_nll = 0;
  int64_t tokens_predicted = 0;
  int spans = 0;
};

/// Throws eg::Error if ctx < 1 or the stream has fewer than 2 tokens.
PerplexityResult perplexity(const Model& model, const std::vector<int32_t>& stream, int ctx);

}  // namespace eg
