// Accelerator types and the roofline ground truth: how long a model's
// kernels take on a type, from their FLOPs and HBM bytes (models/work.cppm),
// the type's datasheet peaks, and efficiencies per kind of work fitted to
// measured profiles. docs/ground-truth.md explains the model and its fit.
//
// Values and pure functions: safe from any thread.
module;
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

export module slicesched.hardware.roofline;
import slicesched.models.work;
import slicesched.core.status;

export namespace slicesched {

// One accelerator type's datasheet figures (configs/accelerators/*.toml).
// A board of several GPUs (NVIDIA A16) is described per GPU: one
// accelerator is one GPU.
struct AcceleratorType {
  std::string name;                  // "H100-SXM"
  std::vector<std::string> aliases;  // other names a cluster may use ("H100")
  double peak_flops = 0;             // dense bf16/fp16 tensor FLOP/s
  // Plain FP32 FLOP/s (not TF32: PyTorch's float32 matmuls default to full
  // precision), what a float32 model's kernels compute at; 0: not given (a
  // float32 model cannot play the roofline on this type).
  double fp32_flops = 0;
  double hbm_bytes_per_s = 0;
  std::int64_t hbm_bytes = 0;
  std::string interconnect;             // "nvlink4", "pcie4"
  double interconnect_bytes_per_s = 0;  // per direction, GPU to GPU
  double interconnect_latency_s = 0;
  // Streaming multiprocessors and their boost clock: how many SM cycles a
  // second the GPU issues (0: not given; no kind is then held to them).
  int sms = 0;
  double sm_clock_hz = 0;
  double sm_cycles_per_s() const { return sms * sm_clock_hz; }
  // The roofline efficiencies fitted on this type's own kernels (a fit
  // file, resolved; "": none). The roofline plays them on this type instead
  // of the general fit, which is fitted across types and carries mostly
  // the behaviour of the type with the most rows (docs/ground-truth.md).
  std::string roofline_fit;
  std::string source;  // the file it was read from, for messages
  // Its name, an alias, or its file (a name ending in ".toml": `source`
  // is that path or ends in "/" + it).
  bool answers_to(std::string_view n) const;
};

// How one kind of kernel falls short of the peaks: with
// tc = flops / (peak_flops * compute) and
// tm = bytes / (hbm * memory) + cache_bytes / (hbm * kv_read.memory),
// time = (tc^p + tm^p)^(1/p) + overhead_s, p = overlap_p, where tm is at
// least (bytes + cache_bytes) / (SMs * SM clock * sm_bytes_per_cycle) and tc
// at least flops / (SMs * SM clock * sm_flops_per_cycle) when both the kind
// and the type give them.
// Two efficiencies, not one: a GEMM reaches a different fraction of peak
// FLOP/s when compute-bound than of peak bandwidth when memory-bound. An
// attention kernel's KV-cache read is costed at the kv_read kind's memory
// efficiency, apart from its score compute and new-token traffic.
// overlap_p says how well a kernel hides its memory traffic behind its
// compute: infinity is the plain roofline, max(tc, tm), perfect overlap; a
// finite p charges both near the ridge point, where a real GEMM tile both
// waits on HBM and computes (measured GEMMs there reach about half of each
// peak: docs/ground-truth.md). p = 1 would be no overlap at all.
// sm_bytes_per_cycle is a second ceiling on a memory-bound kernel: the
// bytes its SMs move per SM cycle, for kernels that cannot keep enough
// loads in flight to reach HBM's bandwidth (an embedding's gather of
// scattered rows). Such a kernel runs at one rate per SM cycle on GPUs with
// very different HBM: Vidur's embedding kernel moves about 2 bytes per SM
// cycle on the A100, A40 and H100 alike, 15 %, 49 % and 17 % of their HBM
// bandwidth (docs/ground-truth.md). 0: no such ceiling.
// sm_flops_per_cycle is its compute-side twin: the FLOPs a kernel's SMs do
// per SM cycle when what holds it is work the tensor peak does not measure
// (attention's softmax exponentials and its Ampere-style mma.sync tiles,
// which run per SM cycle on any type, not at Hopper's wgmma peak). tc is
// then at least flops / (SMs * SM clock * sm_flops_per_cycle). 0: none.
struct KindEfficiency {
  double compute = 1, memory = 1, overhead_s = 0;
  double overlap_p = std::numeric_limits<double>::infinity();
  double sm_bytes_per_cycle = 0;
  double sm_flops_per_cycle = 0;
};

// One efficiency triple per WorkKind, indexed by the kind.
struct RooflineFit {
  std::array<KindEfficiency, kWorkKinds> kinds{};
  std::string fitted_on;  // what it was fitted on, for the record
  const KindEfficiency& operator[](WorkKind k) const { return kinds[static_cast<std::size_t>(k)]; }
  KindEfficiency& operator[](WorkKind k) { return kinds[static_cast<std::size_t>(k)]; }
};

// Seconds of one kernel (its count already folded into `w`: `calls` kernels
// pay the overhead `calls` times).
double kernel_seconds(const AcceleratorType& t, const RooflineFit& f, const Work& w, double calls = 1);
// Seconds of a sequence of kernel calls (each call's count repeats it). A
// shape of 4-byte elements computes at t.fp32_flops, not the tensor peak.
double calls_seconds(const AcceleratorType& t, const RooflineFit& f, const DenseShape& s,
                     std::span<const SublayerCall> calls);
// One rank's share of a model sharded over `tp` GPUs (Megatron-style tensor
// parallelism): heads, KV heads, MLP width and vocabulary divided, rounded
// up (a KV head is replicated where there are fewer than ranks, the
// vocabulary padded to a multiple of tp rows); hidden size unchanged.
DenseShape tp_rank_shape(DenseShape s, int tp);

// One measured kernel time: what it did and how long it took on `type`.
struct ProfileRow {
  std::string op;  // the profile's own name ("q_proj", "attn_pre_proj")
  Work work;
  double calls = 1;   // kernels behind the row (overheads paid)
  double tokens = 0;  // the batch's token count
  double seconds = 0;
  std::string type;  // accelerator type name the row was measured on
};

// Reads an LLMServingSim layers CSV (layer_name,input,kv_cache,tp_size,
// latency(ns); rows with kv_cache 0 and the given tp) or a Vidur compute
// mlp CSV (time_stats.<op>.median in ms, num_tokens,
// num_tensor_parallel_workers), told apart by their header. `shape` is the
// model's full shape; tensor parallelism divides heads, MLP and vocab.
// Errors are one line naming the file (and line).
Result<std::vector<ProfileRow>> read_profile_rows(const std::string& path, const DenseShape& shape, int tp,
                                                  const std::string& type);

// Fits each kind's efficiencies to `rows` (each on its own type, looked up
// in `types` by name or alias), minimising the mean absolute percentage
// error: a grid over the two efficiencies (and, for kinds whose FLOPs are
// fitted, over overlap_p), the overhead in closed form (a least-squares fit
// of relative errors, never negative). A kind without rows
// keeps `fallback`'s values. kv_read has no rows of its own (no profile
// here measures a filled KV cache): where GEMM rows were fitted it takes
// the rate at which the memory-bound ones (matrix-vector products, under an
// eighth of the ridge point's FLOPs per byte) stream their weights: the
// inverse slope of a least-squares line of their time against their bytes
// at peak bandwidth. Decode attention over a cache is that same product, a
// batch of matrix-vector products whose matrix is the cached K and V, so it
// streams at that rate, not at the fitted memory efficiency, which is
// traded against the overlap and overhead over every row size. Without
// such rows: the fitted GEMM memory efficiency. No overhead of its own (the
// attention kernel's launch pays it).
// On rows of one type, where an SM ceiling cannot be told from an HBM
// efficiency, an elementwise or embedding kind slower than the streaming
// kind is taken as held by its SMs: its memory efficiency is the stream's
// and its shortfall an SM ceiling (docs/ground-truth.md).
Result<RooflineFit> fit_roofline(std::span<const ProfileRow> rows, std::span<const AcceleratorType> types,
                                 const RooflineFit& fallback = {});

// Mean absolute percentage error of `fit` on `rows`, per kind (NaN where a
// kind has no rows) and overall.
struct RooflineError {
  std::array<double, kWorkKinds> kind_pct{};
  std::array<std::size_t, kWorkKinds> kind_rows{};
  double overall_pct = 0;
  std::size_t rows = 0;
  // The same for the sum of every row at one token count (a whole layer's
  // kernels, as an operator's time is their sum).
  double summed_pct = 0;
  std::size_t token_counts = 0;
};
Result<RooflineError> roofline_error(std::span<const ProfileRow> rows, std::span<const AcceleratorType> types,
                                     const RooflineFit& fit);

// The type `name` names (by name or alias) among `types`, or nullptr.
const AcceleratorType* find_type(std::span<const AcceleratorType> types, std::string_view name);
// Whether `a` and `b` name one type: equal strings, or names or aliases of
// the same entry of `types` ("H100" and "H100-SXM"). Every comparison of
// type names goes through this, so an alias never picks another truth.
bool same_type(std::span<const AcceleratorType> types, std::string_view a, std::string_view b);
// The type's own name when `types` knows `name`, else `name` as given.
std::string canonical_type(std::span<const AcceleratorType> types, std::string_view name);

}  // namespace slicesched
