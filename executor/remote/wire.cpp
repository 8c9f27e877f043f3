module;
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

module slicesched.executor.remote.wire;

namespace slicesched::wire {

namespace {
constexpr char kMagic[4] = {'S', 'L', 'S', 'X'};
constexpr std::size_t kHeaderBytes = 8;  // magic, version (u16 LE), type (u16 LE)
}  // namespace

std::string header(Type type, std::uint16_t version) {
  std::string h(kMagic, 4);
  const auto t = static_cast<std::uint16_t>(type);
  h.push_back(static_cast<char>(version & 0xff));
  h.push_back(static_cast<char>(version >> 8));
  h.push_back(static_cast<char>(t & 0xff));
  h.push_back(static_cast<char>(t >> 8));
  return h;
}

Result<Type> parse_header(const std::string& frame) {
  if (frame.size() != kHeaderBytes || std::memcmp(frame.data(), kMagic, 4) != 0)
    return InvalidArgument("not a slicesched executor message (bad header frame of " + std::to_string(frame.size()) +
                           " bytes)");
  auto u16 = [&](std::size_t i) {
    return static_cast<std::uint16_t>(static_cast<unsigned char>(frame[i]) |
                                      (static_cast<unsigned char>(frame[i + 1]) << 8));
  };
  const std::uint16_t version = u16(4), type = u16(6);
  if (version != kProtocolVersion)
    return FailedPrecondition("the peer speaks executor protocol version " + std::to_string(version) +
                              ", this process speaks version " + std::to_string(kProtocolVersion) +
                              " (run the same slicesched build on every host)");
  if (type < 1 || type > static_cast<std::uint16_t>(Type::kBye))
    return InvalidArgument("unknown executor message type " + std::to_string(type));
  return static_cast<Type>(type);
}

Status send(zmq::socket_t& s, const Message& m, const std::vector<std::string>& route, std::uint16_t version) {
  try {
    // A multipart message is taken whole or not at all, so only its first
    // part can time out (a socket with a send timeout and no peer to queue
    // for: the connection is gone, or never passed the handshake).
    bool first = true;
    auto part = [&](zmq::const_buffer b, zmq::send_flags f) {
      const auto sent = s.send(b, f);
      if (first && !sent) return false;
      first = false;
      return true;
    };
    for (const std::string& r : route)
      if (!part(zmq::buffer(r), zmq::send_flags::sndmore)) return Aborted("sending: no peer took the message");
    const std::string h = header(m.type, version);
    if (!part(zmq::buffer(h), zmq::send_flags::sndmore)) return Aborted("sending: no peer took the message");
    s.send(zmq::buffer(m.body), m.blobs.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    for (std::size_t i = 0; i < m.blobs.size(); ++i)
      s.send(zmq::buffer(m.blobs[i]), i + 1 < m.blobs.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return Aborted(std::string("sending: ") + e.what());
  }
  return Status::Ok();
}

Result<Message> recv(zmq::socket_t& s, std::size_t route_frames, std::vector<std::string>* route) {
  std::vector<std::string> frames;
  try {
    for (;;) {
      zmq::message_t f;
      if (!s.recv(f, zmq::recv_flags::none)) return Aborted("receiving: interrupted");
      frames.push_back(f.to_string());
      if (!f.more()) break;
    }
  } catch (const zmq::error_t& e) {
    return Aborted(std::string("receiving: ") + e.what());
  }
  if (route) route->assign(frames.begin(), frames.begin() + std::min(route_frames, frames.size()));
  if (frames.size() < route_frames + 2) return InvalidArgument("a malformed executor message (too few frames)");
  auto type = parse_header(frames[route_frames]);
  if (!type.ok()) return type.status();
  Message m;
  m.type = type.value();
  m.body = std::move(frames[route_frames + 1]);
  for (std::size_t i = route_frames + 2; i < frames.size(); ++i) m.blobs.push_back(std::move(frames[i]));
  return m;
}

std::vector<NcclLink> plan_nccl_links(const std::vector<std::size_t>& accel_host, const std::vector<std::string>& gpu) {
  std::vector<NcclLink> links;
  for (AccelId a = 0; a < gpu.size(); ++a)
    for (AccelId b = 0; b < gpu.size(); ++b)
      if (!gpu[a].empty() && !gpu[b].empty() && accel_host[a] != accel_host[b] && gpu[a] != gpu[b])
        links.push_back({a, b});
  return links;
}

Fingerprint host_fingerprint(const std::string& host, const std::vector<HostAccel>& accels, int heartbeat_ms,
                             int timeout_ms) {
  std::string list;
  for (const HostAccel& a : accels)
    list += (list.empty() ? "" : ", ") + a.name + " on " + a.device + " (" + std::to_string(a.budget) + " bytes)";
  return {{"protocol", std::to_string(kProtocolVersion)},
          {"host", host},
          {"host.accelerators", list},
          {"live.heartbeat_ms", std::to_string(heartbeat_ms)},
          {"live.executor_timeout_ms", std::to_string(timeout_ms)}};
}

std::optional<std::string> first_difference(const Fingerprint& scheduler, const Fingerprint& executor,
                                            const std::string& who) {
  const std::size_t n = std::min(scheduler.size(), executor.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto& [sk, sv] = scheduler[i];
    const auto& [ek, ev] = executor[i];
    if (sk != ek)  // (the same build lists the same fields: one side serves more models)
      return sk + ": the scheduler has it, " + who + " has " + ek + " in its place";
    if (sv != ev) return sk + ": the scheduler has " + sv + ", " + who + " has " + ev;
  }
  if (scheduler.size() > n)
    return scheduler[n].first + ": the scheduler has " + scheduler[n].second + ", " + who + " has none";
  if (executor.size() > n) return executor[n].first + ": the scheduler has none, " + who + " has " + executor[n].second;
  return std::nullopt;
}

}  // namespace slicesched::wire
