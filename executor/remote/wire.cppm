// The control channel between `slicesched serve` and its executor
// processes, and between executors for peer transfers: ZeroMQ (cppzmq)
// multipart messages. Frame 0 is a fixed header (magic, protocol version,
// message type), frame 1 a JSON body, any further frames raw bytes (a
// tensor). A peer whose header carries another protocol version is
// refused by recv() with a line naming both versions; nothing of its
// message is read.
//
// Threading: a zmq socket belongs to one thread; these functions take the
// socket from the caller and keep nothing.
module;
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

export module slicesched.executor.remote.wire;
import slicesched.core.backend;
import slicesched.core.ids;
import slicesched.core.sampling;
import slicesched.core.status;

export namespace slicesched::wire {

// Bumped whenever a message's meaning or a body's fields change.
// 2: kNcclInit, kNcclPull, kLayout; hello replies name each accelerator's GPU.
// 3: the hello carries the scheduler's name and the fingerprint both sides
//    must agree on; an executor serves one scheduler at a time.
// 4: an iteration plan's sequence may carry its sampling (and the history
//    penalties count); a head's reply may carry log-probabilities.
inline constexpr std::uint16_t kProtocolVersion = 4;

enum class Type : std::uint16_t {
  kHello = 1,      // scheduler -> executor: {host, scheduler, fingerprint}; reply: {host, accels:[{accel, name,
                   // weights, gpu}], fingerprint}, or a refusal (fingerprint differs, another scheduler holds it)
  kRun = 2,        // scheduler -> executor: run an operator; reply: its result
  kCopy = 3,       // scheduler -> executor: copy a value onto one of its accelerators (maybe pulled from a peer)
  kRelease = 4,    // scheduler -> executor: {ids}: drop these values (no reply)
  kPull = 5,       // executor -> executor: {id}: send me this value; reply: kValue
  kValue = 6,      // reply to kPull: {bytes} + the value's bytes frame
  kReply = 7,      // reply to kHello / kRun / kCopy: {req, ok, error, ...}
  kHeartbeat = 8,  // either way, every heartbeat_ms: "still here"
  kShutdown = 9,   // scheduler -> executor: exit now
  kError = 10,     // a refusal: {error}
  kNcclInit = 11,  // scheduler -> executor: {links:[{link, from, to, rank, id}]}; reply: kReply once all are up
  kNcclPull = 12,  // executor -> executor: {id, link}: send me this value over NCCL link; reply: kLayout
  kLayout = 13,    // reply to kNcclPull: {bytes} + the value's layout frame; its data follows over NCCL
  kBye = 14,       // scheduler -> executor: it will not serve after all (connect failed): the lease is free
};

// One NCCL communicator between two executor processes: two ranks, the
// source accelerator's (rank 0) and the destination's (rank 1), carrying
// copies from -> to only.
struct NcclLink {
  AccelId from = kNoAccel, to = kNoAccel;
  friend bool operator==(const NcclLink&, const NcclLink&) = default;
};

// The links a cluster needs: every ordered pair of accelerators on GPUs
// (`gpu[a]`: the GPU's UUID, "" for a CPU device) whose executors differ
// (`accel_host[a]`) and whose GPUs differ: NCCL refuses two ranks of one
// communicator on one GPU, so two processes sharing a GPU keep the ZeroMQ
// byte path between them. Ordered by (from, to); a link's index in the
// result is its number on the wire. Pure; sizes must match.
std::vector<NcclLink> plan_nccl_links(const std::vector<std::size_t>& accel_host, const std::vector<std::string>& gpu);

// Everything serve and an executor must agree on for the executor's tokens
// to be the ones the scheduler plans for: the protocol version, the host
// entry (its name and accelerators), the heartbeat and timeout, and every served model's shapes,
// vocabulary, dtype and weights (seed or checkpoint digest), as ordered
// (field, value) pairs. Both sides build it the same way from their own
// config (host_fingerprint + the runner's model_fingerprint).
using Fingerprint = std::vector<std::pair<std::string, std::string>>;

struct HostAccel {
  std::string name, device;
  std::int64_t budget = 0;  // bytes
};
// The protocol version and the [[hosts]] entry `host` with its accelerators
// (config order).
// The timing fields are [live]'s heartbeat_ms and executor_timeout_ms: both
// sides time each other out by them, so an executor that gives up on a
// scheduler sooner than the scheduler beats would drop out mid-run.
Fingerprint host_fingerprint(const std::string& host, const std::vector<HostAccel>& accels, int heartbeat_ms,
                             int timeout_ms);

// The first field where `executor` differs from what `scheduler` expects,
// as one line ("models[0].vocab: the scheduler has 512, executor 'a' has
// 1024"), or nothing when they agree. `who` names the executor.
std::optional<std::string> first_difference(const Fingerprint& scheduler, const Fingerprint& executor,
                                            const std::string& who);

struct Message {
  Type type = Type::kHeartbeat;
  std::string body;                // JSON text
  std::vector<std::string> blobs;  // raw frames (tensor bytes)
};

// Sends `m` on `s`, after `route` frames (a ROUTER's peer identity) when
// given. Fails only when the socket does (e.g. closed).
Status send(zmq::socket_t& s, const Message& m, const std::vector<std::string>& route = {},
            std::uint16_t version = kProtocolVersion);
// Receives one message; `route_frames` frames come first (1 on a ROUTER:
// the peer's identity, returned in `route`). Fails, one line, on a
// malformed message or another protocol version. Blocks (use poll first).
Result<Message> recv(zmq::socket_t& s, std::size_t route_frames = 0, std::vector<std::string>* route = nullptr);

// An iteration plan's sequences as the kRun message's plan frame (JSON:
// [[seq, position, tokens, sampling or null], ...]), and back; a malformed
// frame fails with one line.
std::string encode_plan(const std::vector<IterationPlan::Seq>& seqs);
Result<std::vector<IterationPlan::Seq>> decode_plan(const std::string& frame);
// A head's log-probabilities as JSON text ([[chosen, [[id, lp], ...]], ...]),
// and back.
std::string encode_logprobs(const std::vector<TokenLogprob>& lp);
Result<std::vector<TokenLogprob>> decode_logprobs(const std::string& text);

// The fixed header bytes (for tests of version refusal).
std::string header(Type type, std::uint16_t version = kProtocolVersion);
// Checks a header frame: the type, or the one-line refusal.
Result<Type> parse_header(const std::string& frame);

}  // namespace slicesched::wire
