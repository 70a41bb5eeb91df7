// Perplexity of a model over a text, by two methods.
//
// Default (../shared/models/README.md, what reference.json's valid_ppl_full_float32 records): every
// document (documents are separated by "\n\n\n") is encoded as <bos> text <eos> and the documents are
// concatenated; the stream is cut into consecutive spans of ctx+1 tokens (span k starts at token
// ctx·k; neighbours share one token); each span runs as one sequence (no extra BOS) and its ctx
// next-token predictions are scored. Only full spans are scored (the trailing remainder is dropped,
// as in the reference); a stream shorter than one span is scored as a single span.
//
// Llama (llama.cpp's llama-perplexity, as ../shared/models/gguf/README.md documents it): the file
// is one string with one trailing newline dropped, tokenized once with one BOS at the start and no
// special-token parsing; floor(n/ctx) non-overlapping ctx-token chunks (the tail is dropped; like
// llama-perplexity we require n >= 2·ctx); in each chunk the first token is replaced by BOS and the
// chunk runs from an empty cache; only the second half is scored: logits at positions
// ctx/2 .. ctx-2 predict tokens ctx/2+1 .. ctx-1 (255 predictions per 512-token chunk).
//
// Both: ppl = exp(mean NLL), the NLL from a log-softmax computed in double over the f32 logits.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace eg {

struct PerplexityResult {
  double ppl = 0;
  double mean_nll = 0;
  int64_t tokens_predicted = 0;
  int spans = 0;  // spans (default) or chunks (llama) evaluated
  std::vector<double> running_ppl;  // ppl over the predictions so far, after each span/chunk
};

class ProgressSink;  // core/progress.h

/// Progress of both methods: task "perplexity", scored tokens, updated after each span/chunk with
/// the detail "span k/n, ppl X" ("chunk k/n, ..." for llama's; X the running perplexity).
/// nullptr: silent.

/// Default method over an already built token stream (see document_stream).
/// Throws eg::Error if ctx < 1 or the stream has fewer than 2 tokens.
/// If `top1` is given, the argmax id of every scored position is appended to it (prediction order),
/// for top-1 agreement between two models.
PerplexityResult perplexity(const Model& model, const std::vector<int32_t>& stream, int ctx,
                            ProgressSink* progress = nullptr, std::vector<int32_t>* top1 = nullptr);

/// llama-perplexity's method over an already tokenized stream (see llama_stream). Each chunk's
/// first token is replaced by `bos_id`. Throws eg::Error if ctx < 4 or the stream has fewer than
/// 2·ctx tokens (llama-perplexity's own requirement; the message gives both counts).
PerplexityResult perplexity_llama(const Model& model, const std::vector<int32_t>& stream, int ctx,
                                  int32_t bos_id, ProgressSink* progress = nullptr,
                                  std::vector<int32_t>* top1 = nullptr);

/// The default method's stream: documents of `text` separated by "\n\n\n", each encoded as
/// <bos> text <eos> (special-token text parsed, as HF encode does), empty documents skipped.
/// Throws eg::Error if the tokenizer has no BOS or EOS token.
std::vector<int32_t> document_stream(const Tokenizer& tok, const std::string& text);

/// The llama method's stream: one trailing "\n" dropped, then encode(text, add_bos = true,
/// parse_special = false). (llama.cpp's SentencePiece path for Gemma 2/3 splits runs of 3+ spaces
/// differently from HF; we follow HF: valid.txt is 75,162 tokens here, 75,329 in llama.cpp.)
std::vector<int32_t> llama_stream(const Tokenizer& tok, std::string text);

/// Negative log-likelihood of `target` under softmax(row[0..V)), in double.
double token_nll(const float* row, int V, int32_t target);

}  // namespace eg
