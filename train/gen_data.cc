// Training-data generator for train/train.py: the task generators of src/frugal/eval, built as a
// standalone static binary (train/build_gen_data.sh) so it runs on a GPU machine without the
// project's shared libraries.
//
//   gen_data vocab
//       the task alphabet as one JSON string
//   gen_data examples --family F [--split train|test] [--seed S] [--n N] [--length L]
//                     [--depth D] [--param k=v]...
//       N examples as JSONL (the same lines as `frugal tasks`)
//   gen_data rows --bucket L --rows N --seed-base B --mix fam=w,... --out PREFIX
//                 [--min-frac F] [--split train|test]
//       N rows of L bytes in PREFIX.tok (1 = BOS, 2 = EOS, 0 = padding, else the character) and
//       PREFIX.mask (0 = no loss, 1 = prompt character, 2 = answer character or EOS). Row i is the
//       example of seed B + i of a family drawn by weight, with a length target uniform in
//       [ceil(F * (L - 1)), L - 1] so that EOS fits.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "frugal/eval/jsonl.h"
#include "frugal/eval/rng.h"
#include "frugal/eval/task.h"
#include "frugal/eval/vocab.h"

namespace {

using namespace frugal::eval;

struct Args {
  std::vector<std::pair<std::string, std::string>> kv;
  const char* get(const char* key, const char* def = nullptr) const {
    for (const auto& [k, v] : kv) {
      if (k == key) return v.c_str();
    }
    return def;
  }
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "gen_data: %s\n", msg.c_str());
  std::exit(1);
}

uint64_t to_u64(const char* s, const char* what) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0') die(std::string("bad integer for ") + what + ": " + s);
  return v;
}

TaskOptions options_from(const Args& a) {
  TaskOptions o;
  o.length = static_cast<int64_t>(to_u64(a.get("--length", "1024"), "--length"));
  if (const char* d = a.get("--depth")) o.depth = std::atof(d);
  for (const auto& [k, v] : a.kv) {
    if (k != "--param") continue;
    auto eq = v.find('=');
    if (eq == std::string::npos) die("--param wants name=value, got " + v);
    o.params.emplace_back(v.substr(0, eq),
                          static_cast<int64_t>(to_u64(v.c_str() + eq + 1, "--param")));
  }
  return o;
}

TaskSplit split_from(const Args& a) {
  auto s = parse_split(a.get("--split", "train"));
  if (!s.ok()) die(s.status().to_string());
  return *s;
}

int cmd_examples(const Args& a) {
  const char* family = a.get("--family");
  if (family == nullptr) die("examples needs --family");
  const uint64_t seed = to_u64(a.get("--seed", "0"), "--seed");
  const uint64_t n = to_u64(a.get("--n", "1"), "--n");
  const TaskOptions opts = options_from(a);
  const TaskSplit split = split_from(a);
  for (uint64_t i = 0; i < n; ++i) {
    auto ex = generate_task(family, split, seed + i, opts);
    if (!ex.ok()) die(ex.status().to_string());
    std::printf("%s\n", example_to_json(*ex).c_str());
  }
  return 0;
}

int cmd_rows(const Args& a) {
  const int64_t bucket = static_cast<int64_t>(to_u64(a.get("--bucket", "0"), "--bucket"));
  const uint64_t rows = to_u64(a.get("--rows", "0"), "--rows");
  const uint64_t base = to_u64(a.get("--seed-base", "0"), "--seed-base");
  const double min_frac = std::atof(a.get("--min-frac", "0.6"));
  const char* out = a.get("--out");
  const char* mix = a.get("--mix");
  if (bucket < kMinTaskLength + 1 || rows == 0 || out == nullptr || mix == nullptr) {
    die("rows needs --bucket (>128), --rows, --mix and --out");
  }
  const TaskSplit split = split_from(a);
  std::vector<std::string> fams;
  std::vector<double> cum;
  double total = 0;
  std::string m = mix;
  for (size_t p = 0; p < m.size();) {
    size_t c = m.find(',', p);
    if (c == std::string::npos) c = m.size();
    std::string item = m.substr(p, c - p);
    auto eq = item.find('=');
    if (eq == std::string::npos) die("--mix wants fam=weight,..., got " + item);
    fams.push_back(item.substr(0, eq));
    total += std::atof(item.c_str() + eq + 1);
    cum.push_back(total);
    p = c + 1;
  }
  const int64_t max_len = bucket - 1;
  const int64_t min_len = std::max<int64_t>(
      kMinTaskLength, static_cast<int64_t>(std::ceil(min_frac * static_cast<double>(max_len))));
  std::string tok_path = std::string(out) + ".tok", mask_path = std::string(out) + ".mask";
  FILE* ft = std::fopen(tok_path.c_str(), "wb");
  FILE* fm = std::fopen(mask_path.c_str(), "wb");
  if (ft == nullptr || fm == nullptr) die("cannot write " + tok_path);
  TaskRng pick(base, 0xD47A);
  std::vector<uint8_t> tok(static_cast<size_t>(bucket)), mask(static_cast<size_t>(bucket));
  for (uint64_t r = 0; r < rows; ++r) {
    const double u = pick.unit() * total;
    size_t f = 0;
    while (f + 1 < cum.size() && u >= cum[f]) ++f;
    TaskOptions opts;
    opts.length = pick.range(min_len, max_len);
    auto ex = generate_task(fams[f], split, base + r, opts);
    if (!ex.ok()) die(ex.status().to_string());
    std::fill(tok.begin(), tok.end(), 0);
    std::fill(mask.begin(), mask.end(), 0);
    size_t p = 0;
    tok[p++] = 1;
    for (char c : ex->prompt) {
      mask[p] = 1;
      tok[p++] = static_cast<uint8_t>(c);
    }
    for (char c : ex->answer) {
      mask[p] = 2;
      tok[p++] = static_cast<uint8_t>(c);
    }
    mask[p] = 2;
    tok[p++] = 2;
    std::fwrite(tok.data(), 1, tok.size(), ft);
    std::fwrite(mask.data(), 1, mask.size(), fm);
  }
  if (std::fclose(ft) != 0 || std::fclose(fm) != 0) die("write failed for " + tok_path);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: gen_data vocab | examples ... | rows ...");
  Args a;
  for (int i = 2; i + 1 < argc; i += 2) a.kv.emplace_back(argv[i], argv[i + 1]);
  if ((argc - 2) % 2 != 0) die(std::string("missing value after ") + argv[argc - 1]);
  const std::string cmd = argv[1];
  if (cmd == "vocab") {
    std::printf("%s\n", json_escape(kTaskAlphabet).c_str());
    return 0;
  }
  if (cmd == "examples") return cmd_examples(a);
  if (cmd == "rows") return cmd_rows(a);
  die("unknown command " + cmd);
}
