// The models of a config: building them ([model] / [[models]] tables, a
// Hugging Face config.json), where their weights are resident, and the
// cross-checks between models, the cluster and the tenants.
module;
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

module slicesched.config;
import slicesched.core.graph;
import slicesched.models.model;
import slicesched.models.dense;
import slicesched.models.work;
import slicesched.hardware.roofline;
import slicesched.config.accelerators;

namespace slicesched {

namespace {

std::string gib(std::int64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(b) / 1073741824.0);
  return s;
}

std::string names(const ExperimentConfig& cfg) {
  std::string out;
  for (const auto& m : cfg.models) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

DType dtype_of(const std::string& d) {
  return d == "float32" ? DType::kF32 : d == "float16" ? DType::kF16 : DType::kBF16;
}

}  // namespace

const ModelConfig* find_model(const ExperimentConfig& cfg, const std::string& name) {
  for (const auto& m : cfg.models)
    if (m.name == name) return &m;
  return nullptr;
}

const ModelConfig& model_of(const ExperimentConfig& cfg, const TenantConfig& t) {
  if (t.model.empty()) return cfg.models.front();
  const ModelConfig* m = find_model(cfg, t.model);
  return m ? *m : cfg.models.front();
}

Result<std::shared_ptr<const DenseDecoder>> make_model(const ModelConfig& m) {
  DenseDecoderConfig c;
  if (!m.hf_config.empty()) {
    auto read = read_hf_config(m.hf_config, m.name, m.groups);
    const std::string key = m.checkpoint.empty() ? ".hf_config: " : ".checkpoint: ";
    if (!read.ok()) return Status(read.status().code(), m.where + key + read.status().message());
    c = std::move(read).value();
  } else {
    c = dense_preset(m.preset).value_or(llama3_8b());
    c.name = m.name;
    c.hidden = m.hidden, c.layers = m.layers, c.heads = m.heads, c.kv_heads = m.kv_heads, c.mlp = m.mlp;
    c.vocab = m.vocab, c.groups = m.groups;
    const std::int64_t preset_head_dim = c.head_dim;
    c.head_dim = m.head_dim > 0 ? m.head_dim : m.hidden / m.heads;
    // Partial RoPE turns the preset's share of each head (Phi-2's 0.4) of
    // a head resized here, as transformers does: int(share x head_dim),
    // which must be even and at least two (read_hf_config's rule).
    if (c.rotary_dim > 0 && c.head_dim != preset_head_dim) {
      const double share = static_cast<double>(c.rotary_dim) / static_cast<double>(preset_head_dim);
      c.rotary_dim = static_cast<std::int64_t>(share * static_cast<double>(c.head_dim));
      if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
        return InvalidArgument(m.where + ": a head of " + std::to_string(c.head_dim) + " dimensions leaves " +
                               std::to_string(c.rotary_dim) + " to preset '" + m.preset + "''s partial RoPE (" +
                               std::to_string(share).substr(0, 4) +
                               " of each head), expected an even number of at least 2 (set head_dim)");
    }
    c.dtype = dtype_of(m.dtype);
    c.rope_theta = m.rope_theta;
    c.tied_embeddings = m.tied_embeddings, c.qkv_bias = m.qkv_bias;
    c.context_window = m.context_window;
  }
  // A spread model's LM head runs on the last share, the embedding on the
  // first: with tied embeddings the last share holds a copy of the matrix
  // (as a pipeline-parallel engine keeps one on its last stage), so its
  // weights are charged there too. (spread is simulated only.)
  if (!m.spread.empty()) c.tied_embeddings = false;
  auto made = DenseDecoder::make(std::move(c));
  if (!made.ok()) return Status(made.status().code(), m.where + ": " + made.status().message());
  return made;
}

std::vector<std::vector<std::size_t>> residency(const ExperimentConfig& cfg) {
  std::vector<std::int64_t> weights;
  for (const auto& m : cfg.models) {
    auto made = make_model(m);
    weights.push_back(made.ok() ? made.value()->weight_bytes() : 0);
  }
  std::vector<std::vector<std::size_t>> out;
  for (const auto& a : cfg.accelerators) {
    std::vector<std::size_t> held;
    if (!a.models.empty()) {
      for (const auto& name : a.models)
        for (std::size_t i = 0; i < cfg.models.size(); ++i)
          if (cfg.models[i].name == name) held.push_back(i);
    } else if (cfg.models.size() == 1) {
      if (cfg.models[0].spread.empty()) held.push_back(0);
    } else {
      // Every model that fits beside those before it, in config order (a
      // spread model is held in shares, spread_holders()).
      std::int64_t used = 0;
      for (std::size_t i = 0; i < cfg.models.size(); ++i)
        if (cfg.models[i].spread.empty() && used + weights[i] < a.hbm_bytes) {
          used += weights[i];
          held.push_back(i);
        }
    }
    out.push_back(std::move(held));
  }
  return out;
}

std::vector<std::size_t> spread_holders(const ExperimentConfig& cfg, const ModelConfig& m) {
  std::vector<std::size_t> out;
  if (m.spread.empty()) return out;
  auto made = make_model(m);
  if (!made.ok()) return out;
  const auto ops = made.value()->ops();
  const std::size_t k = m.spread.size();
  const auto groups = static_cast<std::size_t>(std::max(1, m.groups));
  for (const ModelOp& op : ops) {
    // Embedding with the first group, the head with the last.
    const std::size_t g = op.role == OpRole::kLayers  ? static_cast<std::size_t>(op.group)
                          : op.role == OpRole::kEmbed ? 0
                                                      : groups - 1;
    const std::string& name = m.spread[std::min(k - 1, g * k / groups)];
    std::size_t a = 0;
    while (a < cfg.accelerators.size() && cfg.accelerators[a].name != name) ++a;
    out.push_back(a);
  }
  return out;
}

std::int64_t tp_extra_bytes(const DenseDecoder& model, int tp, const std::vector<bool>& held) {
  const DenseDecoderConfig& c = model.config();
  const std::int64_t pad = (c.vocab + tp - 1) / tp * tp - c.vocab;  // vocabulary rows
  // Hidden-sized vectors every rank holds whole: a norm's weight (and
  // LayerNorm's bias), and the biases of the row-parallel projections
  // (o_proj and down_proj: added once, after their all-reduce).
  const std::int64_t per_norm = c.layer_norm ? 2 : 1;
  const std::int64_t per_layer = (c.parallel_block ? 1 : 2) * per_norm + (c.linear_bias ? 2 : 0);
  std::int64_t copies = 0, pad_rows = 0;
  const auto ops = model.ops();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (!held.empty() && !held[i]) continue;
    switch (ops[i].role) {
      case OpRole::kEmbed:
        pad_rows += pad;
        break;
      case OpRole::kLayers:
        copies += per_layer * ops[i].layers;
        break;
      case OpRole::kHead:
        copies += per_norm;  // the final norm
        if (!c.tied_embeddings) pad_rows += pad;
        break;
    }
  }
  // (an LM head's bias pads with its rows: one element a padded row)
  const std::int64_t pad_bias = !c.tied_embeddings && c.linear_bias && (held.empty() || held.back()) ? pad : 0;
  return ((static_cast<std::int64_t>(tp - 1) * copies + pad_rows) * c.hidden + pad_bias) * dtype_bytes(c.dtype);
}

bool plays_all_reduce_profile(const ExperimentConfig& cfg, const AcceleratorConfig& a) {
  const GroundTruthConfig& g = cfg.ground_truth;
  return a.tp > 1 && a.tp_link.empty() && !g.all_reduce_csv.empty() &&
         (g.all_reduce_type.empty() || same_type(cfg.accelerator_types, g.all_reduce_type, a.type));
}

Status apply_tp_groups(ExperimentConfig& cfg) {
  const auto held = residency(cfg);
  for (std::size_t i = 0; i < cfg.accelerators.size(); ++i) {
    AcceleratorConfig& a = cfg.accelerators[i];
    if (a.tp == 1) continue;
    cfg.ground_truth.tp_groups = true;
    // The models it runs: those it holds whole and those spread onto it.
    std::vector<std::size_t> runs = held[i];
    for (std::size_t m = 0; m < cfg.models.size(); ++m)
      if (std::find(cfg.models[m].spread.begin(), cfg.models[m].spread.end(), a.name) != cfg.models[m].spread.end())
        runs.push_back(m);
    std::int64_t extra = 0;
    for (std::size_t m : runs) {
      // A spread model's stage holds only its own operators' copies.
      std::vector<bool> ops_here;
      for (std::size_t holder : spread_holders(cfg, cfg.models[m])) ops_here.push_back(holder == i);
      auto made = make_model(cfg.models[m]);
      if (!made.ok()) return made.status();
      const DenseDecoderConfig& c = made.value()->config();
      const std::string tp = std::to_string(a.tp);
      auto whole = [&](std::int64_t n) { return n % a.tp == 0; };
      if (!whole(c.heads) || !whole(c.kv_heads) || !whole(c.mlp))
        return InvalidArgument(a.tp_where + ": accelerator '" + a.name + "' is a tensor-parallel group of " + tp +
                               ", which does not divide '" + cfg.models[m].name + "''s " + std::to_string(c.heads) +
                               " heads, " + std::to_string(c.kv_heads) + " KV heads and MLP width " +
                               std::to_string(c.mlp) + " evenly (expected a common divisor)");
      extra += tp_extra_bytes(*made.value(), a.tp, ops_here);
    }
    if (extra >= a.hbm_bytes) {
      auto mib = [](std::int64_t b) {
        char s[32];
        std::snprintf(s, sizeof s, "%.2f MiB", static_cast<double>(b) / 1048576.0);
        return std::string(s);
      };
      return InvalidArgument(a.tp_where + ": accelerator '" + a.name + "' has " + mib(a.hbm_bytes) +
                             " of HBM in its GPUs; the copies each holds need " + mib(extra));
    }
    a.hbm_bytes -= extra;
    if (cfg.ground_truth.present && cfg.ground_truth.calibrated.empty() && a.tp_link.empty() &&
        !plays_all_reduce_profile(cfg, a))
      return InvalidArgument(a.tp_where + ": accelerator '" + a.name +
                             "' is a tensor-parallel group: its all-reduces need " +
                             (cfg.ground_truth.all_reduce_csv.empty()
                                  ? "ground_truth.all_reduce (a measured profile)"
                                  : "a measured profile of its type (ground_truth.all_reduce measured " +
                                        cfg.ground_truth.all_reduce_type + ", not " + a.type + ")") +
                             " or tp_link (the link class between its GPUs)");
  }
  return Status::Ok();
}

Status validate_models(const ExperimentConfig& cfg) {
  std::vector<std::int64_t> weights;
  for (const auto& m : cfg.models) {
    auto made = make_model(m);
    if (!made.ok()) return made.status();
    weights.push_back(made.value()->weight_bytes());
  }
  // Every group's list names known models, and they fit together.
  for (const auto& a : cfg.accelerators) {
    std::int64_t used = 0;
    std::string listed;
    for (const auto& name : a.models) {
      const ModelConfig* m = find_model(cfg, name);
      if (!m) return InvalidArgument(a.models_where + ": no model named '" + name + "' (models: " + names(cfg) + ")");
      used += weights[static_cast<std::size_t>(m - cfg.models.data())];
      listed += (listed.empty() ? "'" : ", '") + name + "'";
    }
    if (!a.models.empty() && used >= a.hbm_bytes)
      return InvalidArgument(a.models_where + ": accelerator '" + a.name + "' has " + gib(a.hbm_bytes) +
                             " of HBM; the weights of " + listed + " need " + gib(used));
  }
  // A spread model: every name is an accelerator of the cluster, that
  // accelerator lists no models whole beside it, and each share fits.
  for (const auto& m : cfg.models) {
    if (m.spread.empty()) continue;
    if (static_cast<std::size_t>(m.groups) < m.spread.size())
      return InvalidArgument(m.where + ".spread: " + std::to_string(m.spread.size()) + " accelerators, but '" + m.name +
                             "' has only " + std::to_string(m.groups) + " layer groups (one at least for each)");
    for (const auto& a : cfg.accelerators)
      if (std::find(a.models.begin(), a.models.end(), m.name) != a.models.end())
        return InvalidArgument(a.models_where + ": accelerator '" + a.name + "' lists '" + m.name +
                               "' whole, which is spread (its spread decides who holds what)");
    for (const auto& name : m.spread)
      if (std::none_of(cfg.accelerators.begin(), cfg.accelerators.end(),
                       [&](const AcceleratorConfig& a) { return a.name == name; }))
        return InvalidArgument(m.where + ".spread: no accelerator named '" + name + "' in the cluster");
    auto made = make_model(m);
    const GraphTemplate t = made.value()->make_template();
    const auto at = spread_holders(cfg, m);
    std::vector<std::int64_t> share(cfg.accelerators.size(), 0);
    for (std::size_t i = 0; i < at.size(); ++i) share[at[i]] += t.ops()[i].weight_bytes;
    for (std::size_t a = 0; a < share.size(); ++a)
      if (share[a] > 0 && share[a] >= cfg.accelerators[a].hbm_bytes)
        return InvalidArgument(m.where + ".spread: accelerator '" + cfg.accelerators[a].name + "' has " +
                               gib(cfg.accelerators[a].hbm_bytes) + " of HBM; its share of '" + m.name +
                               "''s weights needs " + gib(share[a]) + " (spread it over more accelerators)");
  }
  const auto held = residency(cfg);
  auto resident_anywhere = [&](std::size_t model) {
    if (!cfg.models[model].spread.empty()) return true;
    for (const auto& h : held)
      for (std::size_t i : h)
        if (i == model) return true;
    return false;
  };
  if (cfg.models.size() > 1)
    for (std::size_t i = 0; i < cfg.models.size(); ++i) {
      if (resident_anywhere(i)) continue;
      std::int64_t largest = 0;
      for (const auto& a : cfg.accelerators) largest = std::max(largest, a.hbm_bytes);
      if (weights[i] >= largest)
        return InvalidArgument(cfg.models[i].where + ": model '" + cfg.models[i].name + "' needs " + gib(weights[i]) +
                               " of weights and fits on no accelerator (the largest has " + gib(largest) + " of HBM)");
    }
  for (const auto& t : cfg.tenants) {
    if (t.model.empty() && cfg.models.size() > 1)
      return InvalidArgument(t.model_where + ": tenant '" + t.name + "' must name its model (models: " + names(cfg) +
                             ")");
    const ModelConfig* m = t.model.empty() ? &cfg.models.front() : find_model(cfg, t.model);
    if (!m)
      return InvalidArgument(t.model_where + ": tenant '" + t.name + "' names no known model '" + t.model +
                             "' (models: " + names(cfg) + ")");
    const auto index = static_cast<std::size_t>(m - cfg.models.data());
    if (cfg.models.size() > 1 && !resident_anywhere(index)) {
      // Say why: lists that leave it out, or the default filling each
      // accelerator with the models before it in config order.
      const bool listed = std::any_of(cfg.accelerators.begin(), cfg.accelerators.end(),
                                      [](const AcceleratorConfig& a) { return !a.models.empty(); });
      return InvalidArgument(
          t.model_where + ": tenant '" + t.name + "' runs model '" + m->name + "', which no accelerator holds (" +
          (listed ? "list it in an accelerator group's models, or leave models out so it goes where it fits"
                  : "by default each accelerator holds the models that fit, in config order, and the ones before "
                    "it took the room: list it in an accelerator group's models") +
          ")");
    }
    // A synthetic stream's requests are all alike: check them now (a
    // trace's are checked when it is read, compose/policy.cpp).
    const StreamConfig& st = t.stream;
    if (st.kind != StreamConfig::Kind::kTrace && !m->truncate_overflow) {
      auto made = make_model(*m);
      const std::int64_t window = made.value()->context_window();
      if (st.input_tokens + st.output_tokens > window)
        return InvalidArgument(
            (st.tokens_where.empty() ? t.model_where : st.tokens_where) + ": tenant '" + t.name +
            "' sends requests of " + std::to_string(st.input_tokens + st.output_tokens) + " tokens (" +
            std::to_string(st.input_tokens) + " in, " + std::to_string(st.output_tokens) + " out), more than model '" +
            m->name + "''s context window of " + std::to_string(window) + " (on_overflow = \"truncate\" cuts them)");
    }
  }
  return Status::Ok();
}

Status resolve_profile_models(ExperimentConfig& cfg) {
  GroundTruthConfig& g = cfg.ground_truth;
  g.off_profile_models.clear();
  // (live mode plays no ground truth: nothing to resolve)
  if (!g.present || !g.calibrated.empty()) return Status::Ok();
  // The measured model's shape: a preset's (a profile measures a real
  // model, and a config's model may share a preset's name but not its
  // shape), else a model of this config.
  std::optional<DenseShape> measured;
  if (!g.layers_csv.empty() && !g.layers_model.empty()) {
    if (auto preset = dense_preset(g.layers_model)) {
      auto made = DenseDecoder::make(std::move(*preset));
      if (!made.ok()) return Status(made.status().code(), g.layers_model_where + ": " + made.status().message());
      measured = made.value()->shape();
    } else if (const ModelConfig* m = find_model(cfg, g.layers_model)) {
      auto made = make_model(*m);
      if (!made.ok()) return made.status();
      measured = made.value()->shape();
    }
    if (measured && !llama_block(*measured))
      return InvalidArgument(g.layers_model_where + ": '" + g.layers_model +
                             "' runs another block than Llama's (attention and MLP in parallel, or a plain MLP), and "
                             "an LLMServingSim layers table times Llama's (gate_proj, post_layernorm): name the model "
                             "the table measured");
    if (!measured) {
      std::string presets;
      for (std::string_view n : dense_preset_names()) presets += (presets.empty() ? "" : ", ") + std::string(n);
      return InvalidArgument(g.layers_model_where + ": no model or preset named '" + g.layers_model +
                             "' (models: " + names(cfg) + "; presets: " + presets + ")");
    }
  }
  std::vector<const ModelConfig*> float32;
  for (const auto& m : cfg.models) {
    auto made = make_model(m);
    if (!made.ok()) return made.status();
    const DenseShape s = made.value()->shape();
    // A layer of another shape is another measurement: its model plays the
    // roofline (the profile's times scaled by layer count would be another
    // model's).
    // (LLMServingSim's tables time Llama's block: gate_proj, post_layernorm;
    // a model of another block form is never what one measured)
    if ((measured && s != *measured) || (!g.layers_csv.empty() && !llama_block(s)))
      g.off_profile_models.push_back(m.name);
    if (s.elem_bytes >= 4) float32.push_back(&m);
  }
  if (g.roofline_fit.empty() && g.needs_roofline()) {
    // The general fit beside the cluster's type tables, else the shipped
    // one: a type table of one's own elsewhere has no fit beside it (it was
    // looked for there only, and the error named ground_truth.roofline, a
    // key the config did not set).
    std::string beside =
        default_roofline_fit(cfg.accelerator_types.empty()
                                 ? default_accelerator_dir()
                                 : std::filesystem::path(cfg.accelerator_types.front().source).parent_path().string());
    std::error_code ec;
    if (!std::filesystem::exists(beside, ec)) beside = default_roofline_fit(default_accelerator_dir());
    g.roofline_fit = std::move(beside);
  }
  // A float32 model computes at the type's plain FP32 rate wherever it
  // plays the roofline: that type's table must give it. (accelerator_types
  // holds each table the cluster names, once.)
  for (const ModelConfig* m : float32) {
    const bool off = g.layers_csv.empty() || std::find(g.off_profile_models.begin(), g.off_profile_models.end(),
                                                       m->name) != g.off_profile_models.end();
    for (const AcceleratorType& t : cfg.accelerator_types) {
      const bool profile_type = g.layers_type.empty() || same_type(cfg.accelerator_types, g.layers_type, t.name);
      if ((off || !profile_type) && !(t.fp32_flops > 0))
        return InvalidArgument(m->where + ": model '" + m->name + "' is float32 and plays the roofline on type '" +
                               t.name + "', whose table (" + t.source +
                               ") gives no fp32_tflops (its plain FP32 FLOP/s, which a float32 model computes at)");
    }
  }
  return Status::Ok();
}

}  // namespace slicesched
