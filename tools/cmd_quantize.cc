// frugal quantize: IN.gguf OUT.gguf TYPE, with llama-quantize's per-tensor rules and bytes
// (quantize/model_quantizer.h). A bar on a terminal, one summary line otherwise. With
// --target-bpw B --fisher FILE (FAMPWQ), the layer matrices get the types an allocator picks from
// the Fisher-weighted quantization error under a size budget; TYPE then only sets the tensors
// outside the layers (token embedding, output), Q8_0's rules when it is omitted.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "command.h"
#include "common.h"
#include "frugal/quantize/bit_allocator.h"
#include "frugal/quantize/fisher_cost.h"
#include "frugal/quantize/fisher_file.h"
#include "frugal/quantize/importance_collector.h"
#include "frugal/quantize/model_quantizer.h"

namespace frugal::cli {
namespace {

struct QuantizeArgs {
  std::string input, output, type, imatrix, output_type, token_type;
  std::string calibration;  // text to compute the importance matrix from, instead of --imatrix
  int calibration_ctx = 512;
  std::string nvfp4_scale = "rtn";
  std::string hbq_scale = "sig";
  int hscale_radius = quant::kHScaleDefaultRadius;
  bool nvfp4_flags_given = false;   // --nvfp4-scale or --hscale-radius on the command line
  bool hscale_radius_given = false;
  std::vector<std::string> tensor_types;
  bool pure = false;
  bool allow_requantize = false;
  bool ocg = false;
  bool list = false;
  int threads = 0;
  // FAMPWQ: a mixed-precision allocation of the layer matrices under a size budget.
  double target_bpw = 0;  // 0: off
  std::string fisher, allocator = "dp", granularity = "layer";
  uint64_t seed = 1;
  int rl_episodes = 3000;
};

Result<DType> parse_tensor_type(const std::string& what, const std::string& name) {
  auto t = dtype_from_name(name);
  if (!t) return error(ErrorCode::kInvalidArgument, "{}: unknown tensor type '{}'", what, name);
  return *t;
}

void draw_bar(const quantize::TensorProgress& p) {
  constexpr int kWidth = 30;
  const int filled = p.index * kWidth / p.count;
  std::fprintf(stderr, "\r[%.*s%*s] %4d/%d %-32.32s %6s -> %-6s", filled, "==============================",
               kWidth - filled, "", p.index, p.count, p.name.c_str(), std::string(dtype_name(p.from)).c_str(),
               std::string(dtype_name(p.to)).c_str());
  if (p.index == p.count) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

// Builds the cost table, checks the budget, runs the allocator, prints the allocation, and puts
// the chosen types into o.assigned_types.
int plan_fampwq(const QuantizeArgs& a, quantize::QuantizeOptions& o) {
  const std::string cmd = "quantize";
  if (a.fisher.empty()) return fail(cmd, "--target-bpw needs --fisher FILE (the Fisher diagonal from train/fisher.py)");
  if (!(a.target_bpw > 0)) return fail(cmd, "--target-bpw must be a positive number of bits per weight");
  auto model = GgufFile::open(a.input);
  if (!model.ok()) return fail(cmd, model.status().message());
  auto fisher = quantize::FisherFile::open(a.fisher);
  if (!fisher.ok()) return fail(cmd, fisher.status().message());
  quantize::FisherCostOptions co;
  co.granularity = a.granularity == "tensor" ? quantize::AllocationGranularity::kTensor
                                             : quantize::AllocationGranularity::kLayer;
  co.imatrix = o.imatrix;
  co.n_threads = o.n_threads;
  auto units = quantize::fisher_cost_table(**model, *fisher, co);
  if (!units.ok()) return fail(cmd, units.status().message());
  int64_t n_weights = 0;
  for (const auto& u : *units) n_weights += u.n_weights;
  const auto budget = static_cast<uint64_t>(a.target_bpw * static_cast<double>(n_weights) / 8.0);
  const uint64_t lo = quantize::min_total_bytes(*units);
  const uint64_t hi = quantize::max_total_bytes(*units);
  auto bpw_of = [&](uint64_t bytes) { return 8.0 * static_cast<double>(bytes) / static_cast<double>(n_weights); };
  if (budget < lo || budget > hi) {
    return fail(cmd, fmt::format("--target-bpw {:.4f} ({} bytes for the {} weights of the layer matrices) is outside "
                                 "what the candidate types allow: {:.4f} ({} bytes, every unit at its smallest type) "
                                 "to {:.4f} bpw ({} bytes, every unit at its largest)",
                                 a.target_bpw, budget, n_weights, bpw_of(lo), lo, bpw_of(hi), hi));
  }
  Result<quantize::Allocation> alloc = quantize::Allocation{};
  std::string how;
  if (a.allocator == "rl") {
    quantize::RlOptions ro;
    ro.seed = a.seed;
    ro.episodes = a.rl_episodes;
    quantize::RlReport rr;
    alloc = quantize::allocate_rl(*units, budget, ro, &rr);
    how = fmt::format("rl: REINFORCE, {} episodes, seed {}, returned episode {} (greedy policy cost {:.6g})",
                      rr.episodes, a.seed, rr.best_episode, rr.final_greedy_cost);
  } else {
    quantize::DpReport dr;
    alloc = quantize::allocate_dp(*units, budget, {}, &dr);
    how = fmt::format("dp: knapsack over {} cells of {} bytes ({})", dr.cells, dr.grid_bytes,
                      dr.exact ? "the gcd of the sizes: exact" : "sizes rounded up: within one cell per unit");
  }
  if (!alloc.ok()) return fail(cmd, alloc.status().message());
  std::printf("FAMPWQ allocation of %s (Fisher %s: %lld windows, %lld tokens), %s granularity\n", a.input.c_str(),
              a.fisher.c_str(), static_cast<long long>(fisher->windows()), static_cast<long long>(fisher->tokens()),
              a.granularity.c_str());
  std::printf("%-28s %-7s %10s %7s %14s\n", "unit", "type", "bytes", "bpw", "cost");
  for (size_t i = 0; i < units->size(); ++i) {
    const auto& u = (*units)[i];
    const auto& opt = u.options[static_cast<size_t>(alloc->choice[i])];
    std::printf("%-28s %-7s %10llu %7.4f %14.6g\n", u.name.c_str(), std::string(dtype_name(opt.type)).c_str(),
                static_cast<unsigned long long>(opt.bytes),
                8.0 * static_cast<double>(opt.bytes) / static_cast<double>(u.n_weights), opt.cost);
    for (const std::string& t : u.tensors) o.assigned_types[t] = opt.type;
  }
  std::printf("allocator %s\n", how.c_str());
  std::printf("layer matrices: %lld weights, budget %llu bytes (%.4f bpw), allocated %llu bytes = %.4f bpw, total "
              "cost %.6g\n",
              static_cast<long long>(n_weights), static_cast<unsigned long long>(budget), a.target_bpw,
              static_cast<unsigned long long>(alloc->bytes), bpw_of(alloc->bytes), alloc->cost);
  // The same cost for every type every unit can take, at its size: what uniform types would cost.
  std::string uniform;
  for (const auto& first : (*units)[0].options) {
    uint64_t bytes = 0;
    double cost = 0;
    bool everywhere = true;
    for (const auto& u : *units) {
      auto it = std::find_if(u.options.begin(), u.options.end(), [&](const auto& x) { return x.type == first.type; });
      if (it == u.options.end()) {
        everywhere = false;
        break;
      }
      bytes += it->bytes;
      cost += it->cost;
    }
    if (everywhere) uniform += fmt::format(" {} {:.4f} bpw cost {:.6g};", dtype_name(first.type), bpw_of(bytes), cost);
  }
  if (!uniform.empty()) std::printf("uniform types for comparison:%s\n", uniform.c_str());
  o.provenance = {{"quantize.fampwq.fisher", a.fisher},
                  {"quantize.fampwq.allocator", a.allocator},
                  {"quantize.fampwq.granularity", a.granularity},
                  {"quantize.fampwq.target_bpw", fmt::format("{:.4f}", a.target_bpw)}};
  return 0;
}

int quantize_cmd(const QuantizeArgs& a) {
  const std::string cmd = "quantize";
  if (a.list) {
    for (const auto& t : quantize::all_targets()) {
      std::printf("%-7s %s\n", std::string(t.name).c_str(), std::string(t.description).c_str());
    }
    return 0;
  }
  const bool fampwq = a.target_bpw != 0 || !a.fisher.empty();
  if (a.input.empty() || a.output.empty() || (a.type.empty() && !fampwq)) {
    return fail(cmd, "usage: frugal quantize IN.gguf OUT.gguf TYPE, or IN.gguf OUT.gguf [TYPE] --target-bpw B --fisher FILE");
  }
  const std::string type_name = a.type.empty() ? "Q8_0" : a.type;
  auto target = quantize::find_target(type_name);
  if (!target) return fail(cmd, "unknown type '" + a.type + "'; one of: " + quantize::target_names());
  quantize::QuantizeOptions o;
  o.input = a.input;
  o.output = a.output;
  o.target = *target;
  o.mix.pure = a.pure;
  o.allow_requantize = a.allow_requantize;
  o.n_threads = resolve_threads(a.threads);
  if (!a.output_type.empty()) {
    auto t = parse_tensor_type("--output-tensor-type", a.output_type);
    if (!t.ok()) return fail(cmd, t.status().message());
    o.mix.output_type = *t;
  }
  if (!a.token_type.empty()) {
    auto t = parse_tensor_type("--token-embedding-type", a.token_type);
    if (!t.ok()) return fail(cmd, t.status().message());
    o.mix.token_embd_type = *t;
  }
  for (const std::string& rule : a.tensor_types) {
    const size_t eq = rule.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == rule.size()) {
      return fail(cmd, "--tensor-type '" + rule + "': expected PATTERN=TYPE, e.g. attn_v=q8_0");
    }
    auto t = parse_tensor_type("--tensor-type '" + rule + "'", rule.substr(eq + 1));
    if (!t.ok()) return fail(cmd, t.status().message());
    o.tensor_types.push_back({rule.substr(0, eq), *t});
  }
  if (a.nvfp4_flags_given) {
    const bool nvfp4_rule =
        std::any_of(o.tensor_types.begin(), o.tensor_types.end(), [](const auto& r) { return r.type == DType::kNVFP4; });
    if (target->file_type != quantize::FileType::kNVFP4 && !nvfp4_rule) {
      return fail(cmd, "--nvfp4-scale and --hscale-radius choose NVFP4 block scales, but type " + a.type +
                           " has no NVFP4 tensors (use type NVFP4, or --tensor-type PATTERN=nvfp4)");
    }
  }
  if (a.ocg) {
    const bool nvfp4_rule =
        std::any_of(o.tensor_types.begin(), o.tensor_types.end(), [](const auto& r) { return r.type == DType::kNVFP4; });
    const DType base = target->base;
    const bool float_type = base == DType::kF32 || base == DType::kF16 || base == DType::kBF16;
    if (target->file_type != quantize::FileType::kNVFP4 && !nvfp4_rule && !float_type) {
      return fail(cmd, "--ocg groups channels for NVFP4's 16-element scales, but type " + a.type +
                           " has no NVFP4 tensors (use type NVFP4, --tensor-type PATTERN=nvfp4, or F32/F16/BF16 for "
                           "the reordering alone)");
    }
    if (a.imatrix.empty() && a.calibration.empty()) {
      return fail(cmd, "--ocg needs calibration statistics: pass --imatrix FILE or --calibration TEXT");
    }
  }
  if (a.hbq_scale != "sig") {
    const bool hbq_rule = std::any_of(o.tensor_types.begin(), o.tensor_types.end(),
                                      [](const auto& r) { return r.type == DType::kHBQ_A || r.type == DType::kHBQ_E; });
    const bool hbq_target = target->base == DType::kHBQ_A || target->base == DType::kHBQ_E;
    if (!hbq_target && !hbq_rule) {
      return fail(cmd, "--hbq-scale chooses HBQ multipliers, but type " + a.type +
                           " has no HBQ tensors (use type HBQ_A or HBQ_E, or --tensor-type PATTERN=hbq_a)");
    }
  }
  if (a.hscale_radius_given && a.nvfp4_scale != "hscale") return fail(cmd, "--hscale-radius needs --nvfp4-scale hscale");
  o.nvfp4_scale = a.nvfp4_scale == "hscale" ? quantize::Nvfp4Scale::kHScale : quantize::Nvfp4Scale::kRtn;
  o.hscale_radius = a.hscale_radius;
  o.hbq_scale = a.hbq_scale == "pow2"  ? quant::HbqScaleStrategy::kPow2
                : a.hbq_scale == "int" ? quant::HbqScaleStrategy::kInt
                                       : quant::HbqScaleStrategy::kSig;
  o.ocg = a.ocg;
  std::unique_ptr<quantize::Imatrix> imatrix;
  if (!a.imatrix.empty() && !a.calibration.empty()) return fail(cmd, "pass --imatrix FILE or --calibration TEXT, not both");
  if (!a.calibration.empty()) {
    // The importance matrix `frugal imatrix -f TEXT -c N` would write, computed on the input model.
    auto text = read_prompt("", a.calibration);
    if (!text.ok()) return fail(cmd, text.status().message());
    auto lm = load_model(a.input, false);
    if (!lm.ok()) return fail(cmd, lm.status().message());
    TokenizeOptions to;
    to.add_special = true;
    auto tokens = lm->tokenizer->encode(*text, to);
    if (!tokens.ok()) return fail(cmd, a.calibration + ": " + tokens.status().message());
    CpuBackendOptions bo;
    bo.n_threads = o.n_threads;
    auto be = make_cpu_backend(bo);
    quantize::ImatrixRunOptions ro;
    ro.n_ctx = a.calibration_ctx;
    ro.bos = lm->tokenizer->add_bos() ? lm->tokenizer->bos() : -1;
    ro.dataset = a.calibration;
    auto m = quantize::collect_imatrix(*lm->model, *be, *tokens, ro);
    if (!m.ok()) return fail(cmd, a.calibration + ": " + m.status().message());
    std::fprintf(stderr, "frugal quantize: importance matrix from %s: %d chunks of %d tokens\n", a.calibration.c_str(),
                 m->chunks, a.calibration_ctx);
    imatrix = std::make_unique<quantize::Imatrix>(std::move(*m));
    o.imatrix = imatrix.get();
    o.imatrix_path = a.calibration;
  }
  if (!a.imatrix.empty()) {
    auto m = quantize::read_imatrix(a.imatrix);
    if (!m.ok()) return fail(cmd, m.status().message());
    imatrix = std::make_unique<quantize::Imatrix>(std::move(*m));
    o.imatrix = imatrix.get();
    o.imatrix_path = a.imatrix;
  }
  if (o.nvfp4_scale == quantize::Nvfp4Scale::kHScale && !imatrix) {
    std::fprintf(stderr, "frugal quantize: H-Scale without --imatrix: every column weighs 1 (plain squared error)\n");
  }
  if (fampwq) {
    if (a.target_bpw == 0) return fail(cmd, "--fisher needs --target-bpw B (bits per weight of the layer matrices)");
    if (int rc = plan_fampwq(a, o); rc != 0) return rc;
  }
  if (isatty(STDERR_FILENO)) o.on_tensor = draw_bar;
  auto r = quantize::quantize_model(o);
  if (!r.ok()) return fail(cmd, r.status().message());
  const double mb_in = static_cast<double>(r->input_tensor_bytes) / 1e6;
  std::fprintf(stderr,
               "frugal quantize: %s -> %s (%s): %d tensors, %d quantized%s; %.2f MB -> %.2f MB of weights, file %llu "
               "bytes; %.2f s, %.1f MB/s of input\n",
               a.input.c_str(), a.output.c_str(), std::string(target->name).c_str(), r->n_tensors, r->n_quantized,
               r->n_fallback ? (", " + std::to_string(r->n_fallback) + " with a fallback type").c_str() : "", mb_in,
               static_cast<double>(r->output_tensor_bytes) / 1e6, static_cast<unsigned long long>(r->output_file_bytes),
               r->seconds, mb_in / std::max(r->seconds, 1e-9));
  if (a.ocg) {
    // One line: packed groups per kind of site, and the sites left in their order.
    int res = 0, down = 0, attn = 0, n_down = 0, n_attn = 0;
    std::map<std::string, int> left_as_is;  // "ffn_down: why" -> layers
    for (const auto& s : r->ocg_sites) {
      if (!s.note.empty()) left_as_is[s.name.substr(s.name.rfind('.') + 1) + ": " + s.note] += 1;
      if (s.name == "residual") {
        res += s.anchors;
      } else if (s.name.ends_with("ffn_down")) {
        down += s.anchors;
        ++n_down;
      } else {
        attn += s.anchors;
        ++n_attn;
      }
    }
    std::string left;
    for (const auto& [what, n] : left_as_is) left += "; " + what + " (" + std::to_string(n) + "x)";
    std::fprintf(stderr,
                 "frugal quantize: OCG packed groups: residual stream %d, ffn_down inputs %d (%d layers), attn_output "
                 "inputs %d (%d layers)%s\n",
                 res, down, n_down, attn, n_attn, left.empty() ? "" : (" | left as is" + left).c_str());
  }
  if (imatrix && r->n_imatrix_missing > 0) {
    std::fprintf(stderr, "frugal quantize: %d quantized tensors had no imatrix entry (quantized without one)\n",
                 r->n_imatrix_missing);
  }
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  app.add_option("input", a->input, "input GGUF (F32/F16/BF16 weights; quantized ones with --allow-requantize)");
  app.add_option("output", a->output, "output GGUF (written whole or not at all)");
  app.add_option("type", a->type, "target type or mix: see --list");
  app.add_option("--imatrix", a->imatrix, "importance matrix (.dat from `frugal imatrix` or llama-imatrix)");
  app.add_option("--calibration", a->calibration,
                 "calibration text: compute the importance matrix from it first (as `frugal imatrix -f TEXT`), "
                 "instead of --imatrix");
  app.add_option("--calibration-ctx", a->calibration_ctx, "with --calibration: tokens per chunk")->capture_default_str();
  app.add_flag("--pure", a->pure, "no mix rules: every quantized tensor gets the base type");
  app.add_option("--tensor-type", a->tensor_types,
                 "PATTERN=TYPE: tensors whose name matches the regular expression get TYPE (repeatable, first wins)");
  app.add_option("--output-tensor-type", a->output_type, "type of output.weight");
  app.add_option("--token-embedding-type", a->token_type, "type of token_embd.weight");
  auto* scale_opt =
      app.add_option("--nvfp4-scale", a->nvfp4_scale,
                     "NVFP4 per-16 scales: rtn (amax/6 rounded, the default) or hscale (the E4M3 code within "
                     "--hscale-radius of RTN's that minimises the imatrix-weighted squared error; without --imatrix "
                     "plain squared error); same layout, no inference cost")
          ->check(CLI::IsMember({"rtn", "hscale"}));
  auto* radius_opt = app.add_option("--hscale-radius", a->hscale_radius,
                                    "H-Scale candidates: RTN's code and this many E4M3 codes on each side (default 8; "
                                    "125 tries all 126 valid codes)")
                         ->check(CLI::Range(0, quant::kHScaleMaxRadius));
  app.add_option("--hbq-scale", a->hbq_scale,
                 "HBQ per-micro-block multipliers: sig (1 + c/4 or 1 + c/8, chosen per 128-block; the default), pow2 "
                 "(1, 2, 4, 8) or int (1, 2, 3, 4); same layout and speed, for comparing second-level scales")
      ->check(CLI::IsMember({"sig", "pow2", "int"}))
      ->capture_default_str();
  app.add_flag("--allow-requantize", a->allow_requantize, "accept already-quantized input tensors");
  app.add_flag("--ocg", a->ocg,
               "Outlier-Companion Grouping: reorder channels so each activation outlier shares its NVFP4 group with "
               "the 15 quietest channels, folded into the weights (needs --imatrix or --calibration; types NVFP4 or "
               "F32/F16/BF16)");
  app.add_option("-t,--threads", a->threads, "threads (0: all cores)");
  app.add_flag("--list", a->list, "list the types and mixes");
  app.add_option("--target-bpw", a->target_bpw,
                 "FAMPWQ: bits per weight for the layer matrices (blk.N.*); their types are allocated from --fisher, "
                 "TYPE (default Q8_0) then only sets the tensors outside the layers");
  app.add_option("--fisher", a->fisher, "FAMPWQ: Fisher diagonal GGUF from train/fisher.py");
  app.add_option("--allocator", a->allocator, "FAMPWQ allocator: dp (exact knapsack) or rl (REINFORCE agent)")
      ->check(CLI::IsMember({"dp", "rl"}))
      ->capture_default_str();
  app.add_option("--granularity", a->granularity, "FAMPWQ unit: layer (all its matrices at one type) or tensor")
      ->check(CLI::IsMember({"layer", "tensor"}))
      ->capture_default_str();
  app.add_option("--seed", a->seed, "FAMPWQ rl: random seed")->capture_default_str();
  app.add_option("--rl-episodes", a->rl_episodes, "FAMPWQ rl: training episodes")->capture_default_str();
  return [a, scale_opt, radius_opt]() {
    a->hscale_radius_given = radius_opt->count() > 0;
    a->nvfp4_flags_given = scale_opt->count() > 0 || a->hscale_radius_given;
    return quantize_cmd(*a);
  };
}

}  // namespace

FRUGAL_COMMAND("quantize", "Quantize a GGUF model (llama-quantize's types, mixes and bytes)", setup);

}  // namespace frugal::cli
