// Subcommand registry. Each cmd_<name>.cc defines `int cmd_<name>(int argc, char** argv)`
// (argv[0] is the subcommand name) and is listed in commands.cc.
#pragma once
#include <cstdio>

namespace ts::cli {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

const Command* find_command(const char* name);
void print_usage(std::FILE* out);

}  // namespace ts::cli
