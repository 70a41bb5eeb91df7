// The store's lock file (STORE/lock): flock(2), exclusive for every change, shared for verify.
// The kernel drops a flock when its process dies (also by kill -9), so a crashed CLI never
// leaves the store locked.
#pragma once
#include <string>

namespace eg::store {

class StoreLock {
 public:
  /// Blocks until the lock on `path` is held (created when missing). Throws eg::Error.
  StoreLock(const std::string& path, bool exclusive);
  ~StoreLock();
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace eg::store
