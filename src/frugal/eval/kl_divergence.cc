#include "frugal/eval/kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace frugal::eval {
namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

int record_u16s(int n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

// ggml's round-half-even through the 1.5*2^23 trick, as the file's writer rounds.
int nearest_int(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// One position's 16-bit log-probabilities (llama-perplexity's encoding, the same float steps);
// returns the NLL of `tok`.
double encode_log_probs(int n_vocab, const float* logits, uint16_t* out, int tok) {
  float max_logit = logits[0];
  float min_logit = logits[0];
  for (int i = 1; i < n_vocab; ++i) {
    max_logit = std::max(max_logit, logits[i]);
    min_logit = std::min(min_logit, logits[i]);
  }
  min_logit = std::max(min_logit, max_logit - 16);
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const auto log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.f;
  std::memcpy(out, &scale, 4);
  std::memcpy(out + 2, &min_log_prob, 4);
  uint16_t* q = out + 4;
  if (scale != 0.f) {
    const float inv_scale = 1 / scale;
    for (int i = 0; i < n_vocab; ++i) {
      q[i] = logits[i] > min_logit ? static_cast<uint16_t>(nearest_int(inv_scale * (logits[i] - min_logit))) : 0;
    }
  } else {
    std::fill(q, q + n_vocab, 0);
  }
  return max_logit + log_sum_exp - logits[tok];
}

// One position against the base record; accumulates into r.
void score_position(int n_vocab, const float* logits, const uint16_t* base, int tok, KlDivergenceResult& r) {
  float max_logit = logits[0];
  int imax = 0;
  for (int i = 1; i < n_vocab; ++i) {
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      imax = i;
    }
  }
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const auto log_sum_exp = static_cast<float>(std::log(sum_exp));
  float scale;
  float min_log_prob;
  std::memcpy(&scale, base, 4);
  std::memcpy(&min_log_prob, base + 2, 4);
  const uint16_t* q = base + 4;
  const float nll = max_logit + log_sum_exp - logits[tok];
  r.sum_nll += nll;
  r.sum_nll2 += static_cast<double>(nll) * nll;
  const float nll_base = -(scale * q[tok] + min_log_prob);
  r.sum_nll_base += nll_base;
  r.sum_nll_base2 += static_cast<double>(nll_base) * nll_base;
  r.sum_nll_nll_base += static_cast<double>(nll) * nll_base;
  const float log_norm = max_logit + log_sum_exp;
  double kld = 0;
  int imax_base = -1;
  float p_log_base_max = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const float p_log_base = scale * q[i] + min_log_prob;
    if (i == 0 || p_log_base > p_log_base_max) {
      p_log_base_max = p_log_base;
      imax_base = i;
    }
    // Entries more than 16 nats below the top were stored as 0: left out, as the writer meant.
    if (p_log_base > -16.f) kld += std::exp(p_log_base) * (p_log_base - logits[i] + log_norm);
  }
  r.sum_kld += kld;
  r.sum_kld2 += kld * kld;
  ++r.count;
  if (imax == imax_base) ++r.n_same_top;
  const float p_diff = std::exp(-nll) - std::exp(-nll_base);
  r.sum_p_diff += p_diff;
  const double p_diff2 = static_cast<double>(p_diff) * p_diff;
  r.sum_p_diff2 += p_diff2;
  r.sum_p_diff4 += p_diff2 * p_diff2;
  r.max_p_diff = std::max(r.max_p_diff, std::fabs(p_diff));
  r.kld_values.push_back(static_cast<float>(kld));
  r.p_diff_values.push_back(p_diff);
}

// Logits of the scored positions n_ctx/2 .. n_ctx-2 of one window.
Status window_logits(Model& model, Backend& backend, const TokenId* window, int32_t n_ctx, DType kv_dtype,
                     TokenId bos, std::vector<float>& logits) {
  const int32_t first = n_ctx / 2;
  logits.resize(static_cast<size_t>(n_ctx - 1 - first) * static_cast<size_t>(model.config().n_vocab));
  FRUGAL_ASSIGN_OR_RETURN(KvCache kv, KvCache::create(model.kv_options(1, n_ctx, kv_dtype)));
  Batch b;
  for (int32_t j = 0; j < n_ctx; ++j) b.add((j == 0 && bos >= 0) ? bos : window[j], j, 0, j >= first && j < n_ctx - 1);
  return model.forward(b, kv, backend, logits.data());
}

std::pair<double, double> mean_and_uncertainty(double sum, double sum2, int64_t count) {
  if (count < 1) return {0., 0.};
  const double f = sum / static_cast<double>(count);
  double df = sum2 / static_cast<double>(count) - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / static_cast<double>(count - 1)) : 0.;
  return {f, df};
}

double covariance(double suma, double sumb, double sumab, int64_t count) {
  if (count < 10) return 0.0;
  const auto n = static_cast<double>(count);
  return (sumab / n - (suma / n) * (sumb / n)) / (n - 1);
}

// Linear interpolation between sorted values, as llama-perplexity's percentiles.
float percentile(const std::vector<float>& v, float fraction) {
  if (fraction <= 0) return v.front();
  if (fraction >= 1) return v.back();
  float p = fraction * static_cast<float>(v.size() - 1);
  const auto ip = static_cast<size_t>(p);
  p -= static_cast<float>(ip);
  return (1 - p) * v[ip] + p * v[std::min(ip + 1, v.size() - 1)];
}

float median(const std::vector<float>& v) {
  const size_t n = v.size();
  return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

}  // namespace

Result<PerplexityResult> save_kl_base(Model& model, Backend& backend, const std::vector<TokenId>& tokens,
                                      int32_t n_ctx, DType kv_dtype, TokenId bos, const std::string& path) {
  if (n_ctx < 8) return error(ErrorCode::kInvalidArgument, "kl-divergence base: context {} is too small", n_ctx);
  const int32_t n_chunk = static_cast<int32_t>(tokens.size() / static_cast<size_t>(n_ctx));
  if (n_chunk < 1) {
    return error(ErrorCode::kInvalidArgument, "kl-divergence base: {} tokens, fewer than one window of {}",
                 tokens.size(), n_ctx);
  }
  const auto n_vocab = static_cast<int32_t>(model.config().n_vocab);
  const int nv = record_u16s(n_vocab);
  const int32_t first = n_ctx / 2;
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return error(ErrorCode::kIo, "{}: cannot create {}", path, tmp);
  const auto n_ctx_u = static_cast<uint32_t>(n_ctx);
  out.write(kMagic, 8);
  out.write(reinterpret_cast<const char*>(&n_ctx_u), 4);
  out.write(reinterpret_cast<const char*>(&n_vocab), 4);
  out.write(reinterpret_cast<const char*>(&n_chunk), 4);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(n_chunk) * n_ctx * 4);
  std::vector<float> logits;
  std::vector<uint16_t> rec(static_cast<size_t>(n_ctx - 1 - first) * static_cast<size_t>(nv));
  double sum = 0, sum2 = 0;
  PerplexityResult res;
  for (int32_t c = 0; c < n_chunk; ++c) {
    const TokenId* window = tokens.data() + static_cast<size_t>(c) * static_cast<size_t>(n_ctx);
    Status st = window_logits(model, backend, window, n_ctx, kv_dtype, bos, logits);
    if (!st.ok()) {
      std::remove(tmp.c_str());
      return st;
    }
    for (int32_t i = 0; i < n_ctx - 1 - first; ++i) {
      const double nll = encode_log_probs(n_vocab, logits.data() + static_cast<size_t>(i) * static_cast<size_t>(n_vocab),
                                          rec.data() + static_cast<size_t>(i) * static_cast<size_t>(nv),
                                          window[first + i + 1]);
      sum += nll;
      sum2 += nll * nll;
      ++res.scored_tokens;
    }
    out.write(reinterpret_cast<const char*>(rec.data()), static_cast<std::streamsize>(rec.size() * 2));
    ++res.windows;
  }
  out.close();
  if (!out) {
    std::remove(tmp.c_str());
    return error(ErrorCode::kIo, "{}: write failed", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return error(ErrorCode::kIo, "{}: cannot rename {} into place", path, tmp);
  }
  const double n = static_cast<double>(res.scored_tokens);
  const double mean = sum / n;
  res.ppl = std::exp(mean);
  res.ppl_stderr = res.ppl * std::sqrt(std::max(0.0, sum2 / n - mean * mean) / std::max(1.0, n - 1));
  return res;
}

Result<KlDivergenceResult> kl_divergence(Model& model, Backend& backend, const std::string& base_path,
                                         DType kv_dtype, TokenId bos) {
  std::ifstream in(base_path, std::ios::binary);
  if (!in) return error(ErrorCode::kNotFound, "{}: cannot open the kl-divergence base file", base_path);
  char magic[8];
  uint32_t n_ctx = 0;
  int32_t n_vocab = 0;
  int32_t n_chunk = 0;
  in.read(magic, 8);
  if (!in || std::memcmp(magic, kMagic, 8) != 0) {
    return error(ErrorCode::kCorrupt, "{}: not a log-probability file (no '_logits_' magic)", base_path);
  }
  in.read(reinterpret_cast<char*>(&n_ctx), 4);
  in.read(reinterpret_cast<char*>(&n_vocab), 4);
  in.read(reinterpret_cast<char*>(&n_chunk), 4);
  if (!in || n_ctx < 8 || n_ctx > (1u << 20) || n_chunk < 1 || n_chunk > (1 << 24)) {
    return error(ErrorCode::kCorrupt, "{}: bad header (n_ctx {}, n_chunk {})", base_path, n_ctx, n_chunk);
  }
  if (n_vocab != model.config().n_vocab) {
    return error(ErrorCode::kInvalidArgument, "{}: vocabulary of {} tokens, the model has {}", base_path, n_vocab,
                 model.config().n_vocab);
  }
  std::vector<TokenId> tokens(static_cast<size_t>(n_ctx) * static_cast<size_t>(n_chunk));
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 4));
  if (!in) return error(ErrorCode::kCorrupt, "{}: truncated in the token list", base_path);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      return error(ErrorCode::kCorrupt, "{}: token {} is {} (vocabulary {})", base_path, i, tokens[i], n_vocab);
    }
  }
  const auto ctx = static_cast<int32_t>(n_ctx);
  const int32_t first = ctx / 2;
  const int nv = record_u16s(n_vocab);
  std::vector<uint16_t> rec(static_cast<size_t>(ctx - 1 - first) * static_cast<size_t>(nv));
  std::vector<float> logits;
  KlDivergenceResult r;
  r.n_ctx = ctx;
  r.n_chunk = n_chunk;
  for (int32_t c = 0; c < n_chunk; ++c) {
    in.read(reinterpret_cast<char*>(rec.data()), static_cast<std::streamsize>(rec.size() * 2));
    if (!in) return error(ErrorCode::kCorrupt, "{}: truncated in window {} of {}", base_path, c, n_chunk);
    const TokenId* window = tokens.data() + static_cast<size_t>(c) * n_ctx;
    FRUGAL_RETURN_IF_ERROR(window_logits(model, backend, window, ctx, kv_dtype, bos, logits));
    for (int32_t i = 0; i < ctx - 1 - first; ++i) {
      score_position(n_vocab, logits.data() + static_cast<size_t>(i) * static_cast<size_t>(n_vocab),
                     rec.data() + static_cast<size_t>(i) * static_cast<size_t>(nv), window[first + i + 1], r);
    }
  }
  return r;
}

double KlDivergenceResult::mean_kld() const { return mean_and_uncertainty(sum_kld, sum_kld2, count).first; }
double KlDivergenceResult::mean_kld_stderr() const { return mean_and_uncertainty(sum_kld, sum_kld2, count).second; }
double KlDivergenceResult::same_top() const {
  return count > 0 ? static_cast<double>(n_same_top) / static_cast<double>(count) : 0.0;
}

std::string kl_report(const KlDivergenceResult& r) {
  if (r.count < 1) return "no positions scored\n";
  std::string s;
  auto line = [&s](const std::string& l) { s += l + "\n"; };
  const auto log_ppl = mean_and_uncertainty(r.sum_nll, r.sum_nll2, r.count);
  const double ppl = std::exp(log_ppl.first);
  const double ppl_unc = ppl * log_ppl.second;
  const auto log_base = mean_and_uncertainty(r.sum_nll_base, r.sum_nll_base2, r.count);
  const double ppl_base = std::exp(log_base.first);
  const double ppl_base_unc = ppl_base * log_base.second;
  const double cov = covariance(r.sum_nll, r.sum_nll_base, r.sum_nll_nll_base, r.count);
  const double ratio = log_ppl.first - log_base.first;
  const double ratio_unc =
      std::sqrt(std::max(0.0, log_ppl.second * log_ppl.second + log_base.second * log_base.second - 2.0 * cov));
  line("====== Perplexity statistics ======");
  line(fmt::format("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}", ppl, ppl_unc));
  line(fmt::format("Mean PPL(base)                : {:10.6f} ± {:10.6f}", ppl_base, ppl_base_unc));
  if (log_ppl.second > 0 && log_base.second > 0) {
    line(fmt::format("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2f}%", 100.0 * cov / (log_ppl.second * log_base.second)));
  }
  line(fmt::format("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}", ratio, ratio_unc));
  line(fmt::format("Mean PPL(Q)/PPL(base)         : {:10.6f} ± {:10.6f}", std::exp(ratio), std::exp(ratio) * ratio_unc));
  const double ppl_cov = ppl * ppl_base * cov;
  line(fmt::format("Mean PPL(Q)-PPL(base)         : {:10.6f} ± {:10.6f}", ppl - ppl_base,
                   std::sqrt(std::max(0.0, ppl_unc * ppl_unc + ppl_base_unc * ppl_base_unc - 2.0 * ppl_cov))));
  line("");
  std::vector<float> kld = r.kld_values;
  std::vector<float> dp = r.p_diff_values;
  std::sort(kld.begin(), kld.end());
  std::sort(dp.begin(), dp.end());
  const auto kl = mean_and_uncertainty(r.sum_kld, r.sum_kld2, r.count);
  line("====== KL divergence statistics ======");
  line(fmt::format("Mean    KLD: {:10.6f} ± {:10.6f}", kl.first, kl.second));
  line(fmt::format("Maximum KLD: {:10.6f}", kld.back()));
  line(fmt::format("99.9%   KLD: {:10.6f}", percentile(kld, 0.999f)));
  line(fmt::format("99.0%   KLD: {:10.6f}", percentile(kld, 0.990f)));
  line(fmt::format("Median  KLD: {:10.6f}", median(kld)));
  line(fmt::format("10.0%   KLD: {:10.6f}", percentile(kld, 0.100f)));
  line(fmt::format(" 5.0%   KLD: {:10.6f}", percentile(kld, 0.050f)));
  line(fmt::format(" 1.0%   KLD: {:10.6f}", percentile(kld, 0.010f)));
  line(fmt::format("Minimum KLD: {:10.6f}", kld.front()));
  line("");
  const auto pd = mean_and_uncertainty(r.sum_p_diff, r.sum_p_diff2, r.count);
  line("====== Token probability statistics ======");
  line(fmt::format("Mean    Δp: {:6.3f} ± {:5.3f} %", 100.0 * pd.first, 100.0 * pd.second));
  line(fmt::format("Maximum Δp: {:6.3f}%", 100.0 * dp.back()));
  for (float f : {0.999f, 0.99f, 0.95f, 0.90f, 0.75f}) {
    line(fmt::format("{:4.1f}%   Δp: {:6.3f}%", 100.0 * f, 100.0 * percentile(dp, f)));
  }
  line(fmt::format("Median  Δp: {:6.3f}%", 100.0 * median(dp)));
  for (float f : {0.25f, 0.10f, 0.05f, 0.01f, 0.001f}) {
    line(fmt::format("{:4.1f}%   Δp: {:6.3f}%", 100.0 * f, 100.0 * percentile(dp, f)));
  }
  line(fmt::format("Minimum Δp: {:6.3f}%", 100.0 * dp.front()));
  const auto mse = mean_and_uncertainty(r.sum_p_diff2, r.sum_p_diff4, r.count);
  const double rms = std::sqrt(mse.first);
  line(fmt::format("RMS Δp    : {:6.3f} ± {:5.3f} %", 100.0 * rms, rms > 0 ? 100.0 * 0.5 / rms * mse.second : 0.0));
  const double same = r.same_top();
  line(fmt::format("Same top p: {:6.3f} ± {:5.3f} %", 100.0 * same,
                   r.count > 1 ? 100.0 * std::sqrt(same * (1.0 - same) / static_cast<double>(r.count - 1)) : 0.0));
  return s;
}

}  // namespace frugal::eval
