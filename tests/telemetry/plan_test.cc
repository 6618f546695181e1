// frugal plan's model against a scenario computed by hand (the arithmetic is in the comments), and
// its input errors: each names the file, the line and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "frugal/telemetry/plan.h"

namespace frugal::telemetry::plan {
namespace {

namespace fs = std::filesystem;

class PlanFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("frugal_plan_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Two requests: arrivals 0 s and 0.5 s (finish time minus total_ms).
    write("trace.jsonl",
          "{\"time\":\"2026-01-01T00:00:01.000000000Z\",\"id\":\"r1\",\"finish_reason\":\"eos\",\"prompt_tokens\":100,"
          "\"generated_tokens\":10,\"timings\":{\"total_ms\":1000}}\n"
          "{\"time\":\"2026-01-01T00:00:09Z\",\"id\":\"refused\",\"finish_reason\":\"error\"}\n"
          "{\"time\":\"2026-01-01T00:00:01.5Z\",\"id\":\"r2\",\"prompt_tokens\":200,\"generated_tokens\":5,"
          "\"timings\":{\"total_ms\":1000}}\n");
    // Prefill 1000 tok/s at 0.1 J/token; decode at batch 1: 10 tok/s at 2 J/token; idle 100 W.
    write("gpu.json",
          "{\n \"source\": \"test figures\",\n \"idle_watts\": 100,\n \"tests\": [\n"
          "  {\"name\": \"pp512\", \"phase\": \"prefill\", \"n_parallel\": 1, \"depth\": 0, \"avg_ts\": 1000,\n"
          "   \"energy\": {\"source\": \"nvml\", \"joules_per_token_mean\": 0.1}},\n"
          "  {\"name\": \"tg128\", \"phase\": \"decode\", \"n_parallel\": 1, \"depth\": 0, \"avg_ts\": 10,\n"
          "   \"energy\": {\"source\": \"nvml\", \"joules_per_token_mean\": 2.0}},\n"
          "  {\"name\": \"tg128x8\", \"phase\": \"decode\", \"n_parallel\": 8, \"depth\": 0, \"avg_ts\": 40,\n"
          "   \"energy\": {\"source\": \"nvml\", \"joules_per_token_mean\": 0.5}}\n ]\n}\n");
    write("near.csv", "# a dirty grid that gets cleaner after the first hour\nhour,g_co2_per_kwh\n0,400\n1,200\n");
    write("green.csv", "hour,g_co2_per_kwh\n0,50\n");
    write("sites.csv",
          "# test sites\nname,profile,servers,batch,pue,wue_l_per_kwh,renewable_share,rtt_ms,carbon_csv\n"
          "near,gpu,1,1,1.5,2.0,0.5,10,near.csv\n"
          "green,gpu,1,1,1.1,0.5,0,100,green.csv\n");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  ScenarioResult run(Policy policy, double slo_ms) {
    auto trace = read_trace(path("trace.jsonl"));
    EXPECT_TRUE(trace.ok()) << trace.status().message();
    auto prof = read_profile("gpu", path("gpu.json"));
    EXPECT_TRUE(prof.ok()) << prof.status().message();
    auto sites = read_sites(path("sites.csv"));
    EXPECT_TRUE(sites.ok()) << sites.status().message();
    PlanOptions o;
    o.policy = policy;
    o.slo_ms = slo_ms;
    auto r = simulate(*trace, {*prof}, *sites, o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return *r;
  }
  fs::path dir_;
};

constexpr double kJPerKwh = 3.6e6;
#define EXPECT_REL(a, b) EXPECT_NEAR((a), (b), 1e-12 * std::max(1.0, std::abs(b)))

TEST_F(PlanFiles, LatencyFirstByHand) {
  const ScenarioResult r = run(Policy::kLatencyFirst, 0);
  // r1 (100 in, 10 out): service 100/1000 + 10/10 = 1.1 s, energy 100*0.1 + 10*2 = 30 J.
  //   near: 0.01 + 1.1 = 1.11 s; green: 0.1 + 1.1 = 1.2 s -> near, busy [0, 1.1].
  // r2 (200 in, 5 out) at 0.5 s: service 0.2 + 0.5 = 0.7 s, energy 20 + 10 = 30 J.
  //   near: waits until 1.1 -> 0.01 + 0.6 + 0.7 = 1.31 s; green: 0.1 + 0.7 = 0.8 s -> green [0.5, 1.2].
  ASSERT_EQ(r.site_of, (std::vector<int>{0, 1}));
  EXPECT_REL(r.horizon_s, 1.2);
  EXPECT_REL(r.latency_s[0], 1.11);
  EXPECT_REL(r.latency_s[1], 0.8);
  const SiteResult& near = r.sites[0];
  const SiteResult& green = r.sites[1];
  // near: idle 0.1 s x 100 W = 10 J; IT 40 J; facility x1.5 = 60 J.
  EXPECT_REL(near.idle_joules, 10.0);
  EXPECT_REL(near.it_joules, 40.0);
  EXPECT_REL(near.facility_joules, 60.0);
  // carbon: r1 at 400 g/kWh: 30 J x 1.5 x (1 - 0.5) x 400 / 3.6e6; idle over [1.1, 1.2] at 400:
  // 100 W x 0.1 s x 400 x 1.5 x 0.5 / 3.6e6.
  EXPECT_REL(near.carbon_g, (30 * 1.5 * 0.5 * 400 + 100 * 0.1 * 400 * 1.5 * 0.5) / kJPerKwh);
  EXPECT_REL(near.water_l, 40 / kJPerKwh * 2.0);
  EXPECT_REL(near.utilization, 1.1 / 1.2);
  // green: idle [0, 0.5] = 50 J; IT 80 J; facility 88 J; carbon at 50 g/kWh, no renewables.
  EXPECT_REL(green.it_joules, 80.0);
  EXPECT_REL(green.facility_joules, 88.0);
  EXPECT_REL(green.carbon_g, (30 * 1.1 * 50 + 100 * 0.5 * 50 * 1.1) / kJPerKwh);
  EXPECT_REL(green.water_l, 80 / kJPerKwh * 0.5);
  EXPECT_REL(green.utilization, 0.7 / 1.2);
  EXPECT_REL(r.total.facility_joules, 148.0);
  EXPECT_REL(r.total.mean_facility_w, 60 / 1.2 + 88 / 1.2);
  EXPECT_REL(r.latency_mean_s, (1.11 + 0.8) / 2);
  EXPECT_REL(r.latency_p50_s, 0.8);
  EXPECT_REL(r.latency_p95_s, 1.11);
}

TEST_F(PlanFiles, CarbonAwareByHandWithAndWithoutTheSloBinding) {
  // SLO 1.5 s: r1 carbon near 30*1.5*0.5*400 vs green 30*1.1*50 (per 3.6e6) -> green (1.2 s).
  // r2: green waits until 1.1: 0.1 + 0.6 + 0.7 = 1.4 s <= 1.5 and still cleaner -> green.
  ScenarioResult r = run(Policy::kCarbonAware, 1500);
  ASSERT_EQ(r.site_of, (std::vector<int>{1, 1}));
  EXPECT_REL(r.horizon_s, 1.8);
  EXPECT_REL(r.latency_s[1], 1.4);
  EXPECT_EQ(r.sites[0].requests, 0);
  // near idles the whole 1.8 s: 180 J, its carbon at 400 g/kWh, half renewable, PUE 1.5.
  EXPECT_REL(r.sites[0].it_joules, 180.0);
  EXPECT_REL(r.sites[0].carbon_g, 100 * 1.8 * 400 * 1.5 * 0.5 / kJPerKwh);
  EXPECT_REL(r.sites[1].it_joules, 60.0);
  EXPECT_REL(r.sites[1].idle_joules, 0.0);
  EXPECT_REL(r.sites[1].carbon_g, 2 * 30 * 1.1 * 50 / kJPerKwh);
  EXPECT_EQ(r.slo_misses, 0);
  // SLO 1.3 s: r2 at green would take 1.4 s, so it goes near (0.71 s).
  r = run(Policy::kCarbonAware, 1300);
  ASSERT_EQ(r.site_of, (std::vector<int>{1, 0}));
  EXPECT_REL(r.latency_s[1], 0.71);
}

TEST_F(PlanFiles, CarbonSeriesStepsAndIntegrates) {
  auto c = read_carbon(path("near.csv"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->at(3599.0), 400);
  EXPECT_EQ(c->at(3600.0), 200);
  EXPECT_REL(c->integral(3000, 4000), 600.0 * 400 + 400.0 * 200);
}

TEST_F(PlanFiles, BatchUsesTheOperatingPointAtThatParallelism) {
  write("sites.csv", "name,profile,servers,batch,pue,wue_l_per_kwh,renewable_share,rtt_ms,carbon_csv\n"
                     "only,gpu,1,8,1,0,0,0,green.csv\n");
  const ScenarioResult r = run(Policy::kLatencyFirst, 0);
  // Batch 8: 40 tok/s over 8 sequences = 5 tok/s each, 0.5 J/token. r1: 0.1 + 10/5 = 2.1 s.
  EXPECT_REL(r.latency_s[0], 2.1);
  EXPECT_REL(r.latency_s[1], 0.2 + 1.0);  // its own slot: no wait
  EXPECT_REL(r.total.it_joules - r.total.idle_joules, 10 + 10 * 0.5 + 20 + 5 * 0.5);
}

TEST_F(PlanFiles, ErrorsNameFileLineAndField) {
  const auto expect_error = [](const Status& st, const std::string& what) {
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  };
  write("bad_trace.jsonl", "{\"time\":\"2026-01-01T00:00:01Z\",\"prompt_tokens\":1,\"generated_tokens\":1,"
                           "\"timings\":{\"total_ms\":1}}\n{\"time\":\"yesterday\"}\n");
  expect_error(read_trace(path("bad_trace.jsonl")).status(), "bad_trace.jsonl: line 2: field 'time'");
  write("bad_trace.jsonl", "{\"time\":\"2026-01-01T00:00:01Z\",\"prompt_tokens\":-3}\n");
  expect_error(read_trace(path("bad_trace.jsonl")).status(), "bad_trace.jsonl: line 1: field 'prompt_tokens'");
  write("bad_trace.jsonl", "\n{not json\n");
  expect_error(read_trace(path("bad_trace.jsonl")).status(), "bad_trace.jsonl: line 2: not JSON");

  write("bad.json", "{\n \"tests\": [\n  {\"name\": \"pp\", \"phase\": \"prefill\", \"n_parallel\": 1, \"depth\": 0,\n"
                    "   \"avg_ts\": 5, \"energy\": {\"source\": \"unavailable\", \"joules_per_token_mean\": null}}\n ]\n}\n");
  expect_error(read_profile("x", path("bad.json")).status(),
               "bad.json: line 4: field 'tests[0].energy.joules_per_token_mean': not a positive number (energy source "
               "'unavailable'");
  write("bad.json", "{\n \"tests\": [\n  {\"name\": \"pp\",\n   \"phase\": \"warmup\"}\n ]\n}\n");
  expect_error(read_profile("x", path("bad.json")).status(), "bad.json: line 4: field 'tests[0].phase'");
  write("bad.json", "{\n \"tests\": [\n  1,\n");
  expect_error(read_profile("x", path("bad.json")).status(), "bad.json: line 4: not JSON");

  write("bad_sites.csv", "name,profile,servers,batch,pue,wue_l_per_kwh,renewable_share,rtt_ms,carbon_csv\n"
                         "a,gpu,1,1,0.9,0,0,0,green.csv\n");
  expect_error(read_sites(path("bad_sites.csv")).status(), "bad_sites.csv: line 2: field 'pue': '0.9'");
  write("bad_sites.csv", "name,profile,servers,batch,pue,wue_l_per_kwh,renewable_share,rtt_ms,carbon_csv\n"
                         "#\na,gpu,1,1,1.2,0,1.5,0,green.csv\n");
  expect_error(read_sites(path("bad_sites.csv")).status(), "bad_sites.csv: line 3: field 'renewable_share'");
  write("bad_sites.csv", "name,profile,servers,batch,pue,wue_l_per_kwh,renewable_share,rtt_ms,carbon_csv\n"
                         "a,gpu,1,1,1.2,0,0,0,bad_ci.csv\n");
  write("bad_ci.csv", "hour,g_co2_per_kwh\n0,100\n2,lots\n");
  expect_error(read_sites(path("bad_sites.csv")).status(),
               "bad_sites.csv: line 2: field 'carbon_csv': " + path("bad_ci.csv") + ": line 3: field 'g_co2_per_kwh'");
  write("bad_ci.csv", "hour,g_co2_per_kwh\n0,100\n0,90\n");
  expect_error(read_carbon(path("bad_ci.csv")).status(), "line 3: field 'hour'");

  // A site whose batch the profile never measured.
  write("sites.csv", "name,profile,servers,batch,pue,wue_l_per_kwh,renewable_share,rtt_ms,carbon_csv\n"
                     "a,gpu,2,64,1.2,0,0,0,green.csv\n");
  auto trace = read_trace(path("trace.jsonl"));
  auto prof = read_profile("gpu", path("gpu.json"));
  auto sites = read_sites(path("sites.csv"));
  ASSERT_TRUE(trace.ok() && prof.ok() && sites.ok());
  expect_error(simulate(*trace, {*prof}, *sites, {}).status(), "no decode test at parallel 64 (bench it with --parallel 64)");
  expect_error(simulate(*trace, {}, *sites, {}).status(), "site 'a': no profile named 'gpu'");
}

}  // namespace
}  // namespace frugal::telemetry::plan
