// StopWatch: when a request's output is complete before max_tokens.
module;
#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

module slicesched.serving.api;

namespace slicesched::serving {

StopWatch::StopWatch(const ServedModel& model, const GenerationOptions& gen)
    : model_(model), stop_(gen.stop), stop_ids_(gen.stop_token_ids) {
  if (!gen.ignore_eos) stop_ids_.insert(stop_ids_.end(), model.eos_ids.begin(), model.eos_ids.end());
  for (const std::string& s : stop_) longest_stop_ = std::max(longest_stop_, s.size());
  if (!stop_.empty()) decoder_ = std::make_unique<StreamDecoder>(model_);
}

// A stop string may start in text already seen, up to its length back
// from `before` (the text's length before what was just added).
void StopWatch::cut_at_stop(std::size_t before) {
  const std::size_t from = before > longest_stop_ ? before - longest_stop_ : 0;
  std::size_t cut = std::string::npos;
  for (const std::string& s : stop_)
    if (const std::size_t at = text_.find(s, from); at != std::string::npos) cut = std::min(cut, at);
  if (cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
  }
}

bool StopWatch::add(std::int64_t token) {
  if (stopped_) return true;
  tokens_.push_back(token);
  if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) {
    stopped_ = true;  // the stop token is output, its text is not
    if (decoder_) text_ += decoder_->flush(std::span(tokens_).first(tokens_.size() - 1));
    return true;
  }
  text_tokens_ = tokens_.size();
  if (!decoder_) return false;
  const std::size_t before = text_.size();
  text_ += decoder_->next(tokens_);
  cut_at_stop(before);
  return stopped_;
}

void StopWatch::end() {
  if (stopped_ || !decoder_) return;
  const std::size_t before = text_.size();
  text_ += decoder_->flush(std::span(tokens_).first(text_tokens_));
  cut_at_stop(before);
}

std::size_t StopWatch::settled() const {
  if (stopped_) return text_.size();
  // Hold back what a stop string could still begin with, at a character boundary.
  const std::size_t hold = longest_stop_ - 1;  // (a whole stop would have ended it)
  std::size_t n = text_.size() > hold ? text_.size() - hold : 0;
  while (n > 0 && n < text_.size() && (static_cast<unsigned char>(text_[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace slicesched::serving
