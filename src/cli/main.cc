// tokenserve: one binary, subcommands (DESIGN.md "Command line"). Each subcommand lives in its
// own cmd_*.cc and registers itself in commands.h; this file only dispatches.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace ts::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(stdout);
    return argc < 2 ? 1 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("tokenserve 0.1.0\n");
    return 0;
  }
  const Command* cmd = find_command(argv[1]);
  if (!cmd) {
    std::fprintf(stderr, "tokenserve: unknown command '%s' (try 'tokenserve --help')\n", argv[1]);
    return 2;
  }
  return cmd->run(argc - 1, argv + 1);
}
