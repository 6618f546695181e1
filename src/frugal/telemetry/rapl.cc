#include "frugal/telemetry/rapl.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace frugal::telemetry {
namespace {

namespace fs = std::filesystem;

// The first line of a small sysfs file, without its newline.
Result<std::string> read_line(const fs::path& p) {
  std::ifstream f(p);
  if (!f) return error(ErrorCode::kIo, "cannot read {}: {}", p.string(), std::strerror(errno));
  std::string s;
  std::getline(f, s);
  if (f.bad()) return error(ErrorCode::kIo, "cannot read {}", p.string());
  return s;
}

Result<uint64_t> parse_u64(const std::string& s, const fs::path& p) {
  uint64_t v = 0;
  size_t i = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    if (v > (UINT64_MAX - 9) / 10) return error(ErrorCode::kCorrupt, "{}: '{}' overflows 64 bits", p.string(), s);
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  if (i == 0 || i != s.size()) return error(ErrorCode::kCorrupt, "{}: '{}' is not an unsigned integer", p.string(), s);
  return v;
}

// "intel-rapl:0" -> 1 colon (a package or psys zone), "intel-rapl:0:2" -> 2 (a sub-zone).
int zone_depth(const std::string& zone) { return static_cast<int>(std::count(zone.begin(), zone.end(), ':')); }

class RaplMeter final : public EnergyMeter {
 public:
  RaplMeter(std::vector<RaplDomain> domains, std::vector<int> fds, std::string root)
      : domains_(std::move(domains)), fds_(std::move(fds)) {
    desc_ = "rapl:";
    for (size_t i = 0; i < domains_.size(); ++i) desc_ += (i ? ", " : " ") + domains_[i].name;
    desc_ += " under " + root;
  }
  ~RaplMeter() override {
    for (int fd : fds_) ::close(fd);
  }
  EnergySource source() const override { return EnergySource::kRapl; }
  const std::string& describe() const override { return desc_; }
  double joules_per_unit() const override { return 1e-6; }
  // A generous ceiling per domain: no CPU package or DIMM set draws a kilowatt.
  double max_watts() const override { return 1000.0 * static_cast<double>(domains_.size()); }
  CounterReading read() override {
    CounterReading r;
    r.ok = true;
    r.n = static_cast<int>(fds_.size());
    for (size_t i = 0; i < fds_.size(); ++i) {
      char buf[32];
      const ssize_t got = ::pread(fds_[i], buf, sizeof(buf) - 1, 0);
      uint64_t v = 0;
      int digits = 0;
      for (ssize_t k = 0; k < got && buf[k] >= '0' && buf[k] <= '9'; ++k, ++digits) {
        v = v * 10 + static_cast<uint64_t>(buf[k] - '0');
      }
      if (got <= 0 || digits == 0 || digits > 19) r.ok = false;
      r.raw[i] = v;
      r.range[i] = domains_[i].range_uj;
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return r;
  }

 private:
  std::vector<RaplDomain> domains_;
  std::vector<int> fds_;
  std::string desc_;
};

}  // namespace

Result<std::vector<RaplDomain>> find_rapl_domains(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return error(ErrorCode::kNotSupported, "rapl: no powercap tree at {} (no RAPL driver, or not Linux)", root);
  }
  std::vector<RaplDomain> packages, drams, psys;
  std::string unreadable;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string zone = e.path().filename().string();
    if (zone.rfind("intel-rapl:", 0) != 0) continue;
    auto name = read_line(e.path() / "name");
    if (!name.ok()) continue;
    RaplDomain d{zone, *name, 0};
    const bool pkg = zone_depth(zone) == 1 && name->rfind("package", 0) == 0;
    const bool is_psys = zone_depth(zone) == 1 && *name == "psys";
    const bool dram = *name == "dram";
    if (!pkg && !is_psys && !dram) continue;
    auto energy = read_line(e.path() / "energy_uj");
    if (!energy.ok()) {
      unreadable = energy.status().message();
      continue;
    }
    FRUGAL_RETURN_IF_ERROR(parse_u64(*energy, e.path() / "energy_uj").status());
    if (auto range = read_line(e.path() / "max_energy_range_uj"); range.ok()) {
      FRUGAL_ASSIGN_OR_RETURN(d.range_uj, parse_u64(*range, e.path() / "max_energy_range_uj"));
    }
    (pkg ? packages : is_psys ? psys : drams).push_back(std::move(d));
  }
  if (ec) return error(ErrorCode::kIo, "rapl: cannot list {}: {}", root, ec.message());
  std::vector<RaplDomain> out = packages.empty() ? psys : packages;
  if (!packages.empty()) out.insert(out.end(), drams.begin(), drams.end());
  if (out.empty()) {
    if (!unreadable.empty()) {
      return error(ErrorCode::kNotSupported, "rapl: energy counters exist but are not readable ({}; root only since "
                   "Linux 5.10)", unreadable);
    }
    return error(ErrorCode::kNotSupported, "rapl: no package, psys or dram zone under {}", root);
  }
  if (static_cast<int>(out.size()) > CounterReading::kMaxDomains) {
    return error(ErrorCode::kNotSupported, "rapl: {} domains under {}, at most {} are read", out.size(), root,
                 CounterReading::kMaxDomains);
  }
  std::sort(out.begin(), out.end(), [](const RaplDomain& a, const RaplDomain& b) { return a.zone < b.zone; });
  return out;
}

Result<std::unique_ptr<EnergyMeter>> open_rapl_meter(const std::string& root) {
  FRUGAL_ASSIGN_OR_RETURN(std::vector<RaplDomain> domains, find_rapl_domains(root));
  std::vector<int> fds;
  for (const RaplDomain& d : domains) {
    const std::string p = (fs::path(root) / d.zone / "energy_uj").string();
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const std::string why = std::strerror(errno);
      for (int f : fds) ::close(f);
      return error(ErrorCode::kNotSupported, "rapl: cannot open {}: {}", p, why);
    }
    fds.push_back(fd);
  }
  return std::unique_ptr<EnergyMeter>(new RaplMeter(std::move(domains), std::move(fds), root));
}

}  // namespace frugal::telemetry
