#include "frugal/eval/harness.h"

#include "frugal/engine/timings_json.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "frugal/engine/sequence_kv.h"
#include "frugal/eval/score.h"

namespace frugal::eval {
namespace {

uint64_t peak_rss() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

// log-softmax of one logits row into `out` (double for a stable KL).
void log_softmax_row(const float* x, size_t n, std::vector<double>& out) {
  out.resize(n);
  double m = -INFINITY;
  for (size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  const double lse = m + std::log(s);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(x[i]) - lse;
}

size_t argmax_row(const float* x, size_t n) { return static_cast<size_t>(std::max_element(x, x + n) - x); }

}  // namespace

Interval wilson_interval(int64_t k, int64_t n, double z) {
  if (n <= 0) return {0, 1};
  const double nn = static_cast<double>(n), p = static_cast<double>(k) / nn, z2 = z * z;
  const double denom = 1 + z2 / nn;
  const double center = (p + z2 / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

Result<std::vector<float>> teacher_forced_logits(Model& model, Backend& backend, const std::vector<TokenId>& tokens,
                                                 size_t n_context, const GenerateOptions& gen) {
  if (n_context == 0 || n_context >= tokens.size()) {
    return error(ErrorCode::kInvalidArgument, "teacher forcing needs 0 < context ({}) < tokens ({})", n_context,
                 tokens.size());
  }
  // The attention options of this configuration, not those the last generate() left on the backend.
  FRUGAL_RETURN_IF_ERROR(backend.set_prefill_sparse(gen.prefill_sparse));
  FRUGAL_RETURN_IF_ERROR(backend.set_tilemix(gen.tilemix));
  const size_t nv = static_cast<size_t>(model.config().n_vocab);
  SequenceKvShape shape;
  shape.prompt_len = static_cast<int32_t>(n_context);
  shape.trace_len = static_cast<int32_t>(tokens.size());
  shape.n_ctx = static_cast<int32_t>(tokens.size()) + 1;
  shape.n_batch = gen.n_batch;
  shape.dtype = gen.kv_dtype;
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<SequenceKv> state, make_sequence_kv(model, gen.kv_policy, shape));
  KvCache& kv = state->cache;
  KvEvictor* evictor = state->evictor.get();
  AttentionObserver* observer = state->observer();
  std::vector<float> out((tokens.size() - n_context) * nv);
  Batch b;
  // Prefill the context in chunks; its last position predicts tokens[n_context].
  for (size_t i = 0; i < n_context; i += static_cast<size_t>(gen.n_batch)) {
    const size_t end = std::min(n_context, i + static_cast<size_t>(gen.n_batch));
    b.clear();
    for (size_t j = i; j < end; ++j) b.add(tokens[j], static_cast<int32_t>(j), 0, j + 1 == n_context);
    FRUGAL_RETURN_IF_ERROR(model.forward(b, kv, backend, out.data(), observer));
  }
  for (size_t j = n_context; j + 1 < tokens.size(); ++j) {
    FRUGAL_RETURN_IF_ERROR(evictor->step(kv, 0));  // same rounds as generate()
    b.clear();
    b.add(tokens[j], static_cast<int32_t>(j), 0, true);
    FRUGAL_RETURN_IF_ERROR(model.forward(b, kv, backend, out.data() + (j - n_context + 1) * nv, observer));
  }
  return out;
}

Result<EvalReport> run_eval(Model& model, const Tokenizer& tok, Backend& backend, const EvalSuite& suite,
                            const EvalConfig& config, const EvalConfig* reference, const EvalProgress& progress) {
  if (suite.n <= 0) return error(ErrorCode::kInvalidArgument, "eval: n must be positive");
  if (suite.lengths.empty()) return error(ErrorCode::kInvalidArgument, "eval: no lengths given");
  std::vector<std::string> families = suite.families.empty() ? task_family_names() : suite.families;
  for (const auto& f : families) {
    if (find_task_family(f) == nullptr) return error(ErrorCode::kInvalidArgument, "eval: unknown task family '{}'", f);
  }
  const auto t0 = std::chrono::steady_clock::now();
  EvalReport rep;
  rep.label = config.label;
  rep.config = describe_generate_options(config.gen);
  const size_t nv = static_cast<size_t>(model.config().n_vocab);
  std::vector<double> lp_ref, lp_cfg;
  const int total = static_cast<int>(families.size() * suite.lengths.size()) * suite.n;
  int done = 0;
  for (const auto& family : families) {
    for (int64_t length : suite.lengths) {
      CellResult cell;
      cell.family = family;
      cell.length = length;
      double prefill_ms = 0, decode_ms = 0;
      int64_t prefill_tok = 0, decode_tok = 0;
      double kl_sum = 0, top1_sum = 0;
      for (int i = 0; i < suite.n; ++i) {
        TaskOptions to;
        to.length = length;
        FRUGAL_ASSIGN_OR_RETURN(TaskExample ex, generate_task(family, suite.split, suite.seed + static_cast<uint64_t>(i), to));
        FRUGAL_ASSIGN_OR_RETURN(std::vector<TokenId> prompt, tok.encode(ex.prompt));
        TokenizeOptions no_special;
        no_special.add_special = false;
        FRUGAL_ASSIGN_OR_RETURN(std::vector<TokenId> answer, tok.encode(ex.answer, no_special));
        GenerateOptions g = config.gen;
        // Room for the expected answer plus slack: a model that rambles is cut off and scored.
        g.n_predict = static_cast<int32_t>(answer.size()) + 16;
        g.n_ctx = std::max<int32_t>(g.n_ctx, static_cast<int32_t>(prompt.size()) + g.n_predict + 1);
        FRUGAL_ASSIGN_OR_RETURN(GenerateResult gr, generate(model, tok, backend, prompt, g));
        ExampleResult r;
        r.family = family;
        r.length = length;
        r.seed = suite.seed + static_cast<uint64_t>(i);
        const TaskScore sc = score_completion(ex, gr.text);
        r.correct = sc.correct;
        r.full_match = sc.full_match;
        r.expected = ex.final_answer;
        r.extracted = sc.extracted;
        r.completion = gr.text;
        r.prompt_tokens = static_cast<int64_t>(prompt.size());
        r.generated_tokens = static_cast<int64_t>(gr.tokens.size());
        r.timings = gr.timings;
        r.kv_rounds = gr.kv_eviction.rounds;
        r.kv_round_ms = gr.kv_eviction.round_ms;
        rep.peak_kv_bytes = std::max(rep.peak_kv_bytes, gr.kv_bytes);
        if (reference != nullptr && i < suite.kl_examples && !answer.empty()) {
          std::vector<TokenId> all = prompt;
          all.insert(all.end(), answer.begin(), answer.end());
          FRUGAL_ASSIGN_OR_RETURN(std::vector<float> lc, teacher_forced_logits(model, backend, all, prompt.size(), config.gen));
          FRUGAL_ASSIGN_OR_RETURN(std::vector<float> lr, teacher_forced_logits(model, backend, all, prompt.size(), reference->gen));
          const size_t rows = answer.size();
          double kl = 0, agree = 0;
          for (size_t row = 0; row < rows; ++row) {
            log_softmax_row(lr.data() + row * nv, nv, lp_ref);
            log_softmax_row(lc.data() + row * nv, nv, lp_cfg);
            double k = 0;
            for (size_t v = 0; v < nv; ++v) k += std::exp(lp_ref[v]) * (lp_ref[v] - lp_cfg[v]);
            kl += std::max(0.0, k);
            agree += argmax_row(lr.data() + row * nv, nv) == argmax_row(lc.data() + row * nv, nv) ? 1 : 0;
          }
          r.kl = kl / static_cast<double>(rows);
          r.top1 = agree / static_cast<double>(rows);
          kl_sum += r.kl;
          top1_sum += r.top1;
          ++cell.kl_n;
        }
        cell.n++;
        cell.correct += r.correct ? 1 : 0;
        prefill_ms += gr.timings.prefill_ms;
        decode_ms += gr.timings.decode_ms;
        prefill_tok += gr.timings.prefill_tokens;
        decode_tok += gr.timings.decode_tokens;
        rep.examples.push_back(std::move(r));
        if (progress) progress(family + "@" + std::to_string(length), ++done, total);
      }
      cell.ci = wilson_interval(cell.correct, cell.n);
      if (cell.kl_n > 0) {
        cell.kl_mean = kl_sum / static_cast<double>(cell.kl_n);
        cell.top1_mean = top1_sum / static_cast<double>(cell.kl_n);
      }
      cell.prefill_tok_s = prefill_ms > 0 ? prefill_tok * 1000.0 / prefill_ms : 0;
      cell.decode_tok_s = decode_ms > 0 ? decode_tok * 1000.0 / decode_ms : 0;
      rep.cells.push_back(cell);
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.peak_rss_bytes = peak_rss();
  return rep;
}

Result<PerplexityResult> perplexity(Model& model, Backend& backend, const std::vector<TokenId>& tokens, int32_t n_ctx,
                                    DType kv_dtype, TokenId bos) {
  if (n_ctx < 8) return error(ErrorCode::kInvalidArgument, "perplexity: context {} is too small (at least 8)", n_ctx);
  if (static_cast<int64_t>(tokens.size()) < n_ctx) {
    return error(ErrorCode::kInvalidArgument, "perplexity: the text has {} tokens, fewer than one window of {}",
                 tokens.size(), n_ctx);
  }
  const size_t nv = static_cast<size_t>(model.config().n_vocab);
  // llama-perplexity's method: window w holds tokens [w*n_ctx, (w+1)*n_ctx) of the stream (which
  // starts with BOS when the model adds one), its first token replaced by BOS; the logits of
  // positions first..n_ctx-2 score the tokens that follow them, so n_ctx - 1 - first per window.
  const int32_t first = n_ctx / 2;
  std::vector<float> logits(static_cast<size_t>(n_ctx - 1 - first) * nv);
  std::vector<double> lp;
  double sum = 0, sum2 = 0;
  PerplexityResult res;
  for (size_t start = 0; start + static_cast<size_t>(n_ctx) <= tokens.size(); start += static_cast<size_t>(n_ctx)) {
    FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(model.kv_options(1, n_ctx, kv_dtype)));
    Batch b;
    for (int32_t j = 0; j < n_ctx; ++j) {
      const TokenId t = (j == 0 && bos >= 0) ? bos : tokens[start + static_cast<size_t>(j)];
      b.add(t, j, 0, j >= first && j < n_ctx - 1);
    }
    FRUGAL_RETURN_IF_ERROR(model.forward(b, kv, backend, logits.data()));
    for (int32_t j = first; j < n_ctx - 1; ++j) {
      log_softmax_row(logits.data() + static_cast<size_t>(j - first) * nv, nv, lp);
      const double nll = -lp[static_cast<size_t>(tokens[start + static_cast<size_t>(j) + 1])];
      sum += nll;
      sum2 += nll * nll;
      res.nll.push_back(static_cast<float>(nll));
      ++res.scored_tokens;
    }
    ++res.windows;
  }
  const double n = static_cast<double>(res.scored_tokens);
  const double mean = sum / n;
  const double var = std::max(0.0, sum2 / n - mean * mean);
  res.ppl = std::exp(mean);
  res.ppl_stderr = res.ppl * std::sqrt(var / std::max(1.0, n - 1));
  return res;
}

std::string report_table(const std::vector<EvalReport>& reports) {
  std::string s =
      "| config | task | length | n | accuracy | 95% CI | KL vs ref | top-1 vs ref | prefill tok/s | decode tok/s |\n"
      "|---|---|---:|---:|---:|---|---:|---:|---:|---:|\n";
  for (const auto& r : reports) {
    for (const auto& c : r.cells) {
      s += fmt::format("| {} | {} | {} | {} | {:.1f}% | [{:.1f}, {:.1f}] | {} | {} | {:.0f} | {:.0f} |\n", r.label,
                       c.family, c.length, c.n, 100 * c.accuracy(), 100 * c.ci.lo, 100 * c.ci.hi,
                       c.kl_n ? fmt::format("{:.2e}", c.kl_mean) : "-",
                       c.kl_n ? fmt::format("{:.3f}", c.top1_mean) : "-", c.prefill_tok_s, c.decode_tok_s);
    }
  }
  return s;
}

std::string report_json(const std::vector<EvalReport>& reports) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : reports) {
    nlohmann::json jr = {{"label", r.label}, {"config", r.config}, {"seconds", r.seconds},
                         {"peak_rss_bytes", r.peak_rss_bytes}, {"peak_kv_bytes", r.peak_kv_bytes}};
    for (const auto& c : r.cells) {
      jr["cells"].push_back({{"task", c.family}, {"length", c.length}, {"n", c.n}, {"correct", c.correct},
                             {"accuracy", c.accuracy()}, {"ci95", {c.ci.lo, c.ci.hi}}, {"kl_n", c.kl_n},
                             {"kl_mean", c.kl_mean}, {"top1_mean", c.top1_mean},
                             {"prefill_tok_s", c.prefill_tok_s}, {"decode_tok_s", c.decode_tok_s}});
    }
    for (const auto& e : r.examples) {
      jr["examples"].push_back({{"task", e.family}, {"length", e.length}, {"seed", e.seed}, {"correct", e.correct},
                                {"full_match", e.full_match}, {"expected", e.expected}, {"extracted", e.extracted},
                                {"completion", e.completion}, {"prompt_tokens", e.prompt_tokens},
                                {"generated_tokens", e.generated_tokens}, {"prefill_ms", e.timings.prefill_ms},
                                {"decode_ms", e.timings.decode_ms}, {"kl", e.kl}, {"top1", e.top1},
                                {"kv_rounds", e.kv_rounds}, {"kv_round_ms", e.kv_round_ms},
                                {"timings", timings_json<nlohmann::json>(local_request_timings(e.timings))}});
    }
    out.push_back(jr);
  }
  return out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sweep_svg(const std::string& name, const std::vector<std::string>& values,
                      const std::vector<EvalReport>& reports) {
  const int W = 720, H = 420, L = 60, R = 170, T = 30, B = 50;
  const int pw = W - L - R, ph = H - T - B;
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"};
  auto x_of = [&](size_t i) { return L + (values.size() <= 1 ? pw / 2.0 : pw * static_cast<double>(i) / (values.size() - 1)); };
  auto y_of = [&](double acc) { return T + ph * (1 - acc); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"18\" font-size=\"14\">accuracy vs {}</text>\n",
      W, H, L, name);
  for (int k = 0; k <= 10; k += 2) {
    const double y = y_of(k / 10.0);
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                     "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}%</text>\n",
                     L, y, L + pw, y, L - 6, y + 4, k * 10);
  }
  for (size_t i = 0; i < values.size(); ++i) {
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x_of(i), T + ph + 20, values[i]);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", L + pw / 2, H - 10, name);
  // One line per family: accuracy pooled over lengths, with its Wilson interval.
  std::vector<std::string> families;
  for (const auto& c : reports.empty() ? std::vector<CellResult>{} : reports[0].cells) {
    if (std::find(families.begin(), families.end(), c.family) == families.end()) families.push_back(c.family);
  }
  for (size_t f = 0; f < families.size(); ++f) {
    const char* color = kColors[f % 7];
    std::string path;
    for (size_t i = 0; i < reports.size() && i < values.size(); ++i) {
      int64_t k = 0, n = 0;
      for (const auto& c : reports[i].cells) {
        if (c.family == families[f]) { k += c.correct; n += c.n; }
      }
      const double acc = n ? static_cast<double>(k) / n : 0;
      const Interval ci = wilson_interval(k, n);
      path += fmt::format("{}{:.1f},{:.1f} ", i ? "L" : "M", x_of(i), y_of(acc));
      s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\"/>"
                       "<circle cx=\"{0:.1f}\" cy=\"{4:.1f}\" r=\"3\" fill=\"{3}\"/>\n",
                       x_of(i), y_of(ci.lo), y_of(ci.hi), color, y_of(acc));
    }
    s += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", path, color);
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                     L + pw + 15, T + 20 * static_cast<int>(f), color, L + pw + 32, T + 20 * static_cast<int>(f) + 11,
                     families[f]);
  }
  s += "</svg>\n";
  return s;
}

}  // namespace frugal::eval
