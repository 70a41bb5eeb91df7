#include "engine/stop_strings.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace eg {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const auto& s : stops_)
    if (s.empty()) throw Error("stop strings must not be empty");
}

std::string StopStringMatcher::push(std::string_view piece) {
  if (stopped()) return "";
  held_.append(piece);
  if (stops_.empty()) return std::exchange(held_, {});
  // The stop string that completes first (smallest end; on a tie the one starting earliest,
  // i.e. the longest): the one a token-by-token stream would have stopped at, whatever the
  // split. Everything before held_ was emitted only when no stop string could start there, so
  // an occurrence can only start inside held_.
  size_t best = std::string::npos, best_end = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t pos = held_.find(stops_[i]);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stops_[i].size();
    if (end < best_end || (end == best_end && pos < best)) {
      best = pos;
      best_end = end;
      matched_ = static_cast<int>(i);
    }
  }
  if (best != std::string::npos) {
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix of held_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string out = stopped() ? std::string() : std::move(held_);
  reset();
  return out;
}

void StopStringMatcher::reset() {
  held_.clear();
  matched_ = -1;
}

}  // namespace eg
