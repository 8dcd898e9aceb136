// ISA selection for the benchmark programs: `--isa NAME` (removed from argv) or TOKENSERVE_ISA,
// read once at start-up and applied with tensor::set_isa before anything is loaded. A tier the
// CPU lacks is clamped down with a warning on stderr.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tensor/matrix.h"

namespace ts::bench {

// Returns false (after a message on stderr) for an unknown ISA name.
inline bool apply_isa_arg(int* argc, char** argv) {
  std::string name;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strcmp(argv[i], "--isa") == 0 && i + 1 < *argc) {
      name = argv[++i];
    } else if (std::strncmp(argv[i], "--isa=", 6) == 0) {
      name = argv[i] + 6;
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  if (name.empty()) {
    const char* env = std::getenv("TOKENSERVE_ISA");
    if (env != nullptr) name = env;
  }
  auto choice = tensor::resolve_isa(name);
  if (!choice.ok()) {
    std::fprintf(stderr, "%s\n", choice.status().message().c_str());
    return false;
  }
  if (!choice->warning.empty()) std::fprintf(stderr, "warning: %s\n", choice->warning.c_str());
  tensor::set_isa(choice->isa);
  std::fprintf(stderr, "%s\n", tensor::isa_summary().c_str());
  return true;
}

}  // namespace ts::bench
