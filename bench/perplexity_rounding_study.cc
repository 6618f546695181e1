// Where a perplexity's last digits come from: frugal's figure beside the float64 reference forward
// (tests/reference) computed exactly, with keys and values rounded to F16 (as an F16 cache stores
// them), and with the query and the softmax weights rounded to F16 as well (as ggml's CPU attention
// does when the cache is F16 and attention is not fused: its K.Q and V.softmax products convert
// their F32 operand to the cache's type). Same windows and scored tokens as `frugal perplexity`
// and llama-perplexity: window w is tokens [w n_ctx, (w+1) n_ctx) of the text encoded with BOS,
// its first token replaced by BOS, positions n_ctx/2 .. n_ctx-2 scored.
//
// Usage: perplexity_rounding_study MODEL TEXT N_CTX [LLAMA_PERPLEXITY_LOG]
// Prints the running estimate after each window ("[i]x.xxxx", llama-perplexity's format) for each
// of the four, and their final values to six decimals. With the log of llama-perplexity on the
// same model, text and -c, it also counts, per variant, the running estimates that equal
// llama-perplexity's to the four decimals it prints.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "frugal/backend/backend.h"
#include "frugal/eval/harness.h"
#include "frugal/format/gguf.h"
#include "frugal/model/model.h"
#include "frugal/tokenize/tokenizer.h"
#include "reference/reference_forward.h"

namespace {

using namespace frugal;

// Running perplexity after each window: exp of the mean NLL of every token scored so far.
std::vector<double> running(const std::vector<double>& nll, size_t per_window) {
  std::vector<double> out;
  double sum = 0;
  for (size_t i = 0; i < nll.size(); ++i) {
    sum += nll[i];
    if ((i + 1) % per_window == 0) out.push_back(std::exp(sum / static_cast<double>(i + 1)));
  }
  return out;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "perplexity_rounding_study: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return fail("usage: perplexity_rounding_study MODEL TEXT N_CTX [LLAMA_PERPLEXITY_LOG]");
  const std::string model_path = argv[1], text_path = argv[2];
  const int32_t n_ctx = std::atoi(argv[3]);
  if (n_ctx < 8) return fail("N_CTX must be at least 8");
  std::ifstream tf(text_path);
  if (!tf) return fail("cannot read " + text_path);
  std::stringstream ss;
  ss << tf.rdbuf();
  auto file = GgufFile::open(model_path);
  if (!file.ok()) return fail(file.status().message());
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok.ok()) return fail(tok.status().message());
  TokenizeOptions to;
  to.add_special = true;
  auto tokens = (*tok)->encode(ss.str(), to);
  if (!tokens.ok()) return fail(tokens.status().message());
  const TokenId bos = (*tok)->bos();
  auto model = Model::load(model_path);
  if (!model.ok()) return fail(model.status().message());
  auto be = make_cpu_backend({});
  auto ours = eval::perplexity(**model, *be, *tokens, n_ctx, DType::kF16, bos);
  if (!ours.ok()) return fail(ours.status().message());
  auto ref = reference::ReferenceModel::load(model_path);
  if (!ref.ok()) return fail(ref.status().message());

  const size_t per_window = static_cast<size_t>(n_ctx - 1 - n_ctx / 2);
  std::vector<std::string> names = {"frugal", "float64", "float64, F16 K/V", "float64, F16 K/V, q, softmax"};
  std::vector<std::vector<double>> est;
  est.push_back(running(std::vector<double>(ours->nll.begin(), ours->nll.end()), per_window));
  reference::RefForwardOptions o;
  for (int variant = 0; variant < 3; ++variant) {
    o.kv_f16 = variant >= 1;
    o.attention_operands_f16 = variant >= 2;
    auto nll = reference::window_nll(**ref, *tokens, n_ctx, bos, o);
    if (!nll.ok()) return fail(nll.status().message());
    est.push_back(running(*nll, per_window));
  }
  std::printf("%s, %s, -c %d: %d windows, %lld scored tokens\n", model_path.c_str(), text_path.c_str(), n_ctx,
              ours->windows, static_cast<long long>(ours->scored_tokens));
  for (size_t v = 0; v < names.size(); ++v) {
    std::printf("%-30s final %.6f  ", names[v].c_str(), est[v].empty() ? 0.0 : est[v].back());
    for (size_t i = 0; i < est[v].size(); ++i) std::printf("[%zu]%.4f,", i + 1, est[v][i]);
    std::printf("\n");
  }
  if (argc < 5) return 0;
  // llama-perplexity prints "[i]x.xxxx," per window and "Final estimate: PPL = x.xxxx".
  std::ifstream lf(argv[4]);
  if (!lf) return fail(std::string("cannot read ") + argv[4]);
  std::stringstream ls;
  ls << lf.rdbuf();
  const std::string log = ls.str();
  std::map<size_t, std::string> llama;
  const std::regex chunk(R"(\[(\d+)\]([0-9]+\.[0-9]{4}))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), chunk); it != std::sregex_iterator(); ++it) {
    llama[static_cast<size_t>(std::stoul((*it)[1]))] = (*it)[2];
  }
  std::smatch fm;
  const std::regex final_re(R"(Final estimate: PPL = ([0-9]+\.[0-9]{4}))");
  const std::string final_llama = std::regex_search(log, fm, final_re) ? fm[1].str() : "?";
  std::printf("llama-perplexity: %zu running estimates, final %s\n", llama.size(), final_llama.c_str());
  char buf[64];
  for (size_t v = 0; v < names.size(); ++v) {
    int same = 0, compared = 0;
    for (size_t i = 0; i < est[v].size(); ++i) {
      auto it = llama.find(i + 1);
      if (it == llama.end()) continue;
      std::snprintf(buf, sizeof buf, "%.4f", est[v][i]);
      same += it->second == buf ? 1 : 0;
      ++compared;
    }
    std::snprintf(buf, sizeof buf, "%.4f", est[v].empty() ? 0.0 : est[v].back());
    std::printf("%-30s running estimates equal to llama-perplexity's: %d of %d; final %s (%s)\n", names[v].c_str(), same,
                compared, buf, buf == final_llama ? "equal" : "differs");
  }
  return 0;
}
