// `edgegemma models`: the model store (src/store/store.h, docs/model-store.md): add, list, show,
// use, rollback, rm, verify, gc; --json on all of them.
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "core/error.h"
#include "store/store.h"

namespace eg::cli {

namespace {

using nlohmann::json;

struct ModelsArgs {
  std::string store;
  bool json = false;
  // add
  std::string path, name, version, provenance, expect;
  bool link = false, no_switch = false;
  // show / use / rm / rollback / verify
  std::string ref;
  bool force = false;
};

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

store::Store open_store(const ModelsArgs& a, bool create) {
  return store::Store(a.store.empty() ? store::Store::default_root() : a.store, create);
}

json manifest_json(const store::Manifest& m) {
  json files = json::array();
  for (const auto& f : m.files) files.push_back({{"path", f.path}, {"sha256", f.sha256}, {"size", f.size}});
  return json{{"name", m.name}, {"version", m.version}, {"id", "sha256:" + m.id()}, {"format", m.format},
              {"architecture", m.architecture}, {"quantization", m.quantization},
              {"tokenizer_digest", m.tokenizer_digest.empty() ? json(nullptr) : json("sha256:" + m.tokenizer_digest)},
              {"created", m.created}, {"provenance", m.provenance}, {"bytes", m.total_bytes()}, {"files", files}};
}

json pointers_json(const std::string& name, const store::Pointers& p) {
  return json{{"name", name}, {"current", p.current.empty() ? json(nullptr) : json(p.current)},
              {"previous", p.previous.empty() ? json(nullptr) : json(p.previous)}};
}

void print(const json& j) {
  std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
}

// (name:version -> manifest) for the shared-bytes count: a blob used by two or more versions.
std::map<std::string, int> blob_uses(const store::Store& s) {
  std::map<std::string, int> uses;
  for (const auto& n : s.names())
    for (const auto& v : s.versions(n)) {
      std::set<std::string> seen;
      for (const auto& f : v.manifest.files)
        if (seen.insert(f.sha256).second) ++uses[f.sha256];
    }
  return uses;
}

int cmd_add(const ModelsArgs& a) {
  store::Store s = open_store(a, true);
  store::AddOptions o;
  o.name = a.name;
  o.version = a.version;
  o.provenance = a.provenance;
  o.hard_link = a.link;
  o.make_current = !a.no_switch;
  o.expect_id = a.expect;
  const store::Manifest m = s.add(a.path, o);
  const store::Pointers p = s.pointers(m.name);
  if (a.json) {
    json j = manifest_json(m);
    j["current"] = p.current == m.version;
    print(j);
  } else {
    std::printf("added %s:%s (%s, %s, sha256:%s)%s\n", m.name.c_str(), m.version.c_str(), m.format.c_str(),
                human_bytes(m.total_bytes()).c_str(), m.id().substr(0, 12).c_str(),
                p.current == m.version ? ", now current" : "");
  }
  return 0;
}

int cmd_list(const ModelsArgs& a) {
  const store::Store s = open_store(a, false);
  const auto uses = blob_uses(s);
  std::map<std::string, uint64_t> size_of;
  for (const auto& n : s.names())
    for (const auto& v : s.versions(n))
      for (const auto& f : v.manifest.files) size_of[f.sha256] = f.size;
  uint64_t shared = 0, total = 0;
  for (const auto& [h, n] : uses) {
    total += size_of[h];
    if (n > 1) shared += size_of[h];
  }
  json models = json::array();
  for (const auto& n : s.names()) {
    json versions = json::array();
    for (const auto& v : s.versions(n)) {
      uint64_t sh = 0;
      for (const auto& f : v.manifest.files)
        if (uses.at(f.sha256) > 1) sh += f.size;
      versions.push_back({{"version", v.manifest.version}, {"id", "sha256:" + v.manifest.id()},
                          {"current", v.current}, {"previous", v.previous}, {"bytes", v.manifest.total_bytes()},
                          {"shared_bytes", sh}, {"format", v.manifest.format},
                          {"quantization", v.manifest.quantization}, {"created", v.manifest.created}});
    }
    const store::Pointers p = s.pointers(n);
    json m = pointers_json(n, p);
    m["versions"] = versions;
    models.push_back(m);
  }
  if (a.json) {
    print(json{{"store", s.root()}, {"models", models}, {"bytes", total}, {"shared_bytes", shared}});
    return 0;
  }
  if (models.empty()) {
    std::printf("no models in %s (edgegemma models add PATH --name NAME)\n", s.root().c_str());
    return 0;
  }
  std::printf("%-24s %-12s %-9s %-11s %-11s %-14s %s\n", "NAME", "VERSION", "POINTER", "SIZE", "SHARED", "ID", "CREATED");
  for (const auto& m : models)
    for (const auto& v : m["versions"])
      std::printf("%-24s %-12s %-9s %-11s %-11s %-14s %s\n", m["name"].get<std::string>().c_str(),
                  v["version"].get<std::string>().c_str(),
                  v["current"].get<bool>() ? "current" : v["previous"].get<bool>() ? "previous" : "",
                  human_bytes(v["bytes"].get<uint64_t>()).c_str(), human_bytes(v["shared_bytes"].get<uint64_t>()).c_str(),
                  v["id"].get<std::string>().substr(7, 12).c_str(), v["created"].get<std::string>().c_str());
  std::printf("store %s: %s on disk, %s in blobs shared by several versions\n", s.root().c_str(),
              human_bytes(total).c_str(), human_bytes(shared).c_str());
  return 0;
}

int cmd_show(const ModelsArgs& a) {
  const store::Store s = open_store(a, false);
  const store::Manifest m = s.resolve(a.ref);
  const store::Pointers p = s.pointers(m.name);
  json j = manifest_json(m);
  j["current"] = p.current == m.version;
  j["previous"] = p.previous == m.version;
  j["path"] = s.model_path(m);
  if (a.json) {
    print(j);
    return 0;
  }
  std::printf("%s:%s%s\n", m.name.c_str(), m.version.c_str(),
              j["current"].get<bool>() ? " (current)" : j["previous"].get<bool>() ? " (previous)" : "");
  std::printf("  id            sha256:%s\n  format        %s\n  architecture  %s\n  quantization  %s\n",
              m.id().c_str(), m.format.c_str(), m.architecture.c_str(), m.quantization.c_str());
  std::printf("  tokenizer     %s\n  created       %s\n  provenance    %s\n  path          %s\n  files\n",
              m.tokenizer_digest.empty() ? "-" : ("sha256:" + m.tokenizer_digest).c_str(), m.created.c_str(),
              m.provenance.c_str(), s.model_path(m).c_str());
  for (const auto& f : m.files)
    std::printf("    %-28s %12llu  sha256:%s\n", f.path.c_str(), static_cast<unsigned long long>(f.size), f.sha256.c_str());
  return 0;
}

// "NAME:VERSION" -> (NAME, VERSION); the version is required.
std::pair<std::string, std::string> split_versioned(const std::string& ref, const char* cmd) {
  const size_t c = ref.find(':');
  if (c == std::string::npos || ref.rfind("sha256:", 0) == 0)
    throw Error(std::string("models ") + cmd + " takes NAME:VERSION, not '" + ref + "'");
  return {ref.substr(0, c), ref.substr(c + 1)};
}

int cmd_use(const ModelsArgs& a) {
  store::Store s = open_store(a, true);
  const auto [name, version] = split_versioned(a.ref, "use");
  const store::Pointers p = s.use(name, version);
  if (a.json) print(pointers_json(name, p));
  else std::printf("%s: current %s%s\n", name.c_str(), p.current.c_str(), p.previous.empty() ? "" : (", previous " + p.previous).c_str());
  return 0;
}

int cmd_rollback(const ModelsArgs& a) {
  store::Store s = open_store(a, true);
  const store::Pointers p = s.rollback(a.ref);
  if (a.json) print(pointers_json(a.ref, p));
  else std::printf("%s: rolled back to %s (previous %s)\n", a.ref.c_str(), p.current.c_str(), p.previous.c_str());
  return 0;
}

int cmd_rm(const ModelsArgs& a) {
  store::Store s = open_store(a, true);
  const auto [name, version] = split_versioned(a.ref, "rm");
  s.remove(name, version, a.force);
  const store::Pointers p = s.pointers(name);
  if (a.json) {
    json j = pointers_json(name, p);
    j["removed"] = version;
    print(j);
  } else {
    std::printf("removed %s:%s\n", name.c_str(), version.c_str());
  }
  return 0;
}

int cmd_verify(const ModelsArgs& a) {
  const store::Store s = open_store(a, false);
  const store::VerifyReport r = s.verify(a.ref);
  if (a.json) {
    print(json{{"store", s.root()}, {"consistent", r.consistent}, {"errors", r.errors}, {"garbage", r.garbage},
               {"versions", r.versions}, {"bytes_hashed", r.bytes_hashed}});
  } else {
    for (const auto& e : r.errors) std::printf("error: %s\n", e.c_str());
    for (const auto& g : r.garbage) std::printf("garbage: %s\n", g.c_str());
    std::printf("%s: %d versions, %s hashed, %zu errors, %zu leftovers%s\n", r.consistent ? "consistent" : "CORRUPT",
                r.versions, human_bytes(r.bytes_hashed).c_str(), r.errors.size(), r.garbage.size(),
                r.garbage.empty() ? "" : " (edgegemma models gc removes them)");
  }
  return r.consistent ? 0 : 1;
}

int cmd_gc(const ModelsArgs& a) {
  store::Store s = open_store(a, true);
  const store::GcReport r = s.gc();
  if (a.json)
    print(json{{"bytes_freed", r.bytes_freed}, {"blobs", r.blobs}, {"trees", r.trees}, {"temp", r.temp}});
  else
    std::printf("freed %s: %d blobs, %d trees, %d temp files\n", human_bytes(r.bytes_freed).c_str(), r.blobs, r.trees, r.temp);
  return 0;
}

}  // namespace

Action register_models(CLI::App& app) {
  auto a = std::make_shared<ModelsArgs>();
  app.require_subcommand(1);
  app.fallthrough();
  app.add_option("--store", a->store, "store folder (default: $EDGEGEMMA_STORE or ~/.local/share/edgegemma/models)");
  app.add_flag("--json", a->json, "machine-readable output");
  CLI::App* add = app.add_subcommand("add", "add a Hugging Face folder or a .gguf file as a new version (verified, then current)");
  add->add_option("path", a->path, "model folder or .gguf file")->required();
  add->add_option("--name", a->name, "model name")->required();
  add->add_option("--version", a->version, "version tag (default v1, v2, ...)");
  add->add_option("--note", a->provenance, "provenance note (default: where it was added from)");
  add->add_option("--expect", a->expect, "refuse unless the version's id is this sha256:HEX (for a .gguf: the file's SHA-256)");
  add->add_flag("--link", a->link, "hard-link the files instead of copying them (same file system)");
  add->add_flag("--no-switch", a->no_switch, "keep the current version (the new one is only stored)");
  CLI::App* list = app.add_subcommand("list", "names, versions, pointers, sizes and shared bytes");
  CLI::App* show = app.add_subcommand("show", "one version's manifest");
  show->add_option("ref", a->ref, "NAME, NAME:VERSION or sha256:PREFIX")->required();
  CLI::App* use = app.add_subcommand("use", "verify a version, then make it current");
  use->add_option("ref", a->ref, "NAME:VERSION")->required();
  CLI::App* rollback = app.add_subcommand("rollback", "make the previous version current again (verified)");
  rollback->add_option("name", a->ref, "model name")->required();
  CLI::App* rm = app.add_subcommand("rm", "remove a version and the blobs no other version uses");
  rm->add_option("ref", a->ref, "NAME:VERSION")->required();
  rm->add_flag("-f,--force", a->force, "also remove the current version");
  CLI::App* verify = app.add_subcommand("verify", "re-hash every blob and check manifests, pointers and trees");
  verify->add_option("name", a->ref, "only this model");
  CLI::App* gc = app.add_subcommand("gc", "remove unreferenced blobs and leftovers of interrupted commands");
  return [=] {
    if (add->parsed()) return cmd_add(*a);
    if (list->parsed()) return cmd_list(*a);
    if (show->parsed()) return cmd_show(*a);
    if (use->parsed()) return cmd_use(*a);
    if (rollback->parsed()) return cmd_rollback(*a);
    if (rm->parsed()) return cmd_rm(*a);
    if (verify->parsed()) return cmd_verify(*a);
    if (gc->parsed()) return cmd_gc(*a);
    return 2;
  };
}

}  // namespace eg::cli
