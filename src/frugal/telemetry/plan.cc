#include "frugal/telemetry/plan.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace frugal::telemetry::plan {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

Result<std::string> read_text(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return error(ErrorCode::kIo, "{}: cannot open {} file", path, what);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// "2026-12-03T10:11:12.123456789Z" (the request log's time) -> seconds since the epoch.
bool parse_rfc3339(const std::string& s, double& out) {
  std::tm tm{};
  int frac_digits = 0;
  double frac = 0;
  if (s.size() < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':') return false;
  const auto num = [&](size_t at, size_t n, int& v) {
    v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    return true;
  };
  int y, mo, d, h, mi, se;
  if (!num(0, 4, y) || !num(5, 2, mo) || !num(8, 2, d) || !num(11, 2, h) || !num(14, 2, mi) || !num(17, 2, se)) {
    return false;
  }
  size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    double scale = 0.1;
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++frac_digits) {
      frac += (s[i] - '0') * scale;
      scale /= 10;
    }
    if (frac_digits == 0) return false;
  }
  if (i + 1 != s.size() || s[i] != 'Z') return false;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return false;
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = se;
  out = static_cast<double>(timegm(&tm)) + frac;
  return true;
}

// The 1-based line of byte `offset` in `text`.
int line_at(const std::string& text, size_t offset) {
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(
                                                                         std::min(offset, text.size())), '\n'));
}

// The line of the `k`-th (0-based) occurrence of "key": in `text`, or 0 when there is none.
int line_of_key(const std::string& text, const std::string& key, int k) {
  const std::string needle = "\"" + key + "\"";
  size_t pos = 0;
  for (int i = 0;; ++i) {
    pos = text.find(needle, pos);
    if (pos == std::string::npos) return 0;
    if (i == k) return line_at(text, pos);
    pos += needle.size();
  }
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  for (auto& f : out) {
    const size_t b = f.find_first_not_of(" \t");
    const size_t e = f.find_last_not_of(" \t");
    f = b == std::string::npos ? "" : f.substr(b, e - b + 1);
  }
  return out;
}

bool parse_double(const std::string& s, double& v) {
  if (s.empty()) return false;
  try {
    size_t used = 0;
    v = std::stod(s, &used);
    return used == s.size() && std::isfinite(v);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

Result<std::vector<TraceRequest>> read_trace(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(std::string text, read_text(path, "trace"));
  std::vector<TraceRequest> out;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  double first = std::numeric_limits<double>::infinity();
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto bad = [&](const std::string& field, const std::string& why) {
      return error(ErrorCode::kInvalidArgument, "{}: line {}: field '{}': {}", path, n, field, why);
    };
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      return error(ErrorCode::kInvalidArgument, "{}: line {}: not JSON ({})", path, n, e.what());
    }
    if (!j.is_object()) return error(ErrorCode::kInvalidArgument, "{}: line {}: expected a JSON object", path, n);
    // A refused request never ran: nothing to plan for it.
    if (j.contains("finish_reason") && j["finish_reason"] == "error") continue;
    TraceRequest r;
    if (j.contains("id") && j["id"].is_string()) r.id = j["id"].get<std::string>();
    if (!j.contains("time") || !j["time"].is_string()) return bad("time", "missing or not a string");
    double finish = 0;
    if (!parse_rfc3339(j["time"].get<std::string>(), finish)) {
      return bad("time", "'" + j["time"].get<std::string>() + "' is not an RFC 3339 UTC time (2026-12-03T10:11:12.5Z)");
    }
    for (const char* f : {"prompt_tokens", "generated_tokens"}) {
      if (!j.contains(f) || !j[f].is_number_integer() || j[f].get<int64_t>() < 0) {
        return bad(f, "missing or not a non-negative integer");
      }
    }
    r.prompt_tokens = j["prompt_tokens"].get<int64_t>();
    r.output_tokens = j["generated_tokens"].get<int64_t>();
    if (!j.contains("timings") || !j["timings"].is_object() || !j["timings"].contains("total_ms") ||
        !j["timings"]["total_ms"].is_number() || j["timings"]["total_ms"].get<double>() < 0) {
      return bad("timings.total_ms", "missing or not a non-negative number");
    }
    r.arrival_s = finish - j["timings"]["total_ms"].get<double>() / 1e3;
    first = std::min(first, r.arrival_s);
    out.push_back(std::move(r));
  }
  if (out.empty()) return error(ErrorCode::kInvalidArgument, "{}: no requests (an empty trace)", path);
  for (auto& r : out) r.arrival_s -= first;
  std::stable_sort(out.begin(), out.end(), [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  return out;
}

Result<HardwareProfile> read_profile(const std::string& name, const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(std::string text, read_text(path, "profile"));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    return error(ErrorCode::kInvalidArgument, "{}: line {}: not JSON ({})", path, line_at(text, e.byte), e.what());
  }
  HardwareProfile p;
  p.name = name;
  p.file = path;
  if (!j.is_object() || !j.contains("tests") || !j["tests"].is_array()) {
    return error(ErrorCode::kInvalidArgument, "{}: line 1: field 'tests': missing or not an array (a `frugal bench "
                 "--json` output)", path);
  }
  if (j.contains("source") && j["source"].is_string()) p.source = j["source"].get<std::string>();
  if (j.contains("prefill_in_decode")) {
    if (!j["prefill_in_decode"].is_boolean()) {
      return error(ErrorCode::kInvalidArgument, "{}: line {}: field 'prefill_in_decode': not true or false", path,
                   line_of_key(text, "prefill_in_decode", 0));
    }
    p.prefill_in_decode = j["prefill_in_decode"].get<bool>();
  }
  if (j.contains("idle_watts")) {
    if (!j["idle_watts"].is_number() || j["idle_watts"].get<double>() < 0) {
      return error(ErrorCode::kInvalidArgument, "{}: line {}: field 'idle_watts': not a non-negative number", path,
                   line_of_key(text, "idle_watts", 0));
    }
    p.idle_watts = j["idle_watts"].get<double>();
  }
  const json& tests = j["tests"];
  for (size_t i = 0; i < tests.size(); ++i) {
    const json& t = tests[i];
    const int k = static_cast<int>(i);
    const auto bad = [&](const std::string& field, const std::string& why) {
      int line = line_of_key(text, field.substr(field.rfind('.') + 1), k);
      if (line == 0) line = line_of_key(text, "name", k);
      return error(ErrorCode::kInvalidArgument, "{}: line {}: field 'tests[{}].{}': {}", path, line, i, field, why);
    };
    if (!t.is_object()) return bad("name", "not an object");
    if (!t.contains("phase") || !t["phase"].is_string() ||
        (t["phase"] != "prefill" && t["phase"] != "decode")) {
      return bad("phase", "missing or not \"prefill\" or \"decode\"");
    }
    OperatingPoint op;
    if (!t.contains("avg_ts") || !t["avg_ts"].is_number() || !(t["avg_ts"].get<double>() > 0)) {
      return bad("avg_ts", "missing or not a positive number (tokens/s)");
    }
    op.tok_s = t["avg_ts"].get<double>();
    for (const char* f : {"n_parallel", "depth"}) {
      if (!t.contains(f) || !t[f].is_number_integer() || t[f].get<int64_t>() < (f[0] == 'n' ? 1 : 0)) {
        return bad(f, "missing or not an integer in range");
      }
    }
    op.parallel = t["n_parallel"].get<int>();
    op.depth = t["depth"].get<int>();
    const json* e = t.contains("energy") && t["energy"].is_object() ? &t["energy"] : nullptr;
    if (e == nullptr || !e->contains("joules_per_token_mean")) {
      return bad("energy.joules_per_token_mean", "missing");
    }
    if (!(*e)["joules_per_token_mean"].is_number() || !((*e)["joules_per_token_mean"].get<double>() > 0)) {
      const std::string src = e->contains("source") && (*e)["source"].is_string() ? (*e)["source"].get<std::string>() : "?";
      return bad("energy.joules_per_token_mean", "not a positive number (energy source '" + src +
                                                     "': a profile needs measured J/token; bench on hardware with "
                                                     "an energy counter)");
    }
    op.j_per_token = (*e)["joules_per_token_mean"].get<double>();
    (t["phase"] == "prefill" ? p.prefill : p.decode).push_back(op);
  }
  if ((p.prefill.empty() && !p.prefill_in_decode) || p.decode.empty()) {
    return error(ErrorCode::kInvalidArgument, "{}: line 1: field 'tests': needs a prefill (pp) and a decode (tg) test",
                 path);
  }
  if (p.prefill_in_decode && !p.prefill.empty()) {
    return error(ErrorCode::kInvalidArgument, "{}: line {}: field 'prefill_in_decode': true, but the profile has a "
                 "prefill test", path, line_of_key(text, "prefill_in_decode", 0));
  }
  return p;
}

double CarbonSeries::at(double t) const {
  const auto it = std::upper_bound(start_s.begin(), start_s.end(), t);
  const size_t i = it == start_s.begin() ? 0 : static_cast<size_t>(it - start_s.begin()) - 1;
  return g_per_kwh[i];
}

double CarbonSeries::integral(double t0, double t1) const {
  double sum = 0;
  for (size_t i = 0; i < start_s.size(); ++i) {
    const double a = std::max(t0, start_s[i]);
    const double b = std::min(t1, i + 1 < start_s.size() ? start_s[i + 1] : std::numeric_limits<double>::infinity());
    if (b > a) sum += (b - a) * g_per_kwh[i];
  }
  return sum;
}

Result<CarbonSeries> read_carbon(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(std::string text, read_text(path, "carbon intensity"));
  CarbonSeries c;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#' || line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto f = split_csv(line);
    if (!header) {
      if (f.size() != 2 || f[0] != "hour" || f[1] != "g_co2_per_kwh") {
        return error(ErrorCode::kInvalidArgument, "{}: line {}: expected the header 'hour,g_co2_per_kwh'", path, n);
      }
      header = true;
      continue;
    }
    if (f.size() != 2) return error(ErrorCode::kInvalidArgument, "{}: line {}: expected 2 fields, found {}", path, n, f.size());
    double h = 0, g = 0;
    if (!parse_double(f[0], h) || h < 0) {
      return error(ErrorCode::kInvalidArgument, "{}: line {}: field 'hour': '{}' is not a non-negative number", path, n, f[0]);
    }
    if (!parse_double(f[1], g) || g < 0) {
      return error(ErrorCode::kInvalidArgument, "{}: line {}: field 'g_co2_per_kwh': '{}' is not a non-negative number",
                   path, n, f[1]);
    }
    if (c.start_s.empty() ? h != 0 : h * 3600 <= c.start_s.back()) {
      return error(ErrorCode::kInvalidArgument, "{}: line {}: field 'hour': {} must {}", path, n, f[0],
                   c.start_s.empty() ? "be 0 in the first row" : "be larger than the row before");
    }
    c.start_s.push_back(h * 3600);
    c.g_per_kwh.push_back(g);
  }
  if (c.start_s.empty()) return error(ErrorCode::kInvalidArgument, "{}: no rows", path);
  return c;
}

Result<std::vector<Site>> read_sites(const std::string& path) {
  FRUGAL_ASSIGN_OR_RETURN(std::string text, read_text(path, "sites"));
  static const std::vector<std::string> kCols = {"name", "profile", "servers", "batch", "pue", "wue_l_per_kwh",
                                                 "renewable_share", "rtt_ms", "carbon_csv"};
  std::vector<Site> out;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#' || line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto f = split_csv(line);
    if (!header) {
      if (f != kCols) {
        return error(ErrorCode::kInvalidArgument, "{}: line {}: expected the header '{}'", path, n, fmt::join(kCols, ","));
      }
      header = true;
      continue;
    }
    if (f.size() != kCols.size()) {
      return error(ErrorCode::kInvalidArgument, "{}: line {}: expected {} fields, found {}", path, n, kCols.size(), f.size());
    }
    const auto bad = [&](size_t col, const std::string& why) {
      return error(ErrorCode::kInvalidArgument, "{}: line {}: field '{}': '{}' {}", path, n, kCols[col], f[col], why);
    };
    Site s;
    s.name = f[0];
    s.profile = f[1];
    if (s.name.empty()) return bad(0, "is empty");
    if (s.profile.empty()) return bad(1, "is empty");
    double v[7];
    for (size_t c = 2; c < 8; ++c) {
      if (!parse_double(f[c], v[c - 2]) || v[c - 2] < 0) return bad(c, "is not a non-negative number");
    }
    if (v[0] < 1 || v[0] != std::floor(v[0]) || v[0] > 1e6) return bad(2, "is not a whole number of servers >= 1");
    if (v[1] < 1 || v[1] != std::floor(v[1]) || v[1] > 4096) return bad(3, "is not a whole batch size >= 1");
    if (v[2] < 1) return bad(4, "is below 1 (a PUE counts the IT energy itself)");
    if (v[4] > 1) return bad(6, "is not a share in [0, 1]");
    s.servers = static_cast<int>(v[0]);
    s.batch = static_cast<int>(v[1]);
    s.pue = v[2];
    s.wue_l_per_kwh = v[3];
    s.renewable_share = v[4];
    s.rtt_ms = v[5];
    if (f[8].empty()) return bad(8, "is empty");
    const fs::path cp = fs::path(f[8]).is_absolute() ? fs::path(f[8]) : fs::path(path).parent_path() / f[8];
    auto carbon = read_carbon(cp.string());
    if (!carbon.ok()) {
      return error(ErrorCode::kInvalidArgument, "{}: line {}: field 'carbon_csv': {}", path, n, carbon.status().message());
    }
    s.carbon = std::move(*carbon);
    for (const Site& o : out) {
      if (o.name == s.name) return bad(0, "is the name of an earlier site");
    }
    out.push_back(std::move(s));
  }
  if (out.empty()) return error(ErrorCode::kInvalidArgument, "{}: no sites", path);
  return out;
}

Result<Policy> policy_from_name(const std::string& name) {
  if (name == "latency-first") return Policy::kLatencyFirst;
  if (name == "carbon-aware") return Policy::kCarbonAware;
  return error(ErrorCode::kInvalidArgument, "policy '{}': expected latency-first or carbon-aware", name);
}

const char* policy_name(Policy p) { return p == Policy::kCarbonAware ? "carbon-aware" : "latency-first"; }

namespace {

struct SiteState {
  const Site* site = nullptr;
  const HardwareProfile* profile = nullptr;
  const OperatingPoint* prefill = nullptr;
  std::vector<const OperatingPoint*> decode;  // tests at the site's batch
  std::vector<double> slot_free;              // [servers * batch]
  std::vector<std::vector<std::pair<double, double>>> busy;  // per server: request intervals
};

const OperatingPoint* nearest_depth(const std::vector<const OperatingPoint*>& ops, double context) {
  const OperatingPoint* best = nullptr;
  for (const OperatingPoint* op : ops) {
    if (best == nullptr || std::abs(op->depth - context) < std::abs(best->depth - context)) best = op;
  }
  return best;
}

// Total length of the union of intervals, and the carbon integral over the idle rest of [0, h].
void idle_of(std::vector<std::pair<double, double>> iv, double h, const CarbonSeries& c, double& idle_s, double& idle_ci) {
  std::sort(iv.begin(), iv.end());
  double t = 0;
  idle_s = 0;
  idle_ci = 0;
  for (const auto& [a, b] : iv) {
    if (a > t) {
      idle_s += a - t;
      idle_ci += c.integral(t, a);
    }
    t = std::max(t, b);
  }
  if (h > t) {
    idle_s += h - t;
    idle_ci += c.integral(t, h);
  }
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest value with at least q of the values at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

Result<ScenarioResult> simulate(const std::vector<TraceRequest>& trace, const std::vector<HardwareProfile>& profiles,
                                const std::vector<Site>& sites, const PlanOptions& o) {
  std::vector<SiteState> st(sites.size());
  for (size_t i = 0; i < sites.size(); ++i) {
    SiteState& s = st[i];
    s.site = &sites[i];
    for (const auto& p : profiles) {
      if (p.name == sites[i].profile) s.profile = &p;
    }
    if (s.profile == nullptr) {
      return error(ErrorCode::kInvalidArgument, "site '{}': no profile named '{}' was given (--profile {}=FILE)",
                   sites[i].name, sites[i].profile, sites[i].profile);
    }
    std::vector<const OperatingPoint*> pre;
    for (const auto& op : s.profile->prefill) pre.push_back(&op);
    s.prefill = nearest_depth(pre, 0);  // null: prompts priced within decode
    for (const auto& op : s.profile->decode) {
      if (op.parallel == sites[i].batch) s.decode.push_back(&op);
    }
    if (s.decode.empty()) {
      return error(ErrorCode::kInvalidArgument,
                   "site '{}': profile '{}' ({}) has no decode test at parallel {} (bench it with --parallel {})",
                   sites[i].name, s.profile->name, s.profile->file, sites[i].batch, sites[i].batch);
    }
    s.slot_free.assign(static_cast<size_t>(sites[i].servers) * static_cast<size_t>(sites[i].batch), 0.0);
    s.busy.resize(static_cast<size_t>(sites[i].servers));
  }
  ScenarioResult res;
  res.policy = policy_name(o.policy);
  res.sites.resize(sites.size());
  for (size_t i = 0; i < sites.size(); ++i) res.sites[i].name = sites[i].name;
  double horizon = 0;
  for (const TraceRequest& r : trace) {
    struct Option {
      size_t slot = 0;
      double start = 0, service = 0, latency = 0, joules = 0, carbon = 0;
    };
    std::vector<Option> opts(st.size());
    for (size_t i = 0; i < st.size(); ++i) {
      const SiteState& s = st[i];
      Option& op = opts[i];
      op.slot = static_cast<size_t>(std::min_element(s.slot_free.begin(), s.slot_free.end()) - s.slot_free.begin());
      op.start = std::max(r.arrival_s, s.slot_free[op.slot]);
      const double context = static_cast<double>(r.prompt_tokens) + static_cast<double>(r.output_tokens) / 2;
      const OperatingPoint* d = nearest_depth(s.decode, context);
      const double per_seq = d->tok_s / d->parallel;
      const double prompt_s = s.prefill != nullptr ? static_cast<double>(r.prompt_tokens) / s.prefill->tok_s : 0;
      const double prompt_j = s.prefill != nullptr ? static_cast<double>(r.prompt_tokens) * s.prefill->j_per_token : 0;
      op.service = prompt_s + static_cast<double>(r.output_tokens) / per_seq;
      op.latency = s.site->rtt_ms / 1e3 + (op.start - r.arrival_s) + op.service;
      op.joules = prompt_j + static_cast<double>(r.output_tokens) * d->j_per_token;
      op.carbon = op.joules * s.site->pue / 3.6e6 * (1 - s.site->renewable_share) * s.site->carbon.at(op.start);
    }
    size_t pick = 0;
    const auto faster = [&](size_t a, size_t b) { return opts[a].latency < opts[b].latency; };
    for (size_t i = 1; i < st.size(); ++i) {
      if (faster(i, pick)) pick = i;
    }
    if (o.policy == Policy::kCarbonAware) {
      bool found = false;
      size_t best = 0;
      for (size_t i = 0; i < st.size(); ++i) {
        if (o.slo_ms > 0 && opts[i].latency * 1e3 > o.slo_ms) continue;
        if (!found || opts[i].carbon < opts[best].carbon ||
            (opts[i].carbon == opts[best].carbon && faster(i, best))) {
          best = i;
          found = true;
        }
      }
      if (found) pick = best;
    }
    const Option& op = opts[pick];
    SiteState& s = st[pick];
    SiteResult& sr = res.sites[pick];
    const double end = op.start + op.service;
    s.slot_free[op.slot] = end;
    s.busy[op.slot / static_cast<size_t>(s.site->batch)].push_back({op.start, end});
    ++sr.requests;
    sr.it_joules += op.joules;
    sr.carbon_g += op.carbon;
    sr.busy_slot_s += op.service;
    horizon = std::max(horizon, end);
    res.site_of.push_back(static_cast<int>(pick));
    res.latency_s.push_back(op.latency);
    if (o.slo_ms > 0 && op.latency * 1e3 > o.slo_ms) ++res.slo_misses;
  }
  res.horizon_s = horizon;
  SiteResult& tot = res.total;
  tot.name = "total";
  for (size_t i = 0; i < st.size(); ++i) {
    SiteState& s = st[i];
    SiteResult& sr = res.sites[i];
    const Site& site = *s.site;
    for (const auto& iv : s.busy) {
      double idle_s = 0, idle_ci = 0;
      idle_of(iv, horizon, site.carbon, idle_s, idle_ci);
      const double w = s.profile->idle_watts;
      sr.idle_joules += w * idle_s;
      sr.carbon_g += w * idle_ci * site.pue / 3.6e6 * (1 - site.renewable_share);
    }
    sr.it_joules += sr.idle_joules;
    sr.facility_joules = sr.it_joules * site.pue;
    sr.water_l = sr.it_joules / 3.6e6 * site.wue_l_per_kwh;
    const double slots = static_cast<double>(s.slot_free.size());
    sr.utilization = horizon > 0 ? sr.busy_slot_s / (slots * horizon) : 0;
    sr.mean_facility_w = horizon > 0 ? sr.facility_joules / horizon : 0;
    tot.requests += sr.requests;
    tot.it_joules += sr.it_joules;
    tot.idle_joules += sr.idle_joules;
    tot.facility_joules += sr.facility_joules;
    tot.carbon_g += sr.carbon_g;
    tot.water_l += sr.water_l;
    tot.busy_slot_s += sr.busy_slot_s;
    tot.mean_facility_w += sr.mean_facility_w;
  }
  double all_slots = 0;
  for (const auto& s : st) all_slots += static_cast<double>(s.slot_free.size());
  tot.utilization = horizon > 0 ? tot.busy_slot_s / (all_slots * horizon) : 0;
  double sum = 0;
  for (double l : res.latency_s) sum += l;
  res.latency_mean_s = res.latency_s.empty() ? 0 : sum / static_cast<double>(res.latency_s.size());
  res.latency_p50_s = quantile(res.latency_s, 0.5);
  res.latency_p95_s = quantile(res.latency_s, 0.95);
  res.latency_max_s = quantile(res.latency_s, 1.0);
  return res;
}

std::string report_table(const std::vector<ScenarioResult>& results) {
  std::string s;
  for (const auto& r : results) {
    s += fmt::format("scenario {}: horizon {:.1f} s; latency mean {:.3f} s, p50 {:.3f} s, p95 {:.3f} s, max {:.3f} s{}\n",
                     r.policy, r.horizon_s, r.latency_mean_s, r.latency_p50_s, r.latency_p95_s, r.latency_max_s,
                     r.slo_misses > 0 ? fmt::format(", {} over the SLO", r.slo_misses) : "");
    s += fmt::format("  {:<14} {:>8} {:>12} {:>12} {:>14} {:>12} {:>10} {:>8} {:>12}\n", "site", "requests", "IT kWh",
                     "idle kWh", "facility kWh", "carbon kg", "water L", "util %", "mean kW");
    std::vector<SiteResult> rows = r.sites;
    rows.push_back(r.total);
    for (const auto& x : rows) {
      s += fmt::format("  {:<14} {:>8} {:>12.6f} {:>12.6f} {:>14.6f} {:>12.6f} {:>10.4f} {:>8.2f} {:>12.4f}\n", x.name,
                       x.requests, x.it_joules / 3.6e6, x.idle_joules / 3.6e6, x.facility_joules / 3.6e6,
                       x.carbon_g / 1e3, x.water_l, 100 * x.utilization, x.mean_facility_w / 1e3);
    }
  }
  return s;
}

std::string report_json(const std::vector<ScenarioResult>& results) {
  json out = json::array();
  const auto site = [](const SiteResult& x) {
    return json{{"name", x.name},           {"requests", x.requests},       {"it_joules", x.it_joules},
                {"idle_joules", x.idle_joules}, {"facility_joules", x.facility_joules}, {"carbon_g", x.carbon_g},
                {"water_l", x.water_l},     {"utilization", x.utilization}, {"mean_facility_watts", x.mean_facility_w}};
  };
  for (const auto& r : results) {
    json j = {{"policy", r.policy},
              {"horizon_s", r.horizon_s},
              {"latency_s", {{"mean", r.latency_mean_s}, {"p50", r.latency_p50_s}, {"p95", r.latency_p95_s},
                             {"max", r.latency_max_s}}},
              {"slo_misses", r.slo_misses},
              {"total", site(r.total)}};
    j["sites"] = json::array();
    for (const auto& x : r.sites) j["sites"].push_back(site(x));
    out.push_back(j);
  }
  return out.dump(1);
}

// Four panels (carbon, facility energy, water, p95 latency), one bar per scenario, stacked by site.
std::string report_svg(const std::vector<ScenarioResult>& results) {
  const int W = 900, H = 340, pw = 190, ph = 220, top = 50, left0 = 50, gap = 25;
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
  struct Panel {
    const char* title;
    double (*value)(const SiteResult&);
    bool per_site;
  };
  const Panel panels[] = {
      {"carbon (kg CO2)", [](const SiteResult& x) { return x.carbon_g / 1e3; }, true},
      {"facility energy (kWh)", [](const SiteResult& x) { return x.facility_joules / 3.6e6; }, true},
      {"water (L)", [](const SiteResult& x) { return x.water_l; }, true},
      {"p95 latency (s)", nullptr, false},
  };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"20\" font-size=\"14\">frugal plan: scenarios by routing policy (bars stacked by site)</text>\n",
      W, H, left0);
  for (int p = 0; p < 4; ++p) {
    const int x0 = left0 + p * (pw + gap);
    double vmax = 0;
    for (const auto& r : results) {
      vmax = std::max(vmax, panels[p].per_site ? panels[p].value(r.total) : r.latency_p95_s);
    }
    if (vmax <= 0) vmax = 1;
    s += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", x0, top - 8, panels[p].title);
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", x0, top + ph, x0 + pw, top + ph);
    s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\">max {:.4g}</text>\n", x0, top + 10, vmax);
    const double bw = static_cast<double>(pw) / (static_cast<double>(results.size()) * 1.5 + 0.5);
    for (size_t k = 0; k < results.size(); ++k) {
      const auto& r = results[k];
      const double bx = x0 + bw * 0.5 + static_cast<double>(k) * bw * 1.5;
      double y = top + ph;
      if (panels[p].per_site) {
        for (size_t i = 0; i < r.sites.size(); ++i) {
          const double h = ph * panels[p].value(r.sites[i]) / vmax;
          y -= h;
          s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n", bx, y, bw,
                           h, kColors[i % 6]);
        }
      } else {
        const double h = ph * r.latency_p95_s / vmax;
        s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#777\"/>\n", bx,
                         y - h, bw, h);
      }
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"9\">{}</text>\n", bx, top + ph + 14, r.policy);
    }
  }
  if (!results.empty()) {
    for (size_t i = 0; i < results[0].sites.size(); ++i) {
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                       left0 + static_cast<int>(i) * 150, H - 30, kColors[i % 6], left0 + static_cast<int>(i) * 150 + 14,
                       H - 21, results[0].sites[i].name);
    }
  }
  s += "</svg>\n";
  return s;
}

}  // namespace frugal::telemetry::plan
