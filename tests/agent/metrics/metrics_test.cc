// Copyright 2026 The Strata Authors.
//
// Metrics: the registry's text format, the HTTP endpoint, and a real job's
// agents (processes, --metrics via STRATA_METRICS) whose values move as the
// job saves, replicates and restores.
#include "util/metrics.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "agent/metrics/metrics_server.h"
#include "cluster.h"
#include "net/socket.h"

namespace strata::testing {
namespace {

using namespace std::chrono_literals;

// One HTTP request on a fresh connection; the whole answer (head and body),
// or what went wrong (also an answer that takes over 20 s: the server's
// request timeout is 5 s).
std::string Http(uint16_t port, const std::string& request) {
  auto s = net::Socket::Connect("127.0.0.1", port, 5s);
  if (!s.ok()) return "connect: " + s.status().ToString();
  if (!s->SendAll(request.data(), request.size(), net::DeadlineAfter(5s)).ok()) return "send";
  std::string out;
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    ssize_t n = ::recv(s->fd(), buf, sizeof buf, 0);
    if (n < 0 && errno == EAGAIN) {
      if (std::chrono::steady_clock::now() > deadline) {
        return "no answer within 20 s (" + std::to_string(out.size()) + " bytes): " + out;
      }
      std::this_thread::sleep_for(10ms);
      continue;
    }
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string Get(uint16_t port, const std::string& path) {
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n";
  SaveFuzzSeed("metrics", request);
  return Http(port, request);
}

// "name{labels} value" lines of a scrape -> value, keyed by "name{labels}".
std::map<std::string, double> Parse(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text.substr(text.find("\r\n\r\n") + 4));
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    auto space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

// The sum of every series of `name` whose labels contain `label` (e.g.
// tier="ram"); -1 when there is none.
double Sum(const std::map<std::string, double>& m, const std::string& name,
           const std::string& label = "") {
  double sum = 0;
  bool any = false;
  for (const auto& [k, v] : m) {
    bool same = k == name || k.rfind(name + "{", 0) == 0;
    if (same && (label.empty() || k.find(label) != std::string::npos)) {
      sum += v;
      any = true;
    }
  }
  return any ? sum : -1;
}

TEST(MetricsRegistryTest, RendersTheTextFormat) {
  metrics::Registry r;
  r.GetCounter("t_bytes_total", "Bytes", {{"peer", "a\"b"}}).Add(5);
  r.GetGauge("t_held_bytes", "Held\nnow").Set(1.5);
  auto& h = r.GetHistogram("t_seconds", "Took", {0.1, 1});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(7);
  int id = r.AddCollector([](std::vector<metrics::Sample>* out) {
    out->push_back({"t_lag_seconds", "Lag", {{"tier", "ram"}}, 3});
    out->push_back({"t_lag_seconds", "Lag", {{"tier", "peer"}}, 4});
  });
  const std::string text = r.Render();
  EXPECT_NE(text.find("# HELP t_bytes_total Bytes\n# TYPE t_bytes_total counter\n"
                      "t_bytes_total{peer=\"a\\\"b\"} 5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# HELP t_held_bytes Held\\nnow\n# TYPE t_held_bytes gauge\n"
                      "t_held_bytes 1.5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE t_seconds histogram\nt_seconds_bucket{le=\"0.10000000000000001\"} "
                      "1\nt_seconds_bucket{le=\"1\"} 2\nt_seconds_bucket{le=\"+Inf\"} 3\n"
                      "t_seconds_sum 7.5499999999999998\nt_seconds_count 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE t_lag_seconds gauge\nt_lag_seconds{tier=\"ram\"} 3\n"
                      "t_lag_seconds{tier=\"peer\"} 4\n"),
            std::string::npos)
      << text;
  r.RemoveCollector(id);
  EXPECT_EQ(r.Render().find("t_lag_seconds"), std::string::npos);
}

TEST(MetricsRegistryTest, ACollectedSampleNeverDuplicatesARegisteredFamily) {
  metrics::Registry r;
  r.GetCounter("t_total", "n").Add(1);
  r.AddCollector([](std::vector<metrics::Sample>* out) {
    out->push_back({"t_total", "again", {}, 9});
    out->push_back({"t_other", "other", {}, 2});
  });
  const std::string text = r.Render();
  EXPECT_EQ(text.find("# TYPE t_total"), text.rfind("# TYPE t_total")) << text;
  EXPECT_EQ(text.find("t_total 9"), std::string::npos) << text;
  EXPECT_NE(text.find("\nt_other 2\n"), std::string::npos) << text;
}

TEST(MetricsRegistryTest, SeriesAreSharedAndUpdatesAreAtomic) {
  metrics::Registry r;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&r] {
      for (int i = 0; i < 10000; ++i) {
        r.GetCounter("t_total", "n").Add();
        r.GetHistogram("t_seconds", "s", metrics::kDurationBuckets).Observe(0.002);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(r.GetCounter("t_total", "n").value(), 40000);
  EXPECT_EQ(r.GetHistogram("t_seconds", "s", {}).count(), 40000u);
}

TEST(MetricsServerTest, ServesMetricsAndRefusesTheRest) {
  metrics::Registry r;
  r.GetCounter("t_total", "n").Add(2);
  agent::MetricsServer server(&r);
  ASSERT_TRUE(server.Start("127.0.0.1", 0).ok());
  std::string ok = Get(server.port(), "/metrics");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << ok;
  EXPECT_NE(ok.find("\nt_total 2\n"), std::string::npos) << ok;
  EXPECT_EQ(Get(server.port(), "/nope").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Http(server.port(), "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
                .rfind("HTTP/1.1 405", 0),
            0u);
  // A client that never sends its request does not stop the next one.
  auto idle = net::Socket::Connect("127.0.0.1", server.port(), 5s);
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(Get(server.port(), "/metrics").rfind("HTTP/1.1 200", 0), 0u);
  // A port in use is an error at start.
  agent::MetricsServer second(&r);
  EXPECT_FALSE(second.Start("127.0.0.1", server.port()).ok());
  server.Stop();
}

TEST(AgentMetricsTest, ValuesMoveAsTheJobSavesReplicatesAndRestores) {
  Cluster c(2, "metrics");
  const uint16_t port[2] = {FreePort(), FreePort()};
  for (int n = 0; n < 2; ++n) {
    c.SetAgentEnv(n, {"STRATA_METRICS=127.0.0.1:" + std::to_string(port[n])});
  }
  c.StartAll();
  auto before = Parse(Get(port[1], "/metrics"));
  EXPECT_EQ(Sum(before, "strata_local_commit_bytes_total"), -1) << "nothing saved yet";
  EXPECT_GE(Sum(before, "strata_ram_bytes"), 0);

  // 20 ms a step: runs long enough for the ledger's 50 ms samples to see.
  auto runs = c.Train(20, 5, "orbax", 2, 20);
  ASSERT_EQ(runs[1].exit_code, 0) << runs[1].err;
  // The trainer's last steps are replicated, and the job's watermark
  // reported back, after it exits: scraped until the peer tier shows.
  auto saved = Parse(Get(port[1], "/metrics"));
  for (int i = 0; i < 300 && (Sum(saved, "strata_durability_lag_seconds", "tier=\"peer\"") < 0 ||
                              Sum(saved, "strata_replication_peer_lag_seconds") < 0);
       ++i) {
    std::this_thread::sleep_for(100ms);
    saved = Parse(Get(port[1], "/metrics"));
  }
  EXPECT_GT(Sum(saved, "strata_local_commit_bytes_total"), 4 * 2e6);  // 4 steps of 2 MiB
  EXPECT_GE(Sum(saved, "strata_local_commit_seconds_count"), 4);
  EXPECT_GT(Sum(saved, "strata_replication_bytes_total", "peer=\"" + c.address(0) + "\""), 0);
  EXPECT_GE(Sum(saved, "strata_durability_lag_seconds", "tier=\"ram\""), 0);
  EXPECT_GE(Sum(saved, "strata_durability_lag_seconds", "tier=\"peer\""), 0);
  EXPECT_GE(Sum(saved, "strata_replication_peer_lag_seconds", "peer=\"" + c.address(0) + "\""), 0);
  EXPECT_GT(Sum(saved, "strata_ram_bytes"), 0);
  // The coordinator (node 0) timed the job's start round.
  EXPECT_GE(Sum(Parse(Get(port[0], "/metrics")), "strata_coordinator_round_seconds_count"), 1);

  // Node 1 is replaced: its new agent restores its step from node 0.
  c.KillAgent(1);
  c.WipeDir(1);
  c.StartAgent(1);
  runs = c.Train(30, 5, "orbax", 2, 20);
  ASSERT_EQ(runs[1].exit_code, 0) << runs[1].err;
  EXPECT_EQ(runs[1].restored, "20");
  auto restored = Parse(Get(port[1], "/metrics"));
  EXPECT_EQ(Sum(restored, "strata_restore_seconds_count", "source=\"peer\""), 1);
  EXPECT_GT(Sum(restored, "strata_restore_bytes_total", "source=\"peer\""), 0);
  auto own = Parse(Get(port[0], "/metrics"));
  EXPECT_GE(Sum(own, "strata_restore_seconds_count", "source=\"own\""), 1);
  EXPECT_GT(Sum(own, "strata_goodput_seconds", "category=\"productive\""), 0);

  // strata goodput over both nodes: the job's time, split.
  std::string out;
  ASSERT_EQ(c.Cli("goodput", 0, {"--agent", c.socket(1), "--json"}, &out), 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  ASSERT_EQ(j["nodes"].size(), 2u) << out;
  const auto& job = j["job"];
  EXPECT_GT(job["productive_seconds"].get<double>(), 0) << out;
  EXPECT_GT(job["restore_seconds"].get<double>(), 0) << out;
  // The ledger samples the ranks' step every 50 ms; the last steps may fall
  // between samples.
  EXPECT_GE(job["step"].get<int64_t>(), 20) << out;
  EXPECT_LE(job["step"].get<int64_t>(), 30) << out;
  EXPECT_EQ(job["interruptions"].get<int64_t>(), 1) << out;  // node 0 saw the job start again
  EXPECT_EQ(job["wasted_steps"].get<int64_t>(), 0) << out;   // it resumed where it stopped
  double sum = 0;
  for (const char* k : {"productive_seconds", "save_seconds", "restore_seconds", "wasted_seconds",
                        "other_seconds"}) {
    sum += job[k].get<double>();
  }
  EXPECT_NEAR(sum, job["elapsed_seconds"].get<double>(), 1e-6) << out;
  ASSERT_EQ(c.Cli("goodput", 0, {"--agent", c.socket(1)}, &out), 0) << out;
  EXPECT_NE(out.find("goodput "), std::string::npos) << out;
}

// strata run --agent (the agent's local socket) reports each restart of the
// command to the agent, which counts them by reason.
TEST(AgentMetricsTest, SupervisorRestartsAreCountedByReason) {
  Cluster c(1, "metrics-run");
  const uint16_t port = FreePort();
  c.SetAgentEnv(0, {"STRATA_METRICS=127.0.0.1:" + std::to_string(port)});
  c.StartAll();
  // Exits 75 (stopped after an on-demand checkpoint), then 3, then 0.
  const std::string count = c.dir(0) + "-runs";
  const std::string script = "n=$(cat " + count + " 2>/dev/null || echo 0)\necho $((n + 1)) > " +
                             count + "\n[ $n -eq 0 ] && exit 75\n[ $n -eq 1 ] && exit 3\nexit 0\n";
  // Through the agent's local socket: restarts are reported only there.
  Child run({BinaryPath("strata"), "run", "--agent", c.socket(0), "--backoff", "10ms,20ms", "--",
             "sh", "-c", script});
  ASSERT_EQ(run.Wait(std::chrono::minutes(1)), 0) << run.Stderr();
  auto m = Parse(Get(port, "/metrics"));
  EXPECT_EQ(Sum(m, "strata_supervisor_restarts_total", "reason=\"planned\""), 1);
  EXPECT_EQ(Sum(m, "strata_supervisor_restarts_total", "reason=\"failed\""), 1);
  EXPECT_EQ(Sum(m, "strata_supervisor_restarts_total", "reason=\"quarantined\""), -1);
  EXPECT_EQ(run.Stderr().find("the restart was not counted"), std::string::npos) << run.Stderr();
}

}  // namespace
}  // namespace strata::testing
