// The iteration plan and a head's log-probabilities on the wire
// (wire.cppm's encode_plan / decode_plan, encode_logprobs / decode_logprobs).
module;
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

module slicesched.executor.remote.wire;

namespace slicesched::wire {

namespace {

using json = nlohmann::json;

json sampling_json(const IterationPlan::Seq& s) {
  if (!s.sampling) return nullptr;
  const SamplingParams& p = *s.sampling;
  return {{"temperature", p.temperature},
          {"top_p", p.top_p},
          {"top_k", p.top_k},
          {"min_p", p.min_p},
          {"seed", p.seed},
          {"presence_penalty", p.presence_penalty},
          {"frequency_penalty", p.frequency_penalty},
          {"repetition_penalty", p.repetition_penalty},
          {"logprobs", p.logprobs},
          {"history", s.history},
          {"prompt_tokens", s.prompt_tokens}};
}

}  // namespace

std::string encode_plan(const std::vector<IterationPlan::Seq>& seqs) {
  json a = json::array();
  for (const auto& s : seqs) a.push_back({s.seq, s.position, s.tokens, sampling_json(s)});
  return a.dump();
}

Result<std::vector<IterationPlan::Seq>> decode_plan(const std::string& frame) {
  const json a = json::parse(frame, nullptr, false);
  if (!a.is_array()) return InvalidArgument("a malformed iteration plan (not a JSON array)");
  std::vector<IterationPlan::Seq> seqs;
  try {
    for (const json& s : a) {
      IterationPlan::Seq q;
      q.seq = s.at(0).get<std::uint64_t>();
      q.position = s.at(1).get<std::int64_t>();
      q.tokens = s.at(2).get<std::vector<std::int64_t>>();
      if (s.size() > 3 && !s[3].is_null()) {
        const json& j = s[3];
        auto p = std::make_shared<SamplingParams>();
        p->temperature = j.at("temperature").get<double>();
        p->top_p = j.at("top_p").get<double>();
        p->top_k = j.at("top_k").get<std::int64_t>();
        p->min_p = j.at("min_p").get<double>();
        p->seed = j.at("seed").get<std::uint64_t>();
        p->presence_penalty = j.at("presence_penalty").get<double>();
        p->frequency_penalty = j.at("frequency_penalty").get<double>();
        p->repetition_penalty = j.at("repetition_penalty").get<double>();
        p->logprobs = j.at("logprobs").get<std::int32_t>();
        q.history = j.at("history").get<std::vector<std::int64_t>>();
        q.prompt_tokens = j.at("prompt_tokens").get<std::int64_t>();
        q.sampling = std::move(p);
      }
      seqs.push_back(std::move(q));
    }
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("a malformed iteration plan: ") + e.what());
  }
  return seqs;
}

std::string encode_logprobs(const std::vector<TokenLogprob>& lp) {
  json a = json::array();
  for (const TokenLogprob& t : lp) {
    json top = json::array();
    for (const auto& [id, v] : t.top) top.push_back({id, v});
    a.push_back({t.logprob, top});
  }
  return a.dump();
}

Result<std::vector<TokenLogprob>> decode_logprobs(const std::string& text) {
  const json a = json::parse(text, nullptr, false);
  if (!a.is_array()) return InvalidArgument("malformed log-probabilities (not a JSON array)");
  std::vector<TokenLogprob> out;
  try {
    for (const json& t : a) {
      TokenLogprob l;
      l.logprob = t.at(0).get<double>();
      for (const json& e : t.at(1)) l.top.emplace_back(e.at(0).get<std::int64_t>(), e.at(1).get<double>());
      out.push_back(std::move(l));
    }
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("malformed log-probabilities: ") + e.what());
  }
  return out;
}

}  // namespace slicesched::wire
