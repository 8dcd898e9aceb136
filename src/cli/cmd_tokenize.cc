// tokenserve tokenize -m MODEL [--ids] [--no-bos] [--special] [--file F | TEXT]
#include <fstream>
#include <sstream>

#include "cli/cli_util.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ts::cli {

int cmd_tokenize(int argc, char** argv) {
  CLI::App app("Tokenize text with a model's tokenizer (works on vocab-only GGUF files too)", "tokenize");
  std::string model_path, file, text;
  bool ids_only = false, no_bos = false, special = false;
  app.add_option("-m,--model", model_path, "GGUF model or vocab file")->required();
  app.add_flag("--ids", ids_only, "print only the ids, on one line separated by spaces");
  app.add_flag("--no-bos", no_bos, "do not add BOS/EOS even when the vocabulary asks for them");
  app.add_flag("--special", special, "parse special-token text such as <|im_start|> as single tokens");
  app.add_option("-f,--file", file, "read the text from a file (exact bytes)");
  app.add_option("text", text, "the text to tokenize");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return fail("tokenize", "cannot read '" + file + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  } else if (app.count("text") == 0) {
    return fail("tokenize", "give the text as an argument or with --file", 2);
  }
  auto g = gguf::GgufFile::open(model_path);
  if (!g.ok()) return fail("tokenize", g.status().message());
  auto tok = tokenizer::Tokenizer::from_gguf(**g);
  if (!tok.ok()) return fail("tokenize", tok.status().message());
  auto ids = (*tok)->encode(text, !no_bos, special);
  if (ids_only) {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
  } else {
    for (int32_t id : ids) std::printf("%6d -> '%s'\n", id, (*tok)->token_bytes(id).c_str());
  }
  return 0;
}

}  // namespace ts::cli
