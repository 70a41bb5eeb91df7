// Internals shared by the mmproj writers and readers (model/mmproj.h): the file type, writing a
// tensor's f32 values as the chosen type, and the Gemma 4 halves of write_mmproj / open_mmproj.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "model/mmproj.h"

namespace eg::mmproj_detail {

using KV = std::vector<std::pair<std::string, GGUFValue>>;
using Fail = std::function<Error(const std::string&)>;

/// "f32" / "f16" / "q8_0" → the matrix type and general.file_type. Throws eg::Error otherwise.
DType parse_type(const std::string& type, uint32_t& ftype);
/// The general.* keys of an mmproj (architecture clip, type mmproj, name from `dir`, file type).
KV general_keys(const std::string& dir, uint32_t ftype);
/// Appends `f` (rows of n0 values) to `w` as type `d` (F32, F16 or a block type).
void append_rows(GGUFWriter& w, const std::vector<float>& f, int64_t n0, DType d);
/// Opens the file just written; on failure removes it and throws eg::Error.
void verify_written(const std::string& out);

/// write_mmproj for a Gemma 4 checkpoint (vc.kind Gemma4): mmproj_write_gemma4.cpp.
MmprojWriteReport write_gemma4(const std::string& dir, const std::string& out, const MmprojWriteOptions& opt,
                               const vision::VisionConfig& vc);
/// open_mmproj's Gemma 4 half (m.has_vision / has_audio / projector types already set):
/// mmproj_read_gemma4.cpp.
void read_gemma4(Mmproj& m, const Fail& fail);

}  // namespace eg::mmproj_detail
