// Hugging Face checkpoints in the safetensors format, memory-mapped: the
// reading and checking half of the live runtime's real weights. Plain C++
// (no LibTorch), so it compiles fast and tests without the model.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON mapping each tensor's name to {dtype, shape, data_offsets [begin,
// end)} (offsets into the data that follows the header; an optional
// "__metadata__" entry of strings), then the data. A directory holds either
// one model.safetensors or shards listed by model.safetensors.index.json
// ("weight_map": tensor name -> shard file).
//
// Failure: every function throws std::invalid_argument with one line naming
// the file (and the tensor where there is one) and what was expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime.h"

namespace slicesched::rt::ckpt {

// One tensor as its file's header describes it, over the file's mapping.
// Valid while the Checkpoint that made it lives.
struct TensorView {
  std::string file;   // the shard's path, for messages
  std::string dtype;  // "F32" | "F16" | "BF16" (the only ones a view is made of)
  std::vector<std::int64_t> shape;
  const void* data = nullptr;  // into the read-only mapping
  std::size_t bytes = 0;
};

// The tensors of a checkpoint directory, every shard mapped read-only
// (mmap, MAP_PRIVATE) for the object's lifetime. Immutable after open();
// safe to read from any thread.
class Checkpoint {
 public:
  // Maps and parses `dir`'s model.safetensors.index.json and its shards, or
  // its model.safetensors. Refuses: no safetensors in the directory, a file
  // shorter than its header says (truncated), a header that is not JSON or
  // whose entries lack dtype / shape / data_offsets, data offsets beyond the
  // file or not matching the shape, a dtype other than F32, F16 or BF16, a
  // tensor in two shards, a weight_map entry its shard does not hold.
  static std::shared_ptr<const Checkpoint> open(const std::string& dir);
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& dir() const { return dir_; }
  // Null when the checkpoint has no tensor of that name.
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  Checkpoint() = default;
  struct Mapping;
  void map_file(const std::string& path);  // adds the file's tensors
  std::string dir_;
  std::vector<std::unique_ptr<Mapping>> files_;
  std::map<std::string, TensorView> tensors_;
};

// A tensor a dense decoder's checkpoint must hold, in Hugging Face's names
// (Llama, Mistral, Qwen2): model.embed_tokens.weight, per layer
// model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ q/k/v .bias with
// qkv_bias), model.layers.{i}.mlp.{gate,up,down}_proj.weight,
// model.layers.{i}.{input,post_attention}_layernorm.weight,
// model.norm.weight and lm_head.weight (absent when tied).
struct ExpectedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
};
std::vector<ExpectedTensor> expected_tensors(const LlamaConfig& cfg);

// Checks `ck` holds exactly expected_tensors(cfg) with their shapes: a
// missing tensor ("DIR: tensor 'model.norm.weight' is missing (expected
// shape [64])"), a wrong shape ("FILE: tensor 'T' has shape [a, b], expected
// [c, d]"), and any other tensor ("FILE: unexpected tensor 'T' ...") are
// errors. Two kinds are ignored: *.rotary_emb.inv_freq buffers (recomputed
// from rope_theta) and, with tied embeddings, an lm_head.weight of the
// embedding's shape (Hugging Face ties it to the embedding on load too).
void check(const Checkpoint& ck, const LlamaConfig& cfg);

// "[4, 64]": a shape as messages show it.
std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace slicesched::rt::ckpt
