// `tokenserve template`: renders a chat template from files, for checking a model's template
// against reference renderings. Lives here (not in src/cli) so tests can drive it directly.
//
//   tokenserve template -t FILE.jinja --messages FILE.json [--tools FILE.json]
//       [--add-generation-prompt] [--bos S] [--eos S] [--now 2024-07-26T00:00:00]
//       [--var NAME=JSON]...
//
// --messages holds a JSON array of messages, or an object with a "messages" array whose other
// keys (add_generation_prompt, tools, ...) become template variables too; flags override them.
// bos_token/eos_token default to "" when not given. --var adds one extra variable (the value is
// parsed as JSON, or taken as a plain string when it is not JSON).
//
// Exit codes: 0 with the exact rendering on stdout (nothing added); 1 when the template fails
// (its raise_exception message, or the syntax/runtime error, as one line on stderr); 2 for bad
// arguments or unreadable/invalid input files (one line on stderr).
#pragma once

#include <string>
#include <vector>

namespace ts::chat {

struct CommandOutput {
  int exit_code = 0;
  std::string out;  // stdout bytes
  std::string err;  // stderr bytes
};

// `args` are the arguments after the subcommand name.
CommandOutput run_template_command(const std::vector<std::string>& args);

}  // namespace ts::chat
