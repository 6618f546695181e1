// frugal tokenize: print the token ids of a text as a JSON list (BOS included when the model
// adds it).
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "frugal/format/gguf.h"

namespace frugal::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::string prompt;
  std::string file;
  bool no_special = false;
  bool parse_special = false;
  bool pieces = false;
};

int tokenize(const TokenizeArgs& a) {
  const std::string cmd = "tokenize";
  auto path = resolve_model_path(a.model);
  if (!path.ok()) return fail(cmd, path.status().message());
  auto text = read_prompt(a.prompt, a.file);
  if (!text.ok()) return fail(cmd, text.status().message());
  // Only the vocabulary is needed: a vocab-only file tokenizes too.
  auto file = GgufFile::open(*path);
  if (!file.ok()) return fail(cmd, file.status().message());
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok.ok()) return fail(cmd, tok.status().with_context(*path).message());
  TokenizeOptions o;
  o.add_special = !a.no_special;
  o.parse_special = a.parse_special;
  auto ids = (*tok)->encode(*text, o);
  if (!ids.ok()) return fail(cmd, ids.status().message());
  if (a.pieces) {
    nlohmann::json j = nlohmann::json::array();
    for (TokenId id : *ids) j.push_back({{"id", id}, {"piece", (*tok)->piece(id, true)}});
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << nlohmann::json(*ids).dump() << "\n";
  }
  return 0;
}

RunFn setup(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  app.add_option("-m,--model", a->model, "GGUF model or vocabulary file");
  app.add_option("-p,--prompt", a->prompt, "text to tokenize");
  app.add_option("-f,--file", a->file, "read the text from a file (else -p, else stdin)");
  app.add_flag("--no-bos", a->no_special, "do not add BOS/EOS");
  app.add_flag("--parse-special", a->parse_special, "recognise special-token text such as <|im_start|>");
  app.add_flag("--pieces", a->pieces, "print {id, piece} objects instead of bare ids");
  return [a]() { return tokenize(*a); };
}

}  // namespace

FRUGAL_COMMAND("tokenize", "Print the token ids of a text as JSON", setup);

}  // namespace frugal::cli
