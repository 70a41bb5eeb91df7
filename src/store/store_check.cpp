// Store::verify (re-hash everything, report corruption and leftovers) and Store::gc.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/file_util.h"
#include "store/durable.h"
#include "store/lock.h"
#include "store/sha256.h"
#include "store/store.h"

namespace eg::store {

namespace fs = std::filesystem;

namespace {

// Removes a file or folder tree; returns the bytes this frees: files whose last link goes (a tree's
// files are hard links to blobs, so removing a tree frees nothing while the blobs stay).
uint64_t remove_counting(const fs::path& p) {
  std::error_code ec;
  uint64_t freed = 0;
  const auto st = fs::symlink_status(p, ec);
  if (ec) return 0;
  if (fs::is_directory(st)) {
    std::vector<fs::path> kids;
    for (const auto& e : fs::directory_iterator(p, ec)) kids.push_back(e.path());
    for (const auto& k : kids) freed += remove_counting(k);
    ::rmdir(p.c_str());
    return freed;
  }
  struct stat sb{};
  if (::lstat(p.c_str(), &sb) == 0 && ::unlink(p.c_str()) == 0 && sb.st_nlink == 1 && S_ISREG(sb.st_mode))
    freed = static_cast<uint64_t>(sb.st_size);
  return freed;
}

}  // namespace

VerifyReport Store::verify(const std::string& only) const {
  VerifyReport r;
  if (!fs::exists(root_ + "/manifests")) return r;  // no store yet: nothing to be inconsistent
  StoreLock lock(root_ + "/lock", false);
  std::vector<Manifest> ms;
  std::vector<std::string> errors;
  for (auto& m : all_manifests(&errors))
    if (only.empty() || m.name == only) ms.push_back(std::move(m));
  for (auto& e : errors)
    if (only.empty() || e.find("/manifests/" + only + "/") != std::string::npos) r.errors.push_back("bad manifest: " + e);
  // Pointers name existing versions.
  std::set<std::pair<std::string, std::string>> have;
  for (const auto& m : ms) have.insert({m.name, m.version});
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(root_ + "/refs", ec)) {
    const std::string fn = f.path().filename().string();
    if (f.path().extension() != ".json") {
      if (only.empty()) r.garbage.push_back("temp file " + f.path().string());
      continue;
    }
    const std::string name = f.path().stem().string();
    if (!only.empty() && name != only) continue;
    try {
      const Pointers p = parse_pointers(read_file(f.path().string()), f.path().string());
      for (const auto& [role, v] : {std::pair<const char*, std::string>{"current", p.current}, {"previous", p.previous}})
        if (!v.empty() && !have.count({name, v}))
          r.errors.push_back(name + ": the " + std::string(role) + " pointer names " + v + ", which has no manifest");
    } catch (const Error& e) {
      r.errors.push_back(std::string("bad pointer file: ") + e.what());
    }
  }
  // Blobs: each one used is re-hashed once; trees link them.
  std::map<std::string, std::string> blob_state;  // sha256 -> "" (ok) or the problem
  for (const auto& m : ms) {
    ++r.versions;
    for (const auto& f : m.files) {
      auto it = blob_state.find(f.sha256);
      if (it == blob_state.end()) {
        std::string problem;
        try {
          uint64_t size = 0;
          const std::string h = sha256_file(blob_path(f.sha256), &size);
          r.bytes_hashed += size;
          if (size != f.size) problem = "has " + std::to_string(size) + " bytes, expected " + std::to_string(f.size);
          else if (h != f.sha256) problem = "is corrupt (its sha256 is " + h + ")";
        } catch (const Error&) {
          problem = "is missing";
        }
        it = blob_state.emplace(f.sha256, problem).first;
      }
      if (!it->second.empty())
        r.errors.push_back(m.name + ":" + m.version + ": " + f.path + " (blob " + f.sha256.substr(0, 12) + ") " + it->second);
      const std::string t = tree_path(m.name, m.version) + "/" + f.path;
      struct stat sb{}, st{};
      if (::stat(t.c_str(), &st) != 0)
        r.errors.push_back(m.name + ":" + m.version + ": " + t + " is missing");
      else if (::stat(blob_path(f.sha256).c_str(), &sb) == 0 && (sb.st_ino != st.st_ino || sb.st_dev != st.st_dev))
        r.errors.push_back(m.name + ":" + m.version + ": " + t + " is not a link to its blob");
    }
  }
  if (only.empty()) {
    for (const auto& e : fs::directory_iterator(root_ + "/blobs/sha256", ec)) {
      const std::string h = e.path().filename().string();
      if (!blob_state.count(h)) r.garbage.push_back("unreferenced blob " + h);
    }
    for (const auto& e : fs::directory_iterator(root_ + "/tmp", ec)) r.garbage.push_back("temp " + e.path().string());
    for (const auto& n : fs::directory_iterator(root_ + "/trees", ec))
      for (const auto& v : fs::directory_iterator(n.path(), ec))
        if (!have.count({n.path().filename().string(), v.path().filename().string()}))
          r.garbage.push_back("tree without a manifest " + v.path().string());
    for (const auto& n : fs::directory_iterator(root_ + "/manifests", ec))
      for (const auto& f : fs::directory_iterator(n.path(), ec))
        if (f.path().extension() != ".json") r.garbage.push_back("temp file " + f.path().string());
  }
  r.consistent = r.errors.empty();
  return r;
}

GcReport Store::gc() {
  make_layout();
  StoreLock lock(root_ + "/lock", true);
  GcReport r;
  std::vector<std::string> errors;
  const std::vector<Manifest> ms = all_manifests(&errors);
  if (!errors.empty()) throw Error("gc: refusing to collect while a manifest is unreadable: " + errors[0]);
  std::set<std::string> used;
  std::set<std::pair<std::string, std::string>> have;
  for (const auto& m : ms) {
    have.insert({m.name, m.version});
    for (const auto& f : m.files) used.insert(f.sha256);
  }
  std::error_code ec;
  auto remove = [&](const fs::path& p, int& count, const char* step) {
    r.bytes_freed += remove_counting(p);
    ++count;
    crash_point(step);
  };
  std::vector<fs::path> temp, trees, blobs;
  for (const auto& e : fs::directory_iterator(root_ + "/tmp", ec)) temp.push_back(e.path());
  for (const auto& e : fs::directory_iterator(root_ + "/refs", ec))
    if (e.path().extension() != ".json") temp.push_back(e.path());
  for (const auto& n : fs::directory_iterator(root_ + "/manifests", ec))
    for (const auto& f : fs::directory_iterator(n.path(), ec))
      if (f.path().extension() != ".json") temp.push_back(f.path());
  for (const auto& n : fs::directory_iterator(root_ + "/trees", ec))
    for (const auto& v : fs::directory_iterator(n.path(), ec))
      if (!have.count({n.path().filename().string(), v.path().filename().string()})) trees.push_back(v.path());
  for (const auto& e : fs::directory_iterator(root_ + "/blobs/sha256", ec))
    if (!used.count(e.path().filename().string())) blobs.push_back(e.path());
  for (const auto& p : temp) remove(p, r.temp, "gc.temp");
  for (const auto& p : trees) remove(p, r.trees, "gc.tree");  // before the blobs they link
  for (const auto& p : blobs) remove(p, r.blobs, "gc.blob");
  fsync_dir(root_ + "/blobs/sha256");
  return r;
}

}  // namespace eg::store
