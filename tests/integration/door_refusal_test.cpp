// Refusal at the door ([scheduler.slo] refuse_over) on a real kvlaned: a request predicted
// to start far past its class's TTFT objective gets busy on the ring (the real client
// library) and 429 with Retry-After over HTTP, and the requests it waited behind go on.
#include "tests/integration/http_fixture.hpp"

#include <kvlane/client.hpp>

#include <thread>

using namespace kvlane::test::http;
namespace client = kvlane::client;

namespace {

/// Batch requests may wait 1 ms (refuse_over 1 times a 1 ms objective); interactive ones
/// 10 minutes.
std::string door_config(const std::string& run_dir) {
  return http_config(run_dir) + R"([scheduler.slo]
batch_ttft_ms = 1
interactive_ttft_ms = 600000
refuse_over = 1
)";
}

client::request on_slow(client::priority prio, std::uint32_t max_tokens, int i) {
  client::request r;
  r.model = "slow";
  r.prio = prio;
  r.prompt = "door request " + std::to_string(i);
  r.sampling.max_tokens = max_tokens;
  return r;
}

} // namespace

TEST_CASE("door refusal: a batch request predicted to start past refuse_over times its TTFT "
          "objective gets busy on the ring and 429 with Retry-After over HTTP; the requests "
          "ahead of it go on") {
  http_fixture d{door_config};
  client::connect_options o;
  o.socket_path = d.run_dir + "/kvlane.sock";
  o.client_name = "door";
  auto c = client::connect(o);
  REQUIRE(c);
  auto& conn = **c;

  // Two interactive requests hold both slots while four short batch ones wait behind them:
  // the scheduler measures how fast slots are granted, and batch requests waited for theirs.
  std::vector<std::shared_ptr<client::stream>> first;
  for (int i = 0; i < 6; ++i) {
    auto s = conn.submit(i < 2 ? on_slow(client::priority::interactive, 20, i)
                               : on_slow(client::priority::batch, 1, i));
    REQUIRE(s);
    first.push_back(*s);
  }
  for (auto& s : first)
    REQUIRE(s->wait(30s));
  // Two long interactive requests hold the model's two slots; 30 wait, ahead of any batch one.
  std::vector<std::shared_ptr<client::stream>> running;
  for (int i = 0; i < 32; ++i) {
    auto s = conn.submit(on_slow(client::priority::interactive, 400, 100 + i));
    REQUIRE(s);
    running.push_back(*s);
  }
  // No event says the daemon has read them all off the ring: `kvlane ps` (a round trip to
  // the scheduler, which publishes its forecast as it answers) is asked until it lists them.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (d.ps()["sequences"].size() < 32 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  REQUIRE(d.ps()["sequences"].size() == 32);
  std::uint64_t refusals = 0;

  SUBCASE("the ring answers busy with the predicted start") {
    auto over = conn.submit(on_slow(client::priority::batch, 4, 1000));
    REQUIRE(over);
    auto first = (*over)->next(20s);
    REQUIRE_FALSE(first);
    CHECK(first.error().code == client::errc::busy);
    CAPTURE(first.error().message);
    CHECK(first.error().message.find("model 'slow' is predicted to start this batch request in")
          == 0);
    CHECK(first.error().message.find("retry after") != std::string::npos);
    refusals = 1;
  }
  SUBCASE("HTTP answers 429 with Retry-After, in both dialects") {
    const json body{{"model", "slow"}, {"prompt", "door"}, {"max_tokens", 4},
                    {"priority", "batch"}};
    auto r = d.request("POST", "/v1/completions", body.dump());
    CAPTURE(r.head);
    CAPTURE(r.body);
    CHECK(r.status == 429);
    std::smatch m;
    const std::regex retry{R"(\r\nRetry-After: (\d+)\r\n)", std::regex::icase};
    REQUIRE(std::regex_search(r.head, m, retry));
    CHECK(std::stoul(m[1]) >= 1);
    const auto err = json::parse(r.body)["error"];
    CHECK(err["type"] == "requests");
    CHECK(err["code"] == "predicted_wait_too_long");
    CHECK(err["message"].get<std::string>().find("predicted to start") != std::string::npos);

    const json ollama{{"model", "slow"}, {"prompt", "door"}, {"stream", false},
                      {"priority", "batch"}};
    auto o2 = d.request("POST", "/api/generate", ollama.dump());
    CAPTURE(o2.body);
    CHECK(o2.status == 429);
    CHECK(json::parse(o2.body)["error"].get<std::string>().find("predicted to start")
          != std::string::npos);
    refusals = 2;
  }
  // Nothing the refusal met changed: the 32 are still live, and they end when cancelled.
  CHECK(d.ps()["sequences"].size() == 32);
  // kvlane status counts the refusals and shows the limit.
  const auto status = d.status();
  CHECK(status["slo"]["refuse_over"] == 1.0);
  for (const auto& m : status["models"])
    CHECK(m.value("refused", std::uint64_t{0}) == (m["name"] == "slow" ? refusals : 0));
  for (auto& s : running)
    REQUIRE((*s).cancel());
  for (auto& s : running) {
    auto end = s->wait(30s);
    REQUIRE(end);
    CHECK(end->reason == client::end_reason::cancelled);
  }
}
