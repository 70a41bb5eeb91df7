// The edgegemma command-line frontend: one registration function per subcommand.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace eg::cli {

/// A subcommand registers its options on `app` and returns the action run when it was chosen.
/// The action returns the process exit code; it may throw eg::Error (printed by main).
using Action = std::function<int()>;

Action register_run(CLI::App& app);
Action register_chat(CLI::App& app);
Action register_tokenize(CLI::App& app);
Action register_synth(CLI::App& app);
Action register_inspect(CLI::App& app);
Action register_quantize(CLI::App& app);
Action register_perplexity(CLI::App& app);
Action register_bench(CLI::App& app);
Action register_serve(CLI::App& app);
Action register_embed(CLI::App& app);
Action register_kb(CLI::App& app);
Action register_models(CLI::App& app);

/// Validator for counts: an integer in [0, 2^31).
inline const CLI::Range kCount(0, 2147483647, "a count >= 0");

/// Sets the process-wide CPU thread count (backend/cpu/thread_pool.h) when n > 0.
void apply_threads(int n);

/// The model directory used when -m is not given: models/tiny-gemma3 of the source tree, or next
/// to the binary (../models/tiny-gemma3).
std::string default_model_dir();

/// What -m names, as a path for LoadedModel::load (one place for run, chat, serve, bench,
/// perplexity, tokenize, inspect): "" -> default_model_dir(); a path that exists -> itself (a path
/// wins over a store name); else a model store reference (NAME, NAME:VERSION, sha256:PREFIX) in
/// the store of $EDGEGEMMA_STORE (or the default) -> the version's folder or .gguf file. Throws
/// eg::Error for a reference the store does not have. (cli/model_ref.cpp)
std::string model_path(const std::string& arg);

}  // namespace eg::cli
