// StopStringMatcher: every way of splitting a text into streamed pieces gives the text cut before
// the earliest stop string (computed here by a plain search), never shows any part of a stop
// string, stops as soon as the stop string is complete, and keeps UTF-8 characters whole.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/stop_strings.h"

namespace {

// Reference: the first stop string to complete (smallest end, then the longest) by a plain scan
// over end positions. Returns (end of the visible text, end of that occurrence or npos).
std::pair<size_t, size_t> reference_cut(const std::string& text, const std::vector<std::string>& stops) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t best_len = 0;
    for (const auto& s : stops)
      if (s.size() <= end && s.size() > best_len && text.compare(end - s.size(), s.size(), s) == 0)
        best_len = s.size();
    if (best_len > 0) return {end - best_len, end};
  }
  return {text.size(), std::string::npos};
}

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Feeds `text` split at the cut points of `mask` (bit i set: cut after byte i) and checks it.
void check_split(const std::string& text, const std::vector<std::string>& stops, uint64_t mask,
                 bool check_char_boundaries) {
  const auto [visible, stop_end] = reference_cut(text, stops);
  const std::string want = text.substr(0, visible);
  eg::StopStringMatcher m(stops);
  std::string got;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool cut = (i + 1 == text.size()) || ((mask >> i) & 1);
    if (!cut) continue;
    const std::string out = m.push(std::string_view(text).substr(start, i + 1 - start));
    got += out;
    start = i + 1;
    // Never shows anything beyond the visible text.
    ASSERT_EQ(want.compare(0, got.size(), got), 0) << "shown '" << got << "' is not a prefix of '" << want << "'";
    // Stops exactly when the stop string is complete.
    ASSERT_EQ(m.stopped(), stop_end != std::string::npos && start >= stop_end) << text << " mask " << mask;
    if (check_char_boundaries && !out.empty() && got.size() < text.size()) {
      ASSERT_FALSE(is_continuation(text[got.size()])) << "emitted text ends inside a character";
    }
  }
  got += m.flush();
  EXPECT_EQ(got, want) << "text '" << text << "' mask " << mask;
}

void check_all_splits(const std::string& text, const std::vector<std::string>& stops) {
  ASSERT_LE(text.size(), 20u);
  const uint64_t n = text.empty() ? 1 : (uint64_t{1} << (text.size() - 1));
  for (uint64_t mask = 0; mask < n; ++mask) check_split(text, stops, mask, false);
}

TEST(StopStrings, ExhaustiveSplitsAscii) {
  const std::vector<std::string> stops = {"User:", "###", "ab"};
  for (const std::string text :
       {"Hello User: bye", "no stop here at all", "Use User:", "a#b##c###d", "aab", "xUser##ab",
        "Us", "UseUser", "###", "ends with Use", "ends with ##"})
    check_all_splits(text, stops);
}

TEST(StopStrings, OverlappingAndNestedStops) {
  check_all_splits("xxabcdyy", {"abcd", "bc"});   // "bc" completes first: cut at "xxa"
  check_all_splits("xxabcyy", {"bc", "abc"});     // both complete at 'c': the longer wins, "xx"
  check_all_splits("xxabcxyy", {"abcd", "bcx"});  // held "abc" (prefix of abcd) resolves to "bcx"
  check_all_splits("aaaaab", {"aaab"});           // self-overlapping prefix
  check_all_splits("abababac", {"ababac"});
  check_all_splits("\n\n\nUser", {"\n\nUser", "\n\n\n\n"});
}

TEST(StopStrings, Utf8StopsAndText) {
  // Splits at every byte (also inside characters): the output is still the right prefix.
  check_all_splits("héllo wörld", {"wö"});
  check_all_splits("本語す。終", {"。終"});
  check_all_splits("ab😀cd😀", {"d😀"});
  check_all_splits("éé€", {"é€"});
  // Pieces made of whole characters (as StreamingDetokenizer gives): every emitted piece ends
  // on a character boundary.
  const std::string text = "añ日😀b日😀x";
  const std::vector<std::string> stops = {"日😀x", "ñ日😁"};
  std::vector<size_t> starts;
  for (size_t i = 0; i < text.size(); ++i)
    if (!is_continuation(text[i])) starts.push_back(i);
  // cut after byte i only where byte i+1 starts a character
  std::vector<int> boundary_bits;
  for (size_t s : starts)
    if (s > 0) boundary_bits.push_back(static_cast<int>(s) - 1);
  for (uint64_t sub = 0; sub < (uint64_t{1} << boundary_bits.size()); ++sub) {
    uint64_t mask = 0;
    for (size_t b = 0; b < boundary_bits.size(); ++b)
      if ((sub >> b) & 1) mask |= uint64_t{1} << boundary_bits[b];
    check_split(text, stops, mask, true);
  }
}

TEST(StopStrings, NoStopsPassesThroughAndFlushResets) {
  eg::StopStringMatcher none;
  EXPECT_EQ(none.push("abc"), "abc");
  EXPECT_EQ(none.flush(), "");
  eg::StopStringMatcher m({"END"});
  EXPECT_EQ(m.push("xxEN"), "xx");
  EXPECT_EQ(m.held_bytes(), 2u);
  EXPECT_EQ(m.flush(), "EN");
  EXPECT_EQ(m.push("E"), "");
  EXPECT_EQ(m.push("ND and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), 0);
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());  // flush starts a new stream
  EXPECT_EQ(m.push("ok"), "ok");
}

TEST(StopStrings, MatchedReportsTheEarliestStop) {
  eg::StopStringMatcher m({"zz", "b", "ab"});
  EXPECT_EQ(m.push("xabzz"), "x");
  EXPECT_EQ(m.matched(), 2);  // "ab" and "b" complete together; "ab" starts first
}

TEST(StopStrings, EmptyStopStringIsAnError) { EXPECT_THROW(eg::StopStringMatcher({"a", ""}), eg::Error); }

}  // namespace
