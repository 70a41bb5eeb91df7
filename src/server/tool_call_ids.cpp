#include "server/tool_call_ids.h"

#include <random>

#include "tokenizer/tokenizer.h"

namespace eg::server {

int32_t tool_call_start_id(const Tokenizer& tok) { return tok.token_id("<|tool_call>"); }

std::string new_tool_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string s = "call_";
  for (int i = 0; i < 24; ++i) s += a[rng() % 62];
  return s;
}

}  // namespace eg::server
