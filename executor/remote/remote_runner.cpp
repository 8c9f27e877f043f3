module;
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>
#include <zmq.hpp>

module slicesched.executor.remote.remote_runner;

import slicesched.executor.remote.wire;

namespace slicesched {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct RemoteRunner::Channel {
  using Promise = std::promise<Result<wire::Message>>;
  explicit Channel(std::size_t executors)
      : wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        dead(executors, 0),
        hello(executors, 0),
        why(executors),
        last_seen(executors, Clock::now()) {}
  ~Channel() {
    if (wake >= 0) close(wake);
  }
  void notify() const { (void)eventfd_write(wake, 1); }
  // Queues `m` for executor `e` (dropped if it is lost).
  void post(std::size_t e, wire::Message m) {
    {
      std::lock_guard lk(mu);
      if (dead[e]) return;
      out.emplace_back(e, std::move(m));
    }
    notify();
  }
  // Queues a request; its reply (or the executor's loss) fulfils the future.
  std::future<Result<wire::Message>> call(std::size_t e, wire::Type t, json body, std::vector<std::string> blobs = {}) {
    const std::uint64_t req = next_req++;
    body["req"] = req;
    auto p = std::make_shared<Promise>();
    auto f = p->get_future();
    {
      std::lock_guard lk(mu);
      if (dead[e]) {
        p->set_value(Aborted(why[e]));
        return f;
      }
      pending.emplace(req, std::make_pair(e, p));
      out.emplace_back(e, wire::Message{t, body.dump(), std::move(blobs)});
    }
    notify();
    return f;
  }

  zmq::context_t ctx{1};
  const int wake;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> next_req{1};
  std::mutex mu;  // everything below
  std::deque<std::pair<std::size_t, wire::Message>> out;
  std::unordered_map<std::uint64_t, std::pair<std::size_t, std::shared_ptr<Promise>>> pending;
  std::vector<std::uint8_t> dead, hello;
  std::vector<std::string> why;
  std::vector<Clock::time_point> last_seen;
};

namespace {

// A value held by an executor. The last handle tells it to free the value.
struct RemoteValue {
  RemoteValue(std::shared_ptr<RemoteRunner::Channel> c, std::size_t e, AccelId a, std::uint64_t i)
      : ch(std::move(c)), exec(e), accel(a), id(i) {}
  RemoteValue(const RemoteValue&) = delete;  // one handle, one release
  RemoteValue& operator=(const RemoteValue&) = delete;
  ~RemoteValue() { ch->post(exec, {wire::Type::kRelease, json{{"ids", {id}}}.dump(), {}}); }
  const std::shared_ptr<RemoteRunner::Channel> ch;
  const std::size_t exec;
  const AccelId accel;  // where it lives (the NCCL link to copy it on)
  const std::uint64_t id;
};

struct Prepared {
  std::size_t model = 0;
  int role = 0, group = 0;
  std::string name;
  std::shared_ptr<const std::string> plan;
  std::int64_t declared = 0;
};

// A reply's body, or the executor's refusal as a status.
Result<json> reply_body(const Result<wire::Message>& m, const std::string& host) {
  if (!m.ok()) return m.status();
  json b = json::parse(m->body, nullptr, false);
  if (b.is_discarded()) return Internal("executor '" + host + "' sent a malformed reply");
  if (m->type == wire::Type::kError || !b.value("ok", false))
    return Aborted("executor '" + host + "': " + b.value("error", std::string("refused")));
  return b;
}

}  // namespace

RemoteRunner::RemoteRunner(std::vector<ExecutorEndpoint> hosts, std::vector<std::size_t> accel_host,
                           std::vector<RemoteModel> models, RemoteOptions opt)
    : hosts_(std::move(hosts)),
      accel_host_(std::move(accel_host)),
      models_(std::move(models)),
      opt_(opt),
      ch_(std::make_shared<Channel>(hosts_.size())) {
  io_ = std::thread([this] { io_loop(); });
}

RemoteRunner::~RemoteRunner() {
  ch_->stop = true;
  ch_->notify();
  io_.join();
  std::lock_guard lk(ch_->mu);
  for (auto& [req, p] : ch_->pending) p.second->set_value(Aborted("the remote runner stopped"));
  ch_->pending.clear();
  // Handles that outlive the runner post into a queue nobody sends.
  std::fill(ch_->dead.begin(), ch_->dead.end(), 1);
}

void RemoteRunner::io_loop() {
  std::vector<zmq::socket_t> socks;
  for (const ExecutorEndpoint& h : hosts_) {
    socks.emplace_back(ch_->ctx, zmq::socket_type::dealer);
    socks.back().set(zmq::sockopt::linger, 0);
    // A send waits at most this long for a peer to queue for. Without it a
    // peer that fails ZeroMQ's handshake (another socket type, garbage
    // after the greeting) leaves no pipe, and the send would block this
    // thread for good: no deadline, no heartbeat, no shutdown. A message
    // dropped this way is a reply that never comes: the connect deadline
    // and the silence timeout report it.
    socks.back().set(zmq::sockopt::sndtimeo, 100);
    socks.back().connect(h.address);
  }
  const auto beat = std::chrono::milliseconds(opt_.heartbeat_ms);
  const auto timeout = std::chrono::milliseconds(opt_.timeout_ms);
  auto next_beat = Clock::now() + beat;
  std::vector<zmq::pollitem_t> items(socks.size() + 1);
  std::deque<std::pair<std::size_t, wire::Message>> out;
  while (!ch_->stop) {
    items[0] = {nullptr, ch_->wake, ZMQ_POLLIN, 0};
    for (std::size_t i = 0; i < socks.size(); ++i) items[i + 1] = {socks[i].handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(items, beat);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
      continue;  // a signal reached this thread: look again
    }
    if (items[0].revents) {
      eventfd_t v;
      (void)eventfd_read(ch_->wake, &v);
    }
    {
      std::lock_guard lk(ch_->mu);
      out.swap(ch_->out);
    }
    for (auto& [e, m] : out)
      if (!ch_->dead[e]) (void)wire::send(socks[e], m);  // (dead only ever turns on, on this thread)
    out.clear();
    const auto now = Clock::now();
    for (std::size_t e = 0; e < socks.size(); ++e) {
      while (socks[e].get(zmq::sockopt::events) & ZMQ_POLLIN) {
        auto m = wire::recv(socks[e]);
        std::shared_ptr<Channel::Promise> p;
        {
          std::lock_guard lk(ch_->mu);
          ch_->last_seen[e] = now;
          if (!m.ok()) {  // a refusal we cannot parse (another version): every call to it fails so
            for (auto it = ch_->pending.begin(); it != ch_->pending.end();)
              if (it->second.first == e) {
                it->second.second->set_value(
                    Aborted("executor '" + hosts_[e].host + "' at " + hosts_[e].address + ": " + m.status().message()));
                it = ch_->pending.erase(it);
              } else {
                ++it;
              }
            continue;
          }
          if (m->type != wire::Type::kReply && m->type != wire::Type::kError) continue;  // heartbeats
          const json b = json::parse(m->body, nullptr, false);
          if (b.is_discarded() || !b.contains("req")) continue;
          auto it = ch_->pending.find(b["req"].get<std::uint64_t>());
          if (it == ch_->pending.end()) continue;
          p = std::move(it->second.second);
          ch_->pending.erase(it);
        }
        p->set_value(std::move(m));
      }
    }
    if (now >= next_beat) {
      next_beat = now + beat;
      for (std::size_t e = 0; e < socks.size(); ++e)
        if (!ch_->dead[e]) (void)wire::send(socks[e], {wire::Type::kHeartbeat, "{}", {}});
    }
    for (std::size_t e = 0; e < socks.size(); ++e) {
      bool silent;
      {
        std::lock_guard lk(ch_->mu);
        silent = ch_->hello[e] && !ch_->dead[e] && now - ch_->last_seen[e] > timeout;
      }
      if (silent)
        declare_dead(e, "executor '" + hosts_[e].host + "' at " + hosts_[e].address + " was silent for over " +
                            std::to_string(opt_.timeout_ms) + " ms (lost)");
    }
  }
  // What was queued last (shutdown(), releases) still goes out: closing
  // waits up to a second for it to leave.
  {
    std::lock_guard lk(ch_->mu);
    out.swap(ch_->out);
  }
  for (auto& [e, m] : out)
    if (!ch_->dead[e]) (void)wire::send(socks[e], m);
  for (zmq::socket_t& s : socks) s.set(zmq::sockopt::linger, 1000);
}

void RemoteRunner::declare_dead(std::size_t exec, const std::string& why) {
  // The cluster first hears the accelerators are lost, so the calls that
  // fail next (outstanding, or made from now on) report lost, not failed.
  if (lost_cb_)
    for (AccelId a = 0; a < accel_host_.size(); ++a)
      if (accel_host_[a] == exec) lost_cb_(a);
  std::vector<std::shared_ptr<Channel::Promise>> failed;
  {
    std::lock_guard lk(ch_->mu);
    ch_->dead[exec] = 1;
    ch_->why[exec] = why;
    for (auto it = ch_->pending.begin(); it != ch_->pending.end();)
      if (it->second.first == exec) {
        failed.push_back(std::move(it->second.second));
        it = ch_->pending.erase(it);
      } else {
        ++it;
      }
  }
  ++lost_count_;
  for (auto& p : failed) p->set_value(Aborted(why));
}

Result<std::vector<std::int64_t>> RemoteRunner::connect(const std::vector<std::string>& names) {
  auto r = connect_all(names);
  // Refused somewhere (or stopped): the executors that took this scheduler
  // are told it will not serve, so they stay free for the next one.
  if (!r.ok())
    for (std::size_t e = 0; e < hosts_.size(); ++e) ch_->post(e, {wire::Type::kBye, "{}", {}});
  return r;
}

Result<std::vector<std::int64_t>> RemoteRunner::connect_all(const std::vector<std::string>& names) {
  std::vector<std::future<Result<wire::Message>>> hellos;
  for (std::size_t e = 0; e < hosts_.size(); ++e) {
    json fp = json::array();
    for (const auto& [k, v] : hosts_[e].fingerprint) fp.push_back({k, v});
    hellos.push_back(ch_->call(e, wire::Type::kHello,
                               json{{"host", hosts_[e].host}, {"scheduler", opt_.name}, {"fingerprint", fp}}));
  }
  std::vector<std::int64_t> weights(accel_host_.size(), 0);
  std::vector<std::string> gpu(accel_host_.size());
  const auto deadline = Clock::now() + std::chrono::milliseconds(opt_.connect_ms);
  for (std::size_t e = 0; e < hosts_.size(); ++e) {
    const std::string who = "executor '" + hosts_[e].host + "' at " + hosts_[e].address;
    // In slices, so a signal (opt_.stop) ends the wait at once.
    while (hellos[e].wait_until(std::min(deadline, Clock::now() + std::chrono::milliseconds(100))) !=
           std::future_status::ready) {
      if (opt_.stop && opt_.stop->load() != 0) return Aborted("stopped while waiting for " + who + " to answer");
      if (Clock::now() >= deadline)
        return Aborted(who + " did not answer within " + std::to_string(opt_.connect_ms / 1000) +
                       " s (is `slicesched executor --host " + hosts_[e].host + "` running there?)");
    }
    auto m = hellos[e].get();
    // (the channel's failures name the executor themselves, as reply_body
    // passes them on)
    if (!m.ok()) return m.status();
    auto b = json::parse(m->body, nullptr, false);
    if (b.is_discarded()) return Aborted(who + " sent a malformed reply");
    if (m->type == wire::Type::kError || !b.value("ok", false))
      return Aborted(who + " refused this scheduler: " + b.value("error", std::string("no reason given")));
    wire::Fingerprint theirs;
    if (const auto f = b.find("fingerprint"); f != b.end() && f->is_array())
      for (const json& kv : *f) theirs.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
    if (auto d = wire::first_difference(hosts_[e].fingerprint, theirs, "executor '" + hosts_[e].host + "'"))
      return Aborted(who + ": " + *d + " (start serve and every executor from the same config)");
    std::vector<std::string> expected, got;
    for (AccelId a = 0; a < accel_host_.size(); ++a)
      if (accel_host_[a] == e) expected.push_back(names[a]);
    for (const json& a : b["accels"]) {
      const auto id = a["accel"].get<AccelId>();
      got.push_back(a["name"].get<std::string>());
      if (id >= accel_host_.size() || accel_host_[id] != e || names[id] != got.back())
        return Aborted(who + " owns accelerator '" + got.back() + "', which the config gives another host");
      weights[id] = a["weights"].get<std::int64_t>();
      gpu[id] = a.value("gpu", std::string());
    }
    if (got.size() != expected.size())
      return Aborted(who + " owns " + std::to_string(got.size()) + " accelerator(s), the config gives it " +
                     std::to_string(expected.size()) + " (do both read the same config?)");
    std::lock_guard lk(ch_->mu);
    ch_->hello[e] = 1;
    ch_->last_seen[e] = Clock::now();
  }
  if (Status s = connect_nccl(gpu, names, deadline); !s.ok()) return s;
  return weights;
}

Status RemoteRunner::connect_nccl(const std::vector<std::string>& gpu, const std::vector<std::string>& names,
                                  std::chrono::steady_clock::time_point deadline) {
  const std::vector<wire::NcclLink> plan = wire::plan_nccl_links(accel_host_, gpu);
  if (plan.empty() || !opt_.nccl_id) return Status::Ok();
  // Each executor hears all of its links at once, so it can join them in
  // one NCCL group: its two ranks of a pair of links never wait on each other.
  std::vector<json> per(hosts_.size(), json::array());
  const int left_ms = static_cast<int>(std::max<std::int64_t>(
      1000, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
  for (std::size_t n = 0; n < plan.size(); ++n) {
    const auto [from, to] = std::pair(plan[n].from, plan[n].to);
    const std::string name = names[from] + " (" + hosts_[accel_host_[from]].host + ") -> " + names[to] + " (" +
                             hosts_[accel_host_[to]].host + ")";
    std::string id;
    try {
      id = opt_.nccl_id();
    } catch (const std::exception& e) {
      return Aborted("NCCL link " + name + ": " + e.what());
    }
    std::string hex;
    for (char c : id) {
      static const char* digits = "0123456789abcdef";
      hex.push_back(digits[(static_cast<unsigned char>(c) >> 4) & 0xf]);
      hex.push_back(digits[static_cast<unsigned char>(c) & 0xf]);
    }
    json link{{"link", n}, {"from", from}, {"to", to}, {"name", name}, {"id", hex}};
    link["rank"] = 0;
    per[accel_host_[from]].push_back(link);
    link["rank"] = 1;
    per[accel_host_[to]].push_back(link);
    links_[{from, to}] = n;
  }
  std::vector<std::pair<std::size_t, std::future<Result<wire::Message>>>> inits;
  for (std::size_t e = 0; e < hosts_.size(); ++e)
    if (!per[e].empty())
      inits.emplace_back(e, ch_->call(e, wire::Type::kNcclInit, json{{"links", per[e]}, {"timeout_ms", left_ms}}));
  for (auto& [e, f] : inits) {
    const std::string who = "executor '" + hosts_[e].host + "' at " + hosts_[e].address;
    // The executors give up at left_ms themselves; a little longer here
    // lets their own line (naming the link) arrive.
    if (f.wait_until(deadline + std::chrono::seconds(5)) != std::future_status::ready) {
      links_.clear();
      return Aborted(who + " did not set up its NCCL links within " + std::to_string(left_ms / 1000) + " s");
    }
    auto b = reply_body(f.get(), hosts_[e].host);
    if (!b.ok()) {
      links_.clear();
      return Aborted("setting up NCCL links between executors: " + b.status().message());
    }
  }
  return Status::Ok();
}

void RemoteRunner::shutdown() {
  for (std::size_t e = 0; e < hosts_.size(); ++e) ch_->post(e, {wire::Type::kShutdown, "{}", {}});
}

Status RemoteRunner::on_iteration(InstanceId instance, IterationPlan plan) {
  auto text = std::make_shared<const std::string>(wire::encode_plan(plan.seqs));
  std::lock_guard lk(plans_mu_);
  plans_[instance] = std::move(text);
  return Status::Ok();
}

void RemoteRunner::drop_iteration(InstanceId instance) {
  std::lock_guard lk(plans_mu_);
  plans_.erase(instance);
}

Result<std::shared_ptr<const void>> RemoteRunner::prepare(const Gmg& gmg, OpId op) {
  const OpRecord& r = gmg.op(op);
  auto p = std::make_shared<Prepared>();
  p->name = gmg.op_name(op);
  const RemoteModel* m = nullptr;
  for (const RemoteModel& x : models_)
    if (x.tmpl == r.tmpl) m = &x;
  if (!m) return InvalidArgument("remote runner: no model serves " + p->name);
  OpRole role = OpRole::kLayers;
  if (m->contract) {
    const ModelOp& mo = m->contract->ops()[r.tmpl_op];
    role = mo.role;
    p->group = mo.group;
  } else {  // no contract: the Llama template's names (embed, layers<g>, head)
    const std::string& name = gmg.templates().get(r.tmpl).ops()[r.tmpl_op].name;
    if (name == "embed") {
      role = OpRole::kEmbed;
    } else if (name == "head") {
      role = OpRole::kHead;
    } else if (name.rfind("layers", 0) == 0 && name.size() > 6 &&
               name.find_first_not_of("0123456789", 6) == std::string::npos) {
      p->group = std::stoi(name.substr(6));
    } else {
      return InvalidArgument("remote runner: operator '" + name + "' is not embed, layers<g> or head");
    }
  }
  p->model = m->model;
  p->role = static_cast<int>(role);
  p->declared = r.out_bytes + r.retained_bytes;
  std::lock_guard lk(plans_mu_);
  auto it = plans_.find(r.instance);
  if (it == plans_.end()) return FailedPrecondition("remote runner: no iteration plan for " + p->name);
  p->plan = it->second;
  if (role == OpRole::kHead) plans_.erase(it);  // the instance's last operator
  return std::shared_ptr<const void>(std::move(p));
}

Result<OpResult> RemoteRunner::run(AccelId accel, const void* prepared, std::span<const Payload> inputs) {
  const auto& p = *static_cast<const Prepared*>(prepared);
  const std::size_t e = accel_host_[accel];
  json ids = json::array();
  for (const Payload& in : inputs) {
    const auto& v = *static_cast<const RemoteValue*>(in.value.get());
    if (v.exec != e) return Internal("remote runner: an input of " + p.name + " is on another host");
    ids.push_back(v.id);
  }
  json body{{"accel", accel}, {"model", p.model}, {"role", p.role},        {"group", p.group},
            {"name", p.name}, {"inputs", ids},    {"declared", p.declared}};
  auto b = reply_body(ch_->call(e, wire::Type::kRun, std::move(body), {*p.plan}).get(), hosts_[e].host);
  if (!b.ok()) return b.status();
  OpResult out;
  auto handle = [&](const json& v) -> Payload {
    if (v.is_null()) return {};
    return Payload{std::make_shared<const RemoteValue>(ch_, e, accel, v["id"].get<std::uint64_t>()),
                   v["bytes"].get<std::int64_t>()};
  };
  out.output = handle((*b)["output"]);
  out.retained = handle((*b)["retained"]);
  out.tokens = (*b)["tokens"].get<std::vector<std::int64_t>>();
  if (const auto lp = b->find("logprobs"); lp != b->end() && lp->is_string()) {
    auto l = wire::decode_logprobs(lp->get<std::string>());
    if (!l.ok()) return Internal("executor '" + hosts_[e].host + "': " + l.status().message());
    out.logprobs = std::move(l).value();
  }
  out.device_ns = (*b)["ns"].get<Nanos>();
  return out;
}

Result<CopyResult> RemoteRunner::copy(const Payload& value, AccelId to) {
  const auto& v = *static_cast<const RemoteValue*>(value.value.get());
  const std::size_t e = accel_host_[to];
  json body{{"to", to}, {"id", v.id}};
  // Across hosts the destination pulls from the source executor directly.
  if (v.exec != e) body["peer"] = hosts_[v.exec].address;
  if (auto l = links_.find({v.accel, to}); l != links_.end()) body["link"] = l->second;
  auto b = reply_body(ch_->call(e, wire::Type::kCopy, std::move(body)).get(), hosts_[e].host);
  if (!b.ok()) return b.status();
  CopyResult out;
  out.value = Payload{std::make_shared<const RemoteValue>(ch_, e, to, (*b)["output"]["id"].get<std::uint64_t>()),
                      (*b)["output"]["bytes"].get<std::int64_t>()};
  out.device_ns = (*b)["ns"].get<Nanos>();
  return out;
}

}  // namespace slicesched
