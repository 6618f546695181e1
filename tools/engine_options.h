// The engine flags that `run`, `eval`, `serve` and `bench` share: threads, device, the KV
// options (type, policy, budget, buffer, quantization, memory, ...) and speculative decoding
// (--spec, --spec-k, --draft, --draft-memory). Each flag is defined once
// here, with its help text and default, and its value is parsed once, by set_generate_option (the
// parser `eval --set` uses as well), so a flag means the same in every command and a bad value gets
// the same message everywhere. A command that cannot honour a value (bench measures the
// keep-everything cache) refuses it with a message naming the flag, never ignores it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "frugal/core/status.h"
#include "frugal/engine/generate.h"

namespace frugal::cli {

struct EngineFlags {
  int threads = 0;             // -t: CPU threads, 0: all cores
  std::string device = "cpu";  // --device, checked by make_backend
  // Every other flag's value as typed, by option name ("kv-type", ...); only flags given on the
  // command line are applied, so a library default is never overwritten by the help's default.
  std::map<std::string, std::string> values;
  bool kv_protect_prompt = false;
  std::vector<std::pair<std::string, const CLI::Option*>> options;  // to tell which were given
};

// A command's own wording of a flag's help where its meaning there needs a note.
struct FlagHelp {
  std::string flag;  // "--device"
  std::string help;
};

// Registers the shared flags on `app` (all of them, or only those named in `only`, e.g.
// {"--threads", "--kv-type"}); `flags` must outlive parsing.
void add_engine_flags(CLI::App& app, EngineFlags& flags, const std::vector<FlagHelp>& help = {},
                      const std::vector<std::string>& only = {});

// Applies the flags given on the command line on top of `opts`; messages name the flag
// ("--kv-type: 'f8' is not f16 or f32", "--threads: -1 is negative"). Options that only make sense
// together (a policy and its budget) are left to validate(), since `eval --sweep` may set the
// missing one later.
Status apply_engine_flags(const EngineFlags& flags, GenerateOptions& opts);

// Loads the draft model opts.spec names when its method is `draft` (nothing otherwise: null), laid
// out for the CPU backend it runs on, and points opts.spec.draft_model at it; the model must
// outlive its use.
Result<std::unique_ptr<Model>> load_draft_model(GenerateOptions& opts);

// The given flags as NAME=VALUE settings, e.g. {"kv-quant=int8"} (eval's configuration labels).
std::vector<std::string> given_engine_settings(const EngineFlags& flags);


}  // namespace frugal::cli
