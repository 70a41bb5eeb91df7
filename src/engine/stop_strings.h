// Stop strings over streamed text: generation ends when any of them appears in the output, and
// no part of it is ever shown.
//
// Feed the decoded text pieces as they stream (e.g. StreamingDetokenizer::push results). push()
// returns only text that can no longer become part of a stop string: when the text so far ends
// with a proper prefix of some stop string, that tail is held back until later pieces decide it.
// When a stop string appears (possibly spanning many pieces) push() returns the text before it
// and stopped() becomes true; everything after is dropped. With several stop strings, the one
// that completes first in the text wins (on a tie, the one starting earliest), so the result
// does not depend on how the text was split into pieces. At the end of a
// stream that did not stop, flush() returns the held-back tail.
//
// Matching is on bytes. Stop strings are valid UTF-8 and start with a lead byte, so for valid
// UTF-8 input every emitted piece ends on a character boundary (a held-back tail starts where a
// stop string starts); input split in the middle of a character also works (bytes are held or
// emitted as the text allows, never reordered). Concatenating all push() results and flush()
// gives exactly the input text cut before the first stop string to complete.
// Cost: O(piece + longest stop string) per push per stop string.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace eg {

class StopStringMatcher {
 public:
  /// `stops` may be empty (then push() returns its input). Throws eg::Error for an empty stop
  /// string.
  explicit StopStringMatcher(std::vector<std::string> stops = {});

  /// Adds `piece` to the stream; returns the text now safe to show ("" once stopped).
  std::string push(std::string_view piece);
  /// True once a stop string appeared.
  bool stopped() const { return matched_ >= 0; }
  /// Index into stops() of the stop string that matched (the first to complete; on a tie the
  /// one starting earliest, then the first listed); -1 when none.
  int matched() const { return matched_; }
  /// End of stream: returns the held-back text ("" when stopped) and starts a new stream.
  std::string flush();
  /// Drops the held-back text and the stopped state (a new stream).
  void reset();
  /// Bytes currently held back.
  size_t held_bytes() const { return held_.size(); }
  const std::vector<std::string>& stops() const { return stops_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // text received but not yet emitted
  int matched_ = -1;
};

}  // namespace eg
