// Durable file operations of the model store (docs/model-store.md, "Crash safety"), and the
// test-only crash hook.
//
// Every change of a pointer or manifest is: write a temp file in the same directory, fsync it,
// rename it over the target, fsync the directory. rename(2) is atomic on POSIX file systems, so a
// reader (or a process restarted after a crash) sees the old or the new file, never a mix.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace eg::store {

/// Test-only crash hook. When the environment variable EDGEGEMMA_STORE_CRASH_AT equals `step`
/// (or "step#k": the k-th time this process reaches `step`, counting from 1), the process kills
/// itself with SIGKILL right there, as `kill -9` would. When EDGEGEMMA_STORE_TRACE is set, every
/// step reached is written to stderr as "store-step: step#k" (how tests enumerate the steps).
/// Never set these in production: they exist so tests can interrupt the real CLI at every step.
void crash_point(std::string_view step);

/// fsync of a directory (so a rename / unlink in it is durable). Throws eg::Error.
void fsync_dir(const std::string& dir);

/// Writes `data` to `path` atomically and durably: `path`.tmp-PID-N in the same directory, fsync,
/// rename, fsync of the directory. Crash points: "<step>.tmp" (temp written and synced, before the
/// rename) and "<step>.renamed" (after the rename, before the directory sync). Throws eg::Error.
void atomic_write(const std::string& path, std::string_view data, std::string_view step);

/// Copies `src` to the new file `dst` (which must not exist) while hashing it, fsyncs `dst`.
/// Returns the SHA-256 hex digest; *size receives the byte count. Throws eg::Error (dst removed).
std::string copy_hashing(const std::string& src, const std::string& dst, uint64_t* size);

/// rename(2) that throws eg::Error naming both paths.
void rename_path(const std::string& from, const std::string& to);

}  // namespace eg::store
