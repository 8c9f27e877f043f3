// model_chat_template and model_eos_ids: what a checkpoint's
// tokenizer_config.json, chat_template.jinja and generation_config.json say
// about chat and the end of generation (read as transformers reads them).
module;
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

module slicesched.tokenizer;

namespace slicesched {

namespace {

namespace fs = std::filesystem;

Result<std::string> read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return NotFound(p.string() + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Result<nlohmann::json> read_json(const fs::path& p) {
  auto text = read_text(p);
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(text.value(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(p.string() + ": not a JSON object");
  return j;
}

// The folder holding the model's tokenizer files ("" when none).
fs::path tokenizer_dir(const ModelConfig& m) {
  std::error_code ec;
  if (!m.tokenizer.empty())
    return fs::is_directory(m.tokenizer, ec) ? fs::path(m.tokenizer) : fs::path(m.tokenizer).parent_path();
  if (!m.checkpoint.empty()) return fs::path(m.checkpoint);
  return {};
}

std::string token_text(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return {};
}

}  // namespace

Result<std::optional<ChatTemplate>> model_chat_template(const ModelConfig& m, const std::string& override_file) {
  ChatTemplate t;
  const fs::path dir = tokenizer_dir(m);
  std::error_code ec;
  nlohmann::json config = nlohmann::json::object();
  const fs::path config_file = dir / "tokenizer_config.json";
  if (!dir.empty() && fs::exists(config_file, ec)) {
    auto c = read_json(config_file);
    if (!c.ok()) return c.status();
    config = std::move(c).value();
  }
  t.bos = token_text(config, "bos_token");
  t.eos = token_text(config, "eos_token");
  if (!override_file.empty()) {
    auto text = read_text(override_file);
    if (!text.ok()) return Status(text.status().code(), "--chat-template: " + text.status().message());
    t.text = std::move(text).value();
    t.source = override_file;
    return std::optional<ChatTemplate>(std::move(t));
  }
  if (const auto ct = config.find("chat_template"); ct != config.end() && !ct->is_null()) {
    t.source = config_file.string() + " chat_template";
    if (ct->is_string()) {
      t.text = ct->get<std::string>();
    } else if (ct->is_array()) {
      for (const auto& named : *ct)
        if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
            named["template"].is_string())
          t.text = named["template"].get<std::string>();
      if (t.text.empty())
        return InvalidArgument(config_file.string() + ": chat_template is a list without a \"default\" template");
    } else {
      return InvalidArgument(config_file.string() + ": chat_template: expected a string or a list of {name, template}");
    }
    return std::optional<ChatTemplate>(std::move(t));
  }
  if (const fs::path jinja = dir / "chat_template.jinja"; !dir.empty() && fs::exists(jinja, ec)) {
    auto text = read_text(jinja);
    if (!text.ok()) return text.status();
    t.text = std::move(text).value();
    t.source = jinja.string();
    return std::optional<ChatTemplate>(std::move(t));
  }
  return std::optional<ChatTemplate>();
}

Result<std::vector<std::int64_t>> model_eos_ids(const ModelConfig& m, const Tokenizer* tokenizer) {
  std::vector<std::int64_t> ids;
  std::error_code ec;
  if (!m.checkpoint.empty()) {
    const fs::path gen = fs::path(m.checkpoint) / "generation_config.json";
    if (fs::exists(gen, ec)) {
      auto j = read_json(gen);
      if (!j.ok()) return j.status();
      if (const auto e = j.value().find("eos_token_id"); e != j.value().end() && !e->is_null()) {
        if (e->is_number_integer()) {
          ids.push_back(e->get<std::int64_t>());
        } else if (e->is_array()) {
          for (const auto& v : *e) {
            if (!v.is_number_integer())
              return InvalidArgument(gen.string() + ": eos_token_id: expected an id or a list of ids");
            ids.push_back(v.get<std::int64_t>());
          }
        } else {
          return InvalidArgument(gen.string() + ": eos_token_id: expected an id or a list of ids");
        }
      }
    }
  }
  if (ids.empty() && tokenizer && tokenizer->eos_id() >= 0) ids.push_back(tokenizer->eos_id());
  return ids;
}

}  // namespace slicesched
