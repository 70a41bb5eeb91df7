// Model::repack_for_cpu (model.h): packed copies of the matmul weights for the CPU kernels.
//
// Each eligible weight (backend/cpu/packed.h: rows % 16 == 0; Q4_0, Q8_0, F16, BF16 or F32, and
// Q6_K unless EDGEGEMMA_REPACK_Q6K=0; a machine with the kernel: packed_by_default) is packed
// into its own 64-byte aligned buffer, group by group on the thread pool, and then the pages of the mapped file it came from are released (MappedFile::release_pages), one
// tensor at a time, so the peak resident memory is the model plus one tensor, not twice the
// model. Weight::data keeps pointing into the mapping: other backends read the original bytes,
// which the kernel page-faults back in if needed; the tied embedding's row lookups read the packed
// copy (Model::embed, cpu::unpack_row), so they do not.
#include <algorithm>
#include <cstdlib>
#include <memory>

#include "backend/cpu/packed.h"
#include "backend/cpu/thread_pool.h"
#include "format/mapped_file.h"
#include "model/model.h"

namespace eg {
namespace {

size_t pack_one(ops::Weight& w, std::vector<std::shared_ptr<uint8_t>>& buffers) {
  if (w.data == nullptr || w.packed != nullptr) return 0;
  if (!cpu::packable(w.dtype, w.rows, w.cols) || !cpu::packed_by_default(w.dtype)) return 0;
  const size_t bytes = cpu::packed_bytes(w.dtype, w.rows, w.cols);
  const size_t alloc = (bytes + 63) / 64 * 64;
  auto* mem = static_cast<uint8_t*>(std::aligned_alloc(64, alloc));
  if (mem == nullptr) return 0;  // no memory for the copy: keep using the mapped rows
  std::shared_ptr<uint8_t> buf(mem, [](uint8_t* p) { std::free(p); });
  const int64_t groups = w.rows / cpu::kPackRows;
  constexpr int64_t kGroupsPerTask = 64;
  const int64_t tasks = (groups + kGroupsPerTask - 1) / kGroupsPerTask;
  const size_t group_bytes = dtype_row_bytes(w.dtype, w.cols) * cpu::kPackRows;
  const auto* src = static_cast<const uint8_t*>(w.data);
  cpu::parallel_for(tasks, [&](int64_t t, int) {
    const int64_t g0 = t * kGroupsPerTask, g1 = std::min(groups, g0 + kGroupsPerTask);
    cpu::pack_groups(w.dtype, w.data, w.rows, w.cols, g0, g1, mem);
    // This task's source rows are never read again by matmul: drop them now, so that packing a
    // large tensor (the LM head) does not hold both copies (the pages at the task boundaries
    // stay until the whole tensor is done).
    MappedFile::release_pages(src + static_cast<size_t>(g0) * group_bytes, static_cast<size_t>(g1 - g0) * group_bytes);
  });
  MappedFile::release_pages(w.data, group_bytes * static_cast<size_t>(groups));
  w.packed = mem;
  buffers.push_back(std::move(buf));
  return bytes;
}

}  // namespace

size_t Model::repack_for_cpu() {
  size_t total = 0;
  auto& bufs = w_.packed_buffers;
  for (LayerWeights& l : w_.layers) {
    for (ops::Weight* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.ple_gate, &l.ple_proj})
      total += pack_one(*w, bufs);
  }
  total += pack_one(w_.ple_model_proj, bufs);
  total += pack_one(w_.embed, bufs);  // the tied LM head; lookups keep reading Weight::data
  return total;
}

}  // namespace eg
