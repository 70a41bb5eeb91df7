#include "kb/fusion.h"

#include <algorithm>
#include <climits>
#include <unordered_map>

namespace eg::kb {

std::vector<Fused> rrf_fuse(const std::vector<std::vector<int64_t>>& lists, size_t limit, int k) {
  struct Acc {
    double score = 0;
    int best = INT_MAX;
  };
  std::unordered_map<int64_t, Acc> acc;
  for (const auto& l : lists)
    for (size_t r = 0; r < l.size(); ++r) {
      Acc& a = acc[l[r]];
      a.score += 1.0 / (k + static_cast<double>(r + 1));
      a.best = std::min(a.best, static_cast<int>(r + 1));
    }
  std::vector<std::pair<int64_t, Acc>> v(acc.begin(), acc.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    if (a.second.score != b.second.score) return a.second.score > b.second.score;
    if (a.second.best != b.second.best) return a.second.best < b.second.best;
    return a.first < b.first;
  });
  std::vector<Fused> out;
  for (size_t i = 0; i < v.size() && i < limit; ++i) out.push_back(Fused{v[i].first, v[i].second.score});
  return out;
}

std::vector<std::string> query_words(std::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  auto flush = [&] {
    if (cur.size() > 1 || (cur.size() == 1 && static_cast<unsigned char>(cur[0]) >= 0x80)) {
      if (std::find(words.begin(), words.end(), cur) == words.end() && words.size() < 32) words.push_back(cur);
    }
    cur.clear();
  };
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c >= 0x80) {
      cur += ch;
    } else if (c >= 'A' && c <= 'Z') {
      cur += static_cast<char>(c - 'A' + 'a');
    } else {
      flush();
    }
  }
  flush();
  return words;
}

std::string fts_query(std::string_view text) {
  std::string q;
  for (const std::string& w : query_words(text)) {
    if (!q.empty()) q += " OR ";
    q += '"' + w + '"';  // words hold no '"': it splits words
  }
  return q;
}

}  // namespace eg::kb
