// MemSpec against a bandit and the oracle, on one stream of requests (an edge device serves one
// user at a time): testbed prompts of several families in turn, each decoded greedily by one
// engine that lives for the whole stream, so the selectors learn across requests as they would in
// service. Configurations, each over the same prompts in the same order:
//   plain           no drafts
//   <draft>         each draft of the pool alone (ngram, each model), all of it resident
//   predict@B       MemSpec with a residency budget of B x the largest draft's footprint
//   bandit@B        UCB1 over the pool, loading its pick on demand, same budget
//   oracle          per prompt, the fastest of plain and the single drafts (hindsight, no budget)
// Reported: generated tokens per second of decode time (the draft models' own prefill of each
// prompt included), speed-up over plain, MemSpec over the bandit, each as a fraction of the
// oracle; loads and their time. Every greedy output is compared with plain decoding's.
//
//   build/bin/memspec_study -m models/default.gguf --drafts ngram,models/draft.gguf,DRAFT_Q4_0.gguf \
//       --families arithmetic,kv_recall,passkey,var_track,word_count --seeds 6 -n 128 -t 2 \
//       --budgets 1,1.5,2 --rounds 2
// (bench/memspec.sh makes the quantized drafts and runs it.)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "frugal/backend/backend.h"
#include "frugal/decode/speculative/memspec.h"
#include "frugal/engine/engine.h"
#include "frugal/eval/task.h"
#include "frugal/model/model.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal {
namespace {

using namespace std::chrono_literals;

struct Args {
  std::string model = "models/default.gguf";
  std::vector<std::string> drafts;
  std::vector<std::string> families = {"arithmetic", "kv_recall", "passkey", "var_track", "word_count"};
  int seeds = 6;
  int length = 256;
  int n = 128;
  int threads = 2;
  int k = 6;
  int rounds = 1;
  std::vector<double> budgets = {1.0, 1.5, 2.0};
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= s.size()) {
    const size_t c = std::min(s.find(',', from), s.size());
    if (c > from) out.push_back(s.substr(from, c - from));
    from = c + 1;
  }
  return out;
}

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "memspec_study: %s\n", m.c_str());
  std::exit(2);
}

struct Config {
  std::string name;
  speculative::SpeculativeOptions spec;
  Model* draft = nullptr;
};

struct PromptResult {
  std::vector<TokenId> tokens;
  double decode_ms = 0;
  int64_t drafted = 0, accepted = 0, passes = 0;
  std::string pool;
};

struct RunResult {
  std::vector<PromptResult> prompts;
  double decode_ms = 0;
  int64_t generated = 0, drafted = 0, accepted = 0, passes = 0;
  std::string pool;  // after the last request
};

Result<RunResult> run_config(Model& target, const Tokenizer& tok, Backend& backend, const Config& c,
                             const std::vector<std::vector<TokenId>>& prompts, const Args& a) {
  EngineOptions o;
  o.n_parallel = 1;
  o.n_ctx = 1024;
  o.max_waiting = 4;
  o.queue_timeout_s = std::numeric_limits<double>::infinity();
  o.telemetry_period_s = 0;
  o.spec = c.spec;
  o.spec.draft_model = c.draft;
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::create(target, tok, backend, o));
  RunResult out;
  for (const auto& p : prompts) {
    RequestOptions r;
    r.prompt = p;
    r.sampling.temperature = 0;
    r.max_tokens = a.n;
    FRUGAL_ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> h, e->submit(r));
    PromptResult pr;
    RequestUpdate u;
    for (;;) {
      if (!h->wait(u, 50ms)) continue;
      for (const auto& t : u.tokens) pr.tokens.push_back(t.id);
      if (u.done) break;
    }
    const FinishedRequest& f = u.finished;
    if (f.reason == FinishReason::kError) return f.error.with_context(c.name);
    pr.decode_ms = f.timings.decode_ms;
    pr.drafted = f.speculative.drafted;
    pr.accepted = f.speculative.accepted;
    pr.passes = f.speculative.passes;
    pr.pool = f.speculative.pool;
    out.decode_ms += pr.decode_ms;
    // Tokens after the first: the first comes from the prefill pass.
    out.generated += std::max<int64_t>(0, static_cast<int64_t>(pr.tokens.size()) - 1);
    out.drafted += pr.drafted;
    out.accepted += pr.accepted;
    out.passes += pr.passes;
    out.pool = pr.pool;
    out.prompts.push_back(std::move(pr));
  }
  return out;
}

int main_impl(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die(f + " needs a value");
      return argv[++i];
    };
    if (f == "-m") a.model = next();
    else if (f == "--drafts") a.drafts = split(next());
    else if (f == "--families") a.families = split(next());
    else if (f == "--seeds") a.seeds = std::atoi(next().c_str());
    else if (f == "--length") a.length = std::atoi(next().c_str());
    else if (f == "-n") a.n = std::atoi(next().c_str());
    else if (f == "-t") a.threads = std::atoi(next().c_str());
    else if (f == "--spec-k") a.k = std::atoi(next().c_str());
    else if (f == "--rounds") a.rounds = std::atoi(next().c_str());
    else if (f == "--budgets") {
      a.budgets.clear();
      for (const auto& b : split(next())) a.budgets.push_back(std::atof(b.c_str()));
    } else die("unknown option " + f + " (see the comment at the top of bench/memspec_study.cc)");
  }
  if (a.drafts.size() < 2) die("--drafts needs at least two entries (ngram or draft model files)");
  if (a.seeds < 1 || a.n < 1 || a.threads < 1 || a.rounds < 1) die("--seeds, -n, -t and --rounds must be positive");

  ModelLoadOptions lo;
  lo.cpu_layouts = true;
  auto target = Model::load(a.model, lo);
  if (!target.ok()) die(target.status().message());
  auto tok = Tokenizer::from_gguf((*target)->gguf());
  if (!tok.ok()) die(tok.status().message());
  auto backend = make_cpu_backend(CpuBackendOptions{a.threads});

  // The stream: families in turn, so the best draft changes from one request to the next.
  std::vector<std::vector<TokenId>> prompts;
  std::vector<std::string> labels;
  for (int s = 0; s < a.seeds; ++s) {
    for (const auto& fam : a.families) {
      eval::TaskOptions to;
      to.length = a.length;
      auto ex = eval::generate_task(fam, eval::TaskSplit::kTest, static_cast<uint64_t>(s), to);
      if (!ex.ok()) die(ex.status().message());
      auto ids = (*tok)->encode(ex->prompt);
      if (!ids.ok()) die(ids.status().message());
      prompts.push_back(*ids);
      labels.push_back(fam);
    }
  }

  std::vector<Config> configs;
  std::map<std::string, std::unique_ptr<Model>> models;
  configs.push_back({"plain", {}, nullptr});
  for (const auto& d : a.drafts) {
    Config c;
    c.name = d == "ngram" ? "ngram" : std::string(d.substr(d.find_last_of('/') + 1));
    c.spec.k = a.k;
    if (d == "ngram") {
      c.spec.method = speculative::Method::kNgram;
    } else {
      auto m = Model::load(d, lo);
      if (!m.ok()) die(m.status().message());
      c.spec.method = speculative::Method::kDraft;
      c.spec.draft_path = d;
      c.spec.draft_memory = 1ull << 40;  // alone, with no budget: the single-draft reference
      c.draft = m->get();
      models[d] = std::move(m).value();
    }
    configs.push_back(c);
  }
  const size_t n_single = configs.size();
  // The largest draft's footprint, as the pool measures it (weights + KV for one 1024-token slot).
  uint64_t largest = 0;
  {
    speculative::SpeculativeOptions so;
    so.method = speculative::Method::kMemSpec;
    so.draft_pool = a.drafts;
    speculative::DrafterContext dc;
    dc.target = target->get();
    dc.backend = backend.get();
    dc.n_slots = 1;
    dc.capacity = 1024;
    auto probe = speculative::MemSpecDrafter::create(so, dc);
    if (!probe.ok()) die(probe.status().message());
    largest = (*probe)->budget();
  }
  for (double b : a.budgets) {
    for (auto sel : {speculative::DraftSelector::kPredict, speculative::DraftSelector::kBandit}) {
      Config c;
      char name[64];
      std::snprintf(name, sizeof name, "%s@%.2gx", speculative::draft_selector_name(sel), b);
      c.name = name;
      c.spec.method = speculative::Method::kMemSpec;
      c.spec.k = a.k;
      c.spec.draft_pool = a.drafts;
      c.spec.selector = sel;
      c.spec.draft_memory = static_cast<uint64_t>(std::llround(b * static_cast<double>(largest)));
      configs.push_back(c);
    }
  }

  // Rounds alternate the order of the configurations (A B ... then ... B A) so that a drift in
  // the machine's load falls on all of them alike; the totals add the rounds.
  std::vector<RunResult> total(configs.size());
  std::vector<std::vector<double>> per_prompt_ms(configs.size(), std::vector<double>(prompts.size(), 0.0));
  int mismatches = 0;
  std::vector<std::vector<TokenId>> reference;
  for (int r = 0; r < a.rounds; ++r) {
    std::vector<size_t> order(configs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = r % 2 == 0 ? i : order.size() - 1 - i;
    for (size_t ci : order) {
      auto res = run_config(**target, **tok, *backend, configs[ci], prompts, a);
      if (!res.ok()) die(res.status().message());
      if (ci == 0 && reference.empty()) {
        for (const auto& p : res->prompts) reference.push_back(p.tokens);
      }
      std::fprintf(stderr, "round %d %-14s %7.1f tok/s  %s\n", r + 1, configs[ci].name.c_str(),
                   res->generated * 1000.0 / std::max(res->decode_ms, 1e-9), res->pool.c_str());
      RunResult& t = total[ci];
      t.decode_ms += res->decode_ms;
      t.generated += res->generated;
      t.drafted += res->drafted;
      t.accepted += res->accepted;
      t.passes += res->passes;
      t.pool = res->pool;
      for (size_t p = 0; p < res->prompts.size(); ++p) per_prompt_ms[ci][p] += res->prompts[p].decode_ms;
      t.prompts = std::move(res->prompts);
    }
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      for (size_t p = 0; p < prompts.size() && !reference.empty(); ++p) {
        if (total[ci].prompts[p].tokens != reference[p]) ++mismatches;
      }
    }
  }
  // The oracle: per prompt the fastest of plain and the single drafts, with their tokens.
  double oracle_ms = 0;
  int64_t oracle_generated = 0;
  std::map<std::string, int> oracle_picks;
  for (size_t p = 0; p < prompts.size(); ++p) {
    size_t best = 0;
    for (size_t ci = 1; ci < n_single; ++ci) {
      if (per_prompt_ms[ci][p] < per_prompt_ms[best][p]) best = ci;
    }
    oracle_ms += per_prompt_ms[best][p];
    oracle_generated += a.rounds * std::max<int64_t>(0, static_cast<int64_t>(reference[p].size()) - 1);
    oracle_picks[labels[p] + ":" + configs[best].name] += 1;
  }
  const double plain_tps = total[0].generated * 1000.0 / total[0].decode_ms;
  const double oracle_tps = oracle_generated * 1000.0 / oracle_ms;
  std::printf("| configuration | budget (bytes) | tok/s | x plain | of oracle | acceptance | tokens/pass | pool at the end |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---|\n");
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const RunResult& t = total[ci];
    const double tps = t.generated * 1000.0 / t.decode_ms;
    char budget[32] = "-", acc[16] = "-", tpp[16] = "-";
    if (configs[ci].spec.method == speculative::Method::kMemSpec) {
      std::snprintf(budget, sizeof budget, "%llu", static_cast<unsigned long long>(configs[ci].spec.draft_memory));
    }
    if (t.drafted > 0) std::snprintf(acc, sizeof acc, "%.0f%%", 100.0 * t.accepted / t.drafted);
    // Each verify pass emits its kept draft tokens and one of the target's.
    if (t.passes > 0) std::snprintf(tpp, sizeof tpp, "%.2f", static_cast<double>(t.accepted + t.passes) / t.passes);
    std::printf("| %s | %s | %.1f | %.2fx | %.0f%% | %s | %s | %s |\n", configs[ci].name.c_str(), budget, tps,
                tps / plain_tps, 100.0 * tps / oracle_tps, acc, tpp, t.pool.c_str());
  }
  std::printf("| oracle | - | %.1f | %.2fx | 100%% | - | - | per prompt the fastest single configuration |\n", oracle_tps,
              oracle_tps / plain_tps);
  std::printf("\n%zu prompts (%zu families x %d seeds, test split, %d tokens), -n %d, %d threads, k %d, %d round(s); "
              "largest draft footprint %llu bytes; greedy outputs differing from plain decoding: %d\n",
              prompts.size(), a.families.size(), a.seeds, a.length, a.n, a.threads, a.k, a.rounds,
              static_cast<unsigned long long>(largest), mismatches);
  std::printf("\noracle's picks (family:configuration x prompts):");
  for (const auto& [k, v] : oracle_picks) std::printf(" %s x%d;", k.c_str(), v);
  std::printf("\n");
  return mismatches == 0 ? 0 : 1;
}

}  // namespace
}  // namespace frugal

int main(int argc, char** argv) { return frugal::main_impl(argc, argv); }
