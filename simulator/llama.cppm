// Llama as the simulator's tests and benchmarks knew it before models/: a
// shape and its graph template, now a thin front of the dense-decoder
// family (models/dense.cppm), and the benchmark generator
// (simulator/bench_cluster.cppm) under its old names.
module;
#include <cstdint>
#include <string>

export module slicesched.simulator.llama;
export import slicesched.core;
export import slicesched.models.dense;
export import slicesched.simulator.bench_cluster;

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

// The dense decoder of that shape (heads = hidden / head_dim).
inline DenseDecoderConfig dense_config(const std::string& name, const Shape& s = {}) {
  DenseDecoderConfig c;
  c.name = name;
  c.hidden = s.hidden, c.kv_heads = s.kv_heads, c.head_dim = s.head_dim, c.heads = s.hidden / s.head_dim;
  c.mlp = s.mlp, c.vocab = s.vocab, c.layers = s.layers, c.groups = s.groups, c.dtype = s.dtype;
  return c;
}

// The template (DenseDecoder::make_template).
inline GraphTemplate make_template(const std::string& name, const Shape& s = {}) {
  return DenseDecoder::make(dense_config(name, s)).value()->make_template();
}

using bench::h100_cluster;
using bench::issue_pipelines;
using bench::ToyCluster;

}  // namespace slicesched::llama
