module;
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "executor/torch/cuda.h"
#include "executor/torch/runtime.h"

module slicesched.executor.remote.executor_server;

import slicesched.executor.remote.wire;
import slicesched.core.backend;
import slicesched.executor.runner;
import slicesched.models.model;

namespace slicesched {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// A refusal's body for the peer: {"ok": false, "error": message}, bytes of
// the message that are not UTF-8 (a path, say) replaced rather than thrown.
std::string error_body(const Status& s) {
  return json{{"ok", false}, {"error", s.message()}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

struct Job {
  std::vector<std::string> route;
  json body;
  std::string plan;
  Payload value;  // a send job's value, held until NCCL is done with it
};

std::string from_hex(const std::string& h) {
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::invalid_argument("not a hex digit");
  };
  if (h.size() % 2 != 0) throw std::invalid_argument("an odd number of hex digits");
  std::string out;
  for (std::size_t i = 0; i < h.size(); i += 2) out.push_back(static_cast<char>(nib(h[i]) << 4 | nib(h[i + 1])));
  return out;
}

// One thread's FIFO of jobs.
struct Queue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  bool stop = false;
};

Nanos since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

}  // namespace

struct ExecutorServer::State {
  State(LlamaRunner& r, ExecutorServerOptions o) : runner(r), opt(std::move(o)) {}

  LlamaRunner& runner;
  ExecutorServerOptions opt;
  zmq::context_t ctx{1};
  std::optional<zmq::socket_t> sock;  // the ROUTER, once bound
  int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

  std::mutex out_mu;
  std::deque<std::pair<std::vector<std::string>, wire::Message>> out;

  std::mutex val_mu;
  struct Held {
    AccelId accel;
    Payload value;
  };
  std::unordered_map<std::uint64_t, Held> values;
  std::uint64_t next_id = 1;
  std::map<AccelId, std::int64_t> used;  // weights + held values

  std::map<AccelId, std::unique_ptr<Queue>> runq, copyq, sendq;
  std::vector<std::thread> threads;
  std::map<AccelId, std::string> gpu;  // each GPU accelerator's GPU UUID

  // NCCL links to other executors (kNcclInit), set once by the init thread
  // before it replies; the scheduler sends no copy before that reply.
  std::thread init;
  std::mutex nccl_mu;
  std::unique_ptr<rt::cuda::NcclPeers> nccl;
  struct LinkEnd {
    std::size_t index;  // in *nccl
    AccelId mine;       // this side's accelerator
    int rank;
  };
  std::map<std::uint64_t, LinkEnd> links;  // by the scheduler's link number

  // Copies received: over NCCL, pulled as bytes over ZeroMQ, within this
  // process; values sent over NCCL. For the exit summary (gpu-check reads it).
  std::atomic<std::uint64_t> in_nccl{0}, in_bytes{0}, in_local{0}, out_nccl{0};

  int transfer_timeout_ms() const { return 2 * opt.timeout_ms + opt.heartbeat_ms; }

  const ExecutorServerOptions::Accel* accel(AccelId a) const {
    for (const auto& x : opt.accels)
      if (x.id == a) return &x;
    return nullptr;
  }
  void reply(const std::vector<std::string>& route, json body, wire::Type t = wire::Type::kReply) {
    {
      std::lock_guard lk(out_mu);
      out.emplace_back(route, wire::Message{t, body.dump(), {}});
    }
    (void)eventfd_write(wake, 1);
  }
  void fail(const Job& j, const std::string& why) {
    reply(j.route, json{{"req", j.body.value("req", std::uint64_t{0})}, {"ok", false}, {"error", why}});
  }
  // Keeps a value; returns its handle for the reply. Refuses a value its
  // accelerator's budget cannot hold.
  Result<json> keep(AccelId a, const Payload& v) {
    if (!v) return json(nullptr);
    std::lock_guard lk(val_mu);
    const std::int64_t budget = accel(a)->budget;
    if (used[a] + v.bytes > budget)
      return ResourceExhausted("accelerator " + accel(a)->name + " cannot hold " + std::to_string(v.bytes) +
                               " more bytes (" + std::to_string(used[a]) + " of " + std::to_string(budget) + ")");
    used[a] += v.bytes;
    const std::uint64_t id = next_id++;
    values.emplace(id, Held{a, v});
    return json{{"id", id}, {"bytes", v.bytes}};
  }
  Result<Payload> find(std::uint64_t id) {
    auto h = find_held(id);
    if (!h.ok()) return h.status();
    return h->value;
  }
  Result<Held> find_held(std::uint64_t id) {
    std::lock_guard lk(val_mu);
    auto it = values.find(id);
    if (it == values.end()) return NotFound("value " + std::to_string(id) + " is not held here (released?)");
    return it->second;
  }
  Result<LinkEnd> link(std::uint64_t n, int rank) {
    std::lock_guard lk(nccl_mu);
    auto it = links.find(n);
    if (it == links.end() || it->second.rank != rank)
      return FailedPrecondition("executor '" + opt.host + "' has no NCCL link " + std::to_string(n) +
                                (rank == 0 ? " to send on" : " to receive on"));
    return it->second;
  }

  // kNcclInit, on its own thread: a blocking NCCL init must not stop the
  // server loop (heartbeats, other executors' requests).
  void init_nccl(std::vector<std::string> route, json body) {
    std::vector<rt::cuda::NcclPeers::Link> ls;
    std::map<std::uint64_t, LinkEnd> ends;
    try {
      for (const json& l : body["links"]) {
        const int rank = l["rank"].get<int>();
        const AccelId mine = l[rank == 0 ? "from" : "to"].get<AccelId>();
        const auto* a = accel(mine);
        if (!a || rt::cuda_ordinal(a->device) < 0)
          return reply(route, json{{"req", body["req"]},
                                   {"ok", false},
                                   {"error", "NCCL link " + l["name"].get<std::string>() + ": accelerator " +
                                                 std::to_string(mine) + " is not a GPU of host '" + opt.host + "'"}});
        ends[l["link"].get<std::uint64_t>()] = {ls.size(), mine, rank};
        ls.push_back(
            {l["name"].get<std::string>(), from_hex(l["id"].get<std::string>()), rank, rt::cuda_ordinal(a->device)});
      }
      auto peers = std::make_unique<rt::cuda::NcclPeers>(std::move(ls), body["timeout_ms"].get<int>());
      const std::size_t n = ends.size();
      {
        std::lock_guard lk(nccl_mu);
        nccl = std::move(peers);
        links = std::move(ends);
      }
      reply(route, json{{"req", body["req"]}, {"ok", true}, {"links", n}});
    } catch (const std::exception& e) {
      reply(route, json{{"req", body["req"]}, {"ok", false}, {"error", e.what()}});
    }
  }
  // Frees every value held and forgets queued operators and copies (the
  // scheduler that asked for them is gone).
  void drop_all() {
    for (auto* qs : {&runq, &copyq})
      for (auto& [a, q] : *qs) {
        std::lock_guard lk(q->mu);
        q->jobs.clear();
      }
    std::lock_guard lk(val_mu);
    values.clear();
    for (const auto& a : opt.accels) used[a.id] = a.weights;
  }
  void release(const json& ids) {
    std::lock_guard lk(val_mu);
    for (const json& i : ids) {
      auto it = values.find(i.get<std::uint64_t>());
      if (it == values.end()) continue;
      used[it->second.accel] -= it->second.value.bytes;
      values.erase(it);
    }
  }

  void run_job(AccelId a, const Job& j) {
    std::vector<Payload> inputs;
    for (const json& id : j.body["inputs"]) {
      auto v = find(id.get<std::uint64_t>());
      if (!v.ok()) return fail(j, v.status().message());
      inputs.push_back(std::move(v).value());
    }
    const std::int64_t declared = j.body.value("declared", std::int64_t{0});
    {
      std::lock_guard lk(val_mu);
      if (used[a] + declared > accel(a)->budget)
        return fail(j, "accelerator " + accel(a)->name + " cannot hold the " + std::to_string(declared) + " bytes " +
                           j.body.value("name", std::string()) + " makes");
    }
    auto plan = std::make_shared<rt::StepPlan>();
    auto seqs = wire::decode_plan(j.plan);
    if (!seqs.ok()) return fail(j, seqs.status().message());
    for (IterationPlan::Seq& s : seqs.value()) plan->seqs.push_back(LlamaRunner::runtime_step(std::move(s)));
    auto prepared =
        runner.prepare_role(j.body["model"].get<std::size_t>(), static_cast<OpRole>(j.body["role"].get<int>()),
                            j.body["group"].get<int>(), j.body["name"].get<std::string>(), std::move(plan));
    if (!prepared.ok()) return fail(j, prepared.status().message());
    const auto t0 = Clock::now();
    Result<OpResult> r = OpResult{};
    try {
      r = runner.run(a, prepared->get(), inputs);
    } catch (const std::exception& e) {
      r = Internal(std::string("operator threw: ") + e.what());
    }
    const Nanos ns = since(t0);
    if (!r.ok()) return fail(j, r.status().message());
    auto out = keep(a, r->output);
    auto ret = out.ok() ? keep(a, r->retained) : out;
    if (!out.ok() || !ret.ok()) {
      if (out.ok()) release(json::array({(*out)["id"]}));
      return fail(j, (!out.ok() ? out : ret).status().message());
    }
    json body{{"req", j.body["req"]}, {"ok", true},          {"output", *out},
              {"retained", *ret},     {"tokens", r->tokens}, {"ns", r->device_ns >= 0 ? r->device_ns : ns}};
    if (!r->logprobs.empty()) body["logprobs"] = wire::encode_logprobs(r->logprobs);
    reply(j.route, body);
  }

  // Asks the executor at `peer` (this thread's socket to it) for value
  // `id` with `m`; its answer must be `want` with one frame.
  Result<wire::Message> ask(std::map<std::string, zmq::socket_t>& peers, const std::string& peer, std::uint64_t id,
                            const wire::Message& m, wire::Type want) {
    auto it = peers.find(peer);
    if (it == peers.end()) {
      it = peers.emplace(peer, zmq::socket_t(ctx, zmq::socket_type::dealer)).first;
      it->second.set(zmq::sockopt::linger, 0);
      // As the scheduler's sockets: a peer that fails ZeroMQ's handshake
      // leaves nothing to queue for, and a send would block for good.
      it->second.set(zmq::sockopt::sndtimeo, static_cast<int>(2 * opt.timeout_ms + opt.heartbeat_ms));
      it->second.connect(peer);
    }
    zmq::socket_t& s = it->second;
    if (Status st = wire::send(s, m); !st.ok()) {
      peers.erase(it);
      return Aborted("pulling value " + std::to_string(id) + " from " + peer + ": " + st.message());
    }
    // Longer than the scheduler's own timeout: a dead peer is declared lost
    // there first, so this copy reports lost (redone), not failed.
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(2 * opt.timeout_ms + opt.heartbeat_ms)) == 0) {
      // The peer may answer late: a fresh socket keeps replies in order.
      peers.erase(it);
      return Aborted("pulling value " + std::to_string(id) + " from " + peer + ": no answer in " +
                     std::to_string(2 * opt.timeout_ms + opt.heartbeat_ms) + " ms");
    }
    auto got = wire::recv(s);
    if (!got.ok()) return got.status();
    if (got->type != want || got->blobs.size() != 1)
      return Aborted("pulling value " + std::to_string(id) + " from " + peer + ": " +
                     json::parse(got->body, nullptr, false).value("error", std::string("refused")));
    return got;
  }

  // Pulls value `id` from the executor at `peer` as bytes over ZeroMQ.
  Result<rt::Value> pull(std::map<std::string, zmq::socket_t>& peers, const std::string& peer, std::uint64_t id,
                         const std::string& device) {
    auto m = ask(peers, peer, id, {wire::Type::kPull, json{{"id", id}}.dump(), {}}, wire::Type::kValue);
    if (!m.ok()) return m.status();
    try {
      return rt::LlamaModel::from_bytes(m->blobs[0], device);
    } catch (const std::exception& e) {
      return Internal(std::string("pulled value: ") + e.what());
    }
  }

  // Receives value `id` from the executor at `peer` over NCCL link `n`:
  // asks for it, allocates its twin from the layout the source answers,
  // and posts the receive while the source posts the send.
  Result<CopyResult> nccl_pull(std::map<std::string, zmq::socket_t>& peers, const std::string& peer, std::uint64_t id,
                               std::uint64_t n, AccelId a) {
    auto end = link(n, 1);
    if (!end.ok()) return end.status();
    auto m =
        ask(peers, peer, id, {wire::Type::kNcclPull, json{{"id", id}, {"link", n}}.dump(), {}}, wire::Type::kLayout);
    if (!m.ok()) return m.status();
    const std::string& device = accel(a)->device;
    const rt::ValueLayout l = rt::LlamaModel::decode(m->blobs[0]);
    rt::LlamaModel::bind_thread_stream(device);
    rt::Value v = rt::LlamaModel::allocate(l, device);
    const std::int64_t ns =
        nccl->recv(end->index, rt::LlamaModel::data(v), static_cast<std::size_t>(l.data_bytes), transfer_timeout_ms());
    return CopyResult{LlamaRunner::wrap(v), ns};
  }

  // A send job: value j.value to the peer that asked, over NCCL. Failure
  // reaches the receiver as its receive's timeout; it is logged here.
  void send_job(AccelId a, const Job& j) {
    const std::uint64_t n = j.body["link"].get<std::uint64_t>();
    try {
      auto end = link(n, 0);
      if (!end.ok()) throw std::runtime_error(end.status().message());
      rt::LlamaModel::bind_thread_stream(accel(a)->device);
      const rt::Value v = rt::LlamaModel::contiguous(LlamaRunner::unwrap(j.value));
      nccl->send(end->index, rt::LlamaModel::data(v), static_cast<std::size_t>(j.value.bytes), transfer_timeout_ms());
      ++out_nccl;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "slicesched executor '%s': sending value %llu over NCCL link %llu: %s\n", opt.host.c_str(),
                   static_cast<unsigned long long>(j.body["id"].get<std::uint64_t>()),
                   static_cast<unsigned long long>(n), e.what());
    }
  }

  void copy_job(AccelId a, const Job& j, std::map<std::string, zmq::socket_t>& peers) {
    const std::uint64_t id = j.body["id"].get<std::uint64_t>();
    const auto t0 = Clock::now();
    Result<CopyResult> r = CopyResult{};
    try {
      if (j.body.contains("link")) {
        r = nccl_pull(peers, j.body["peer"].get<std::string>(), id, j.body["link"].get<std::uint64_t>(), a);
        if (r.ok()) ++in_nccl;
      } else if (j.body.contains("peer")) {
        auto v = pull(peers, j.body["peer"].get<std::string>(), id, accel(a)->device);
        if (v.ok()) {
          r = CopyResult{LlamaRunner::wrap(v.value()), -1};
          ++in_bytes;
        } else {
          r = v.status();
        }
      } else {
        auto v = find(id);
        r = v.ok() ? runner.copy(v.value(), a) : Result<CopyResult>(v.status());
        if (r.ok()) ++in_local;
      }
    } catch (const std::exception& e) {
      r = Internal(std::string("transfer threw: ") + e.what());
    }
    const Nanos ns = since(t0);
    if (!r.ok()) return fail(j, r.status().message());
    auto out = keep(a, r->value);
    if (!out.ok()) return fail(j, out.status().message());
    reply(j.route,
          json{{"req", j.body["req"]}, {"ok", true}, {"output", *out}, {"ns", r->device_ns >= 0 ? r->device_ns : ns}});
  }

  enum class Role { kRun, kCopy, kSend };
  void worker(Queue& q, AccelId a, Role role) {
    std::map<std::string, zmq::socket_t> peers;  // this thread's sockets to other executors
    for (;;) {
      Job j;
      {
        std::unique_lock lk(q.mu);
        q.cv.wait(lk, [&] { return q.stop || !q.jobs.empty(); });
        if (q.stop) return;
        j = std::move(q.jobs.front());
        q.jobs.pop_front();
      }
      try {
        if (role == Role::kSend)
          send_job(a, j);
        else if (role == Role::kCopy)
          copy_job(a, j, peers);
        else
          run_job(a, j);
      } catch (const std::exception& e) {  // a malformed body (json type errors)
        fail(j, std::string("a malformed request: ") + e.what());
      }
    }
  }

  static void push(Queue& q, Job j) {
    {
      std::lock_guard lk(q.mu);
      q.jobs.push_back(std::move(j));
    }
    q.cv.notify_one();
  }
};

ExecutorServer::ExecutorServer(LlamaRunner& runner, ExecutorServerOptions opt)
    : st_(std::make_unique<State>(runner, std::move(opt))) {
  for (const auto& a : st_->opt.accels) {
    st_->used[a.id] = a.weights;
    st_->runq[a.id] = std::make_unique<Queue>();
    st_->copyq[a.id] = std::make_unique<Queue>();
    st_->sendq[a.id] = std::make_unique<Queue>();
    if (rt::cuda_ordinal(a.device) >= 0) st_->gpu[a.id] = rt::cuda::device_uuid(rt::cuda_ordinal(a.device));
  }
  for (const auto& a : st_->opt.accels) {
    st_->threads.emplace_back([s = st_.get(), id = a.id] { s->worker(*s->runq[id], id, State::Role::kRun); });
    st_->threads.emplace_back([s = st_.get(), id = a.id] { s->worker(*s->copyq[id], id, State::Role::kCopy); });
    // Sends have a thread of their own: a send waits only for its
    // receiver, which posted its half already, never behind a receive.
    st_->threads.emplace_back([s = st_.get(), id = a.id] { s->worker(*s->sendq[id], id, State::Role::kSend); });
  }
}

ExecutorServer::~ExecutorServer() {
  if (st_->init.joinable()) st_->init.join();
  for (auto* qs : {&st_->runq, &st_->copyq, &st_->sendq})
    for (auto& [a, q] : *qs) {
      {
        std::lock_guard lk(q->mu);
        q->stop = true;
      }
      q->cv.notify_all();
    }
  for (std::thread& t : st_->threads) t.join();
  st_->values.clear();
  st_->nccl.reset();
  close(st_->wake);
}

Status ExecutorServer::bind() {
  State& s = *st_;
  if (s.sock) return Status::Ok();
  zmq::socket_t sock(s.ctx, zmq::socket_type::router);
  sock.set(zmq::sockopt::linger, 0);
  try {
    sock.bind(s.opt.listen);
  } catch (const zmq::error_t& e) {
    // ZeroMQ binds an interface or an address, not a host name: say so
    // instead of its "No such device".
    const std::string hint = e.num() == ENODEV ? " (a tcp:// endpoint binds an IP address, an interface name such "
                                                 "as eth0, or *; not a host name)"
                                               : "";
    return FailedPrecondition("executor '" + s.opt.host + "': cannot listen on " + s.opt.listen + ": " + e.what() +
                              hint);
  }
  s.sock.emplace(std::move(sock));
  return Status::Ok();
}

Status ExecutorServer::serve(const std::atomic<int>* stop) {
  State& s = *st_;
  if (Status b = bind(); !b.ok()) return b;
  zmq::socket_t& sock = *s.sock;
  const auto beat = std::chrono::milliseconds(s.opt.heartbeat_ms);
  const auto timeout = std::chrono::milliseconds(s.opt.timeout_ms);
  std::vector<std::string> scheduler;  // its route, once it said hello: the lease holder
  std::string holder;                  // its name, for a refusal
  auto last_seen = Clock::now(), next_beat = Clock::now(), since = Clock::now();
  std::deque<std::pair<std::vector<std::string>, wire::Message>> out;
  auto refuse = [&](const std::vector<std::string>& route, const json& body, const std::string& why) {
    std::fprintf(stderr, "slicesched executor '%s': refused %s: %s\n", s.opt.host.c_str(),
                 body.value("scheduler", std::string("a scheduler")).c_str(), why.c_str());
    s.reply(route, json{{"req", body.value("req", std::uint64_t{0})}, {"ok", false}, {"error", why}});
  };
  for (;;) {
    if (stop && stop->load() != 0) return Status::Ok();
    zmq::pollitem_t items[2] = {{sock.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, s.wake, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, beat);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // a signal: the stop flag says whether to end
      return Internal("executor '" + s.opt.host + "': polling its socket: " + e.what());
    }
    if (items[1].revents) {
      eventfd_t v;
      (void)eventfd_read(s.wake, &v);
    }
    {
      std::lock_guard lk(s.out_mu);
      out.swap(s.out);
    }
    for (auto& [route, m] : out) (void)wire::send(sock, m, route);
    out.clear();
    while (sock.get(zmq::sockopt::events) & ZMQ_POLLIN) {
      std::vector<std::string> route;
      auto m = wire::recv(sock, 1, &route);
      if (!m.ok()) {  // another version, or garbage: refuse, say so, carry on
        std::fprintf(stderr, "slicesched executor '%s': refused a peer: %s\n", s.opt.host.c_str(),
                     m.status().message().c_str());
        if (!route.empty()) (void)wire::send(sock, {wire::Type::kError, error_body(m.status()), {}}, route);
        continue;
      }
      const bool from_scheduler = !scheduler.empty() && route == scheduler;
      if (from_scheduler) last_seen = Clock::now();
      json body = json::parse(m->body, nullptr, false);
      if (body.is_discarded()) continue;
      try {
        switch (m->type) {
          case wire::Type::kHello: {
            const auto now = Clock::now();
            const std::string who = body.value("scheduler", std::string("a scheduler"));
            if (!scheduler.empty() && route != scheduler && now - last_seen <= timeout) {
              char held[96];
              std::snprintf(held, sizeof held, "connected %.1f s ago, heard from %lld ms ago",
                            std::chrono::duration<double>(now - since).count(),
                            static_cast<long long>(
                                std::chrono::duration_cast<std::chrono::milliseconds>(now - last_seen).count()));
              refuse(route, body,
                     "executor '" + s.opt.host + "' already serves the scheduler " + holder + " (" + held +
                         "); one scheduler at a time: stop that one first, or start another executor");
              break;
            }
            if (body.value("host", std::string()) != s.opt.host) {
              refuse(route, body,
                     "this executor serves host '" + s.opt.host + "', not '" + body.value("host", std::string()) + "'");
              break;
            }
            wire::Fingerprint theirs;
            if (const auto f = body.find("fingerprint"); f != body.end() && f->is_array())
              for (const json& kv : *f) theirs.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
            if (auto d = wire::first_difference(theirs, s.opt.fingerprint, "executor '" + s.opt.host + "'")) {
              refuse(route, body, *d + " (start serve and every executor from the same config)");
              break;
            }
            if (!scheduler.empty() && route != scheduler) {
              // The holder is gone (silent past the timeout): what it left
              // here is freed before the next one starts.
              std::fprintf(stderr, "slicesched executor '%s': %s was silent for over %d ms; %s takes over\n",
                           s.opt.host.c_str(), holder.c_str(), s.opt.timeout_ms, who.c_str());
              s.drop_all();
            }
            scheduler = route;
            holder = who;
            since = last_seen = now;
            json accels = json::array();
            for (const auto& a : s.opt.accels)
              accels.push_back({{"accel", a.id},
                                {"name", a.name},
                                {"weights", a.weights},
                                {"gpu", s.gpu.count(a.id) ? s.gpu[a.id] : std::string()}});
            json fp = json::array();
            for (const auto& [k, v] : s.opt.fingerprint) fp.push_back({k, v});
            s.reply(
                route,
                json{
                    {"req", body["req"]}, {"ok", true}, {"host", s.opt.host}, {"accels", accels}, {"fingerprint", fp}});
            break;
          }
          case wire::Type::kRun:
          case wire::Type::kCopy: {
            if (!from_scheduler) {
              s.fail({route, body, {}, {}}, "executor '" + s.opt.host + "' serves " +
                                                (holder.empty() ? std::string("no scheduler yet (say hello first)")
                                                                : "the scheduler " + holder));
              break;
            }
            const AccelId a = body[m->type == wire::Type::kRun ? "accel" : "to"].get<AccelId>();
            if (!s.accel(a)) {
              s.fail({route, body, {}, {}},
                     "accelerator " + std::to_string(a) + " is not on host '" + s.opt.host + "'");
              break;
            }
            Job j{route, std::move(body), m->blobs.empty() ? std::string() : std::move(m->blobs[0]), {}};
            State::push(m->type == wire::Type::kRun ? *s.runq[a] : *s.copyq[a], std::move(j));
            break;
          }
          case wire::Type::kRelease:
            if (from_scheduler) s.release(body["ids"]);
            break;
          case wire::Type::kPull: {
            auto v = s.find(body["id"].get<std::uint64_t>());
            if (!v.ok()) {
              (void)wire::send(sock, {wire::Type::kError, error_body(v.status()), {}}, route);
              break;
            }
            std::string bytes = rt::LlamaModel::to_bytes(LlamaRunner::unwrap(v.value()));
            (void)wire::send(sock, {wire::Type::kValue, json{{"bytes", bytes.size()}}.dump(), {std::move(bytes)}},
                             route);
            break;
          }
          case wire::Type::kNcclInit:
            if (!from_scheduler) break;
            if (s.init.joinable()) {
              s.fail({route, body, {}, {}}, "NCCL links were set up already");
              break;
            }
            s.init = std::thread([st = &s, route, body] { st->init_nccl(route, body); });
            break;
          case wire::Type::kNcclPull: {
            // The layout goes back now; the data follows on the source
            // accelerator's send thread once the receiver posts its half.
            auto held = s.find_held(body["id"].get<std::uint64_t>());
            auto end = held.ok() ? s.link(body["link"].get<std::uint64_t>(), 0) : Result<State::LinkEnd>(held.status());
            if (end.ok() && end->mine != held->accel)
              end = FailedPrecondition("value " + std::to_string(body["id"].get<std::uint64_t>()) +
                                       " is not on the link's accelerator");
            if (!end.ok()) {
              (void)wire::send(sock, {wire::Type::kError, error_body(end.status()), {}}, route);
              break;
            }
            std::string layout = rt::LlamaModel::encode(rt::LlamaModel::layout(LlamaRunner::unwrap(held->value)));
            (void)wire::send(sock, {wire::Type::kLayout, json{{"bytes", layout.size()}}.dump(), {std::move(layout)}},
                             route);
            State::push(*s.sendq[held->accel], {route, std::move(body), {}, held->value});
            break;
          }
          case wire::Type::kShutdown:
            if (from_scheduler) return Status::Ok();
            break;
          case wire::Type::kBye:
            // The holder did not start after all (another executor refused
            // it): free for the next scheduler.
            if (!from_scheduler) break;
            std::fprintf(stderr, "slicesched executor '%s': %s left without serving; waiting for a scheduler\n",
                         s.opt.host.c_str(), holder.c_str());
            s.drop_all();
            scheduler.clear();
            holder.clear();
            break;
          default:
            break;
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "slicesched executor '%s': a malformed message: %s\n", s.opt.host.c_str(), e.what());
      }
    }
    const auto now = Clock::now();
    if (!scheduler.empty()) {
      if (now - last_seen > timeout)
        return Aborted("executor '" + s.opt.host + "': the scheduler was silent for over " +
                       std::to_string(s.opt.timeout_ms) + " ms; exiting");
      if (now >= next_beat) {
        next_beat = now + beat;
        (void)wire::send(sock, {wire::Type::kHeartbeat, "{}", {}}, scheduler);
      }
    }
  }
}

std::string ExecutorServer::summary() const {
  return "copies received: " + std::to_string(st_->in_nccl.load()) + " over NCCL, " +
         std::to_string(st_->in_bytes.load()) + " pulled as bytes over ZeroMQ, " +
         std::to_string(st_->in_local.load()) +
         " within this process; sent over NCCL: " + std::to_string(st_->out_nccl.load()) +
         "; NCCL links: " + std::to_string(st_->nccl ? st_->nccl->size() : 0);
}

}  // namespace slicesched
