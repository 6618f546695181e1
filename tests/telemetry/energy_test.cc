// Energy counters: the interval arithmetic (wraps, resets, implausible jumps), the RAPL reader on
// fake powercap trees, the NVML loader on a machine without the driver, and the hardware sampler's
// /proc parsing and phase windows.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "frugal/telemetry/energy.h"
#include "frugal/telemetry/nvml.h"
#include "frugal/telemetry/rapl.h"
#include "frugal/telemetry/sampler.h"
#include "frugal/telemetry/telemetry.h"

namespace frugal::telemetry {
namespace {

namespace fs = std::filesystem;

CounterReading reading(std::initializer_list<uint64_t> raw, std::initializer_list<uint64_t> range, double t) {
  CounterReading r;
  r.ok = true;
  r.seconds = t;
  for (uint64_t v : raw) r.raw[static_cast<size_t>(r.n++)] = v;
  int i = 0;
  for (uint64_t v : range) r.range[static_cast<size_t>(i++)] = v;
  return r;
}

TEST(CounterDelta, SumsDomainsInJoules) {
  // Two RAPL domains (microjoules): 3 J and 0.5 J over one second.
  const auto a = reading({1'000'000, 200'000}, {1ull << 32, 1ull << 32}, 10.0);
  const auto b = reading({4'000'000, 700'000}, {1ull << 32, 1ull << 32}, 11.0);
  const EnergyDelta d = counter_delta(a, b, 1e-6, 1000);
  EXPECT_EQ(d.issue, CounterIssue::kNone);
  EXPECT_DOUBLE_EQ(d.joules, 3.5);
}

TEST(CounterDelta, WrapIsUnreliableNotNegativeOrHuge) {
  const uint64_t range = 262'143'328'850;  // a real package's max_energy_range_uj
  const auto a = reading({range - 1'000'000}, {range}, 0.0);
  const auto b = reading({2'000'000}, {range}, 1.0);
  const EnergyDelta d = counter_delta(a, b, 1e-6, 1000);
  EXPECT_EQ(d.issue, CounterIssue::kWrapped);
  EXPECT_EQ(d.joules, 0.0);
}

TEST(CounterDelta, DecreaseWithoutRangeIsAReset) {
  // NVML: 64-bit millijoules since driver load; going down means the driver reloaded.
  const auto a = reading({5'000'000}, {0}, 0.0);
  const auto b = reading({1'000}, {0}, 0.5);
  EXPECT_EQ(counter_delta(a, b, 1e-3, 1400).issue, CounterIssue::kReset);
}

TEST(CounterDelta, JumpBeyondTheCeilingIsImplausible) {
  // 10 kJ in 0.1 s = 100 kW from a meter capped at 1.4 kW: a reset that counted past the old value.
  const auto a = reading({1'000}, {0}, 0.0);
  const auto b = reading({10'001'000}, {0}, 0.1);
  EXPECT_EQ(counter_delta(a, b, 1e-3, 1400).issue, CounterIssue::kImplausible);
  // The same meter over 10 s at 1 kW is fine.
  const auto c = reading({10'001'000}, {0}, 10.0);
  EXPECT_EQ(counter_delta(a, c, 1e-3, 1400).issue, CounterIssue::kNone);
  EXPECT_DOUBLE_EQ(counter_delta(a, c, 1e-3, 1400).joules, 10'000.0);
}

TEST(CounterDelta, FailedOrMismatchedReadsAreUnreliable) {
  auto a = reading({1, 2}, {0, 0}, 0);
  auto b = reading({3}, {0}, 1);
  EXPECT_EQ(counter_delta(a, b, 1, 10).issue, CounterIssue::kReadFailed);
  b = reading({3, 4}, {0, 0}, 1);
  b.ok = false;
  EXPECT_EQ(counter_delta(a, b, 1, 10).issue, CounterIssue::kReadFailed);
}

TEST(PhaseEnergy, OneBadIntervalMakesThePhaseUnreliable) {
  PhaseEnergy p;
  p.source = EnergySource::kRapl;
  p.add({2.0, CounterIssue::kNone}, 0.5);
  p.add({4.0, CounterIssue::kNone}, 0.25);
  EXPECT_TRUE(p.reliable());
  EXPECT_DOUBLE_EQ(p.joules, 2.0);
  p.add({0.0, CounterIssue::kWrapped}, 1.0);
  EXPECT_FALSE(p.reliable());
  EXPECT_EQ(p.issue, CounterIssue::kWrapped);
  EXPECT_EQ(p.intervals, 3);
  PhaseEnergy none;  // unavailable: never reliable
  EXPECT_FALSE(none.reliable());
}

// A fake powercap tree: zones with name, energy_uj and max_energy_range_uj files.
class FakePowercap : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("frugal_powercap_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void zone(const std::string& z, const std::string& name, const std::string& energy, const std::string& range) {
    fs::create_directories(root_ / z);
    write(z + "/name", name + "\n");
    if (!energy.empty()) write(z + "/energy_uj", energy + "\n");
    if (!range.empty()) write(z + "/max_energy_range_uj", range + "\n");
  }
  void write(const std::string& rel, const std::string& text) { std::ofstream(root_ / rel) << text; }
  fs::path root_;
};

TEST_F(FakePowercap, SumsPackagesAndDramButNotCoreOrPsys) {
  zone("intel-rapl:0", "package-0", "1000000", "262143328850");
  zone("intel-rapl:0:0", "core", "999", "262143328850");
  zone("intel-rapl:0:2", "dram", "500000", "65712999613");
  zone("intel-rapl:1", "package-1", "2000000", "262143328850");
  zone("intel-rapl:2", "psys", "7000000", "262143328850");
  auto d = find_rapl_domains(root_.string());
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->size(), 3u);
  EXPECT_EQ((*d)[0].name, "package-0");
  EXPECT_EQ((*d)[1].name, "dram");
  EXPECT_EQ((*d)[1].range_uj, 65712999613u);
  EXPECT_EQ((*d)[2].name, "package-1");

  auto m = open_rapl_meter(root_.string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->source(), EnergySource::kRapl);
  EXPECT_NE((*m)->describe().find("package-0, dram, package-1"), std::string::npos) << (*m)->describe();
  const CounterReading a = (*m)->read();
  ASSERT_TRUE(a.ok);
  EXPECT_EQ(a.raw[0], 1000000u);
  // The counters advance by 1.5 J, 0.25 J and 2 J: the meter re-reads the same open files.
  write("intel-rapl:0/energy_uj", "2500000\n");
  write("intel-rapl:0:2/energy_uj", "750000\n");
  write("intel-rapl:1/energy_uj", "4000000\n");
  IntervalMeter im(m->get());
  // IntervalMeter read at construction: start over from `a` by hand to compare.
  CounterReading b = (*m)->read();
  b.seconds = a.seconds + 1.0;
  const EnergyDelta d1 = counter_delta(a, b, (*m)->joules_per_unit(), (*m)->max_watts());
  EXPECT_EQ(d1.issue, CounterIssue::kNone);
  EXPECT_DOUBLE_EQ(d1.joules, 3.75);
  // Package 1 wraps during the next interval.
  write("intel-rapl:1/energy_uj", "10\n");
  EXPECT_EQ(im.stop().issue, CounterIssue::kWrapped);
}

TEST_F(FakePowercap, PsysAloneWhenThereIsNoPackage) {
  zone("intel-rapl:0", "psys", "42", "");
  auto d = find_rapl_domains(root_.string());
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].range_uj, 0u);  // no max_energy_range_uj: a decrease will read as a reset
}

TEST_F(FakePowercap, MissingTreeOrZonesSayWhy) {
  auto none = open_energy_meter("cpu", (root_ / "absent").string());
  EXPECT_EQ(none->source(), EnergySource::kUnavailable);
  EXPECT_NE(none->describe().find("no powercap tree"), std::string::npos) << none->describe();
  EXPECT_FALSE(none->read().ok);
  zone("intel-rapl:0:0", "core", "1", "2");  // a sub-zone only
  auto d = find_rapl_domains(root_.string());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("no package, psys or dram zone"), std::string::npos) << d.status().message();
}

TEST_F(FakePowercap, GarbageCounterNamesTheFile) {
  zone("intel-rapl:0", "package-0", "12ab", "100");
  auto d = find_rapl_domains(root_.string());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("intel-rapl:0/energy_uj"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("'12ab'"), std::string::npos) << d.status().message();
}

TEST_F(FakePowercap, CounterWithoutEnergyFileIsSkippedWithTheReason) {
  // energy_uj a directory: the file exists but reads nothing (what an unreadable counter gives).
  zone("intel-rapl:0", "package-0", "", "100");
  fs::create_directories(root_ / "intel-rapl:0" / "energy_uj");
  auto d = find_rapl_domains(root_.string());
  ASSERT_FALSE(d.ok());
}

TEST(Nvml, AbsentLibraryIsAMessageNotACrash) {
  NvmlOpenOptions o;
  o.library = "libfrugal-no-such-nvml.so.1";
  auto d = open_nvml_device(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), ErrorCode::kNotSupported);
  EXPECT_NE(d.status().message().find("cannot load libfrugal-no-such-nvml.so.1"), std::string::npos)
      << d.status().message();
}

TEST(Nvml, LibraryWithoutTheSymbolsNamesThem) {
  NvmlOpenOptions o;
  o.library = "libm.so.6";  // loads, but is not NVML
  auto d = open_nvml_device(o);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("libm.so.6 lacks nvmlInit_v2"), std::string::npos) << d.status().message();
}

TEST(Nvml, CudaMeterOnThisMachine) {
  // Without the driver the meter is unavailable and says why; with it, NVML counts.
  auto m = open_energy_meter("cuda");
  if (m->source() == EnergySource::kUnavailable) {
    EXPECT_NE(m->describe().find("nvml:"), std::string::npos) << m->describe();
  } else {
    EXPECT_EQ(m->source(), EnergySource::kNvml);
    EXPECT_TRUE(m->read().ok);
  }
}

TEST(ProcStat, ParsesAndNamesBadFields) {
  auto t = parse_proc_stat("cpu  100 5 50 800 20 3 2 0 0 0\ncpu0 1 2 3 4\n", "/proc/stat");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->busy, 160u);
  EXPECT_EQ(t->total, 980u);
  auto bad = parse_proc_stat("cpu  100 x 50 800\n", "/fake/stat");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "/fake/stat: line 1: field 2 (nice) = 'x' is not a counter");
  EXPECT_FALSE(parse_proc_stat("intr 1 2 3\n", "/fake/stat").ok());
  EXPECT_DOUBLE_EQ(cpu_util_percent({100, 400}, {250, 600}), 75.0);
  EXPECT_TRUE(std::isnan(cpu_util_percent({100, 400}, {100, 400})));
}

TEST(Sampler, ReadsAFakeProcAndSummarisesAWindow) {
  const fs::path root = fs::temp_directory_path() / ("frugal_proc_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "self");
  std::ofstream(root / "stat") << "cpu  100 0 100 800 0 0 0 0\n";
  std::ofstream(root / "self" / "statm") << "5000 300 10 1 0 100 0\n";
  SamplerOptions o;
  o.proc_root = root.string();
  HardwareSampler s(o);  // never busy: only the samples taken here
  const HwSample first = s.sample_now(100.0);
  EXPECT_TRUE(std::isnan(first.cpu_util));  // no baseline yet
  EXPECT_DOUBLE_EQ(first.rss_bytes, 300.0 * static_cast<double>(sysconf(_SC_PAGESIZE)));
  std::ofstream(root / "stat") << "cpu  250 0 150 900 0 0 0 0\n";  // busy +200 of total +300
  const HwSample second = s.sample_now(101.0);
  EXPECT_NEAR(second.cpu_util, 200.0 / 3.0, 1e-9);
  std::ofstream(root / "stat") << "cpu  250 0 150 1200 0 0 0 0\n";  // idle
  (void)s.sample_now(102.0);
  EXPECT_TRUE(std::isnan(second.gpu_util));  // no GPU opened
  const PhaseSamples w = s.summarize(100.5, 102.0);
  EXPECT_EQ(w.n, 2);
  EXPECT_NEAR(w.cpu_util_mean, (200.0 / 3.0 + 0.0) / 2, 1e-9);
  EXPECT_TRUE(std::isnan(w.gpu_power_w_mean));
  EXPECT_EQ(s.summarize(200, 300).n, 0);
  fs::remove_all(root);
}

TEST(Sampler, BackgroundThreadSamplesOnlyWhileBusy) {
  SamplerOptions o;
  o.period_s = 0.005;
  HardwareSampler s(o);
  const double t0 = steady_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(s.summarize(t0, steady_seconds()).n, 0);  // idle: nothing sampled
  s.set_busy(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  s.set_busy(false);
  const PhaseSamples p = s.summarize(t0, steady_seconds());
  EXPECT_GE(p.n, 3);
  EXPECT_GT(p.rss_max_bytes, 0);
}

}  // namespace
}  // namespace frugal::telemetry
