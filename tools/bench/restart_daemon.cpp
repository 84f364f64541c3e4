#include "tools/bench/restart_daemon.hpp"

#include "common/elapsed.hpp"
#include "tools/bench/admin_status.hpp"
#include "tools/bench/config_toml.hpp"
#include "tools/bench/prometheus_text.hpp"

#include <fmt/format.h>

#include <cmath>
#include <csignal>
#include <fstream>
#include <sys/un.h>
#include <vector>

namespace kvlane::tools::bench {

namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

std::uint64_t counter(std::string_view text, const std::string& model, std::string_view kind) {
  const auto v = find_sample(text, "kvlane_transfers_total", {{"model", model}, {"kind", kind}});
  return v && std::isfinite(*v) && *v >= 0 ? static_cast<std::uint64_t>(*v + 0.5) : 0;
}

} // namespace

expected<restart_daemon, std::string> restart_daemon::start(const options& opts,
                                                            daemon::config cfg,
                                                            notify_socket& notify) {
  const auto runtime = fmt::format("{}/run{}", opts.dir, opts.number);
  if (runtime.size() + sizeof "/kvlane-admin.sock" > sizeof(sockaddr_un{}.sun_path))
    return unexpected(fmt::format("the temporary directory's path is too long for a socket ({}); "
                                  "set TMPDIR to a shorter one",
                                  runtime));
  cfg.daemon.runtime_dir = runtime;
  auto toml = config_toml(cfg);
  if (!toml)
    return unexpected(fmt::format("the run's configuration: {}", toml.error()));
  const auto config_path = fmt::format("{}/kvlane-{}.toml", opts.dir, opts.number);
  {
    std::ofstream out{config_path, std::ios::trunc};
    out << *toml;
    if (!out.flush())
      return unexpected(fmt::format("cannot write '{}'", config_path));
  }
  restart_daemon d;
  d.log_ = fmt::format("{}/kvlaned-{}.log", opts.dir, opts.number);
  auto svc = service::start({opts.kvlaned_path, config_path, d.log_, opts.pass_store}, notify);
  if (!svc)
    return unexpected(fmt::format("cannot start kvlaned: {}", svc.error()));
  d.svc_.emplace(std::move(*svc));
  auto ready = notify.wait_for("READY=1", opts.ready_timeout);
  if (!ready)
    return unexpected(ready.error() + d.tail());
  if (!*ready) {
    if (const auto st = d.svc_->exit_status())
      return unexpected(
        fmt::format("kvlaned exited with status {} before READY=1{}", *st, d.tail()));
    return unexpected(fmt::format("kvlaned sent no READY=1 within {} ms{}",
                                  opts.ready_timeout.count(), d.tail()));
  }
  d.ready_at_ = **ready;
  for (auto& c : d.conns_) {
    client::connect_options co;
    co.socket_path = runtime + "/kvlane.sock";
    co.client_name = "bench";
    auto r = client::connection::connect(co);
    if (!r)
      return unexpected(fmt::format("cannot connect to kvlaned: {} ({}){}", r.error().message,
                                    client::to_string(r.error().code), d.tail()));
    c = std::move(*r);
  }
  auto admin = admin_connection::open(runtime + "/kvlane-admin.sock");
  if (!admin)
    return unexpected(fmt::format("cannot open the admin socket: {}{}", admin.error().message,
                                  d.tail()));
  d.admin_.emplace(std::move(*admin));
  return d;
}

restart_daemon::~restart_daemon() {
  for (auto& c : conns_)
    c.reset();
}

double restart_daemon::start_to_ready_ms() const noexcept {
  return svc_ ? ms_between(svc_->started(), ready_at_) : 0;
}

expected<actors::scheduler_stats, std::string> restart_daemon::counters(const std::string& model) {
  auto reply = admin_->command("status", 10s);
  if (!reply)
    return unexpected(fmt::format("admin status: {}", reply.error().message));
  auto st = stats_from_status(*reply, model);
  if (!st)
    return unexpected(std::move(st).error());
  try {
    for (const auto& m : reply->at("models"))
      if (m.at("name").get<std::string>() == model) {
        const auto& r = m.at("reuse");
        st->reused_tokens = r.at("reused_tokens").get<std::uint64_t>();
        st->prefill_tokens = r.at("prefill_tokens").get<std::uint64_t>();
        st->reuse_warm_hits = r.at("hits_warm").get<std::uint64_t>();
        st->reuse_hits = st->reuse_warm_hits + r.at("hits_load").get<std::uint64_t>();
        st->reuse_recomputed = r.at("recomputed").get<std::uint64_t>();
        st->retained_dumps = r.at("dumps").get<std::uint64_t>();
      }
  } catch (const json::exception& e) {
    return unexpected(fmt::format("unexpected admin status reply (reuse): {}", e.what()));
  }
  auto text = metrics();
  if (!text)
    return unexpected(std::move(text).error());
  st->dumps = counter(*text, model, "dump");
  st->loads = counter(*text, model, "load");
  return st;
}

expected<std::string, std::string> restart_daemon::metrics() {
  auto reply = admin_->command("metrics", 10s);
  if (!reply)
    return unexpected(fmt::format("admin metrics: {}", reply.error().message));
  const auto it = reply->find("text");
  if (it == reply->end() || !it->is_string())
    return unexpected(std::string{"admin metrics: the reply has no text"});
  return it->get<std::string>();
}

expected<std::string, std::string> restart_daemon::model_state(const std::string& model) {
  auto reply = admin_->command("status", 10s);
  if (!reply)
    return unexpected(fmt::format("admin status: {}", reply.error().message));
  try {
    for (const auto& m : reply->at("models")) {
      if (m.at("name").get<std::string>() != model)
        continue;
      const auto l = m.find("lifecycle");
      if (l != m.end() && l->is_object() && l->contains("state"))
        return l->at("state").get<std::string>();
      return m.at("state").get<std::string>();
    }
  } catch (const json::exception& e) {
    return unexpected(fmt::format("unexpected admin status reply: {}", e.what()));
  }
  return unexpected(fmt::format("the admin status lists no model '{}'", model));
}

expected<void, std::string> restart_daemon::stop(std::chrono::milliseconds timeout) {
  for (auto& c : conns_)
    c.reset();
  admin_.reset();
  auto status = svc_->stop(SIGTERM, timeout);
  if (!status)
    return unexpected(status.error() + tail());
  if (*status != 0)
    return unexpected(fmt::format("kvlaned exited with status {} after SIGTERM{}", *status, tail()));
  return {};
}

std::string restart_daemon::tail() const {
  const auto text = read_text_file(log_);
  std::vector<std::string_view> lines;
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    lines.push_back(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
  }
  std::string out;
  for (std::size_t i = lines.size() > 20 ? lines.size() - 20 : 0; i < lines.size(); ++i)
    out += fmt::format("\n    {}", lines[i]);
  return out.empty() ? std::string{" (it logged nothing)"} : "; its last lines:" + out;
}

void add_counters(actors::scheduler_stats& into, const actors::scheduler_stats& s) {
  const auto counters = into;
  into = s;
  into.submitted += counters.submitted;
  into.finished += counters.finished;
  into.cancelled += counters.cancelled;
  into.failed += counters.failed;
  into.steps += counters.steps;
  into.tokens_generated += counters.tokens_generated;
  into.prefill_tokens += counters.prefill_tokens;
  into.preemptions += counters.preemptions;
  into.swaps += counters.swaps;
  into.recomputes += counters.recomputes;
  into.demoted += counters.demoted;
  into.dumps += counters.dumps;
  into.loads += counters.loads;
  into.step_busy_ms += counters.step_busy_ms;
  into.transfer_ms += counters.transfer_ms;
  into.transfer_hidden_ms += counters.transfer_hidden_ms;
  into.reuse_hits += counters.reuse_hits;
  into.reuse_warm_hits += counters.reuse_warm_hits;
  into.reused_tokens += counters.reused_tokens;
  into.reuse_recomputed += counters.reuse_recomputed;
  into.retained_dumps += counters.retained_dumps;
}

} // namespace kvlane::tools::bench
