// A job's end in Prometheus, against Debian's real servers started on free loopback ports in a temporary directory
// (never the system's services): ddprun's final metrics through node_exporter's textfile collector
// (--metrics-textfile) and a Pushgateway (--metrics-push), both scraped by a real prometheus and read back through
// its HTTP API; and a live /metrics scrape never shows a rank that is gone as running.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/child_process.hpp"
#include "support/http_test_client.hpp"
#include "support/wait_until.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::waitUntil;
namespace {

const std::string kDdprun = DDPRUN_BIN;

/// GET `target` from 127.0.0.1:`port`; status 0 when nothing answers.
test::HttpReply get(int port, const std::string& target) {
  try {
    test::HttpTestClient client("127.0.0.1", static_cast<uint16_t>(port));
    return client.get(target);
  } catch (const std::exception&) {
    return {};
  }
}

/// A server of the test's own, on loopback.
struct Server {
  std::unique_ptr<test::ChildProcess> process;
  int port = 0;
};

Server start(const std::string& program, const std::vector<std::string>& args, int port, const std::string& ready) {
  Server s{std::make_unique<test::ChildProcess>(program, args, std::map<std::string, std::string>{}), port};
  EXPECT_TRUE(waitUntil([&] { return get(port, ready).status == 200 || !s.process->running(); }, 60s))
      << program << " never became ready\n"
      << s.process->outputSoFar();
  return s;
}

/// The value of `query`'s samples in prometheus, by their "job" label, once `count` of them are there.
std::map<std::string, double> query(int port, const std::string& query, size_t count) {
  std::map<std::string, double> values;
  waitUntil(
      [&] {
        values.clear();
        // curl: prometheus answers in chunks, which the test's own client does not read.
        const auto reply = test::runProcess("/usr/bin/curl",
                                            {"-s", "--max-time", "5", "-G", "--data-urlencode", "query=" + query,
                                             "http://127.0.0.1:" + std::to_string(port) + "/api/v1/query"},
                                            {}, 10s);
        if (reply.exitCode != 0) return false;
        const auto json = nlohmann::json::parse(reply.output, nullptr, false);
        if (json.is_discarded() || !json.contains("data")) return false;
        for (const auto& sample : json["data"]["result"]) {
          values[sample["metric"].value("job", "")] = std::stod(sample["value"][1].get<std::string>());
        }
        return values.size() >= count;
      },
      60s);
  return values;
}

bool installed(const std::string& program) { return fs::exists("/usr/bin/" + program); }

TEST(MetricsExport, TheEndOfAJobReachesPrometheusThroughNodeExporterAndThePushgateway) {
  for (const char* program : {"prometheus", "prometheus-node-exporter", "prometheus-pushgateway"}) {
    if (!installed(program)) GTEST_SKIP() << program << " is not installed (tools/setup.sh installs it)";
  }
  const std::string dir = test::makeTempDir("prom");
  fs::create_directories(dir + "/textfile");
  const int gatewayPort = test::freePort(), exporterPort = test::freePort(), promPort = test::freePort();
  Server gateway = start("/usr/bin/prometheus-pushgateway",
                         {"--web.listen-address=127.0.0.1:" + std::to_string(gatewayPort)}, gatewayPort, "/-/ready");
  Server exporter =
      start("/usr/bin/prometheus-node-exporter",
            {"--web.listen-address=127.0.0.1:" + std::to_string(exporterPort), "--collector.disable-defaults",
             "--collector.textfile", "--collector.textfile.directory=" + dir + "/textfile"},
            exporterPort, "/metrics");
  std::ofstream(dir + "/prometheus.yml") << "global:\n  scrape_interval: 1s\nscrape_configs:\n"
                                         << "  - job_name: node\n    static_configs: [{targets: ['127.0.0.1:"
                                         << exporterPort << "']}]\n"
                                         << "  - job_name: pushgateway\n    honor_labels: true\n"
                                         << "    static_configs: [{targets: ['127.0.0.1:" << gatewayPort << "']}]\n";
  Server prometheus = start("/usr/bin/prometheus",
                            {"--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/data",
                             "--web.listen-address=127.0.0.1:" + std::to_string(promPort)},
                            promPort, "/-/ready");
  const std::vector<std::string> exportFlags = {"--metrics-textfile", dir + "/textfile/ddprun.prom", "--metrics-push",
                                                "http://127.0.0.1:" + std::to_string(gatewayPort)};
  // A job that succeeds: exit code 0 and state "done", from both paths (job "node": the textfile; job "ddprun": the
  // group ddprun pushed, kept by honor_labels).
  std::vector<std::string> args = {"--nproc-per-node", "2", "--max-restarts", "1"};
  args.insert(args.end(), exportFlags.begin(), exportFlags.end());
  args.insert(args.end(), {"sh", "-c", "exit 0"});
  auto ok = test::runProcess(kDdprun, args, {}, 60s);
  ASSERT_EQ(ok.exitCode, 0) << ok.output;
  auto exitCodes = query(promPort, "ddprun_job_exit_code", 2);
  EXPECT_EQ(exitCodes, (std::map<std::string, double>{{"ddprun", 0}, {"node", 0}}));
  EXPECT_EQ(query(promPort, "ddprun_agent_state{state=\"done\"}==1", 2).size(), 2u);
  // A job that fails after its one restart: exit code 1, state "failed", the restart counted, an end time.
  args.back() = "exit 1";
  auto failed = test::runProcess(kDdprun, args, {}, 60s);
  ASSERT_EQ(failed.exitCode, 1) << failed.output;
  EXPECT_TRUE(waitUntil([&] { return query(promPort, "ddprun_job_exit_code==1", 2).size() == 2; }, 60s))
      << "prometheus never saw exit code 1 from both";
  EXPECT_EQ(query(promPort, "ddprun_agent_state{state=\"failed\"}==1", 2).size(), 2u);
  EXPECT_EQ(query(promPort, "ddprun_restarts_total{reason=\"failure\"}==1", 2).size(), 2u);
  const auto ends = query(promPort, "ddprun_job_end_time_seconds", 2);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& [job, end] : ends) EXPECT_NEAR(end, now, 120) << job;
  fs::remove_all(dir);
}

TEST(MetricsExport, ALiveScrapeNeverShowsARankThatIsGoneAsRunning) {
  // Rank 1 exits 0 at once; rank 0 runs until told. Once rank 1's process is gone (ddprun reaped it), every scrape
  // says it exited.
  const std::string dir = test::makeTempDir("live");
  test::ChildProcess ddprun(kDdprun,
                            {"--nproc-per-node", "2", "--status-port", "0", "--log-dir", dir, "sh", "-c",
                             "[ \"$RANK\" = 1 ] && exit 0; while [ ! -e '" + dir + "/go' ]; do sleep 0.05; done"},
                            {});
  int port = 0;
  ASSERT_TRUE(waitUntil(
      [&] {
        const std::string out = ddprun.outputSoFar();
        const auto at = out.find("status page on http://127.0.0.1:");
        if (at != std::string::npos) port = std::atoi(out.c_str() + at + 32);
        return port > 0;
      },
      30s))
      << ddprun.outputSoFar();
  int pid = 0;
  ASSERT_TRUE(waitUntil(
      [&] {
        const auto reply = get(port, "/status.json");
        if (reply.status != 200) return false;
        const auto ranks = nlohmann::json::parse(reply.body)["ranks"];
        pid = ranks.size() == 2 ? ranks[1]["pid"].get<int>() : 0;
        return pid > 0;
      },
      30s));
  ASSERT_TRUE(waitUntil([&] { return ::kill(pid, 0) != 0; }, 30s)) << "rank 1 never went";
  for (int i = 0; i < 20; ++i) {
    const std::string metrics = get(port, "/metrics").body;
    EXPECT_NE(metrics.find("ddprun_worker_state{local_rank=\"1\",rank=\"1\",state=\"exited\"} 1"), std::string::npos)
        << metrics;
  }
  std::ofstream(dir + "/go").close();
  EXPECT_EQ(ddprun.wait(60s).exitCode, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::launcher
