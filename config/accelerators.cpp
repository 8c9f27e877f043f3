module;
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

module slicesched.config.accelerators;
import slicesched.core.files;
import slicesched.models.work;

namespace slicesched {

namespace {

namespace fs = std::filesystem;

std::string fmt(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.9g", v);
  return s;
}

// Reads one table's keys, remembering the first error ("file:line: key: what").
struct Reader {
  const toml::table& t;
  std::string prefix, file;
  std::string error;
  std::vector<std::string> used;

  std::string where(const toml::node* n) const {
    return file + ":" + std::to_string((n ? n->source() : t.source()).begin.line) + ": " + prefix;
  }
  void fail(const toml::node* n, const std::string& key, const std::string& what) {
    if (error.empty()) error = where(n) + "." + key + ": " + what;
  }
  const toml::node* get(const std::string& key) {
    used.push_back(key);
    return t.get(key);
  }
  double positive(const std::string& key, bool required, double fallback = 0) {
    const toml::node* n = get(key);
    if (!n) {
      if (required) fail(nullptr, key, "is required (a number > 0)");
      return fallback;
    }
    auto v = n->value<double>();
    if (!v || !std::isfinite(*v)) {
      fail(n, key, "expected a finite number");
      return fallback;
    }
    // (1e-6 is far below any device's figure in these units; a smaller
    // one would make every duration overflow the simulated clock)
    if (!(*v >= 1e-6)) fail(n, key, "expected a number >= 1e-06, got " + fmt(*v));
    return *v;
  }
  double fraction(const std::string& key, double fallback) {
    const toml::node* n = get(key);
    if (!n) return fallback;
    auto v = n->value<double>();
    if (!v || !(*v >= 1e-6) || *v > 1) fail(n, key, "expected a number in [1e-06, 1]");
    return v ? *v : fallback;
  }
  double non_negative(const std::string& key, double fallback) {
    const toml::node* n = get(key);
    if (!n) return fallback;
    auto v = n->value<double>();
    if (!v || !std::isfinite(*v) || *v < 0 || *v > 1e9) fail(n, key, "expected a number in [0, 1e9]");
    return v ? *v : fallback;
  }
  // An exponent >= 1; `inf` (TOML's infinity) allowed.
  double at_least_one(const std::string& key, double fallback) {
    const toml::node* n = get(key);
    if (!n) return fallback;
    auto v = n->value<double>();
    if (!v || std::isnan(*v) || *v < 1) fail(n, key, "expected a number >= 1 (or inf)");
    return v && !std::isnan(*v) ? *v : fallback;
  }
  std::string str(const std::string& key, bool required) {
    const toml::node* n = get(key);
    if (!n) {
      if (required) fail(nullptr, key, "is required (a string)");
      return {};
    }
    auto v = n->value<std::string>();
    if (!v) fail(n, key, "expected a string");
    return v ? *v : std::string();
  }
  // An unknown key is reported before any other error: a misspelt key
  // ("smz") is what made a required one ("sms") look missing.
  void finish() {
    for (const auto& [k, v] : t)
      if (std::find(used.begin(), used.end(), std::string(k.str())) == used.end()) {
        error.clear();
        fail(&v, std::string(k.str()), "unknown key (expected " + known_keys() + ")");
        return;
      }
  }
  std::string known_keys() const {
    std::string s;
    for (std::size_t i = 0; i < used.size(); ++i)
      if (std::find(used.begin(), used.begin() + static_cast<std::ptrdiff_t>(i), used[i]) == used.begin() + i)
        s += (s.empty() ? "" : ", ") + used[i];
    return s;
  }
};

Result<toml::table> parse(const std::string& path) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    return InvalidArgument(path + ": is a folder, expected a TOML file");
  if (Status s = refuse_special_file(path, "a TOML file"); !s.ok()) return s;
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    if (src.begin.line == 0) return InvalidArgument(path + ": cannot read (" + std::string(e.description()) + ")");
    return InvalidArgument(path + ":" + std::to_string(src.begin.line) + ": " + std::string(e.description()));
  }
}

}  // namespace

namespace {

// <prefix>/share/slicescheduler/<relative> when the running executable sits
// in an installed <prefix>/bin and that path exists; otherwise nothing.
std::optional<std::string> installed(const char* relative) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  const fs::path path = self.parent_path().parent_path() / "share" / "slicescheduler" / relative;
  if (!fs::exists(path, ec)) return std::nullopt;
  return path.string();
}

}  // namespace

std::string default_accelerator_dir() { return installed("accelerators").value_or(SLICESCHED_ACCELERATOR_DIR); }

std::string default_validation_csv() {
  return installed("validation/trtllm_a100.csv").value_or(SLICESCHED_VALIDATION_CSV);
}

Result<AcceleratorType> load_accelerator_type(const std::string& path) {
  auto doc = parse(path);
  if (!doc.ok()) return doc.status();
  const toml::table* at = doc->get_as<toml::table>("accelerator");
  if (!at) return InvalidArgument(path + ":1: accelerator: is required (a table)");
  Reader r{*at, "accelerator", path, {}, {}};
  AcceleratorType t;
  t.source = path;
  t.name = r.str("name", true);
  if (const toml::node* n = r.get("aliases")) {
    const toml::array* arr = n->as_array();
    if (!arr) r.fail(n, "aliases", "expected an array of strings");
    if (arr)
      for (const auto& e : *arr) {
        auto v = e.value<std::string>();
        if (!v)
          r.fail(&e, "aliases", "expected an array of strings");
        else
          t.aliases.push_back(*v);
      }
  }
  t.peak_flops = r.positive("peak_tflops", true) * 1e12;
  // Optional: plain FP32 FLOP/s, what a float32 model computes at.
  t.fp32_flops = r.positive("fp32_tflops", false, 0) * 1e12;
  t.hbm_bytes_per_s = r.positive("hbm_gbps", true) * 1e9;
  t.hbm_bytes = static_cast<std::int64_t>(r.positive("hbm_gib", true) * 1073741824.0);
  // Optional: the SMs and their boost clock (a kind's sm_bytes_per_cycle
  // ceiling needs both).
  t.sms = static_cast<int>(r.positive("sms", false, 0));
  t.sm_clock_hz = r.positive("sm_clock_mhz", false, 0) * 1e6;
  if ((t.sms > 0) != (t.sm_clock_hz > 0))
    r.fail(nullptr, t.sms > 0 ? "sm_clock_mhz" : "sms",
           "is required with " + std::string(t.sms > 0 ? "sms" : "sm_clock_mhz"));
  // Optional: the type's own roofline fit (fitted on its own kernels),
  // relative to the type's file.
  if (const std::string fit = r.str("roofline", false); !fit.empty()) {
    const fs::path p(fit);
    t.roofline_fit = (p.is_absolute() ? p : fs::path(path).parent_path() / p).lexically_normal().string();
    if (!fs::is_regular_file(t.roofline_fit))
      r.fail(r.t.get("roofline"), "roofline", "no fit file " + t.roofline_fit + " (expected a [roofline] TOML file)");
  }
  if (const toml::node* n = r.get("interconnect")) {
    if (!n->is_table()) {
      r.fail(n, "interconnect", "expected a table");
    } else {
      Reader ic{*n->as_table(), "accelerator.interconnect", path, {}, {}};
      t.interconnect = ic.str("name", true);
      t.interconnect_bytes_per_s = ic.positive("bandwidth_gbps", true) * 1e9;
      t.interconnect_latency_s = ic.non_negative("latency_us", 0) * 1e-6;
      ic.finish();
      if (!ic.error.empty()) return InvalidArgument(ic.error);
    }
  }
  r.finish();
  if (!r.error.empty()) return InvalidArgument(r.error);
  return t;
}

Result<AcceleratorType> find_accelerator_type(std::string_view name, const std::string& dir) {
  if (name.ends_with(".toml")) {
    const fs::path p(name);
    return load_accelerator_type((p.is_absolute() ? p : fs::path(dir) / p).string());
  }
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".toml") files.push_back(e.path());
  if (ec) return NotFound("accelerator types: cannot read the folder " + dir + " (" + ec.message() + ")");
  std::sort(files.begin(), files.end());
  std::string known;
  std::optional<AcceleratorType> found;
  for (const auto& f : files) {
    auto doc = parse(f.string());
    if (!doc.ok()) return doc.status();
    if (!doc->contains("accelerator")) continue;  // the fit file, or something else
    auto t = load_accelerator_type(f.string());
    if (!t.ok()) return t.status();
    if (t->answers_to(name)) {
      // Two tables answering to one name: which one a config meant is
      // unknowable (the first in file order used to win silently).
      if (found)
        return InvalidArgument("accelerator type '" + std::string(name) + "' is described twice: by " + found->source +
                               " and by " + t->source + " (expected one table per name and alias)");
      found = std::move(t).value();
      continue;
    }
    known += (known.empty() ? "" : ", ") + t->name;
  }
  if (found) return std::move(*found);
  return NotFound("unknown accelerator type '" + std::string(name) + "' (types in " + dir + ": " +
                  (known.empty() ? "none" : known) + "; or give a path to a .toml)");
}

Result<RooflineFit> load_roofline_fit(const std::string& path) {
  auto doc = parse(path);
  if (!doc.ok()) return doc.status();
  const toml::table* rt = doc->get_as<toml::table>("roofline");
  if (!rt) return InvalidArgument(path + ":1: roofline: is required (a table)");
  Reader r{*rt, "roofline", path, {}, {}};
  RooflineFit fit;
  fit.fitted_on = r.str("fitted_on", false);
  for (int k = 0; k < kWorkKinds; ++k) {
    const auto kind = static_cast<WorkKind>(k);
    const std::string key(work_kind_name(kind));
    const toml::node* n = r.get(key);
    if (!n && (kind == WorkKind::kKvRead || kind == WorkKind::kStreaming)) continue;  // derived below
    if (!n) {
      r.fail(nullptr, key, "is required (a table with compute, memory, overhead_us)");
      continue;
    }
    if (!n->is_table()) {
      r.fail(n, key, "expected a table");
      continue;
    }
    Reader kr{*n->as_table(), "roofline." + key, path, {}, {}};
    // overlap_p absent: the plain roofline (files from before it existed).
    fit[kind] = {kr.fraction("compute", 1),
                 kr.fraction("memory", 1),
                 kr.non_negative("overhead_us", 0) * 1e-6,
                 kr.at_least_one("overlap_p", std::numeric_limits<double>::infinity()),
                 kr.non_negative("sm_bytes_per_cycle", 0),
                 kr.non_negative("sm_flops_per_cycle", 0)};
    kr.finish();
    if (!kr.error.empty()) return InvalidArgument(kr.error);
  }
  r.finish();
  if (!r.error.empty()) return InvalidArgument(r.error);
  // A file from before kv_read was its own kind: the KV cache streams at the
  // GEMMs' memory-bound efficiency (fit_roofline derives it the same way).
  if (!rt->contains("kv_read")) fit[WorkKind::kKvRead] = {1, fit[WorkKind::kGemm].memory, 0};
  // A file from before streaming was apart from elementwise: a residual add
  // was an elementwise kernel.
  if (!rt->contains("streaming")) fit[WorkKind::kStreaming] = fit[WorkKind::kElementwise];
  return fit;
}

std::string roofline_fit_toml(const RooflineFit& fit, const std::vector<std::string>& comment) {
  std::string out;
  for (const auto& c : comment) out += "# " + c + "\n";
  out += "[roofline]\nfitted_on = \"" + fit.fitted_on + "\"\n";
  for (int k = 0; k < kWorkKinds; ++k) {
    const auto kind = static_cast<WorkKind>(k);
    const KindEfficiency& e = fit[kind];
    out += "\n[roofline." + std::string(work_kind_name(kind)) + "]\ncompute = " + fmt(e.compute) +
           "\nmemory = " + fmt(e.memory) + "\noverhead_us = " + fmt(e.overhead_s * 1e6) + "\n";
    if (std::isfinite(e.overlap_p)) out += "overlap_p = " + fmt(e.overlap_p) + "\n";
    if (e.sm_bytes_per_cycle > 0) out += "sm_bytes_per_cycle = " + fmt(e.sm_bytes_per_cycle) + "\n";
    if (e.sm_flops_per_cycle > 0) out += "sm_flops_per_cycle = " + fmt(e.sm_flops_per_cycle) + "\n";
  }
  return out;
}

}  // namespace slicesched
