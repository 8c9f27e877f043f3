// Experiment configuration from TOML: cluster, model, ground truth, tenants,
// policies and plugins. Every key is validated; an error names the file,
// the line and the key, and says what was expected. docs/config.md is the
// reference for every key.
module;
#include <climits>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

export module slicesched.config;
import slicesched.workload.trace;
import slicesched.models.dense;
import slicesched.hardware.roofline;
import slicesched.core.status;

export namespace slicesched {

struct LinkClassConfig {
  std::string name;
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
};

struct AcceleratorConfig {
  std::string name, type;
  std::int64_t hbm_bytes = 0;
  std::string device;  // live mode: "cpu", "cpu:N" (a virtual accelerator), "cuda:N"; "" when not given
  // The models whose weights it holds ([[models]] names); empty: the
  // default (every model that fits, in config order). `models_where` is
  // "file:line: key" for errors.
  std::vector<std::string> models;
  std::string models_where;
  // Live mode across processes: the [[hosts]] name of the executor that
  // owns it ("" without [[hosts]]).
  std::string host;
  // A tensor-parallel group (`tp` > 1, simulate only): `tp` GPUs of `type`,
  // each with `hbm_bytes`, that run every operator sharded over them and
  // all-reduce its output. `tp_link`: the link class between them; given,
  // the all-reduces ring over it, else they play ground_truth.all_reduce
  // ("": none named; unused with tp = 1). `tp_where`: "file:line: key".
  // plays_all_reduce_profile() says which.
  // With tp > 1, `hbm_bytes` is the group's: tp GPUs' HBM less the copies
  // every rank holds of what is not sharded (apply_tp_groups); one GPU's
  // is `gpu_hbm_bytes`.
  int tp = 1;
  std::int64_t gpu_hbm_bytes = 0;
  std::string tp_link, tp_where;
};

// An executor process (`[[hosts]]`, live mode): its name, which
// accelerators' `host` keys name, and the ZeroMQ endpoint it listens on
// ("tcp://HOST:PORT" or "ipc://PATH").
struct HostConfig {
  std::string name, address;
  std::string where;  // "file:line: hosts[i]" for errors
};

struct LinkConfig {
  std::string a, b, link_class;
};

struct StreamConfig {
  enum class Kind { kTrace, kConstant, kPoisson };
  Kind kind = Kind::kConstant;
  std::string path;       // kTrace: resolved against the config file's folder
  TraceOptions trace;     // kTrace
  double rate_per_s = 0;  // kConstant, kPoisson
  double duration_s = 0;
  std::int64_t input_tokens = 0, output_tokens = 0;
  // "--set KEY=VALUE: tenants[i].stream.input_tokens" when an override gave
  // a synthetic stream's lengths (errors about them name it); else empty.
  std::string tokens_where;
};

struct TenantConfig {
  std::string name;
  std::int32_t priority = 0;
  bool online = true;
  std::int64_t token_budget = 2048, max_seqs = 64, kv_budget_tokens = 65536;
  bool chunked_prefill = false;  // prompts past the token budget prefill over several iterations
  int lanes = 1;
  // Lanes that only prefill and hand their sequences' KV caches to the
  // others over cluster.host_link (TenantSpec::prefill_lanes); 0: none.
  int prefill_lanes = 0;
  bool swap_preempted = false;  // preemption_mode = "swap" (default "recompute")
  // Serving instances of this tenant (e.g. Dual-Share's two offline
  // copies). They share one request stream, dealt round-robin, so the
  // offered load does not grow with the instance count.
  int instances = 1;
  StreamConfig stream;
  std::string model;        // [[models]] name; "" = the only model
  std::string model_where;  // "file:line: tenants[i].model" (or the tenant's table) for errors
  // The request priorities (an HTTP request's `priority`, vLLM's: lower runs
  // earlier) this tenant takes, inclusive; request_priorities = [lo, hi].
  // Default: every priority.
  std::int64_t request_priority_min = INT32_MIN, request_priority_max = INT32_MAX;
};

// A plugin by name plus its arguments (every other key of its table).
struct PluginChoice {
  std::string name;
  nlohmann::json args = nlohmann::json::object();
};

// One stage of a policy's `stages` list: a filter or score plugin, its
// weight (scores) and its arguments (the stage's `args` table).
struct StageChoice {
  enum class Kind { kFilter, kScore } kind = Kind::kFilter;
  PluginChoice plugin;
  double weight = 1;
};

struct PolicyConfig {
  std::string name;
  std::vector<std::string> tenants;
  PluginChoice placement;  // empty name when the policy is a list of stages
  // Instead of `placement`: filters then weighted scores (docs/config.md).
  std::vector<StageChoice> stages;
  std::vector<PluginChoice> partition_sets;  // candidates are their union, in order
  PluginChoice arbiter{"greedy"};            // starts transfers: in the emulated cluster and the what-if
  PluginChoice estimator{"online-linear"};   // predicts for the what-if, learns from the cluster's feedback
  // Instances per tenant where this policy differs from the tenant's own
  // `instances` (e.g. Dual-Share serves one offline stream with two).
  std::vector<std::pair<std::string, int>> instances;
  // Lanes per instance where this policy differs from the tenant's own
  // `lanes` (how many iterations each of its instances keeps in flight).
  std::vector<std::pair<std::string, int>> lanes;
  // Likewise `prefill_lanes`.
  std::vector<std::pair<std::string, int>> prefill_lanes;
  std::size_t issued_budget = 256, batch_cap = 16;
  double horizon_s = -1;
  bool scoped_what_if = true;  // scheduler.what_if_scope: "component" (true) or "cluster"
  // Cross-tenant batches (co_batch): each rider tenant's requests may ride
  // in its hosts' iterations (same model). A rider with one instance lends
  // its queue to every host; with as many instances as hosts, instance k
  // rides in host k only (its stream dealt among them).
  struct CoBatch {
    std::string rider;
    std::vector<std::string> hosts;
  };
  std::vector<CoBatch> co_batch;
  bool co_batch_own_iterations = true;  // co_batch.own_iterations: riders' tenants also run iterations of their own
  std::vector<std::string> co_batch_rides_only;  // co_batch.rides_only: rider tenants that run none of their own
  double co_batch_slowdown = -1;                 // co_batch.slowdown: bound on a host iteration's stretch (< 0: none)
  // co_batch.keep_riders: a rider on board leaves only when its host needs
  // the KV room (or the sequence cap); short of token room or the slowdown
  // bound it steps one token instead of being evicted and recomputed.
  bool co_batch_keep_riders = false;
};

// A dense-decoder model ([model], or one [[models]] table): its shapes
// from a Hugging Face config.json (`hf_config`), or a built-in preset
// ("llama3-8b": Llama-3-8B shapes, "llama-tiny": small enough for CPU
// tests) with every size overridable. config/models.cpp builds it.
struct ModelConfig {
  std::string name = "llama3-8b";
  std::string preset = "llama3-8b";  // the built-in the sizes start from (no hf_config)
  std::string hf_config;             // resolved path of a config.json, or ""
  // A Hugging Face checkpoint directory (resolved), or "": live mode reads
  // the weights from its safetensors, and hf_config is its config.json.
  std::string checkpoint;
  // A sentencepiece tokenizer.model (resolved), or "": then the
  // checkpoint's tokenizer.model when it has one (tokenizer/tokenizer.cppm).
  std::string tokenizer;
  int layers = 32, groups = 4;
  std::int64_t vocab = 128256, hidden = 4096, heads = 32, kv_heads = 8, mlp = 14336;
  std::int64_t head_dim = 0;       // 0: hidden / heads
  std::string dtype = "bfloat16";  // "bfloat16" | "float16" | "float32"
  double rope_theta = 500000.0;
  bool tied_embeddings = false, qkv_bias = false;
  std::int64_t context_window = 8192;  // tokens (prompt + output) one request may hold
  bool truncate_overflow = false;      // on_overflow = "truncate": cut longer requests (counted), else refuse
  std::uint64_t weights_seed = 0;      // live mode without a checkpoint: weights are random from this seed
  // Accelerator names (`spread`): the model's layer groups spread over them
  // in order, each holding only the weights of its share (group g of G on
  // member floor(g * m / G), the embedding with the first group, the LM
  // head with the last), a pipeline. Empty: each holder holds the whole
  // model.
  std::vector<std::string> spread;
  std::string where;  // "file:line: models[i]" (or "file:line: model") for errors
};

// Live mode (`slicesched serve`).
struct LiveConfig {
  int threads = 1;          // LibTorch intra-op threads (CPU devices)
  double time_scale = 1.0;  // trace arrivals are replayed this many times faster
  // Between two CUDA accelerators: NCCL send/recv ("nccl") or a LibTorch
  // peer copy ("copy"). Copies to or from a CPU device are always copies.
  std::string transport = "nccl";
  // Executors in other processes ([[hosts]]): how often each side sends a
  // heartbeat, and the silence after which an executor counts as lost.
  int heartbeat_ms = 200;
  int executor_timeout_ms = 3000;
};

// `slicesched serve --listen` ([serve]): the HTTP front end.
struct ServeConfig {
  std::string listen;           // "HOST:PORT": serve HTTP even without --listen ("": replay unless --listen)
  std::int64_t max_queue = 64;  // online completions admitted and not ended; past it, 429
  std::int64_t retry_after_s = 1;
  std::int64_t http_threads = 64;      // connections served at once (a streaming client holds one)
  std::int64_t max_body_mib = 64;      // largest request body (a batch input file)
  std::int64_t header_timeout_s = 10;  // a request's line and headers arrive within this
  std::int64_t body_timeout_s = 60;    // its body within this
  std::int64_t max_connections = 512;  // open HTTP connections at once
  std::int64_t drain_timeout_s = 60;
  std::int64_t max_prompt_tokens = 0;  // the longest prompt a request may send (0: its model's window bounds it)   //
                                       // after a drain's signal, what still runs then is cancelled
  std::string batch_store;             // SQLite file of the batch API (resolved; "": batch API off)
  std::int64_t batch_inflight = 16;    // batch lines in the engine at once
  // The online TTFT target (seconds) SLO attainment is measured against, as
  // vLLM users state one; < 0: none (serve has no baseline run: n/a).
  double ttft_slo_s = -1;
};

struct GroundTruthConfig {
  bool present = false;                   // the section was given (simulate needs it)
  std::string layers_csv, transfers_csv;  // measured profiles (resolved paths), or
  // LLMServingSim layers CSVs measured on one rank of a tensor-parallel
  // group (resolved; `layers_tp`): a group of N of the profile's type and
  // model plays the rows of tp_size N (here or in layers_csv), plus its
  // all-reduces; a group no file measured plays the roofline.
  std::vector<std::string> layers_tp_csvs;
  // A measured all-reduce profile (Vidur's all_reduce.csv, resolved): what
  // tensor-parallel groups' all-reduces cost ("": a ring over tp_link).
  std::string all_reduce_csv;
  // The type it measured ("": every group's type): a group of another type
  // needs its own tp_link.
  std::string all_reduce_type;
  std::string calibrated;  // a calibration profile (resolved path)
  double op_noise_cv = 0.006, transfer_noise_cv = 0.0163;
  double hbm_bytes_per_s = 3.35e12;
  // Accelerators of type `layers_type` play `layers_csv` ("" with a layers
  // profile: every accelerator does); every other type plays the roofline
  // with the efficiencies in `roofline_fit` (resolved; the shipped
  // configs/accelerators/roofline-fit.toml when not given). Transfers play
  // `transfers_csv`, or the pair's link class when it is empty.
  std::string layers_type;
  // The model `layers_csv` measured: a model of this config or a preset,
  // by name ("": every model is taken to be it). Models whose shape
  // (DenseShape: sizes, dtype, biases) differs from it play the roofline on
  // every type: `off_profile_models` (resolve_profile_models fills it).
  std::string layers_model, layers_model_where;
  std::vector<std::string> off_profile_models;
  std::string roofline_fit;
  // The serving engine's fixed costs (CPU scheduling, sampling,
  // detokenizing), per iteration and per sequence in an iteration: added to
  // the operator that samples each iteration (the model's head), whatever
  // plays the operators. Given, they hold on every accelerator type; absent,
  // each type takes what calibrate measured on it (the `calibrated`
  // profile's fixed_costs), else 0.
  std::optional<double> iteration_overhead_s, sequence_overhead_s;
  // And once per request (admission, tokenizing, the reply): charged to the
  // sampling operator of the first iteration that runs the request. Given,
  // on every type; absent, per type from the calibration profile, else 0.
  std::optional<double> request_overhead_s;
  // Whether `roofline_fit` was named ([ground_truth] roofline): then every
  // roofline type plays it; otherwise a type whose table names its own fit
  // (AcceleratorType::roofline_fit) plays that one, the others the shipped
  // general fit.
  bool roofline_given = false;
  // The cluster has a tensor-parallel group (tp > 1): it plays the roofline
  // at one rank's shapes, whatever profile the config gives.
  bool tp_groups = false;
  bool needs_roofline() const {
    return calibrated.empty() &&
           (layers_csv.empty() || !layers_type.empty() || !off_profile_models.empty() || tp_groups);
  }
};

// A lost accelerator (`[[faults]]`, simulate only): lost at `at_s`, back
// after `duration_s` (< 0: lost for good).
struct FaultConfig {
  std::string accelerator;
  double at_s = 0;
  double duration_s = -1;
};

struct ExperimentConfig {
  std::string path;  // the file read
  std::string name;
  std::uint64_t seed = 1;
  double duration_s = -1;  // the measurement window: the run stops here (< 0: when every request finished)
  std::vector<LinkClassConfig> link_classes;
  // cluster.host_link: the link class between an accelerator and host
  // memory (what swapped KV caches cross); -1: none given.
  int host_link = -1;
  std::vector<AcceleratorConfig> accelerators;
  // The type tables the cluster's types name (configs/accelerators, or
  // cluster.accelerator_types), each once; a type without one is absent.
  std::vector<AcceleratorType> accelerator_types;
  std::vector<LinkConfig> links;
  std::vector<ModelConfig> models;  // [model] or [[models]]; at least one (default: llama3-8b)
  LiveConfig live;
  ServeConfig serve;
  GroundTruthConfig ground_truth;
  std::vector<TenantConfig> tenants;
  std::vector<PolicyConfig> policies;
  // The policy whose p90 TTFT is the SLO threshold (`slo_baseline`; default
  // the first policy with static placement, as the paper's Static-Online);
  // empty: none, and SLO attainment is n/a unless a threshold is given.
  std::string slo_baseline;
  std::vector<FaultConfig> faults;        // in time order
  std::vector<HostConfig> hosts;          // live mode's executor processes; empty: one process
  std::vector<std::string> plugin_paths;  // resolved
  std::string estimator_prior;            // a calibration profile used as estimator prior (resolved), or empty
};

// The model tenant `t` runs (load_config checked that it exists).
const ModelConfig& model_of(const ExperimentConfig& cfg, const TenantConfig& t);
// The model of that [[models]] name, or null.
const ModelConfig* find_model(const ExperimentConfig& cfg, const std::string& name);
// The index into cfg.link_classes of the class named `name`, or -1.
int find_link_class(const ExperimentConfig& cfg, std::string_view name);
// The model, built (from its config.json when it names one). Fails with one
// line naming the config key.
Result<std::shared_ptr<const DenseDecoder>> make_model(const ModelConfig& m);
// Per accelerator (config order): the indices into cfg.models of the models
// whose weights it holds. Its own `models` list, or by default every model
// (one model: every accelerator holds it, check_weights_fit says when it
// does not fit; several: those that fit, in config order).
std::vector<std::vector<std::size_t>> residency(const ExperimentConfig& cfg);
// Tensor-parallel groups (tp > 1): every model a group may run shards
// evenly over its GPUs (tp divides its heads, KV heads and MLP width, else
// an error naming the group's `tp`), the group's `hbm_bytes` is tp GPUs'
// HBM less the bytes each rank holds a copy of (the norms, the vocabulary's
// padding to a multiple of tp rows), and a simulated run needs
// ground_truth.all_reduce or the group's tp_link. load_config calls it.
Status apply_tp_groups(ExperimentConfig& cfg);
// Whether tensor-parallel group `a`'s all-reduces play the measured
// ground_truth.all_reduce: it names no tp_link, and the profile names no
// type or `a`'s (by name or alias). Otherwise they ring over its tp_link.
bool plays_all_reduce_profile(const ExperimentConfig& cfg, const AcceleratorConfig& a);
// Those bytes for one model on a group of `tp`: what `tp` ranks hold
// beyond the model's own weights, for the operators `held` marks (by index
// into model.ops(); empty: all of them, the model held whole).
std::int64_t tp_extra_bytes(const DenseDecoder& model, int tp, const std::vector<bool>& held = {});
// For a model with `spread`: per operator of its template (in order), the
// index into cfg.accelerators of the accelerator holding its weights
// (empty for a model without). Names load_config checked.
std::vector<std::size_t> spread_holders(const ExperimentConfig& cfg, const ModelConfig& m);
// The model cross-checks load_config makes (config/models.cpp): every
// tenant names a model (or there is only one), every listed model exists
// and fits where it is listed, every model is resident somewhere and every
// tenant's model with it, synthetic streams fit their model's context
// window unless it truncates.
Status validate_models(const ExperimentConfig& cfg);
// Which models the layers profile plays (ground_truth.layers_model; fills
// off_profile_models and, where they need the roofline, its default fit),
// and that every float32 model that plays the roofline on a type has that
// type's fp32_tflops. One line naming the key on failure.
Status resolve_profile_models(ExperimentConfig& cfg);

// How many instances `policy` runs of tenant `t`.
inline int instances_of(const PolicyConfig& policy, const TenantConfig& t) {
  for (const auto& [name, n] : policy.instances)
    if (name == t.name) return n;
  return t.instances;
}

// How many lanes each of `policy`'s instances of tenant `t` has.
inline int lanes_of(const PolicyConfig& policy, const TenantConfig& t) {
  for (const auto& [name, n] : policy.lanes)
    if (name == t.name) return n;
  return t.lanes;
}

// How many prefill lanes each of `policy`'s instances of tenant `t` has.
inline int prefill_lanes_of(const PolicyConfig& policy, const TenantConfig& t) {
  for (const auto& [name, n] : policy.prefill_lanes)
    if (name == t.name) return n;
  return t.prefill_lanes;
}

// One `--set KEY=VALUE` of sweep and plan: KEY is a dotted path into the
// TOML document, VALUE a TOML value (a bare word that is not one is taken
// as a string). Path segments: a table key (`cluster.duration_s`), an array
// index (`accelerators[0]` or `accelerators.0`), an array element by its
// `name` key (`tenants.offline0`), or `*` for every element of an array
// (`tenants.*.stream.rate_scale`). Every segment but the last must exist;
// the last is created when absent (the reader then checks it like any key).
struct ConfigOverride {
  std::string key, value;
  std::string flag = "--set";  // the option that gave it, as errors name it ("--vary" for plan's points)
};

// Reads and validates `path`, with `overrides` applied in order first.
// Never throws; errors are one line:
// "configs/x.toml:12: cluster.accelerators[0].hbm_gib: expected a number > 0, got -1",
// or for an override "--set tenants.x.stream.constant_rate=-1: ...".
// Every file the config names (traces, ground truth, estimators.prior,
// plugin libraries) must exist and be readable once the rest is valid; if
// one is not, the error names its key and the path it resolved to:
// "x.toml:9: ground_truth.layers: cannot open /abs/l.csv (No such file or
// directory; relative paths resolve against the config's folder)".
Result<ExperimentConfig> load_config(const std::string& path, const std::vector<ConfigOverride>& overrides = {});

// What a policy's output files are named after (requests_<stem>.csv, ...):
// its name lower-cased, each character but a letter or digit as '_'. Two
// policies of one config never share a stem (load_config refuses it).
std::string file_stem(const std::string& policy_name);

// Cross-checks between sections (duplicate accelerators, links naming
// nothing); `load_config` calls it. Whether the model fits is checked by
// the commands that build it.
Status validate(const ExperimentConfig& cfg);

}  // namespace slicesched
