// The store's changes (add, use, rollback, remove) and lookups; verify and gc: store_check.cpp.
#include "store/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/file_util.h"
#include "store/durable.h"
#include "store/lock.h"
#include "store/model_check.h"
#include "store/sha256.h"

namespace eg::store {

namespace fs = std::filesystem;

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string unique_suffix() {
  static std::atomic<int> n{0};
  return std::to_string(::getpid()) + "-" + std::to_string(n++);
}

bool exists(const std::string& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

void check_name(const std::string& what, const std::string& s) {
  if (!is_valid_name(s))
    throw Error("invalid " + what + " '" + s + "' (1-128 characters of A-Z a-z 0-9 . _ -, not starting with . or -)");
}

}  // namespace

bool is_reference(const std::string& s) {
  if (s.rfind("sha256:", 0) == 0) {
    const std::string h = s.substr(7);
    return !h.empty() && h.size() <= 64 && std::all_of(h.begin(), h.end(), [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    });
  }
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return is_valid_name(s);
  return is_valid_name(s.substr(0, colon)) && is_valid_name(s.substr(colon + 1));
}

Store::Store(std::string root, bool create) : root_(std::move(root)) {
  if (root_.empty()) throw Error("the model store path is empty");
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  if (create) make_layout();
}

std::string Store::default_root() {
  if (const char* e = std::getenv("EDGEGEMMA_STORE"); e && *e) return e;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/edgegemma/models";
  const char* home = std::getenv("HOME");
  if (!home || !*home) throw Error("cannot find the model store: set EDGEGEMMA_STORE or HOME");
  return std::string(home) + "/.local/share/edgegemma/models";
}

void Store::make_layout() const {
  std::error_code ec;
  for (const char* d : {"", "/blobs/sha256", "/manifests", "/trees", "/refs", "/tmp"}) {
    fs::create_directories(root_ + d, ec);
    if (ec) throw Error("cannot create " + root_ + d + ": " + ec.message());
  }
}

std::string Store::blob_path(const std::string& h) const { return root_ + "/blobs/sha256/" + h; }
std::string Store::manifest_path(const std::string& n, const std::string& v) const {
  return root_ + "/manifests/" + n + "/" + v + ".json";
}
std::string Store::tree_path(const std::string& n, const std::string& v) const { return root_ + "/trees/" + n + "/" + v; }
std::string Store::refs_path(const std::string& n) const { return root_ + "/refs/" + n + ".json"; }

std::string Store::model_path(const Manifest& m) const {
  const std::string t = tree_path(m.name, m.version);
  return m.format == "gguf" ? t + "/" + m.files[0].path : t;
}

Pointers Store::pointers(const std::string& name) const {
  const std::string p = refs_path(name);
  if (!exists(p)) return {};
  return parse_pointers(read_file(p), p);
}

void Store::write_pointers(const std::string& name, const Pointers& p, const char* step) const {
  if (p.current.empty() && p.previous.empty()) {
    if (::unlink(refs_path(name).c_str()) != 0 && errno != ENOENT)
      throw Error("cannot remove " + refs_path(name) + ": " + std::strerror(errno));
    crash_point(std::string(step) + ".renamed");
    fsync_dir(root_ + "/refs");
    return;
  }
  atomic_write(refs_path(name), pointers_to_json(p), step);
}

Manifest Store::manifest(const std::string& name, const std::string& version) const {
  check_name("model name", name);
  check_name("version", version);
  const std::string p = manifest_path(name, version);
  if (!exists(p)) throw Error("no model version " + name + ":" + version + " in " + root_);
  Manifest m = parse_manifest(read_file(p), p);
  if (m.name != name || m.version != version) throw Error(p + ": names " + m.name + ":" + m.version);
  return m;
}

std::vector<std::string> Store::names() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(root_ + "/manifests", ec)) {
    const std::string n = d.path().filename().string();
    if (!is_valid_name(n)) continue;
    bool any = false;
    std::error_code ec2;
    for (const auto& f : fs::directory_iterator(d.path(), ec2))
      if (f.path().extension() == ".json") any = true;
    if (any) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<VersionInfo> Store::versions(const std::string& name) const {
  check_name("model name", name);
  const Pointers p = pointers(name);
  std::vector<VersionInfo> out;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(root_ + "/manifests/" + name, ec)) {
    if (f.path().extension() != ".json") continue;
    const std::string v = f.path().stem().string();
    if (!is_valid_name(v)) continue;
    VersionInfo vi;
    vi.manifest = manifest(name, v);
    vi.current = v == p.current;
    vi.previous = v == p.previous;
    out.push_back(std::move(vi));
  }
  std::sort(out.begin(), out.end(), [](const VersionInfo& a, const VersionInfo& b) {
    return std::tie(a.manifest.created, a.manifest.version) < std::tie(b.manifest.created, b.manifest.version);
  });
  return out;
}

std::vector<Manifest> Store::all_manifests(std::vector<std::string>* errors) const {
  std::vector<Manifest> out;
  for (const auto& n : names()) {
    std::error_code ec;
    for (const auto& f : fs::directory_iterator(root_ + "/manifests/" + n, ec)) {
      if (f.path().extension() != ".json") continue;
      try {
        out.push_back(manifest(n, f.path().stem().string()));
      } catch (const Error& e) {
        if (!errors) throw;
        errors->push_back(e.what());
      }
    }
  }
  return out;
}

Manifest Store::resolve(const std::string& ref) const {
  if (!is_reference(ref)) throw Error("'" + ref + "' is neither a path nor a model reference (NAME, NAME:VERSION, sha256:PREFIX)");
  if (ref.rfind("sha256:", 0) == 0) {
    const std::string prefix = ref.substr(7);
    if (prefix.size() < 6) throw Error("digest reference '" + ref + "' is too short (at least 6 hex digits)");
    std::vector<Manifest> hits;
    for (auto& m : all_manifests(nullptr))
      if (m.id().rfind(prefix, 0) == 0) hits.push_back(std::move(m));
    if (hits.empty()) throw Error("no model version with id " + ref + " in " + root_);
    if (hits.size() > 1) {
      std::string names;
      for (const auto& h : hits) names += " " + h.name + ":" + h.version;
      throw Error("digest reference " + ref + " is ambiguous:" + names);
    }
    return hits[0];
  }
  const size_t colon = ref.find(':');
  if (colon != std::string::npos) return manifest(ref.substr(0, colon), ref.substr(colon + 1));
  const Pointers p = pointers(ref);
  if (p.current.empty()) {
    if (names().empty() || !exists(root_ + "/manifests/" + ref)) throw Error("no model '" + ref + "' in the store " + root_);
    throw Error("model '" + ref + "' has no current version (edgegemma models use " + ref + ":VERSION)");
  }
  return manifest(ref, p.current);
}

void Store::check_version(const Manifest& m, bool smoke) const {
  const std::string tree = tree_path(m.name, m.version);
  for (const auto& f : m.files) {
    const std::string b = blob_path(f.sha256);
    uint64_t size = 0;
    const std::string h = sha256_file(b, &size);
    if (size != f.size) throw Error(m.name + ":" + m.version + ": " + f.path + " has " + std::to_string(size) + " bytes, the manifest says " + std::to_string(f.size));
    if (h != f.sha256) throw Error(m.name + ":" + m.version + ": " + f.path + " is corrupt (sha256 " + h + ", the manifest says " + f.sha256 + ")");
    struct stat sb{}, st{};
    if (::stat(b.c_str(), &sb) != 0 || ::stat((tree + "/" + f.path).c_str(), &st) != 0 || sb.st_ino != st.st_ino || sb.st_dev != st.st_dev)
      throw Error(m.name + ":" + m.version + ": " + tree + "/" + f.path + " is not a link to its blob");
  }
  const std::string path = model_path(m);
  const ModelFacts facts = read_model_facts(path);
  if (facts.format != m.format) throw Error(m.name + ":" + m.version + ": format is " + facts.format + ", the manifest says " + m.format);
  if (smoke) smoke_generate(path);
}

Manifest Store::add(const std::string& src_arg, const AddOptions& opt) {
  check_name("model name", opt.name);
  if (!opt.version.empty()) check_name("version", opt.version);
  std::error_code ec;
  const fs::path src = fs::absolute(src_arg, ec);
  if (ec || !fs::exists(src)) throw Error("cannot add " + src_arg + ": no such file or folder");
  // The files to add, by their name in the model.
  std::vector<std::pair<std::string, std::string>> files;  // (name, source path)
  std::string format;
  if (fs::is_directory(src)) {
    format = "hf";
    for (const auto& e : fs::directory_iterator(src)) {
      const std::string n = e.path().filename().string();
      if (n.empty() || n[0] == '.' || !e.is_regular_file()) continue;
      if (!is_valid_file_name(n)) throw Error("cannot add " + e.path().string() + ": unsupported file name");
      files.emplace_back(n, e.path().string());
    }
    if (!fs::exists(src / "config.json")) throw Error("cannot add " + src.string() + ": no config.json (not a Hugging Face model folder)");
  } else {
    format = "gguf";
    const std::string n = src.filename().string();
    if (src.extension() != ".gguf") throw Error("cannot add " + src.string() + ": a model file must end in .gguf");
    if (!is_valid_file_name(n)) throw Error("cannot add " + src.string() + ": unsupported file name");
    files.emplace_back(n, src.string());
  }
  std::sort(files.begin(), files.end());

  make_layout();
  StoreLock lock(root_ + "/lock", true);
  std::string version = opt.version;
  if (version.empty()) {
    size_t n = 0;
    for (const auto& d : fs::directory_iterator(root_ + "/manifests/" + opt.name, ec))
      if (d.path().extension() == ".json") ++n;
    for (size_t k = n + 1;; ++k)
      if (!exists(manifest_path(opt.name, "v" + std::to_string(k)))) {
        version = "v" + std::to_string(k);
        break;
      }
  }
  if (exists(manifest_path(opt.name, version)))
    throw Error("model version " + opt.name + ":" + version + " already exists (pick another --version)");

  Manifest m;
  m.name = opt.name;
  m.version = version;
  m.format = format;
  m.created = utc_now();
  m.provenance = opt.provenance.empty() ? "added from " + src.string() : opt.provenance;
  // 1. Blobs: each file hashed while it is copied (or linked) into tmp/, then renamed into blobs/.
  for (const auto& [name, path] : files) {
    const std::string tmp = root_ + "/tmp/blob-" + unique_suffix();
    FileEntry e;
    e.path = name;
    // link(2) does not follow a symlink (a Hugging Face cache snapshot is symlinks): link its target.
    bool linked = opt.hard_link && ::link(fs::canonical(path).c_str(), tmp.c_str()) == 0;
    if (linked) e.sha256 = sha256_file(tmp, &e.size);
    else e.sha256 = copy_hashing(path, tmp, &e.size);
    crash_point("add.copied");
    const std::string blob = blob_path(e.sha256);
    if (exists(blob)) {
      ::unlink(tmp.c_str());  // already stored (another version or model has these bytes)
    } else {
      rename_path(tmp, blob);
      fsync_dir(root_ + "/blobs/sha256");
    }
    crash_point("add.blob");
    m.files.push_back(std::move(e));
  }
  if (!opt.expect_id.empty()) {
    const std::string want = opt.expect_id.rfind("sha256:", 0) == 0 ? opt.expect_id.substr(7) : opt.expect_id;
    if (!is_sha256_hex(want)) throw Error("the expected id must be sha256: and 64 lowercase hex digits");
    if (m.id() != want)
      throw Error("cannot add " + src.string() + ": its id is sha256:" + m.id() + ", expected sha256:" + want +
                  " (a corrupt or different download)");
  }
  for (const auto& f : m.files)
    if (f.path == "tokenizer.json" || (m.format == "gguf")) m.tokenizer_digest = f.sha256;
  // 2. The tree: hard links under the model's file names, built in tmp/ and renamed into place.
  const std::string tree_tmp = root_ + "/tmp/tree-" + unique_suffix();
  fs::create_directories(tree_tmp);
  for (const auto& f : m.files)
    if (::link(blob_path(f.sha256).c_str(), (tree_tmp + "/" + f.path).c_str()) != 0)
      throw Error("cannot link " + blob_path(f.sha256) + ": " + std::strerror(errno));
  fsync_dir(tree_tmp);
  const std::string tree = tree_path(m.name, m.version);
  fs::create_directories(root_ + "/trees/" + m.name);
  fs::remove_all(tree, ec);  // a tree without a manifest: left by an interrupted add
  rename_path(tree_tmp, tree);
  fsync_dir(root_ + "/trees/" + m.name);
  crash_point("add.tree");
  // 3. Checks: headers, then the smoke generation. A failure leaves garbage only (gc).
  try {
    const ModelFacts facts = read_model_facts(model_path(m));
    m.architecture = facts.architecture;
    m.quantization = facts.quantization;
    if (opt.smoke) smoke_generate(model_path(m));
  } catch (const Error& e) {
    fs::remove_all(tree, ec);
    throw Error("cannot add " + src.string() + " as " + m.name + ":" + m.version + ": " + e.what());
  }
  crash_point("add.checked");
  // 4. The manifest (the commit point of the version), then the pointers.
  fs::create_directories(root_ + "/manifests/" + m.name);
  fsync_dir(root_ + "/manifests");
  atomic_write(manifest_path(m.name, m.version), manifest_to_json(m), "add.manifest");
  Pointers p = pointers(m.name);
  if (opt.make_current || p.current.empty()) {
    if (p.current != m.version) p.previous = p.current;
    p.current = m.version;
    write_pointers(m.name, p, "add.pointers");
  }
  return m;
}

Pointers Store::use(const std::string& name, const std::string& version) {
  make_layout();
  StoreLock lock(root_ + "/lock", true);
  const Manifest m = manifest(name, version);
  Pointers p = pointers(name);
  if (p.current == version) return p;
  check_version(m, true);
  crash_point("use.checked");
  p.previous = p.current;
  p.current = version;
  write_pointers(name, p, "use.pointers");
  return p;
}

Pointers Store::rollback(const std::string& name) {
  check_name("model name", name);
  make_layout();
  StoreLock lock(root_ + "/lock", true);
  Pointers p = pointers(name);
  if (p.current.empty() && p.previous.empty()) throw Error("no model '" + name + "' in the store " + root_);
  if (p.previous.empty()) throw Error("model '" + name + "' has no previous version to roll back to");
  check_version(manifest(name, p.previous), true);
  crash_point("rollback.checked");
  std::swap(p.current, p.previous);
  write_pointers(name, p, "rollback.pointers");
  return p;
}

void Store::remove(const std::string& name, const std::string& version, bool force) {
  make_layout();
  StoreLock lock(root_ + "/lock", true);
  const Manifest m = manifest(name, version);
  Pointers p = pointers(name);
  if (p.current == version && !force)
    throw Error(name + ":" + version + " is the current version (use another first, or --force)");
  // 1. Pointers first: no pointer may name a version without a manifest.
  if (p.current == version || p.previous == version) {
    if (p.current == version) p.current = p.previous;
    p.previous.clear();
    write_pointers(name, p, "rm.pointers");
  }
  // 2. The manifest (the version is gone), 3. its tree, 4. the blobs nobody else uses.
  if (::unlink(manifest_path(name, version).c_str()) != 0)
    throw Error("cannot remove " + manifest_path(name, version) + ": " + std::strerror(errno));
  fsync_dir(root_ + "/manifests/" + name);
  crash_point("rm.manifest");
  std::error_code ec;
  fs::remove_all(tree_path(name, version), ec);
  crash_point("rm.tree");
  std::set<std::string> used;
  for (const auto& other : all_manifests(nullptr))
    for (const auto& f : other.files) used.insert(f.sha256);
  for (const auto& f : m.files) {
    if (used.count(f.sha256)) continue;
    ::unlink(blob_path(f.sha256).c_str());
    crash_point("rm.blob");
  }
  fsync_dir(root_ + "/blobs/sha256");
}

}  // namespace eg::store
