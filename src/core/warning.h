// Library warnings: conditions the user should know about that do not stop the work (the KV cache
// switching a layer to BF16 because F16 overflowed, non-finite activations reaching the cache).
//
// Each kind is reported at most once per process, so a server with many slots or an FFI host
// calling in a loop gets one line, not one per token. The default sink writes
// "edgegemma: warning: TEXT" and a newline to stderr; set_warning_sink() replaces it (tests, or a
// host that wants the text elsewhere). Thread-safe.
#pragma once
#include <string>

namespace eg {

enum class WarningKind : int {
  KVF16Overflow = 0,  // a finite K/V value beyond ±65504 reached an F16 cache layer
  KVNonFinite = 1,    // a NaN or infinite K/V value was written to the cache
  kCount
};

/// Called with the text (no prefix, no newline). nullptr restores the default (stderr).
using WarningSink = void (*)(const char* text);
/// Replaces the sink; returns the previous one (nullptr = the default).
WarningSink set_warning_sink(WarningSink sink);

/// True exactly once per process per kind (the caller then builds the text and calls warn()).
bool warning_first_time(WarningKind kind);
/// Hands `text` to the sink.
void warn(const std::string& text);

/// Makes every kind report again (tests only).
void reset_warnings_for_testing();

}  // namespace eg
