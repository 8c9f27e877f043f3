// The benchmarks' load and cluster: pipelines of Llama-3-8B requests issued
// straight into a GMG (no scheduler), on a toy cluster of H100s. Used by
// `bench simulator`, `bench scheduler`, the demo and the simulator tests.
module;
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

export module slicesched.simulator.bench_cluster;
import slicesched.models.dense;
import slicesched.core.accel;
import slicesched.core.gmg;
import slicesched.core.graph;
import slicesched.core.ids;
import slicesched.core.status;

export namespace slicesched::bench {

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
      for (std::size_t g = 0; g < prev.size(); ++g)
        spec.ports.push_back({DenseDecoder::kv_port(static_cast<int>(g)), prev[g], true});
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
  auto model = DenseDecoder::make(llama3_8b());
  if (!model.ok()) return model.status();
  auto tmpl = c.templates->add(model.value()->make_template());
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

}  // namespace slicesched::bench
