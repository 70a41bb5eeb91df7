#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace eg::tok {

void BpeModel::finish_tables() {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);  // Rust's format!("<{:#04X}>")
    byte_ids[b] = vocab.find(name);
  }
  for (int c = 0; c < 128; ++c) {
    const char ch = static_cast<char>(c);
    ascii_ids[c] = vocab.find(std::string_view(&ch, 1));
  }
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // byte length; 0 once merged into its left neighbour
};

struct QueueItem {
  uint32_t rank;
  uint32_t pos;
  int32_t new_id;
};

// std heap functions keep the "largest" on top; the top must be the lowest (rank, pos).
struct QueueLess {
  bool operator()(const QueueItem& a, const QueueItem& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.pos > b.pos;
  }
};

void add_symbol(std::vector<Symbol>& syms, int32_t id, uint32_t len) {
  const auto n = static_cast<int32_t>(syms.size());
  if (n > 0) syms.back().next = n;
  syms.push_back(Symbol{id, n - 1, -1, len});
}

}  // namespace

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    const int32_t id = vocab.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }

  // 1. Characters -> initial symbols (HF BPE::merge_word).
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  int32_t unk_pending_id = -1;
  uint32_t unk_pending_len = 0;
  size_t i = 0;
  while (i < word.size()) {
    const auto lead = static_cast<unsigned char>(word[i]);
    size_t n = 1;
    int32_t id;
    if (lead < 0x80) {
      id = ascii_ids[lead];
    } else {
      if (utf8::check_char(word.substr(i), &n) != utf8::CharStatus::kValid) n = 1;
      id = vocab.find(word.substr(i, n));
    }
    const std::string_view ch = word.substr(i, n);
    i += n;
    if (id >= 0) {
      if (unk_pending_id >= 0) {
        add_symbol(syms, unk_pending_id, unk_pending_len);
        unk_pending_id = -1;
      }
      add_symbol(syms, id, static_cast<uint32_t>(n));
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // As HF: a pending unk is not flushed before the byte pieces.
        for (char c : ch) add_symbol(syms, byte_ids[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (!unk_missing.empty())  // HF fails the same way (UnkTokenOutOfVocabulary)
      throw Error("tokenizer: unk_token '" + unk_missing + "' is not in the vocabulary");
    if (unk_id >= 0) {
      if (unk_pending_id >= 0 && fuse_unk) {
        unk_pending_len += static_cast<uint32_t>(n);
      } else {
        if (unk_pending_id >= 0) add_symbol(syms, unk_pending_id, unk_pending_len);
        unk_pending_id = unk_id;
        unk_pending_len = static_cast<uint32_t>(n);
      }
    }
    // No unk token: the character is dropped, as HF does.
  }
  if (unk_pending_id >= 0) add_symbol(syms, unk_pending_id, unk_pending_len);

  // 2. Merges (HF Word::merge_all without dropout).
  std::vector<QueueItem> queue;
  queue.reserve(syms.size());
  for (size_t p = 0; p + 1 < syms.size(); ++p) {
    if (const MergeInfo* m = merges.find(syms[p].id, syms[p + 1].id))
      queue.push_back(QueueItem{m->rank, static_cast<uint32_t>(p), m->new_id});
  }
  std::make_heap(queue.begin(), queue.end(), QueueLess{});
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), QueueLess{});
    const QueueItem top = queue.back();
    queue.pop_back();
    Symbol& cur = syms[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const int32_t next_pos = cur.next;
    const Symbol right = syms[next_pos];
    const MergeInfo* m = merges.find(cur.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // expired entry

    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    syms[next_pos].len = 0;
    if (right.next > -1 && static_cast<size_t>(right.next) < syms.size())
      syms[right.next].prev = static_cast<int32_t>(top.pos);

    if (cur.prev >= 0) {
      if (const MergeInfo* pm = merges.find(syms[cur.prev].id, cur.id)) {
        queue.push_back(QueueItem{pm->rank, static_cast<uint32_t>(cur.prev), pm->new_id});
        std::push_heap(queue.begin(), queue.end(), QueueLess{});
      }
    }
    if (cur.next >= 0 && static_cast<size_t>(cur.next) < syms.size()) {
      if (const MergeInfo* nm = merges.find(cur.id, syms[cur.next].id)) {
        queue.push_back(QueueItem{nm->rank, top.pos, nm->new_id});
        std::push_heap(queue.begin(), queue.end(), QueueLess{});
      }
    }
  }
  for (const Symbol& s : syms)
    if (s.len != 0) out.push_back(s.id);
}

}  // namespace eg::tok
