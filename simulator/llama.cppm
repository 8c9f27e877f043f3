// A Llama-3-8B-shaped graph template: embedding, four groups of eight
// decoder layers, LM head. One template serves prefill (context = 0, no KV
// attached) and decode (tokens = 1, each group attaches to the KV cache its
// counterpart of the previous step retained).
module;
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

export module slicesched.simulator.llama;
export import slicesched.core;

export namespace slicesched::llama {

struct Shape {
  std::int64_t hidden = 4096;
  std::int64_t kv_heads = 8;
  std::int64_t head_dim = 128;
  std::int64_t mlp = 14336;
  std::int64_t vocab = 128256;
  int layers = 32;
  int groups = 4;              // scheduling units of layers/groups layers each
  DType dtype = DType::kBF16;  // weights, activations and KV cache
};

inline std::string group_op(int g) { return "layers" + std::to_string(g); }
inline std::string kv_port(int g) { return "kv" + std::to_string(g); }

// Builds the template. Dims: `tokens` (new tokens this step, summed over
// its sequences), `sequences` (sequences in the step: 1 for one prompt's
// prefill, the batch size for a decode batch), `context` (cached tokens
// attended this step) and `kv_prev` (tokens in the cache the step attaches
// to; equal to `context` unless sequences just finished). Cost features per
// group: {tokens, tokens*(context+tokens), context+tokens, 1} (linear
// layers, attention, KV reads, weight reads); the head's: {sequences, 1}
// (it computes logits for each sequence's last token only, then reads its
// weights); priors are H100 rooflines (bf16 at ~400 TFLOP/s effective,
// 3.35 TB/s HBM).
inline GraphTemplate make_template(const std::string& name, const Shape& s = {}) {
  TemplateBuilder b(name);
  Expr T = b.dim("tokens"), S = b.dim("sequences"), C = b.dim("context");
  auto k = [](std::int64_t v) { return Expr::constant(v); };
  const int per_group = s.layers / s.groups;
  const DType dt = s.dtype;
  const std::int64_t eb = dtype_bytes(dt);
  const std::int64_t kv_per_token = 2 * per_group * s.kv_heads * s.head_dim;  // K and V, elements
  const std::int64_t layer_params =
      2 * s.hidden * s.hidden + 2 * s.hidden * s.kv_heads * s.head_dim + 3 * s.hidden * s.mlp + 2 * s.hidden;
  const double flops_per_s = 400e12, hbm_per_s = 3.35e12;
  const double group_bytes = static_cast<double>(eb) * per_group * static_cast<double>(layer_params);

  // Prompt tokens come from the host; a decode step's one token comes from
  // the previous step's head.
  b.port("tokens", {{T}, DType::kI64}, /*optional=*/true);
  // The KV cache a step takes over holds `kv_prev` tokens: with continuous
  // batching it can be more than `context`, the tokens still attended (the
  // sequences that finished are dropped from it by this step).
  Expr kv_prev = b.dim("kv_prev");
  for (int g = 0; g < s.groups; ++g) b.port(kv_port(g), {{kv_prev * k(kv_per_token)}, dt}, true);

  b.op("embed")
      .input("tokens")
      .output({{T * k(s.hidden)}, dt})
      .features({T, k(1)})
      .prior({static_cast<double>(eb) * s.hidden / hbm_per_s, 5e-6})  // one row read per token
      .weights(eb * s.vocab * s.hidden);
  std::string prev = "embed";
  for (int g = 0; g < s.groups; ++g) {
    b.op(group_op(g))
        .input(prev, {{T * k(s.hidden)}, dt})
        .input(kv_port(g))
        .output({{T * k(s.hidden)}, dt})
        .workspace(T * k(4 * s.mlp))
        .retain("kv", {{(C + T) * k(kv_per_token)}, dt})
        .features({T, T * (C + T), C + T, k(1)})
        .prior({2.0 * per_group * layer_params / flops_per_s, 4.0 * per_group * s.hidden / flops_per_s,
                static_cast<double>(eb) * kv_per_token / hbm_per_s, group_bytes / hbm_per_s})
        .weights(static_cast<std::int64_t>(group_bytes));
    prev = group_op(g);
  }
  // Final norm, LM head and greedy sampling on each sequence's last token:
  // the norm's float rows and the logits (at most 4 bytes an element) per
  // sequence, and the sampled next token of each.
  b.op("head")
      .input(prev)
      .output({{S}, DType::kI64})
      .workspace(S * k(4 * (s.vocab + 2 * s.hidden)))
      .features({S, k(1)})
      // Per sequence: its logits' matmul; fixed: reading the LM head.
      .prior({2.0 * s.vocab * s.hidden / flops_per_s, static_cast<double>(eb) * s.vocab * s.hidden / hbm_per_s})
      .weights(eb * (s.vocab * s.hidden + s.hidden));  // LM head and final norm
  return std::move(b).build().value();
}

// Appends requests (one prefill of `prompt` tokens, then `decode_steps`
// decode instances chained through the KV caches and the sampled token) until at least `ops`
// operators are issued at time `t`. Request r runs on the pipeline of
// `groups` consecutive accelerators starting at (r * groups) mod N, so
// every layer-group boundary is a cross-accelerator transfer. Weights must
// already be resident. Returns the number of requests.
inline Result<std::int64_t> issue_pipelines(Gmg& gmg, TemplateId tmpl, std::int64_t ops, std::int64_t prompt,
                                            int decode_steps, Nanos t = 0, int groups = 4) {
  const auto n = static_cast<std::int64_t>(gmg.accels().size());
  std::int64_t issued = 0, requests = 0;
  while (issued < ops) {
    const std::int64_t base = (requests * groups) % n;
    auto place = [&](int slot) { return static_cast<AccelId>((base + slot) % n); };
    std::vector<OpId> prev;  // previous step's group ops
    OpId prev_head = kNoOp;
    for (int step = 0; step <= decode_steps && issued < ops; ++step) {
      InstanceSpec spec;
      spec.tmpl = tmpl;
      spec.priority = 0;
      spec.tenant = static_cast<std::uint32_t>(requests);
      const std::int64_t context = step == 0 ? 0 : prompt + step - 1;
      spec.dims = {{"tokens", step == 0 ? prompt : 1}, {"sequences", 1}, {"context", context}, {"kv_prev", context}};
      for (std::size_t g = 0; g < prev.size(); ++g) spec.ports.push_back({kv_port(static_cast<int>(g)), prev[g], true});
      if (prev_head != kNoOp) spec.ports.push_back({"tokens", prev_head, false});
      auto inst = gmg.instantiate(spec);
      if (!inst.ok()) return inst.status();
      const auto& o = inst->ops;  // embed, groups..., head
      prev.assign(o.begin() + 1, o.end() - 1);
      prev_head = o.back();
      for (std::size_t i = 0; i < o.size(); ++i) {
        int slot = i == 0 ? 0 : (i == o.size() - 1 ? groups - 1 : static_cast<int>(i) - 1);
        if (Status s = gmg.issue(o[i], place(slot), t); !s.ok()) return s;
      }
      issued += static_cast<std::int64_t>(o.size());
    }
    ++requests;
  }
  return requests;
}

// The toy cluster of the demo and the benchmarks: n H100s (80 GiB) named
// gpu0.. on one NVLink class (300 GB/s, 5 us), Llama-3-8B's template, and a
// GMG holding its weights on every accelerator.
struct ToyCluster {
  std::shared_ptr<TemplateRegistry> templates = std::make_shared<TemplateRegistry>();
  TemplateId tmpl = 0;
  std::shared_ptr<AcceleratorSet> accels = std::make_shared<AcceleratorSet>();
  std::unique_ptr<Gmg> gmg;
};

inline Result<ToyCluster> h100_cluster(int n) {
  ToyCluster c;
  auto tmpl = c.templates->add(make_template("llama3-8b"));
  if (!tmpl.ok()) return tmpl.status();
  c.tmpl = tmpl.value();
  if (auto link = c.accels->add_link_class("nvlink", 300e9, 5e-6); !link.ok()) return link.status();
  for (int i = 0; i < n; ++i)
    if (auto a = c.accels->add("gpu" + std::to_string(i), "H100", 80ll << 30); !a.ok()) return a.status();
  c.gmg = std::make_unique<Gmg>(c.templates, c.accels);
  for (AccelId a = 0; a < c.accels->size(); ++a)
    if (Status s = c.gmg->place_weights(c.tmpl, a); !s.ok()) return s;
  return c;
}

}  // namespace slicesched::llama
