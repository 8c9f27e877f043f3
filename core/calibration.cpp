module;
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

module slicesched.core.calibration;
import slicesched.core.ids;
import slicesched.core.shape;

namespace slicesched {

namespace {
constexpr const char* kFormat = "slicesched-calibration/2";

std::string braced(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return "{" + s + "}";
}
}  // namespace

std::vector<std::string> feature_names(const GraphTemplate& t, const TemplateOp& op) {
  std::vector<std::string> names;
  for (const Expr& e : op.features) names.push_back(e.to_string(t.dims()));
  return names;
}

const CalibrationProfile::Op* CalibrationProfile::find_op(const std::string& tmpl, const std::string& op,
                                                          const std::string& type) const {
  for (const Op& o : ops)
    if (o.tmpl == tmpl && o.op == op && o.type == type) return &o;
  return nullptr;
}

const CalibrationProfile::Transfer* CalibrationProfile::find_transfer(const std::string& src,
                                                                      const std::string& dst) const {
  for (const Transfer& t : transfers)
    if (t.src == src && t.dst == dst) return &t;
  return nullptr;
}

const CalibrationProfile::FixedCost* CalibrationProfile::find_fixed_cost(const std::string& type) const {
  for (const FixedCost& f : fixed_costs)
    if (f.type == type) return &f;
  return nullptr;
}

const CalibrationProfile::ModelShape* CalibrationProfile::find_model(const std::string& tmpl) const {
  for (const ModelShape& m : models)
    if (m.tmpl == tmpl) return &m;
  return nullptr;
}

CalibrationProfile snapshot(const EstimatorSet& est, const TemplateRegistry& templates, const AcceleratorSet& accels,
                            std::string source) {
  CalibrationProfile p;
  p.source = std::move(source);
  // Kind -> template, op and feature names.
  struct Names {
    std::string tmpl, op;
    std::vector<std::string> features;
  };
  std::vector<Names> names(templates.op_kind_count());
  for (TemplateId t = 0; t < templates.size(); ++t)
    for (const auto& op : templates.get(t).ops())
      names[op.kind] = {templates.get(t).name(), op.name, feature_names(templates.get(t), op)};
  for (const auto& row : est.report()) {
    if (row.transfer) {
      if (row.src >= accels.size() || row.dst >= accels.size() || row.coefficients.size() != 2) continue;
      p.transfers.push_back({accels[row.src].name, accels[row.dst].name, row.coefficients[0], row.coefficients[1],
                             row.samples, row.mape_pct});
    } else {
      if (row.kind >= names.size() || row.type >= accels.type_count()) continue;
      const Names& n = names[row.kind];
      p.ops.push_back({n.tmpl, n.op, accels.type_name(row.type), n.features, row.coefficients, row.samples,
                       row.mape_pct, row.feature_max});
    }
  }
  // Pairs that moved nothing have no fit; "*" -> "*" stands in for them:
  // the sample-weighted mean of the measured pairs.
  double a = 0, c = 0, n = 0;
  for (const auto& t : p.transfers) {
    a += t.sec_per_byte * static_cast<double>(t.samples);
    c += t.fixed_s * static_cast<double>(t.samples);
    n += static_cast<double>(t.samples);
  }
  if (n > 0) {
    p.transfers.push_back({"*", "*", a / n, c / n, static_cast<std::uint64_t>(n), 0});
  } else if (accels.size() > 1) {
    // A run that moved nothing measured no pair: the stand-in is then the
    // estimator's prior (0 samples says so), the mean over neighbouring
    // pairs both ways (every pair of a large cluster would be too many),
    // so the profile still plays as ground truth for the cluster it came
    // from, where a policy that moves tensors needs a cost.
    constexpr std::uint64_t kMiB = 1 << 20;
    double per_byte = 0, fixed = 0, pairs = 0;
    for (AccelId i = 0; i + 1 < accels.size(); ++i)
      for (const auto& [s, d] :
           {std::pair{i, static_cast<AccelId>(i + 1)}, std::pair{static_cast<AccelId>(i + 1), i}}) {
        const double at0 = est.predict_transfer(s, d, 0);
        per_byte += (est.predict_transfer(s, d, kMiB) - at0) / static_cast<double>(kMiB);
        fixed += at0;
        pairs += 1;
      }
    p.transfers.push_back({"*", "*", per_byte / pairs, fixed / pairs, 0, 0});
  }
  return p;
}

std::string calibration_text(const CalibrationProfile& p) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["source"] = p.source;
  j["ops"] = nlohmann::json::array();
  for (const auto& o : p.ops)
    j["ops"].push_back({{"template", o.tmpl},
                        {"op", o.op},
                        {"type", o.type},
                        {"features", o.features},
                        {"coefficients", o.coefficients},
                        {"samples", o.samples},
                        {"mape_pct", o.mape_pct}});
  for (std::size_t i = 0; i < p.ops.size(); ++i)
    if (!p.ops[i].feature_max.empty()) j["ops"][i]["feature_max"] = p.ops[i].feature_max;
  j["transfers"] = nlohmann::json::array();
  for (const auto& t : p.transfers)
    j["transfers"].push_back({{"src", t.src},
                              {"dst", t.dst},
                              {"sec_per_byte", t.sec_per_byte},
                              {"fixed_s", t.fixed_s},
                              {"samples", t.samples},
                              {"mape_pct", t.mape_pct}});
  if (!p.fixed_costs.empty()) {
    j["fixed_costs"] = nlohmann::json::array();
    for (const auto& f : p.fixed_costs)
      j["fixed_costs"].push_back({{"type", f.type},
                                  {"iteration_overhead_us", f.iteration_s * 1e6},
                                  {"sequence_overhead_us", f.sequence_s * 1e6},
                                  {"samples", f.samples}});
    for (std::size_t i = 0; i < p.fixed_costs.size(); ++i)
      if (p.fixed_costs[i].request_s > 0) j["fixed_costs"][i]["request_overhead_us"] = p.fixed_costs[i].request_s * 1e6;
  }
  if (!p.models.empty()) {
    j["models"] = nlohmann::json::array();
    for (const auto& m : p.models) j["models"].push_back({{"template", m.tmpl}, {"shape", m.shape}});
  }
  return j.dump(2) + "\n";
}

Status write_calibration(const CalibrationProfile& p, const std::string& path) {
  return write_file_atomically(path, calibration_text(p));
}

Result<CalibrationProfile> read_calibration(const std::string& path) {
  errno = 0;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const int err = errno;
    return NotFound(path + ": cannot open" + (err ? " (" + std::generic_category().message(err) + ")" : std::string()));
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {  // not JSON, or a number out of range (found by fuzzing)
    return InvalidArgument(path + ": not JSON (" + std::string(e.what()) + ")");
  }
  // A "format" or "source" that is not a string is refused, not thrown.
  auto text = [&](const char* key) {
    const auto it = j.is_object() ? j.find(key) : j.end();
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (j.is_object() && text("format") == "slicesched-calibration/1")
    return InvalidArgument(path +
                           ": a slicesched-calibration/1 profile, fitted before the LM head's features became "
                           "{sequences, 1} (its fits do not say which features they multiply); write it again with "
                           "slicesched calibrate or simulate --out");
  if (!j.is_object() || text("format") != kFormat)
    return InvalidArgument(path + ": expected \"format\": \"" + kFormat + "\"");
  CalibrationProfile p;
  p.source = text("source");
  auto number = [](const nlohmann::json& v) { return v.is_number() && std::isfinite(v.get<double>()); };
  try {
    const auto& ops = j.at("ops");
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& o = ops[i];
      const std::string where = path + ": ops[" + std::to_string(i) + "]";
      CalibrationProfile::Op op;
      op.tmpl = o.at("template").get<std::string>();
      op.op = o.at("op").get<std::string>();
      op.type = o.at("type").get<std::string>();
      for (const auto& c : o.at("coefficients")) {
        if (!number(c)) return InvalidArgument(where + ".coefficients: expected finite numbers");
        op.coefficients.push_back(c.get<double>());
      }
      if (op.coefficients.empty() || op.coefficients.size() > static_cast<std::size_t>(kMaxFeatures))
        return InvalidArgument(where + ".coefficients: expected 1 to " + std::to_string(kMaxFeatures) + " numbers");
      const nlohmann::json features = o.contains("features") ? o["features"] : nlohmann::json();
      if (!features.is_array() || features.size() != op.coefficients.size())
        return InvalidArgument(where + ".features: expected one name per coefficient (" +
                               std::to_string(op.coefficients.size()) + ")");
      for (const auto& f : features) {
        if (!f.is_string()) return InvalidArgument(where + ".features: expected strings");
        op.features.push_back(f.get<std::string>());
      }
      op.samples = o.value("samples", std::uint64_t{0});
      op.mape_pct = o.value("mape_pct", 0.0);
      if (o.contains("feature_max")) {
        const nlohmann::json& m = o["feature_max"];
        if (!m.is_array() || m.size() != op.coefficients.size())
          return InvalidArgument(where + ".feature_max: expected one number per coefficient (" +
                                 std::to_string(op.coefficients.size()) + ")");
        for (const auto& v : m) {
          if (!number(v) || v.get<double>() < 0)
            return InvalidArgument(where + ".feature_max: expected finite numbers >= 0");
          op.feature_max.push_back(v.get<double>());
        }
      }
      p.ops.push_back(std::move(op));
    }
    const auto& transfers = j.at("transfers");
    for (std::size_t i = 0; i < transfers.size(); ++i) {
      const auto& t = transfers[i];
      const std::string where = path + ": transfers[" + std::to_string(i) + "]";
      CalibrationProfile::Transfer tr;
      tr.src = t.at("src").get<std::string>();
      tr.dst = t.at("dst").get<std::string>();
      if (!number(t.at("sec_per_byte")) || !number(t.at("fixed_s")))
        return InvalidArgument(where + ": sec_per_byte and fixed_s must be finite numbers");
      tr.sec_per_byte = t.at("sec_per_byte").get<double>();
      tr.fixed_s = t.at("fixed_s").get<double>();
      tr.samples = t.value("samples", std::uint64_t{0});
      tr.mape_pct = t.value("mape_pct", 0.0);
      p.transfers.push_back(std::move(tr));
    }
    if (j.contains("fixed_costs")) {
      const auto& fixed = j.at("fixed_costs");
      if (!fixed.is_array()) return InvalidArgument(path + ": fixed_costs: expected an array");
      for (std::size_t i = 0; i < fixed.size(); ++i) {
        const auto& f = fixed[i];
        const std::string where = path + ": fixed_costs[" + std::to_string(i) + "]";
        CalibrationProfile::FixedCost fc;
        fc.type = f.at("type").get<std::string>();
        for (const char* key : {"iteration_overhead_us", "sequence_overhead_us"})
          if (!number(f.at(key)) || f.at(key).get<double>() < 0)
            return InvalidArgument(where + "." + key + ": expected a finite number >= 0");
        fc.iteration_s = f.at("iteration_overhead_us").get<double>() * 1e-6;
        fc.sequence_s = f.at("sequence_overhead_us").get<double>() * 1e-6;
        if (f.contains("request_overhead_us")) {
          if (!number(f.at("request_overhead_us")) || f.at("request_overhead_us").get<double>() < 0)
            return InvalidArgument(where + ".request_overhead_us: expected a finite number >= 0");
          fc.request_s = f.at("request_overhead_us").get<double>() * 1e-6;
        }
        fc.samples = f.value("samples", std::uint64_t{0});
        if (p.find_fixed_cost(fc.type))
          return InvalidArgument(where + ".type: \"" + fc.type + "\" has fixed costs already");
        p.fixed_costs.push_back(std::move(fc));
      }
    }
    if (j.contains("models")) {
      const auto& models = j.at("models");
      if (!models.is_array()) return InvalidArgument(path + ": models: expected an array");
      for (std::size_t i = 0; i < models.size(); ++i) {
        const auto& m = models[i];
        const std::string where = path + ": models[" + std::to_string(i) + "]";
        if (!m.is_object() || !m.contains("template") || !m["template"].is_string() || !m.contains("shape") ||
            !m["shape"].is_string())
          return InvalidArgument(where + ": expected { \"template\": \"...\", \"shape\": \"...\" }");
        CalibrationProfile::ModelShape ms{m["template"].get<std::string>(), m["shape"].get<std::string>()};
        if (p.find_model(ms.tmpl)) return InvalidArgument(where + ".template: \"" + ms.tmpl + "\" has a shape already");
        p.models.push_back(std::move(ms));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(path + ": " + std::string(e.what()));
  }
  return p;
}

Status check_features(const CalibrationProfile& p, const TemplateRegistry& templates) {
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const auto& o = p.ops[i];
    auto t = templates.find(o.tmpl);
    if (!t) continue;
    const GraphTemplate& g = templates.get(*t);
    const int idx = g.find_op(o.op);
    if (idx < 0) continue;
    const std::vector<std::string> want = feature_names(g, g.ops()[idx]);
    if (o.features != want)
      return FailedPrecondition("ops[" + std::to_string(i) + "] (" + o.tmpl + "/" + o.op + " on " + o.type +
                                ") was fitted to features " + braced(o.features) + ", the template's are " +
                                braced(want) + "; measure it again");
  }
  return Status::Ok();
}

Status apply_as_prior(const CalibrationProfile& p, EstimatorSet& est, const TemplateRegistry& templates,
                      const AcceleratorSet& accels) {
  if (Status s = check_features(p, templates); !s.ok()) return s;
  for (const auto& o : p.ops) {
    auto t = templates.find(o.tmpl);
    if (!t) continue;
    int idx = templates.get(*t).find_op(o.op);
    if (idx < 0) continue;
    for (AccelTypeId type = 0; type < accels.type_count(); ++type)
      if (accels.type_name(type) == o.type)
        if (Status s = est.set_op_prior_for_type(templates.get(*t).ops()[idx].kind, type, o.coefficients); !s.ok())
          return s;
  }
  for (const auto& tr : p.transfers) {
    const int a = accels.find(tr.src), b = accels.find(tr.dst);
    if (a < 0 || b < 0) continue;
    if (Status s =
            est.set_transfer_prior(static_cast<AccelId>(a), static_cast<AccelId>(b), tr.sec_per_byte, tr.fixed_s);
        !s.ok())
      return s;
  }
  return Status::Ok();
}

}  // namespace slicesched
