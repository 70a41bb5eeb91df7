// The model store's SHA-256 is core/sha256.h (nettle); these names keep store code short.
#pragma once
#include "core/sha256.h"

namespace eg::store {
using eg::is_sha256_hex;
using eg::Sha256;
using eg::sha256_file;
using eg::sha256_hex;
}  // namespace eg::store
