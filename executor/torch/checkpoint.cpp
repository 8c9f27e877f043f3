// Safetensors checkpoints: mapping, header parsing and the check against
// the dense decoder's expected tensors (checkpoint.h).
#include "checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace slicesched::rt::ckpt {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::invalid_argument(where + ": " + what);
}

// Bytes per element of the dtypes the runtime converts from; 0 for the
// other safetensors dtypes (named so the message can say what it saw).
std::size_t element_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

bool known_dtype(const std::string& dtype) {
  static const std::set<std::string> kAll = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                                             "BF16", "I32", "U32", "F32",     "F64",     "I64", "U64"};
  return kAll.count(dtype) != 0;
}

// One header entry -> a view over `data` (the bytes after the header).
TensorView parse_entry(const std::string& file, const std::string& name, const nlohmann::json& e,
                       const unsigned char* data, std::uint64_t data_bytes) {
  auto fail = [&](const std::string& what) { throw std::invalid_argument(file + ": tensor '" + name + "' " + what); };
  if (!e.is_object()) fail("expected a header entry {dtype, shape, data_offsets}, got " + e.dump());
  if (!e.contains("dtype") || !e["dtype"].is_string()) fail("has no dtype string");
  TensorView v;
  v.file = file;
  v.dtype = e["dtype"].get<std::string>();
  if (!known_dtype(v.dtype)) fail("has unknown dtype \"" + v.dtype + "\"");
  const std::size_t eb = element_bytes(v.dtype);
  if (eb == 0) fail("has dtype " + v.dtype + "; the runtime loads F32, F16 and BF16 weights");
  if (!e.contains("shape") || !e["shape"].is_array()) fail("has no shape array");
  std::uint64_t numel = 1;
  for (const auto& d : e["shape"]) {
    if (!d.is_number_unsigned()) fail("has a shape that is not a list of sizes: " + e["shape"].dump());
    const auto n = d.get<std::uint64_t>();
    // Bounded so that numel * element bytes cannot wrap around and match a
    // short span by accident.
    if (n != 0 && numel > (std::uint64_t(1) << 48) / n) fail("has an impossibly large shape " + e["shape"].dump());
    v.shape.push_back(static_cast<std::int64_t>(n));
    numel *= n;
  }
  const auto& off = e.contains("data_offsets") ? e["data_offsets"] : nlohmann::json();
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail("has no data_offsets [begin, end]");
  const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
  if (begin > end) fail("has data_offsets " + off.dump() + " with begin after end");
  if (end > data_bytes)
    fail("has data_offsets " + off.dump() + " beyond the file's " + std::to_string(data_bytes) +
         " data bytes (a truncated file?)");
  if (end - begin != numel * eb)
    fail("has data_offsets " + off.dump() + " spanning " + std::to_string(end - begin) + " bytes, but shape " +
         shape_text(v.shape) + " of " + v.dtype + " needs " + std::to_string(numel * eb));
  v.data = data + begin;
  v.bytes = static_cast<std::size_t>(end - begin);
  return v;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot open");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail(path, "expected a JSON object");
  return j;
}

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A read-only private mapping of a whole file.
struct Checkpoint::Mapping {
  std::string path;
  void* base = MAP_FAILED;
  std::size_t size = 0;
  ~Mapping() {
    if (base != MAP_FAILED) munmap(base, size);
  }
};

Checkpoint::~Checkpoint() = default;

void Checkpoint::map_file(const std::string& path) {
  auto m = std::make_unique<Mapping>();
  m->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  std::memset(&st, 0, sizeof st);
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  m->size = static_cast<std::size_t>(st.st_size);
  if (m->size < 8) {
    ::close(fd);
    fail(path, "truncated: " + std::to_string(m->size) + " bytes, less than the 8-byte header length");
  }
  m->base = mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (m->base == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(err));

  const auto* bytes = static_cast<const unsigned char*>(m->base);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian, whatever the host
  if (n > m->size - 8)
    fail(path, "truncated: the header says " + std::to_string(n) + " bytes of JSON, the file has " +
                   std::to_string(m->size - 8) + " after the length");
  const std::string header(reinterpret_cast<const char*>(bytes + 8), static_cast<std::size_t>(n));
  nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail(path, "the header is not a JSON object (not a safetensors file?)");
  const unsigned char* data = bytes + 8 + n;
  const std::uint64_t data_bytes = m->size - 8 - n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    TensorView v = parse_entry(path, it.key(), it.value(), data, data_bytes);
    auto [at, fresh] = tensors_.emplace(it.key(), std::move(v));
    if (!fresh) fail(path, "tensor '" + it.key() + "' is also in " + at->second.file);
  }
  files_.push_back(std::move(m));
}

std::shared_ptr<const Checkpoint> Checkpoint::open(const std::string& dir) {
  std::shared_ptr<Checkpoint> ck(new Checkpoint());
  ck->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, "not a directory (a Hugging Face checkpoint directory was expected)");
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(index, ec)) {
    const nlohmann::json j = read_json(index.string());
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail(index.string(), "weight_map: expected an object of tensor name -> shard file");
    std::set<std::string> shards;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        fail(index.string(), "weight_map: '" + it.key() + "': expected a file name, got " + it.value().dump());
      shards.insert(it.value().get<std::string>());
    }
    for (const std::string& s : shards) ck->map_file((fs::path(dir) / s).string());
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      const std::string shard = (fs::path(dir) / it.value().get<std::string>()).string();
      const TensorView* v = ck->find(it.key());
      if (v == nullptr || v->file != shard)
        fail(index.string(), "weight_map: tensor '" + it.key() + "' is not in " + shard);
    }
  } else if (fs::exists(single, ec)) {
    ck->map_file(single.string());
  } else {
    fail(dir, "no model.safetensors or model.safetensors.index.json (only safetensors checkpoints are read)");
  }
  return ck;
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<ExpectedTensor> expected_tensors(const LlamaConfig& c) {
  const std::int64_t h = c.hidden, hd = c.head_dim(), q = c.heads * hd, kv = c.kv_heads * hd;
  std::vector<ExpectedTensor> out{{"model.embed_tokens.weight", {c.vocab, h}}};
  if (c.parallel_block) {  // transformers' PhiForCausalLM
    for (std::int64_t i = 0; i < c.layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      for (const auto& [n, rows] :
           {std::pair<const char*, std::int64_t>{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}}) {
        out.push_back({p + "self_attn." + n + ".weight", {rows, h}});
        out.push_back({p + "self_attn." + n + ".bias", {rows}});
      }
      out.push_back({p + "self_attn.dense.weight", {h, q}});
      out.push_back({p + "self_attn.dense.bias", {h}});
      out.push_back({p + "mlp.fc1.weight", {c.mlp, h}});
      out.push_back({p + "mlp.fc1.bias", {c.mlp}});
      out.push_back({p + "mlp.fc2.weight", {h, c.mlp}});
      out.push_back({p + "mlp.fc2.bias", {h}});
      out.push_back({p + "input_layernorm.weight", {h}});
      out.push_back({p + "input_layernorm.bias", {h}});
    }
    out.push_back({"model.final_layernorm.weight", {h}});
    out.push_back({"model.final_layernorm.bias", {h}});
    out.push_back({"lm_head.weight", {c.vocab, h}});
    out.push_back({"lm_head.bias", {c.vocab}});
    return out;
  }
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "self_attn.q_proj.weight", {q, h}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    if (c.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}});
      out.push_back({p + "self_attn.k_proj.bias", {kv}});
      out.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    out.push_back({p + "self_attn.o_proj.weight", {h, q}});
    out.push_back({p + "mlp.gate_proj.weight", {c.mlp, h}});
    out.push_back({p + "mlp.up_proj.weight", {c.mlp, h}});
    out.push_back({p + "mlp.down_proj.weight", {h, c.mlp}});
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "post_attention_layernorm.weight", {h}});
  }
  out.push_back({"model.norm.weight", {h}});
  if (!c.tied_embeddings) out.push_back({"lm_head.weight", {c.vocab, h}});
  return out;
}

void check(const Checkpoint& ck, const LlamaConfig& cfg) {
  std::set<std::string> expected;
  for (const ExpectedTensor& e : expected_tensors(cfg)) {
    expected.insert(e.name);
    const TensorView* v = ck.find(e.name);
    if (v == nullptr) fail(ck.dir(), "tensor '" + e.name + "' is missing (expected shape " + shape_text(e.shape) + ")");
    if (v->shape != e.shape)
      fail(v->file, "tensor '" + e.name + "' has shape " + shape_text(v->shape) + ", expected " + shape_text(e.shape) +
                        " (from config.json)");
  }
  const std::string inv_freq = ".rotary_emb.inv_freq";
  for (const auto& [name, v] : ck.tensors()) {
    if (expected.count(name)) continue;
    if (name.size() > inv_freq.size() && name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0)
      continue;
    if (cfg.tied_embeddings && name == "lm_head.weight" && v.shape == std::vector<std::int64_t>{cfg.vocab, cfg.hidden})
      continue;
    fail(v.file, "unexpected tensor '" + name + "' of shape " + shape_text(v.shape) +
                     " (not part of a dense decoder with this config.json: layers, tie_word_embeddings, "
                     "attention_bias?)");
  }
}

}  // namespace slicesched::rt::ckpt
