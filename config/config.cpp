module;
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

module slicesched.config;
import slicesched.config.accelerators;
import slicesched.core.files;
import slicesched.core.graph;

namespace slicesched {

namespace {

namespace fs = std::filesystem;

// Nodes that came from a --set override, with the override's text: errors
// at them name the override instead of a line. Set by load_config while it
// reads (one config per thread at a time).
thread_local const std::vector<std::pair<const toml::node*, std::string>>* g_overridden = nullptr;

// Thrown inside the reader only; load_config turns it into a Status.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A table being read: remembers which keys were used, so leftovers can be
// reported as unknown.
class Table {
 public:
  Table(const toml::table& t, std::string path, const std::string& file) : t_(t), path_(std::move(path)), file_(file) {}

  [[noreturn]] void fail(const toml::node* at, const std::string& key, const std::string& what) const {
    if (at) throw ConfigError(where(at, key) + ": " + what);
    std::string hint;
    if (!at)  // a missing key: maybe it is there, misspelt
      for (const auto& [k, v] : t_)
        if (k.str() != key && edit_distance(k.str(), key) <= 2) {
          hint =
              " (found '" + std::string(k.str()) + "' on line " + std::to_string(v.source().begin.line) + ": a typo?)";
          break;
        }
    throw ConfigError(where(nullptr, key) + ": " + what + hint);
  }
  // "file:line: key", or "--set key=value: key" for a node an override put
  // there: how every error names the place it is about.
  std::string where(const toml::node* at, const std::string& key) const {
    // A missing key of a table an override wrote is about that table.
    if (const std::string* label = override_label(at ? at : &t_)) return *label + ": " + qualified(key);
    const auto& src = at ? at->source() : t_.source();
    return file_ + ":" + std::to_string(src.begin.line) + ": " + qualified(key);
  }
  std::string qualified(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // Whether an override put `at` there (where() then names the override).
  bool overridden(const toml::node* at) const { return override_label(at) != nullptr; }
  // The label of the override that put `at` there ("--set KEY=VALUE"), or null.
  static const std::string* override_label(const toml::node* at) {
    if (g_overridden)
      for (const auto& [node, label] : *g_overridden)
        if (node == at) return &label;
    return nullptr;
  }
  const toml::node* node(const std::string& key) {
    used_.insert(key);
    return t_.get(key);
  }
  // Asking counts the key as known: keys read only when present (or only
  // beside another key) are named in the unknown-key hint too.
  bool has(const std::string& key) const {
    asked_.insert(key);
    return t_.contains(key);
  }

  std::string str(const std::string& key, const std::string* fallback = nullptr) {
    const toml::node* n = node(key);
    if (!n) {
      if (fallback) return *fallback;
      fail(nullptr, key, "is required (a string)");
    }
    if (auto v = n->value<std::string>()) return *v;
    fail(n, key, "expected a string");
  }
  // A name shown in tables, file names and messages: a string, not empty,
  // with no control character (a newline split the printed table).
  std::string name(const std::string& key, const std::string* fallback = nullptr) {
    std::string v = str(key, fallback);
    if (v.empty()) fail(node(key), key, "expected a non-empty name");
    for (unsigned char c : v)
      if (c < 0x20 || c == 0x7f) fail(node(key), key, "expected a name without control characters (newline, tab, NUL)");
    return v;
  }
  double num(const std::string& key, double fallback, double lo, double hi, bool required = false) {
    const toml::node* n = node(key);
    if (!n) {
      if (required) fail(nullptr, key, "is required (a number)");
      return fallback;
    }
    const double v = finite(n, key);
    if (v < lo || v > hi) fail(n, key, "expected a number in [" + fmt(lo) + ", " + fmt(hi) + "], got " + fmt(v));
    return v;
  }
  // A number in (0, hi]: for keys where any positive value works, so the
  // error states the bound a user reads in the docs ("> 0") instead of a
  // made-up smallest value, and never "[0, ...]" for a 0 it refuses.
  double positive(const std::string& key, double fallback, double hi, bool required = false) {
    const toml::node* n = node(key);
    if (!n) {
      if (required) fail(nullptr, key, "is required (a number > 0)");
      return fallback;
    }
    const double v = finite(n, key);
    if (!(v > 0) || v > hi) fail(n, key, "expected a number > 0 and <= " + fmt(hi) + ", got " + fmt(v));
    return v;
  }
  // A number in (0, hi], or exactly `sentinel`, which `meaning` explains
  // ("-1 to run until done"): nothing between them.
  double positive_or(const std::string& key, double fallback, double hi, double sentinel, const std::string& meaning) {
    const toml::node* n = node(key);
    if (!n) return fallback;
    const double v = finite(n, key);
    if (v != sentinel && (!(v > 0) || v > hi))
      fail(n, key,
           "expected a number > 0 and <= " + fmt(hi) + ", or " + fmt(sentinel) + " " + meaning + ", got " + fmt(v));
    return v;
  }
  // ", got VALUE" for a value of the wrong type, so the line shows what was
  // written ("" for one it cannot show in a word).
  static std::string got(const toml::node* n) {
    if (auto s = n->value_exact<std::string>()) return ", got \"" + *s + "\"";
    if (auto d = n->value_exact<double>()) return ", got " + fmt(*d);
    if (auto i = n->value_exact<std::int64_t>()) return ", got " + std::to_string(*i);
    if (auto b = n->value_exact<bool>()) return std::string(", got ") + (*b ? "true" : "false");
    if (n->is_array()) return ", got an array";
    if (n->is_table()) return ", got a table";
    return "";
  }
  // The number at `n` (an integer counts), or a one-line error.
  double finite(const toml::node* n, const std::string& key) const {
    auto v = n->value<double>();
    if (!v) fail(n, key, "expected a number" + got(n));
    if (!std::isfinite(*v)) fail(n, key, "expected a finite number, got " + fmt(*v));
    return *v;
  }
  std::int64_t integer(const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi,
                       bool required = false) {
    const toml::node* n = node(key);
    if (!n) {
      if (required) fail(nullptr, key, "is required (an integer)");
      return fallback;
    }
    auto v = n->value_exact<std::int64_t>();
    if (!v) fail(n, key, "expected an integer" + got(n));
    if (*v < lo || *v > hi)
      fail(
          n, key,
          "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(*v));
    return *v;
  }
  bool boolean(const std::string& key, bool fallback) {
    const toml::node* n = node(key);
    if (!n) return fallback;
    if (auto v = n->value_exact<bool>()) return *v;
    fail(n, key, "expected true or false" + got(n));
  }
  const toml::array* array(const std::string& key, bool required) {
    const toml::node* n = node(key);
    if (!n) {
      if (required) fail(nullptr, key, "is required (an array)");
      return nullptr;
    }
    if (!n->is_array()) fail(n, key, "expected an array");
    return n->as_array();
  }
  const toml::table* table(const std::string& key, bool required) {
    const toml::node* n = node(key);
    if (!n) {
      if (required) fail(nullptr, key, "is required (a table)");
      return nullptr;
    }
    if (!n->is_table()) fail(n, key, "expected a table");
    return n->as_table();
  }
  // Every key must have been read: anything else is a typo or a key this
  // version does not know.
  void finish(const std::vector<std::string>& allowed_extra = {}) const {
    for (const auto& [k, v] : t_) {
      const std::string key(k.str());
      if (used_.count(key) || std::find(allowed_extra.begin(), allowed_extra.end(), key) != allowed_extra.end())
        continue;
      std::set<std::string> names = used_;
      names.insert(asked_.begin(), asked_.end());
      std::string known, near;
      for (const auto& u : names) {
        known += (known.empty() ? "" : ", ") + u;
        // Two edits in a short name would make any short name a guess.
        if (near.empty() && edit_distance(u, key) <= (key.size() >= 6 ? 2u : 1u)) near = u;
      }
      const std::string guess = near.empty() ? "" : "did you mean '" + near + "'? ";
      fail(&v, key, "unknown key" + (known.empty() ? std::string() : " (" + guess + "known here: " + known + ")"));
    }
  }
  const toml::table& raw() const { return t_; }
  const std::string& path() const { return path_; }

  // Shortest text that names the bound exactly (1e-09, not 0).
  static std::string fmt(double v) {
    char s[32];
    std::snprintf(s, sizeof s, "%.9g", v);
    return s;
  }

 private:
  const toml::table& t_;
  std::string path_;
  const std::string& file_;
  std::set<std::string> used_;
  mutable std::set<std::string> asked_;
};

// Why `a` is not a ZeroMQ endpoint an executor can listen on and peers can
// reach ("tcp://HOST:PORT" or "ipc://PATH"), or nothing.
std::optional<std::string> wire_address_error(const std::string& a) {
  if (a.rfind("ipc://", 0) == 0)
    return a.size() > 6 ? std::nullopt : std::optional<std::string>("expected a path after ipc://");
  if (a.rfind("tcp://", 0) != 0) return "expected \"tcp://HOST:PORT\" or \"ipc://PATH\", got \"" + a + "\"";
  const std::string rest = a.substr(6);
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return "expected \"tcp://HOST:PORT\", got \"" + a + "\"";
  const std::string port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535)
    return "expected a port in [1, 65535] in \"" + a + "\"";
  if (rest.substr(0, colon) == "*") return "expected a host others can reach, not * (\"" + a + "\")";
  return std::nullopt;
}

// Tables of an array of tables, with their element paths.
std::vector<Table> tables_of(Table& parent, const std::string& key, bool required, const std::string& file) {
  std::vector<Table> out;
  const toml::array* arr = parent.array(key, required);
  if (!arr) return out;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const toml::node& n = (*arr)[i];
    const std::string path = parent.qualified(key) + "[" + std::to_string(i) + "]";
    if (!n.is_table())
      throw ConfigError(file + ":" + std::to_string(n.source().begin.line) + ": " + path + ": expected a table");
    out.emplace_back(*n.as_table(), path, file);
  }
  return out;
}

nlohmann::json to_json(const toml::node& n) {
  if (auto t = n.as_table()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : *t) j[std::string(k.str())] = to_json(v);
    return j;
  }
  if (auto a = n.as_array()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& v : *a) j.push_back(to_json(v));
    return j;
  }
  if (auto v = n.value_exact<std::int64_t>()) return *v;
  if (auto v = n.value_exact<double>()) return *v;
  if (auto v = n.value_exact<bool>()) return *v;
  if (auto v = n.value<std::string>()) return *v;
  return nullptr;
}

PluginChoice plugin_choice(Table& t) {
  PluginChoice c;
  c.name = t.str("plugin");
  for (const auto& [k, v] : t.raw())
    if (k.str() != "plugin") c.args[std::string(k.str())] = to_json(v);
  return c;
}

std::vector<std::string> strings(Table& t, const std::string& key, bool required) {
  std::vector<std::string> out;
  const toml::array* arr = t.array(key, required);
  if (!arr) return out;
  for (const auto& n : *arr) {
    auto v = n.value<std::string>();
    if (!v) t.fail(&n, key, "expected an array of strings");
    out.push_back(*v);
  }
  return out;
}

// The files a config names (traces, profiles, plugin libraries). Each is
// resolved against the config's folder as it is read, and opened once the
// whole config has been checked: a missing file is the last thing reported,
// after every mistake in the text, and a config copied away from its data
// says which key names what it could not find, and where it looked.
class NamedFiles {
 public:
  explicit NamedFiles(fs::path dir) : dir_(std::move(dir)) {}

  // A path as the config gives it, resolved against its folder (not checked).
  std::string resolve(const std::string& given) const {
    const fs::path path(given);
    return (path.is_absolute() ? path : dir_ / path).lexically_normal().string();
  }
  // The string at `key` of `t`, resolved.
  std::string add(Table& t, const std::string& key) {
    const toml::node* n = t.node(key);
    return add(t, n, key, t.str(key));
  }
  // `given`, the string at node `n` (key `key` of `t`), resolved.
  std::string add(const Table& t, const toml::node* n, const std::string& key, const std::string& given) {
    const fs::path path(given);
    std::string resolved = (path.is_absolute() ? path : dir_ / path).lexically_normal().string();
    files_.push_back({t.where(n, key), resolved, !path.is_absolute()});
    return resolved;
  }

  // Throws ConfigError for the first file that cannot be opened for reading.
  void check() const {
    for (const File& f : files_) {
      std::error_code ec;
      const std::string shown = fs::absolute(f.resolved, ec).lexically_normal().string();
      std::string problem;
      if (fs::is_directory(f.resolved, ec)) {
        problem = "is a folder";
      } else if (fs::exists(f.resolved, ec) && !fs::is_regular_file(f.resolved, ec)) {
        // (a FIFO would block the run; a device like /dev/zero never ends)
        problem = "not a regular file: a FIFO, device or socket";
      } else if (std::FILE* opened = std::fopen(f.resolved.c_str(), "rb")) {
        std::fclose(opened);
        continue;
      } else {
        problem = std::generic_category().message(errno);
      }
      if (f.relative) problem += "; relative paths resolve against the config's folder";
      throw ConfigError(f.where + ": cannot open " + (shown.empty() ? f.resolved : shown) + " (" + problem + ")");
    }
  }

 private:
  struct File {
    std::string where, resolved;
    bool relative;
  };
  fs::path dir_;
  std::vector<File> files_;
};

// The most accelerators a cluster may have, in all its entries together.
// Memory grows linearly with the count (about 2 KB an accelerator), and a
// run at this size with static placement takes about a second; beyond it
// nothing has been measured.
constexpr std::int64_t kMaxAccelerators = 100000;

// Accelerator types named in the cluster but not found: an error once the
// ground truth needs their roofline (where: the type key's place).
struct UnresolvedType {
  std::string type, where, why;
};

// The index of link class `name` (find_link_class); an unknown one fails
// naming `key` of `t` and the classes there.
int link_class_of(Table& t, const std::string& key, const std::string& name, const ExperimentConfig& cfg) {
  const int i = find_link_class(cfg, name);
  if (i < 0) {
    std::string names;
    for (const auto& c : cfg.link_classes) names += (names.empty() ? "" : ", ") + c.name;
    t.fail(t.node(key), key,
           "no link class named '" + name + "' (link_classes: " + (names.empty() ? "none" : names) + ")");
  }
  return i;
}

void read_cluster(Table& root, ExperimentConfig& cfg, const std::string& file, NamedFiles& files,
                  std::vector<UnresolvedType>& unresolved) {
  const toml::table* ct = root.table("cluster", true);
  Table cluster(*ct, "cluster", file);
  const std::string type_dir =
      cluster.has("accelerator_types") ? files.resolve(cluster.str("accelerator_types")) : default_accelerator_dir();
  // Required where accelerators reach each other (checked below, once the
  // accelerators are read): a single accelerator moves nothing.
  for (Table& l : tables_of(cluster, "link_classes", false, file)) {
    LinkClassConfig c;
    c.name = l.name("name");
    c.bandwidth_bytes_per_s = l.num("bandwidth_gbps", 0, 1e-6, 1e6, true) * 1e9;
    c.latency_s = l.num("latency_us", 0, 0, 1e9) * 1e-6;
    for (const LinkClassConfig& o : cfg.link_classes)
      if (o.name == c.name) l.fail(l.node("name"), "name", "duplicate link class name '" + c.name + "'");
    l.finish();
    cfg.link_classes.push_back(c);
  }
  // [[hosts]] first: accelerators name them.
  for (Table& h : tables_of(root, "hosts", false, file)) {
    HostConfig hc;
    hc.name = h.name("name");
    if (hc.name.empty()) h.fail(h.node("name"), "name", "expected a non-empty host name");
    for (const HostConfig& o : cfg.hosts)
      if (o.name == hc.name) h.fail(h.node("name"), "name", "duplicate host name '" + hc.name + "'");
    hc.address = h.str("address");
    if (auto bad = wire_address_error(hc.address)) h.fail(h.node("address"), "address", *bad);
    for (const HostConfig& o : cfg.hosts)
      if (o.address == hc.address)
        h.fail(h.node("address"), "address", "host '" + o.name + "' already listens on " + hc.address);
    hc.where = h.where(nullptr, "name");
    h.finish();
    cfg.hosts.push_back(std::move(hc));
  }
  for (Table& a : tables_of(cluster, "accelerators", true, file)) {
    const std::string type = a.str("type");
    // The type's table (configs/accelerators): its HBM is the default.
    const AcceleratorType* known = find_type(cfg.accelerator_types, type);
    std::string why;
    if (!known) {
      if (auto t = find_accelerator_type(type, type_dir); t.ok()) {
        cfg.accelerator_types.push_back(std::move(t).value());
        known = &cfg.accelerator_types.back();
      } else {
        why = t.status().message();
        // A table that is there but wrong (a misspelt key, a bad value) is
        // an error even with hbm_gib: it was silently passed over, and the
        // run went on without its datasheet.
        if (t.status().code() != StatusCode::kNotFound) a.fail(a.node("type"), "type", why);
        if (!a.has("hbm_gib")) a.fail(a.node("type"), "type", why + " (and no hbm_gib to fall back on)");
        unresolved.push_back({type, a.where(a.node("type"), "type"), why});
      }
    }
    const double hbm_gib =
        a.positive("hbm_gib", known ? static_cast<double>(known->hbm_bytes) / 1073741824.0 : 0, 1e6, !known);
    const auto hbm = static_cast<std::int64_t>(hbm_gib * 1073741824.0);
    const std::string none;
    const std::string device = a.str("device", &none);
    // "cpu", "cuda", or either with ":N"; with count, ":*" numbers them.
    auto valid_device = [&](const std::string& d, bool counted) {
      const auto colon = d.find(':');
      const std::string kind = d.substr(0, colon);
      if (kind != "cpu" && kind != "cuda") return false;
      if (colon == std::string::npos) return true;
      const std::string idx = d.substr(colon + 1);
      if (counted && idx == "*") return true;
      return !idx.empty() && idx.size() < 6 && idx.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!device.empty() && !valid_device(device, a.has("count")))
      a.fail(a.node("device"), "device",
             "expected \"cpu\", \"cpu:N\", \"cuda:N\"" +
                 std::string(a.has("count") ? " or \"cpu:*\" / \"cuda:*\"" : "") + ", got \"" + device + "\"");
    // The models whose weights this group holds (checked once [[models]] is read).
    const std::vector<std::string> held = strings(a, "models", false);
    const std::string held_where = a.where(a.node("models"), "models");
    const std::string host = a.str("host", &none);
    if (a.has("host")) {
      std::string names;
      bool known = false;
      for (const HostConfig& h : cfg.hosts) {
        known |= h.name == host;
        names += (names.empty() ? "" : ", ") + h.name;
      }
      if (!known)
        a.fail(a.node("host"), "host",
               "no [[hosts]] entry named '" + host + "'" +
                   (names.empty() ? " (there is no [[hosts]])" : " (known: " + names + ")"));
    } else if (!cfg.hosts.empty()) {
      a.fail(nullptr, "host", "is required with [[hosts]] (the name of the host whose executor owns it)");
    }
    // A tensor-parallel group: `tp` GPUs of the type, hbm_gib each.
    const int tp = static_cast<int>(a.integer("tp", 1, 1, 64));
    const std::string tp_where = a.where(a.node("tp"), "tp");
    const std::string tp_link = a.str("tp_link", &none);
    if (a.has("tp_link")) (void)link_class_of(a, "tp_link", tp_link, cfg);
    auto add = [&](AcceleratorConfig c) {
      c.tp = tp;
      c.gpu_hbm_bytes = c.hbm_bytes;
      c.hbm_bytes *= tp;
      c.tp_link = tp_link;
      c.tp_where = tp_where;
      cfg.accelerators.push_back(std::move(c));
    };
    if (a.has("count")) {
      const std::string prefix = a.str("name_prefix", &none);
      const std::int64_t count = a.integer("count", 1, 1, kMaxAccelerators, true);
      const std::int64_t first = a.integer("first_index", 0, 0, 1000000);
      const auto total = static_cast<std::int64_t>(cfg.accelerators.size()) + count;
      if (total > kMaxAccelerators)
        a.fail(a.node("count"), "count",
               "the cluster would have " + std::to_string(total) + " accelerators; at most " +
                   std::to_string(kMaxAccelerators) + " are supported");
      for (std::int64_t i = 0; i < count; ++i) {
        std::string d = device;
        if (auto star = d.find('*'); star != std::string::npos) d.replace(star, 1, std::to_string(i));
        add({(prefix.empty() ? type : prefix) + std::to_string(first + i), type, hbm, d, held, held_where, host});
      }
    } else {
      const std::string name = a.name("name");
      if (static_cast<std::int64_t>(cfg.accelerators.size()) >= kMaxAccelerators)
        a.fail(a.node("name"), "name",
               "the cluster would have " + std::to_string(cfg.accelerators.size() + 1) + " accelerators; at most " +
                   std::to_string(kMaxAccelerators) + " are supported");
      add({name, type, hbm, device, held, held_where, host});
    }
    a.finish();
  }
  // Every [[hosts]] entry owns an accelerator: serve would wait for an
  // executor that cannot start (it refuses a host with nothing to run).
  for (const HostConfig& h : cfg.hosts)
    if (std::none_of(cfg.accelerators.begin(), cfg.accelerators.end(),
                     [&](const AcceleratorConfig& a) { return a.host == h.name; }))
      throw ConfigError(h.where + ": host '" + h.name + "' has no accelerator (give one `host = \"" + h.name +
                        "\"` in cluster.accelerators, or remove the entry)");
  if (cfg.link_classes.empty() && cfg.accelerators.size() > 1)
    cluster.fail(nullptr, "link_classes",
                 "is required (an array) with more than one accelerator: how they reach each other");
  for (Table& l : tables_of(cluster, "links", false, file)) {
    auto ends = strings(l, "between", true);
    if (ends.size() != 2) l.fail(l.node("between"), "between", "expected two accelerator names");
    if (ends[0] == ends[1])
      l.fail(l.node("between"), "between", "expected two different accelerators, got '" + ends[0] + "' twice");
    cfg.links.push_back({ends[0], ends[1], l.str("class")});
    l.finish();
  }
  if (cluster.has("host_link")) cfg.host_link = link_class_of(cluster, "host_link", cluster.str("host_link"), cfg);
  cluster.finish();
}

// The most requests a synthetic stream may offer inside the measurement
// window. Each replayed request costs a few hundred bytes through the run
// (stream, tenant queue, record), so this is several GB; beyond it a run
// ended in a bare std::bad_alloc.
constexpr double kMaxStreamRequests = 20'000'000;

// `window_s` is the measurement window (top-level duration_s, < 0: none):
// only what arrives inside it is generated.
StreamConfig read_stream(Table& s, NamedFiles& files, double window_s) {
  StreamConfig st;
  const int kinds = s.has("trace") + s.has("constant_rate") + s.has("poisson_rate");
  if (kinds != 1) s.fail(nullptr, "trace", "exactly one of trace, constant_rate, poisson_rate is required");
  if (s.has("trace")) {
    st.kind = StreamConfig::Kind::kTrace;
    st.path = files.add(s, "trace");
    st.trace.start_offset_s = s.num("start_offset_s", 0, 0, 1e12);
    st.trace.duration_s = s.positive_or("duration_s", -1, 1e12, -1, "for all");
    st.trace.rate_scale = s.num("rate_scale", 1, 1e-9, 1e9);
    st.trace.time_shift_s = s.num("time_shift_s", 0, -1e12, 1e12);
    st.trace.skip_bad_lines = s.boolean("skip_bad_lines", false);
  } else {
    st.kind = s.has("trace")           ? StreamConfig::Kind::kTrace
              : s.has("constant_rate") ? StreamConfig::Kind::kConstant
                                       : StreamConfig::Kind::kPoisson;
    st.rate_per_s =
        s.num(st.kind == StreamConfig::Kind::kConstant ? "constant_rate" : "poisson_rate", 0, 1e-9, 1e9, true);
    // rate_scale means the same for every stream kind: more load.
    st.rate_per_s *= s.num("rate_scale", 1, 1e-9, 1e9);
    if (st.rate_per_s > 1e9) s.fail(s.node("rate_scale"), "rate_scale", "the scaled rate exceeds 1e9 requests/s");
    st.duration_s = s.positive("duration_s", 0, 1e12, true);
    st.input_tokens = s.integer("input_tokens", 0, 1, 1 << 24, true);
    st.output_tokens = s.integer("output_tokens", 0, 1, 1 << 24, true);
    // A length an override set is what a context-window refusal names.
    for (const char* key : {"output_tokens", "input_tokens"})
      if (s.overridden(s.node(key))) st.tokens_where = s.where(s.node(key), key);
    const bool cut = window_s > 0 && window_s < st.duration_s;
    const double span = cut ? window_s : st.duration_s;
    if (const double n = st.rate_per_s * span; n > kMaxStreamRequests) {
      const std::string key = st.kind == StreamConfig::Kind::kConstant ? "constant_rate" : "poisson_rate";
      s.fail(s.node(key), key,
             "expected at most " + Table::fmt(kMaxStreamRequests) + " requests inside the measurement window, got " +
                 Table::fmt(n) + " (" + Table::fmt(st.rate_per_s) + " requests/s for " + Table::fmt(span) + " s" +
                 (cut ? ", the top-level duration_s" : ", the stream's duration_s") + ")");
    }
  }
  s.finish();
  return st;
}

// One model's table: [model] (`name` picks the built-in preset) or one of
// [[models]] (`name` is free; `preset` or `hf_config` gives the shapes).
ModelConfig read_model(Table& m, NamedFiles& files, const std::string& file, bool listed) {
  ModelConfig mc;
  mc.where = file + ":" + std::to_string(m.raw().source().begin.line) + ": " + m.path();
  const std::string def = "llama3-8b";
  mc.name = listed ? m.name("name") : m.name("name", &def);
  if (listed && m.has("checkpoint") && m.has("hf_config"))
    m.fail(m.node("hf_config"), "hf_config", "checkpoint gives the model's config.json; leave this key out");
  if (listed && (m.has("hf_config") || m.has("checkpoint"))) {
    const std::string by = m.has("checkpoint") ? "checkpoint" : "hf_config";
    for (const char* key : {"preset", "layers", "vocab", "hidden", "heads", "kv_heads", "head_dim", "mlp", "dtype",
                            "rope_theta", "tied_embeddings", "qkv_bias", "context_window"})
      if (m.has(key)) m.fail(m.node(key), key, by + " gives the model's shapes; leave this key out");
    if (by == "checkpoint") {
      if (m.has("weights_seed"))
        m.fail(m.node("weights_seed"), "weights_seed", "checkpoint gives the weights; leave this key out");
      const std::string given = m.str("checkpoint");
      mc.checkpoint = files.resolve(given);
      // The directory's config.json gives the shapes; checked like any file.
      mc.hf_config = files.add(m, m.node("checkpoint"), "checkpoint", (fs::path(given) / "config.json").string());
    } else {
      mc.hf_config = files.add(m, "hf_config");
    }
  } else {
    mc.preset = listed ? m.str("preset", &def) : mc.name;
    if (const auto p = dense_preset(mc.preset)) {
      mc.vocab = p->vocab, mc.hidden = p->hidden, mc.heads = p->heads, mc.kv_heads = p->kv_heads, mc.mlp = p->mlp;
      mc.layers = static_cast<int>(p->layers), mc.groups = p->groups;
      mc.dtype = p->dtype == DType::kF32 ? "float32" : p->dtype == DType::kF16 ? "float16" : "bfloat16";
      mc.rope_theta = p->rope_theta;
      mc.tied_embeddings = p->tied_embeddings, mc.qkv_bias = p->qkv_bias;
      mc.context_window = p->context_window;
    } else {
      std::string known;
      for (std::string_view n : dense_preset_names()) known += (known.empty() ? "\"" : ", \"") + std::string(n) + "\"";
      const std::string key = listed ? "preset" : "name";
      m.fail(m.node(key), key,
             "expected one of " + known +
                 std::string(listed ? " (or give hf_config, a Hugging Face config.json)" : "") + ", got \"" +
                 mc.preset + "\"");
    }
    mc.layers = static_cast<int>(m.integer("layers", mc.layers, 1, 1024));
  }
  mc.groups = static_cast<int>(m.integer("groups", mc.groups, 1, 1024));
  if (mc.hf_config.empty()) {
    if (mc.layers % mc.groups != 0)
      m.fail(m.node("groups"), "groups", "expected a divisor of layers (" + std::to_string(mc.layers) + ")");
    mc.vocab = m.integer("vocab", mc.vocab, 2, 1 << 24);
    mc.hidden = m.integer("hidden", mc.hidden, 2, 1 << 20);
    mc.heads = m.integer("heads", mc.heads, 1, 4096);
    mc.head_dim = m.integer("head_dim", 0, 0, 1 << 16);
    if (mc.head_dim == 0 && (mc.hidden % mc.heads != 0 || (mc.hidden / mc.heads) % 2 != 0))
      m.fail(m.node("heads"), "heads",
             "expected a divisor of hidden (" + std::to_string(mc.hidden) + ") leaving an even head dimension");
    if (mc.head_dim % 2 != 0) m.fail(m.node("head_dim"), "head_dim", "expected an even number (RoPE rotates pairs)");
    mc.kv_heads = m.integer("kv_heads", mc.kv_heads, 1, 4096);
    if (mc.heads % mc.kv_heads != 0)
      m.fail(m.node("kv_heads"), "kv_heads", "expected a divisor of heads (" + std::to_string(mc.heads) + ")");
    mc.mlp = m.integer("mlp", mc.mlp, 1, 1 << 22);
    mc.dtype = m.str("dtype", &mc.dtype);
    if (mc.dtype != "bfloat16" && mc.dtype != "float16" && mc.dtype != "float32")
      m.fail(m.node("dtype"), "dtype", "expected \"bfloat16\", \"float16\" or \"float32\", got \"" + mc.dtype + "\"");
    mc.rope_theta = m.num("rope_theta", mc.rope_theta, 1e-6, 1e12);
    mc.tied_embeddings = m.boolean("tied_embeddings", mc.tied_embeddings);
    mc.qkv_bias = m.boolean("qkv_bias", mc.qkv_bias);
    mc.context_window = m.integer("context_window", mc.context_window, 1, INT64_MAX / 4);
  }
  static const std::string kRefuse = "refuse";
  const std::string overflow = m.str("on_overflow", &kRefuse);
  if (overflow != "refuse" && overflow != "truncate")
    m.fail(m.node("on_overflow"), "on_overflow", "expected \"refuse\" or \"truncate\", got \"" + overflow + "\"");
  mc.truncate_overflow = overflow == "truncate";
  mc.weights_seed = static_cast<std::uint64_t>(m.integer("weights_seed", 0, 0, INT64_MAX));
  if (m.has("tokenizer")) mc.tokenizer = files.add(m, "tokenizer");
  mc.spread = strings(m, "spread", false);
  if (m.has("spread") && mc.spread.size() < 2)
    m.fail(m.node("spread"), "spread", "expected two or more accelerator names (the model spread over them)");
  m.finish();
  return mc;
}

// [live]: the live executors' threads, transport and heartbeats.
void read_live(Table& root, ExperimentConfig& cfg, const std::string& file) {
  if (const toml::table* lt = root.table("live", false)) {
    Table l(*lt, "live", file);
    cfg.live.threads = static_cast<int>(l.integer("threads", 1, 1, 1024));
    cfg.live.time_scale = l.num("time_scale", 1.0, 1e-6, 1e9);
    cfg.live.transport = l.str("transport", &cfg.live.transport);
    cfg.live.heartbeat_ms = static_cast<int>(l.integer("heartbeat_ms", cfg.live.heartbeat_ms, 10, 60000));
    cfg.live.executor_timeout_ms =
        static_cast<int>(l.integer("executor_timeout_ms", cfg.live.executor_timeout_ms, 50, 3600000));
    if (cfg.live.executor_timeout_ms < 2 * cfg.live.heartbeat_ms)
      l.fail(l.node("executor_timeout_ms"), "executor_timeout_ms",
             "expected at least twice heartbeat_ms (" + std::to_string(2 * cfg.live.heartbeat_ms) + "), got " +
                 std::to_string(cfg.live.executor_timeout_ms));
    if (cfg.live.transport != "nccl" && cfg.live.transport != "copy")
      l.fail(l.node("transport"), "transport", "expected \"nccl\" or \"copy\", got \"" + cfg.live.transport + "\"");
    l.finish();
  }
}

// [serve]: the HTTP front end's limits.
void read_serve(Table& root, ExperimentConfig& cfg, const std::string& file, NamedFiles& files) {
  if (const toml::table* st = root.table("serve", false)) {
    Table sv(*st, "serve", file);
    const std::string none;
    cfg.serve.listen = sv.str("listen", &none);
    if (!cfg.serve.listen.empty() && cfg.serve.listen.rfind(':') == std::string::npos)
      sv.fail(sv.node("listen"), "listen", "expected \"HOST:PORT\", got \"" + cfg.serve.listen + "\"");
    cfg.serve.max_queue = sv.integer("max_queue", 64, 1, 1000000);
    cfg.serve.retry_after_s = sv.integer("retry_after_s", 1, 1, 3600);
    cfg.serve.http_threads = sv.integer("http_threads", 64, 1, 4096);
    cfg.serve.max_body_mib = sv.integer("max_body_mib", 64, 1, 4096);
    cfg.serve.header_timeout_s = sv.integer("header_timeout_s", 10, 1, 3600);
    cfg.serve.body_timeout_s = sv.integer("body_timeout_s", 60, 1, 86400);
    cfg.serve.max_connections = sv.integer("max_connections", 512, 1, 65536);
    cfg.serve.drain_timeout_s = sv.integer("drain_timeout_s", 60, 1, 86400);
    cfg.serve.max_prompt_tokens = sv.integer("max_prompt_tokens", 0, 0, 1ll << 30);
    if (sv.has("batch_store")) {
      const std::string given = sv.str("batch_store");
      if (given.empty()) sv.fail(sv.node("batch_store"), "batch_store", "expected a file path, got \"\"");
      cfg.serve.batch_store = files.resolve(given);
    }
    cfg.serve.batch_inflight = sv.integer("batch_inflight", 16, 1, 100000);
    cfg.serve.ttft_slo_s = sv.positive_or("ttft_slo_s", -1, 1e6, -1, "for no SLO target");
    sv.finish();
  }
}

// [ground_truth]: what the simulated accelerators play (docs/ground-truth.md).
void read_ground_truth(Table& root, ExperimentConfig& cfg, const std::string& file, NamedFiles& files,
                       const std::vector<UnresolvedType>& unresolved) {
  if (const toml::table* gt = root.table("ground_truth", false)) {
    Table g(*gt, "ground_truth", file);
    cfg.ground_truth.present = true;
    double layers_hbm = 0;  // the measured type's HBM bandwidth, where known
    if (g.has("calibrated") && (g.has("layers") || g.has("transfers") || g.has("roofline")))
      g.fail(nullptr, "layers",
             "give either calibrated (a profile) or measured profiles (layers, transfers) and the roofline, not both");
    if (g.has("calibrated")) {
      cfg.ground_truth.calibrated = files.add(g, "calibrated");
    } else {
      // Measured where given, the roofline elsewhere (docs/ground-truth.md).
      if (g.has("layers")) cfg.ground_truth.layers_csv = files.add(g, "layers");
      if (g.has("layers_tp")) {
        if (!g.has("layers"))
          g.fail(g.node("layers_tp"), "layers_tp",
                 "measures the layers profile's model and type on tensor-parallel ranks: give layers too");
        const toml::array* arr = g.array("layers_tp", true);
        if (arr->empty())
          g.fail(g.node("layers_tp"), "layers_tp",
                 "expected at least one file name (leave the key out where no tensor-parallel table is measured)");
        for (const auto& n : *arr) {
          auto v = n.value<std::string>();
          if (!v || v->empty())
            g.fail(&n, "layers_tp", "expected an array of file names (LLMServingSim layers CSVs with tp_size > 1)");
          cfg.ground_truth.layers_tp_csvs.push_back(files.add(g, &n, "layers_tp", *v));
        }
      }
      if (g.has("transfers")) cfg.ground_truth.transfers_csv = files.add(g, "transfers");
      if (g.has("all_reduce")) cfg.ground_truth.all_reduce_csv = files.add(g, "all_reduce");
      if (g.has("all_reduce_type")) {
        if (!g.has("all_reduce"))
          g.fail(g.node("all_reduce_type"), "all_reduce_type",
                 "names the type the all-reduce profile measured: give all_reduce too");
        cfg.ground_truth.all_reduce_type = g.str("all_reduce_type");
        if (cfg.ground_truth.all_reduce_type.empty())
          g.fail(g.node("all_reduce_type"), "all_reduce_type",
                 "expected the accelerator type the all-reduce profile measured (e.g. \"H100\")");
      }
      const std::string none;
      cfg.ground_truth.layers_type = g.str("layers_type", &none);
      cfg.ground_truth.layers_model = g.str("layers_model", &none);
      if (g.has("layers_model") && cfg.ground_truth.layers_model.empty())
        g.fail(g.node("layers_model"), "layers_model",
               "expected the name of the model the layers profile measured (a model of this config or a preset)");
      if (!cfg.ground_truth.layers_model.empty()) {
        if (cfg.ground_truth.layers_csv.empty())
          g.fail(g.node("layers_model"), "layers_model",
                 "names the model the layers profile measured: give layers too");
        cfg.ground_truth.layers_model_where = g.where(g.node("layers_model"), "layers_model");
      }
      if (!cfg.ground_truth.layers_type.empty() && cfg.ground_truth.layers_csv.empty())
        g.fail(g.node("layers_type"), "layers_type", "names the type the layers profile measured: give layers too");
      const std::string& lt = cfg.ground_truth.layers_type;
      const bool in_cluster = std::any_of(cfg.accelerators.begin(), cfg.accelerators.end(),
                                          [&](const AcceleratorConfig& a) { return a.type == lt; });
      // The bandwidth the profile's decode attention reads its cache at,
      // unless hbm_gbps says: the measured type's (an A100 profile read
      // at the H100's 3,350 GB/s was 2 % fast end to end).
      const AcceleratorType* known = lt.empty() ? nullptr : find_type(cfg.accelerator_types, lt);
      if (known) layers_hbm = known->hbm_bytes_per_s;
      if (!lt.empty() && !in_cluster && !known) {
        // A type no table knows and no accelerator has (a misspelling, most
        // likely) would leave the measured profile playing for none, said
        // only in a warning; a known type the cluster lacks is a choice
        // (that line), and a type without a table that accelerators name
        // (with their hbm_gib) is theirs.
        const std::string dir = cfg.accelerator_types.empty()
                                    ? default_accelerator_dir()
                                    : fs::path(cfg.accelerator_types.front().source).parent_path().string();
        if (auto t = find_accelerator_type(lt, dir); !t.ok())
          g.fail(g.node("layers_type"), "layers_type", t.status().message());
        else
          layers_hbm = t.value().hbm_bytes_per_s;
      }
      if (g.has("roofline")) {
        cfg.ground_truth.roofline_fit = files.add(g, "roofline");
        cfg.ground_truth.roofline_given = true;
      }
      // Which types play the roofline: every type but the profile's.
      for (const auto& u : unresolved) {
        const bool measured = !cfg.ground_truth.layers_csv.empty() &&
                              (cfg.ground_truth.layers_type.empty() ||
                               same_type(cfg.accelerator_types, cfg.ground_truth.layers_type, u.type));
        if (!measured)
          throw ConfigError(u.where + ": " + u.why + " (the roofline ground truth needs its datasheet figures)");
      }
      // (the default fit is named by resolve_profile_models, once the
      // models, and so whether any plays the roofline, are known)
    }
    cfg.ground_truth.op_noise_cv = g.num("op_noise_cv", 0.006, 0, 1);
    if (g.has("iteration_overhead_us"))
      cfg.ground_truth.iteration_overhead_s = g.num("iteration_overhead_us", 0, 0, 1e6) * 1e-6;
    if (g.has("sequence_overhead_us"))
      cfg.ground_truth.sequence_overhead_s = g.num("sequence_overhead_us", 0, 0, 1e6) * 1e-6;
    if (g.has("request_overhead_us"))
      cfg.ground_truth.request_overhead_s = g.num("request_overhead_us", 0, 0, 1e7) * 1e-6;
    cfg.ground_truth.transfer_noise_cv = g.num("transfer_noise_cv", 0.0163, 0, 1);
    cfg.ground_truth.hbm_bytes_per_s =
        g.has("hbm_gbps") || !(layers_hbm > 0) ? g.num("hbm_gbps", 3350, 1e-3, 1e7) * 1e9 : layers_hbm;
    g.finish();
  }
}

// One [[tenants]] entry.
TenantConfig read_tenant(Table& t, const ExperimentConfig& cfg, const std::string& file, NamedFiles& files) {
  TenantConfig tc;
  tc.name = t.name("name");
  tc.priority = static_cast<std::int32_t>(t.integer("priority", 0, -32768, 32767));
  tc.online = t.boolean("online", true);
  tc.token_budget = t.integer("token_budget", 2048, 1, 1 << 24);
  tc.chunked_prefill = t.boolean("chunked_prefill", false);
  tc.max_seqs = t.integer("max_seqs", 64, 1, 1 << 20);
  tc.kv_budget_tokens = t.integer("kv_budget_tokens", 65536, 1, INT64_MAX / 2);
  tc.lanes = static_cast<int>(t.integer("lanes", 1, 1, 1024));
  tc.prefill_lanes = static_cast<int>(t.integer("prefill_lanes", 0, 0, 1024));
  if (tc.prefill_lanes > 0 && cfg.host_link < 0)
    t.fail(t.node("prefill_lanes"), "prefill_lanes",
           "prefill lanes need cluster.host_link: the link class a handed-off KV cache crosses to host memory and "
           "back");
  // vLLM's preemption_mode: what a preempted sequence's KV cache becomes.
  static const std::string kRecompute = "recompute";
  const std::string mode = t.str("preemption_mode", &kRecompute);
  if (mode != "recompute" && mode != "swap")
    t.fail(t.node("preemption_mode"), "preemption_mode", "expected \"recompute\" or \"swap\", got \"" + mode + "\"");
  tc.swap_preempted = mode == "swap";
  if (tc.swap_preempted && cfg.host_link < 0)
    t.fail(t.node("preemption_mode"), "preemption_mode",
           "\"swap\" needs cluster.host_link: the link class KV caches cross to host memory and back");
  tc.instances = static_cast<int>(t.integer("instances", 1, 1, 1024));
  if (const toml::array* rp = t.array("request_priorities", false)) {
    auto bound = [&](std::size_t i) -> std::int64_t {
      const auto v = (*rp)[i].value<std::int64_t>();
      if (!v || *v < INT32_MIN || *v > INT32_MAX)
        t.fail(&(*rp)[i], "request_priorities", "expected [lowest, highest], two 32-bit integers");
      return *v;
    };
    if (rp->size() != 2)
      t.fail(t.node("request_priorities"), "request_priorities",
             "expected [lowest, highest] (two integers), got " + std::to_string(rp->size()) + " values");
    tc.request_priority_min = bound(0);
    tc.request_priority_max = bound(1);
    if (tc.request_priority_min > tc.request_priority_max)
      t.fail(t.node("request_priorities"), "request_priorities",
             "expected [lowest, highest] with lowest <= highest, got [" + std::to_string(tc.request_priority_min) +
                 ", " + std::to_string(tc.request_priority_max) + "]");
  }
  static const std::string kNone;
  tc.model = t.str("model", &kNone);
  tc.model_where = t.where(t.node("model") ? t.node("model") : nullptr, "model");
  const toml::table* st = t.table("stream", true);
  Table s(*st, t.qualified("stream"), file);
  tc.stream = read_stream(s, files, cfg.duration_s);
  t.finish();
  return tc;
}

// A policy's co_batch table: which tenants ride in which (cross-tenant batches).
void read_co_batch(Table& p, PolicyConfig& pc, const std::string& file) {
  if (const toml::table* ct = p.table("co_batch", false)) {
    Table cb(*ct, p.qualified("co_batch"), file);
    const toml::table* rt = cb.table("riders", true);
    Table riders(*rt, cb.qualified("riders"), file);
    auto runs = [&](const std::string& name) {
      return std::find(pc.tenants.begin(), pc.tenants.end(), name) != pc.tenants.end();
    };
    for (const auto& [k, v] : *rt) {
      const std::string name(k.str());
      if (!runs(name)) riders.fail(&v, name, "the policy runs no tenant named '" + name + "'");
      PolicyConfig::CoBatch c{name, strings(riders, name, true)};
      if (c.hosts.empty()) riders.fail(&v, name, "expected at least one host tenant");
      for (const auto& h : c.hosts)
        if (!runs(h) || h == name)
          riders.fail(&v, name, "expected host tenants the policy runs, other than '" + name + "', got '" + h + "'");
      pc.co_batch.push_back(std::move(c));
    }
    riders.finish();
    pc.co_batch_own_iterations = cb.boolean("own_iterations", true);
    if (cb.has("rides_only")) {
      if (!pc.co_batch_own_iterations)
        cb.fail(cb.node("rides_only"), "rides_only",
                "own_iterations = false already makes every rider ride only; give one of the two");
      for (const std::string& name : strings(cb, "rides_only", true)) {
        bool rider = false;
        for (const auto& c : pc.co_batch) rider |= c.rider == name;
        if (!rider)
          cb.fail(cb.node("rides_only"), "rides_only", "expected tenants named in riders, got '" + name + "'");
        pc.co_batch_rides_only.push_back(name);
      }
      // A tenant that only rides needs a host that runs iterations.
      auto rides_only = [&](const std::string& t) {
        return std::find(pc.co_batch_rides_only.begin(), pc.co_batch_rides_only.end(), t) !=
               pc.co_batch_rides_only.end();
      };
      for (const auto& c : pc.co_batch)
        if (rides_only(c.rider) && std::all_of(c.hosts.begin(), c.hosts.end(), rides_only))
          cb.fail(cb.node("rides_only"), "rides_only",
                  "'" + c.rider +
                      "' would ride only in tenants that ride only themselves: its requests would "
                      "never run");
    }
    if (cb.has("slowdown")) pc.co_batch_slowdown = cb.num("slowdown", -1, 0, 1e6);
    pc.co_batch_keep_riders = cb.boolean("keep_riders", false);
    cb.finish();
  }
}

// One [[policies]] entry.
PolicyConfig read_policy(Table& p, const ExperimentConfig& cfg, const std::string& file) {
  PolicyConfig pc;
  pc.name = p.name("name");
  pc.tenants = strings(p, "tenants", true);
  if (pc.tenants.empty()) p.fail(p.node("tenants"), "tenants", "expected at least one tenant name, got []");
  for (std::size_t i = 0; i < pc.tenants.size(); ++i) {
    const std::string& name = pc.tenants[i];
    bool known = false;
    for (const auto& t : cfg.tenants) known |= t.name == name;
    if (!known) p.fail(p.node("tenants"), "tenants", "no tenant named '" + name + "'");
    // (listed twice, a tenant's stream would be offered twice)
    for (std::size_t j = 0; j < i; ++j)
      if (pc.tenants[j] == name) p.fail(p.node("tenants"), "tenants", "'" + name + "' is listed twice");
  }
  // { tenant = count } tables: what this policy overrides of its tenants'
  // own counts. `check` may refuse a count (it fails naming the entry).
  auto per_tenant = [&](const char* key, std::int64_t least, auto&& check) {
    std::vector<std::pair<std::string, int>> out;
    const toml::table* t = p.table(key, false);
    if (!t) return out;
    Table counts(*t, p.qualified(key), file);
    for (const auto& [k, v] : *t) {
      const std::string name(k.str());
      if (std::find(pc.tenants.begin(), pc.tenants.end(), name) == pc.tenants.end())
        counts.fail(&v, name, "the policy runs no tenant named '" + name + "'");
      const int n = static_cast<int>(counts.integer(name, least, least, 1024));
      check(counts, v, name, n);
      out.emplace_back(name, n);
    }
    counts.finish();
    return out;
  };
  auto any = [](Table&, const toml::node&, const std::string&, int) {};
  pc.instances = per_tenant("instances", 1, any);
  pc.lanes = per_tenant("lanes", 1, any);
  pc.prefill_lanes = per_tenant("prefill_lanes", 0, [&](Table& t, const toml::node& v, const std::string& name, int n) {
    if (n > 0 && cfg.host_link < 0)
      t.fail(&v, name,
             "prefill lanes need cluster.host_link: the link class a handed-off KV cache crosses to host memory and "
             "back");
  });
  read_co_batch(p, pc, file);
  // Prefill lanes this policy gives a tenant that runs no iteration of its
  // own would do nothing: refused, naming the entry.
  for (const auto& [name, n] : pc.prefill_lanes) {
    bool rider = false;
    for (const auto& c : pc.co_batch) rider |= c.rider == name;
    const bool only =
        rider && (!pc.co_batch_own_iterations || std::find(pc.co_batch_rides_only.begin(), pc.co_batch_rides_only.end(),
                                                           name) != pc.co_batch_rides_only.end());
    if (n > 0 && only)
      p.fail(p.table("prefill_lanes", false)->get(name), "prefill_lanes." + name,
             "'" + name +
                 "' only rides in other tenants' iterations (co_batch), so it has no lanes to prefill in; "
                 "give its hosts the prefill lanes");
  }
  // A placement plugin, or a list of stages that together act as one.
  if (p.has("stages") && p.has("placement"))
    p.fail(p.node("stages"), "stages", "give either placement or stages, not both");
  if (p.has("stages")) {
    for (Table& st : tables_of(p, "stages", true, file)) {
      StageChoice sc;
      const std::string kind = st.str("kind");
      if (kind != "filter" && kind != "score")
        st.fail(st.node("kind"), "kind", "expected \"filter\" or \"score\", got \"" + kind + "\"");
      sc.kind = kind == "filter" ? StageChoice::Kind::kFilter : StageChoice::Kind::kScore;
      sc.plugin.name = st.str("plugin");
      if (sc.kind == StageChoice::Kind::kScore)
        sc.weight = st.num("weight", 1.0, 1e-12, 1e12);
      else if (st.has("weight"))
        st.fail(st.node("weight"), "weight", "only a score stage has a weight");
      if (const toml::table* at = st.table("args", false)) sc.plugin.args = to_json(*at);
      st.finish();
      pc.stages.push_back(std::move(sc));
    }
    if (pc.stages.empty()) p.fail(p.node("stages"), "stages", "expected at least one stage");
  } else {
    const toml::table* pt = p.table("placement", true);
    Table placement(*pt, p.qualified("placement"), file);
    pc.placement = plugin_choice(placement);
  }
  for (Table& ps : tables_of(p, "partition_sets", true, file)) pc.partition_sets.push_back(plugin_choice(ps));
  if (pc.partition_sets.empty()) p.fail(p.node("partition_sets"), "partition_sets", "expected at least one");
  // Optional plugins; their names and arguments are checked when simulate
  // creates them (plugin libraries may add names).
  if (const toml::table* at = p.table("arbiter", false)) {
    Table arbiter(*at, p.qualified("arbiter"), file);
    pc.arbiter = plugin_choice(arbiter);
  }
  if (const toml::table* et = p.table("estimator", false)) {
    Table estimator(*et, p.qualified("estimator"), file);
    pc.estimator = plugin_choice(estimator);
  }
  // The default budget grows with the tenants the policy schedules (64
  // issued operators each, at least 256): a cluster-wide cap that suits a
  // few tenants throttles fifty (docs/config.md).
  const auto default_budget = static_cast<std::int64_t>(std::max<std::size_t>(256, 64 * pc.tenants.size()));
  pc.issued_budget = static_cast<std::size_t>(default_budget);
  if (const toml::table* sct = p.table("scheduler", false)) {
    Table sc(*sct, p.qualified("scheduler"), file);
    pc.issued_budget = static_cast<std::size_t>(sc.integer("issued_budget", default_budget, 1, 1 << 30));
    pc.batch_cap = static_cast<std::size_t>(sc.integer("batch_cap", 16, 1, 1 << 20));
    pc.horizon_s = sc.num("horizon_s", -1, -1, 1e9);
    static const std::string kComponent = "component";
    const std::string scope = sc.str("what_if_scope", &kComponent);
    if (scope != "component" && scope != "cluster")
      sc.fail(sc.node("what_if_scope"), "what_if_scope",
              "expected \"component\" or \"cluster\", got \"" + scope + "\"");
    pc.scoped_what_if = scope == "component";
    sc.finish();
  }
  p.finish();
  return pc;
}

// slo_baseline: the policy whose TTFT sets the SLO threshold.
void read_slo_baseline(Table& root, ExperimentConfig& cfg) {
  // Read whether given or not, so the key is known to --set and typo hints.
  const bool baseline_given = root.has("slo_baseline");
  const std::string no_baseline;
  cfg.slo_baseline = root.str("slo_baseline", &no_baseline);
  if (baseline_given && !cfg.slo_baseline.empty()) {
    std::string names;
    bool known = false;
    for (const auto& pc : cfg.policies) {
      known |= pc.name == cfg.slo_baseline;
      names += (names.empty() ? "'" : ", '") + pc.name + "'";
    }
    if (!known)
      root.fail(root.node("slo_baseline"), "slo_baseline",
                "expected the name of a [[policies]] entry (" + (names.empty() ? std::string("none") : names) +
                    ") or \"\" for none, got '" + cfg.slo_baseline + "'");
  } else if (!baseline_given) {
    for (const auto& pc : cfg.policies)
      if (pc.placement.name == "static") {
        cfg.slo_baseline = pc.name;
        break;
      }
  }
}

// [[faults]]: accelerators lost at a time, for a while or for good.
void read_faults(Table& root, ExperimentConfig& cfg, const std::string& file) {
  for (Table& f : tables_of(root, "faults", false, file)) {
    FaultConfig fc;
    fc.accelerator = f.str("accelerator");
    bool known = false;
    for (const auto& a : cfg.accelerators) known |= a.name == fc.accelerator;
    if (!known)
      f.fail(f.node("accelerator"), "accelerator", "no accelerator named '" + fc.accelerator + "' in [cluster]");
    fc.at_s = f.num("at_s", 0, 0, 1e9, true);
    // A fault at or after the window's end would change nothing and say
    // nothing: refused, so a fault a user wrote always happens.
    if (cfg.duration_s > 0 && fc.at_s >= cfg.duration_s)
      f.fail(f.node("at_s"), "at_s",
             "expected a time inside the measurement window (duration_s = " + Table::fmt(cfg.duration_s) + " s), got " +
                 Table::fmt(fc.at_s) + " s");
    if (f.has("duration_s")) {
      fc.duration_s = f.num("duration_s", -1, 0, 1e9);
      if (fc.duration_s == 0) f.fail(f.node("duration_s"), "duration_s", "expected > 0 (leave it out: lost for good)");
    }
    f.finish();
    cfg.faults.push_back(std::move(fc));
  }
  std::stable_sort(cfg.faults.begin(), cfg.faults.end(),
                   [](const FaultConfig& a, const FaultConfig& b) { return a.at_s < b.at_s; });
  for (std::size_t i = 0; i < cfg.faults.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) {
      const FaultConfig &a = cfg.faults[j], &b = cfg.faults[i];
      if (a.accelerator == b.accelerator && (a.duration_s < 0 || b.at_s < a.at_s + a.duration_s))
        root.fail(root.node("faults"), "faults",
                  "the fault of '" + b.accelerator + "' at " + std::to_string(b.at_s) +
                      " s starts while its fault at " + std::to_string(a.at_s) + " s lasts");
    }
}

ExperimentConfig read(const toml::table& doc, const std::string& file, NamedFiles& files) {
  ExperimentConfig cfg;
  cfg.path = file;
  Table root(doc, "", file);
  const std::string stem = fs::path(file).stem().string();
  cfg.name = root.name("name", &stem);
  cfg.seed = static_cast<std::uint64_t>(root.integer("seed", 1, 0, INT64_MAX));
  cfg.duration_s = root.positive_or("duration_s", -1, 1e9, -1, "to run until done");
  std::vector<UnresolvedType> unresolved;
  read_cluster(root, cfg, file, files, unresolved);

  // One model ([model]) or several ([[models]], each named).
  if (root.has("model") && root.has("models"))
    root.fail(root.node("models"), "models", "give either [model] (one model) or [[models]] tables, not both");
  if (const toml::table* mt = root.table("model", false)) {
    Table m(*mt, "model", file);
    cfg.models.push_back(read_model(m, files, file, false));
  }
  for (Table& m : tables_of(root, "models", false, file)) {
    ModelConfig mc = read_model(m, files, file, true);
    for (const auto& other : cfg.models)
      if (other.name == mc.name) m.fail(m.node("name"), "name", "duplicate model name '" + mc.name + "'");
    cfg.models.push_back(std::move(mc));
  }
  if (cfg.models.empty()) cfg.models.emplace_back();

  read_live(root, cfg, file);
  read_serve(root, cfg, file, files);
  read_ground_truth(root, cfg, file, files, unresolved);

  for (Table& t : tables_of(root, "tenants", true, file)) {
    TenantConfig tc = read_tenant(t, cfg, file, files);
    for (const auto& other : cfg.tenants)
      if (other.name == tc.name) t.fail(t.node("name"), "name", "duplicate tenant name '" + tc.name + "'");
    cfg.tenants.push_back(std::move(tc));
  }

  std::vector<Table> policy_tables = tables_of(root, "policies", true, file);
  if (policy_tables.empty()) root.fail(root.node("policies"), "policies", "expected at least one [[policies]] table");
  for (Table& p : policy_tables) {
    PolicyConfig pc = read_policy(p, cfg, file);
    for (const auto& other : cfg.policies) {
      if (other.name == pc.name) p.fail(p.node("name"), "name", "duplicate policy name '" + pc.name + "'");
      // Their files would overwrite each other's (requests_<stem>.csv, ...).
      if (file_stem(other.name) == file_stem(pc.name))
        p.fail(p.node("name"), "name",
               "policy '" + pc.name + "' would write the same files as policy '" + other.name + "' (requests_" +
                   file_stem(pc.name) + ".csv, ...): expected names that differ in more than case and punctuation");
    }
    cfg.policies.push_back(std::move(pc));
  }

  read_slo_baseline(root, cfg);
  read_faults(root, cfg, file);

  if (const toml::table* et = root.table("estimators", false)) {
    Table e(*et, "estimators", file);
    cfg.estimator_prior = files.add(e, "prior");
    e.finish();
  }

  if (const toml::table* pl = root.table("plugins", false)) {
    Table t(*pl, "plugins", file);
    // Errors name the array's line (an override replaces the whole array)
    // and the element's index.
    const toml::node* arr = t.node("paths");
    const std::vector<std::string> paths = strings(t, "paths", false);
    for (std::size_t i = 0; i < paths.size(); ++i)
      cfg.plugin_paths.push_back(files.add(t, arr, "paths[" + std::to_string(i) + "]", paths[i]));
    t.finish();
  }
  root.finish();
  return cfg;
}

}  // namespace

std::string file_stem(const std::string& policy_name) {
  std::string s;
  for (char c : policy_name)
    s += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
  return s;
}

Status validate(const ExperimentConfig& cfg) {
  const std::string f = cfg.path + ": ";
  std::set<std::string> names;
  for (const auto& a : cfg.accelerators)
    if (!names.insert(a.name).second)
      return InvalidArgument(f + "cluster: duplicate accelerator name '" + a.name + "'");
  for (const auto& l : cfg.links) {
    if (!names.count(l.a) || !names.count(l.b))
      return InvalidArgument(f + "cluster.links: no accelerator named '" + (names.count(l.a) ? l.b : l.a) + "'");
    if (find_link_class(cfg, l.link_class) < 0)
      return InvalidArgument(f + "cluster.links: no link class named '" + l.link_class + "'");
  }
  return Status::Ok();
}

namespace {

// The nodes a dotted override path names (see ConfigOverride). Throws
// ConfigError naming the override.
struct OverridePath {
  const ConfigOverride& o;

  [[noreturn]] void fail(const std::string& what) const { throw ConfigError(o.flag + " " + o.key + ": " + what); }

  // The node an override wrote, and everything inside it (a table or an
  // array value), are named by the override in errors, not by a line.
  static void label(const toml::node* n, const std::string& source,
                    std::vector<std::pair<const toml::node*, std::string>>& set) {
    set.emplace_back(n, source);
    if (const toml::table* t = n->as_table())
      for (const auto& [k, v] : *t) label(&v, source, set);
    else if (const toml::array* a = n->as_array())
      for (const toml::node& e : *a) label(&e, source, set);
  }

  // "a.b[2].c" -> a, b, 2, c. Brackets must pair and be followed by '.',
  // '[' or the end ("tenants[0.priority" used to pass as tenants.0.priority).
  std::vector<std::string> split(const std::string& key) const {
    std::vector<std::string> out;
    std::string cur;
    bool in_bracket = false, closed = false;
    const std::string example = " (expected e.g. tenants[0].priority)";
    for (char c : key) {
      if (closed) {
        closed = false;
        if (c == '.') continue;
        if (c != '[') fail("expected '.' or '[' after ']'" + example);
        in_bracket = true;
        continue;
      }
      if (in_bracket) {
        if (c == ']') {
          out.push_back(cur);
          cur.clear();
          in_bracket = false;
          closed = true;
        } else if (c == '[' || c == '.') {
          fail("a '[' without its ']'" + example);
        } else {
          cur += c;
        }
        continue;
      }
      if (c == ']') fail("a ']' without its '['" + example);
      if (c == '.' || c == '[') {
        out.push_back(cur);
        cur.clear();
        in_bracket = c == '[';
      } else {
        cur += c;
      }
    }
    if (in_bracket) fail("a '[' without its ']'" + example);
    if (!closed) out.push_back(cur);
    return out;
  }

  // The elements of `arr` that segment `seg` selects: "*", an index, or a name.
  std::vector<toml::node*> select(toml::array& arr, const std::string& seg, const std::string& where) const {
    std::vector<toml::node*> out;
    if (seg == "*") {
      for (auto& n : arr) out.push_back(&n);
      if (out.empty()) fail("'" + where + "' is empty");
      return out;
    }
    if (!seg.empty() && seg.find_first_not_of("0123456789") == std::string::npos) {
      const std::size_t i = std::stoul(seg.size() > 9 ? std::string("999999999") : seg);
      if (i >= arr.size()) fail("'" + where + "' has " + std::to_string(arr.size()) + " element(s), no [" + seg + "]");
      out.push_back(arr.get(i));
      return out;
    }
    std::string names;
    for (auto& n : arr) {
      const toml::table* t = n.as_table();
      const auto name = t ? (*t)["name"].value<std::string>() : std::nullopt;
      if (!name) continue;
      if (*name == seg) out.push_back(&n);
      names += (names.empty() ? "" : ", ") + *name;
    }
    if (out.empty())
      fail("no element of '" + where + "' is named '" + seg + "'" + (names.empty() ? "" : " (names: " + names + ")"));
    return out;
  }

  void apply(toml::table& doc, const std::string& file,
             std::vector<std::pair<const toml::node*, std::string>>& set) const {
    if (o.key.empty()) fail("expected KEY=VALUE with a dotted KEY");
    const std::vector<std::string> segs = split(o.key);
    for (const auto& seg : segs)
      if (seg.empty()) fail("empty path segment (expected e.g. tenants.offline0.stream.constant_rate)");
    // The value, as TOML; a bare word that is not TOML is a string.
    toml::table parsed;
    const std::string source = o.flag + " " + o.key + "=" + o.value;
    try {
      parsed = toml::parse("v = " + o.value, source);
    } catch (const toml::parse_error&) {
      if (o.value.find_first_of("\"'[]{}=\n") != std::string::npos || o.value.empty())
        fail("'" + o.value + "' is not a TOML value (strings with quotes, arrays in [...])");
      parsed = toml::parse("v = \"" + o.value + "\"", source);
    }
    std::vector<toml::node*> at{&doc};
    std::string where;
    for (std::size_t i = 0; i + 1 < segs.size(); ++i) {
      std::vector<toml::node*> next;
      const std::string& seg = segs[i];
      for (toml::node* n : at) {
        if (toml::array* arr = n->as_array()) {
          for (toml::node* e : select(*arr, seg, where)) next.push_back(e);
        } else if (toml::table* t = n->as_table()) {
          toml::node* child = t->get(seg);
          if (!child) fail("'" + (where.empty() ? file : where) + "' has no key '" + seg + "'");
          next.push_back(child);
        } else {
          fail("'" + where + "' is a value, not a table or an array");
        }
      }
      where += (where.empty() ? "" : ".") + seg;
      at = std::move(next);
    }
    const std::string& last = segs.back();
    for (toml::node* n : at) {
      if (toml::table* t = n->as_table()) {
        parsed.get("v")->visit([&](auto& v) { t->insert_or_assign(last, v); });
        label(t->get(last), source, set);
      } else if (toml::array* arr = n->as_array()) {
        const std::vector<toml::node*> chosen = select(*arr, last, where);
        for (std::size_t k = 0; k < arr->size(); ++k)
          if (std::find(chosen.begin(), chosen.end(), arr->get(k)) != chosen.end()) {
            parsed.get("v")->visit([&](auto& v) { arr->replace(arr->cbegin() + static_cast<std::ptrdiff_t>(k), v); });
            label(arr->get(k), source, set);
          }
      } else {
        fail("'" + where + "' is a value, not a table or an array");
      }
    }
  }
};

}  // namespace

int find_link_class(const ExperimentConfig& cfg, std::string_view name) {
  for (std::size_t i = 0; i < cfg.link_classes.size(); ++i)
    if (cfg.link_classes[i].name == name) return static_cast<int>(i);
  return -1;
}

Result<ExperimentConfig> load_config(const std::string& path, const std::vector<ConfigOverride>& overrides) {
  toml::table doc;
  if (std::error_code ec; fs::is_directory(path, ec))
    return InvalidArgument(path + ": is a folder, expected an experiment TOML file");
  if (Status s = refuse_special_file(path, "an experiment TOML file"); !s.ok()) return s;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    if (src.begin.line == 0) return InvalidArgument(path + ": cannot read (" + std::string(e.description()) + ")");
    return InvalidArgument(path + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column) + ": " +
                           std::string(e.description()));
  }
  try {
    std::vector<std::pair<const toml::node*, std::string>> set;
    for (const ConfigOverride& o : overrides) OverridePath{o}.apply(doc, path, set);
    // A later override of the same key replaced the node: the last label wins.
    std::reverse(set.begin(), set.end());
    g_overridden = &set;
    struct Reset {
      ~Reset() { g_overridden = nullptr; }
    } reset;
    NamedFiles files(fs::path(path).parent_path());
    ExperimentConfig cfg = read(doc, path, files);
    if (Status s = validate(cfg); !s.ok()) return s;
    files.check();
    if (Status s = apply_tp_groups(cfg); !s.ok()) return s;
    if (Status s = validate_models(cfg); !s.ok()) return s;
    if (Status s = resolve_profile_models(cfg); !s.ok()) return s;
    return cfg;
  } catch (const ConfigError& e) {
    return InvalidArgument(e.what());
  }
}

}  // namespace slicesched
