// `slicesched explain DIR --request ID`: the scheduling rounds that placed
// one request's operators, read back from DIR/decisions.jsonl (written by
// `simulate --explain` or `serve --explain`): per round the batch, every
// candidate with its predicted mean completion and makespan or why it was
// infeasible, and the pick.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"

import slicesched.cli.fail;
import slicesched.cli.report;

namespace slicesched::cli {

namespace {

std::string batch_text(const nlohmann::json& batch) {
  std::string kinds;
  for (const auto& op : batch) kinds += (kinds.empty() ? "" : ", ") + op.value("kind", std::string("?"));
  return kinds + " (" + std::to_string(batch.size()) + " op" + (batch.size() == 1 ? "" : "s") + ")";
}

void print_round(const nlohmann::json& d) {
  const nlohmann::json pick = d.value("pick", nlohmann::json());
  std::printf("  t=%.6f s  round %llu  tenant %s  batch: %s  -> %s\n", d.value("t", 0.0),
              static_cast<unsigned long long>(d.value("round", 0ull)), d.value("tenant", std::string("?")).c_str(),
              batch_text(d.value("batch", nlohmann::json::array())).c_str(),
              pick.is_string() ? ("picked " + pick.get<std::string>()).c_str() : "deferred");
  const bool simulated = d.value("simulated", false);
  std::printf("      %-20s %12s %12s  %s\n", "candidate", "mean s", "makespan s", simulated ? "verdict" : "");
  // pick_index names the candidate when two share a label; files written
  // before it was recorded match by label.
  const nlohmann::json index = d.value("pick_index", nlohmann::json());
  std::size_t at = 0;
  for (const auto& c : d.value("candidates", nlohmann::json::array())) {
    const std::string label = c.value("label", std::string("?"));
    const bool picked = index.is_number_unsigned() ? index.get<std::size_t>() == at
                                                   : pick.is_string() && pick.get<std::string>() == label;
    ++at;
    if (c.contains("mean_completion_s")) {
      std::string note;
      if (c.contains("past_horizon_ops"))
        note = std::to_string(c["past_horizon_ops"].get<std::size_t>()) + " op(s) past the horizon";
      std::printf("    %s %-20s %12.6f %12.6f  %s\n", picked ? "*" : " ", label.c_str(),
                  c["mean_completion_s"].get<double>(), c["makespan_s"].get<double>(), note.c_str());
    } else {
      std::printf(
          "    %s %-20s %12s %12s  %s\n", picked ? "*" : " ", label.c_str(), "-", "-",
          c.value("infeasible", std::string(simulated ? "" : "not simulated (the policy needs no what-if)")).c_str());
    }
  }
  // What the policy said of its pick (PlacementPolicy::reasons).
  if (d.contains("waited") && d["waited"].is_string())
    std::printf("      waited: %s\n", d["waited"].get<std::string>().c_str());
  for (const auto& r : d.value("reasons", nlohmann::json::array()))
    if (r.is_string()) std::printf("      reason: %s\n", r.get<std::string>().c_str());
}

// What requests_<policy>.csv says of request `id`: nullopt when the file
// has no such row (or cannot be read: `rows` is then 0); else its error
// ("" when none).
struct CsvRequest {
  std::optional<std::string> error;
  std::size_t rows = 0;
};
CsvRequest csv_request(const std::filesystem::path& file, std::uint64_t id) {
  CsvRequest out;
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return out;
  const std::string key = std::to_string(id) + ",";
  while (std::getline(in, line)) {
    ++out.rows;
    if (!line.starts_with(key)) continue;
    // The error is the last field, quoted when it holds a comma or quote.
    std::string error;
    if (!line.empty() && line.back() == '"') {
      const std::size_t open = line.rfind(",\"");
      std::string q = line.substr(open + 2, line.size() - open - 3);
      for (std::size_t i = 0; i < q.size(); ++i) {
        error += q[i];
        if (q[i] == '"' && i + 1 < q.size() && q[i + 1] == '"') ++i;
      }
    } else {
      error = line.substr(line.rfind(',') + 1);
    }
    out.error = error;
  }
  return out;
}

}  // namespace

int explain(const ExplainOptions& opt) {
  const std::filesystem::path path = std::filesystem::path(opt.dir) / "decisions.jsonl";
  std::ifstream in(path);
  if (!in)
    fail(path.string() + ": cannot open (write it with `slicesched simulate CONFIG --explain --out " + opt.dir + "`)");
  // Per policy, in file order, with each round's line.
  std::map<std::string, std::vector<std::pair<std::size_t, nlohmann::json>>> rounds;
  std::size_t lineno = 0;
  std::map<std::string, std::size_t> lines;  // every policy the file records, and its rounds
  std::string line;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    nlohmann::json d;
    try {
      d = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(path.string() + ":" + std::to_string(lineno) + ": expected one JSON object per line (" + e.what() + ")");
    }
    if (!d.is_object() || !d.contains("requests") || !d["requests"].is_array())
      fail(path.string() + ":" + std::to_string(lineno) + ": expected a decision object with a \"requests\" array");
    const std::string policy = d.value("policy", std::string());
    ++lines[policy];
    if (opt.policy && policy != *opt.policy) continue;
    for (const auto& r : d["requests"])
      if (r.is_number_unsigned() && r.get<std::uint64_t>() == opt.request) {
        rounds[policy].emplace_back(lineno, std::move(d));
        break;
      }
  }
  if (opt.policy && !lines.contains(*opt.policy)) {
    std::string names;
    for (const auto& [p, n] : lines) names += (names.empty() ? "" : ", ") + p;
    fail("--policy " + *opt.policy + ": " + path.string() +
         " records no policy of that name (policies: " + (names.empty() ? "none" : names) + ")");
  }
  // What the requests CSV says of it, per policy looked at.
  const std::string id = std::to_string(opt.request);
  auto of = [&](const std::string& policy) {
    return csv_request(std::filesystem::path(opt.dir) / requests_file_name(policy), opt.request);
  };
  if (rounds.empty()) {
    std::string why;
    std::size_t recorded = 0;
    for (const auto& [policy, n] : lines) {
      if (opt.policy && policy != *opt.policy) continue;
      recorded += n;
      const CsvRequest r = of(policy);
      if (r.rows > 0 && !r.error)
        why += "; policy '" + policy + "' has no request " + id + " (" + requests_file_name(policy) + " has " +
               std::to_string(r.rows) + ": ids 0 to " + std::to_string(r.rows - 1) + ")";
      else if (r.error && !r.error->empty())
        why += "; under policy '" + policy + "' it failed before it was placed: " + *r.error;
    }
    fail("request " + id + " is in none of the " + std::to_string(recorded) + " recorded round(s)" +
             (opt.policy ? " of policy '" + *opt.policy + "'" : std::string()) + " of " + path.string() +
             (why.empty() ? " (rounds are recorded for the first --trace-seconds of a run; ids are rows of "
                            "requests_<policy>.csv)"
                          : why),
         1);
  }
  for (const auto& [policy, list] : rounds) {
    std::size_t picked = 0;
    for (const auto& [at, d] : list) picked += d.contains("pick") && d["pick"].is_string();
    std::printf("policy %s: request %llu was in %zu round(s): placed in %zu, deferred in %zu\n", policy.c_str(),
                static_cast<unsigned long long>(opt.request), list.size(), picked, list.size() - picked);
    for (const auto& [at, d] : list) {
      // (a file edited by hand: a field of the wrong type is named by line)
      try {
        print_round(d);
      } catch (const nlohmann::json::exception& e) {
        fail(path.string() + ":" + std::to_string(at) + ": a field of this round has the wrong type (" + e.what() +
             ")");
      }
    }
    if (const CsvRequest r = of(policy); r.error && !r.error->empty())
      std::printf("  then it failed: %s\n", r.error->c_str());
  }
  return 0;
}

}  // namespace slicesched::cli
