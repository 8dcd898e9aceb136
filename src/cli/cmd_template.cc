// `tokenserve template`: thin shell over ts::chat::run_template_command (src/chat).
#include <cstdio>
#include <string>
#include <vector>

#include "chat/template_command.h"

namespace ts::cli {

int cmd_template(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  ts::chat::CommandOutput r = ts::chat::run_template_command(args);
  if (!r.out.empty()) std::fwrite(r.out.data(), 1, r.out.size(), stdout);
  if (!r.err.empty()) std::fwrite(r.err.data(), 1, r.err.size(), stderr);
  std::fflush(stdout);
  return r.exit_code;
}

}  // namespace ts::cli
