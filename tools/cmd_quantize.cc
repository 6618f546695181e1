// frugal quantize: IN.gguf OUT.gguf TYPE, with llama-quantize's per-tensor rules and bytes
// (quantize/model_quantizer.h). A bar on a terminal, one summary line otherwise.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "command.h"
#include "common.h"
#include "frugal/quantize/importance_collector.h"
#include "frugal/quantize/model_quantizer.h"

namespace frugal::cli {
namespace {

struct QuantizeArgs {
  std::string input, output, type, imatrix, output_type, token_type;
  std::string calibration;  // text to compute the importance matrix from, instead of --imatrix
  int calibration_ctx = 512;
  std::string nvfp4_scale = "rtn";
  int hscale_radius = quant::kHScaleDefaultRadius;
  bool nvfp4_flags_given = false;   // --nvfp4-scale or --hscale-radius on the command line
  bool hscale_radius_given = false;
  std::vector<std::string> tensor_types;
  bool pure = false;
  bool allow_requantize = false;
  bool ocg = false;
  bool list = false;
  int threads = 0;
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

int quantize_cmd(const QuantizeArgs& a) {
  const std::string cmd = "quantize";
  if (a.list) {
    for (const auto& t : quantize::all_targets()) {
      std::printf("%-7s %s\n", std::string(t.name).c_str(), std::string(t.description).c_str());
    }
    return 0;
  }
  if (a.input.empty() || a.output.empty() || a.type.empty()) return fail(cmd, "usage: frugal quantize IN.gguf OUT.gguf TYPE");
  auto target = quantize::find_target(a.type);
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
  if (a.hscale_radius_given && a.nvfp4_scale != "hscale") return fail(cmd, "--hscale-radius needs --nvfp4-scale hscale");
  o.nvfp4_scale = a.nvfp4_scale == "hscale" ? quantize::Nvfp4Scale::kHScale : quantize::Nvfp4Scale::kRtn;
  o.hscale_radius = a.hscale_radius;
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
  app.add_flag("--allow-requantize", a->allow_requantize, "accept already-quantized input tensors");
  app.add_flag("--ocg", a->ocg,
               "Outlier-Companion Grouping: reorder channels so each activation outlier shares its NVFP4 group with "
               "the 15 quietest channels, folded into the weights (needs --imatrix or --calibration; types NVFP4 or "
               "F32/F16/BF16)");
  app.add_option("-t,--threads", a->threads, "threads (0: all cores)");
  app.add_flag("--list", a->list, "list the types and mixes");
  return [a, scale_opt, radius_opt]() {
    a->hscale_radius_given = radius_opt->count() > 0;
    a->nvfp4_flags_given = scale_opt->count() > 0 || a->hscale_radius_given;
    return quantize_cmd(*a);
  };
}

}  // namespace

FRUGAL_COMMAND("quantize", "Quantize a GGUF model (llama-quantize's types, mixes and bytes)", setup);

}  // namespace frugal::cli
