// Helpers shared by all test binaries.
#pragma once
#include <string>
#include <vector>

namespace ts::testing {

// Directory of the shared test data (../shared beside the repository, or $TOKENSERVE_SHARED).
// Returns "" when it is absent; tests then GTEST_SKIP() with a clear message.
std::string shared_dir();

// Path under shared_dir(), or "" when shared data is absent or the file is missing.
std::string shared_path(const std::string& rel);

// The golden model stems: the folders under golden/expected, sorted (empty without shared data).
std::vector<std::string> golden_stems();

// A fresh temporary directory, unique per call.
std::string temp_dir();

// Whole file as bytes; throws std::runtime_error if unreadable.
std::string read_file(const std::string& path);

}  // namespace ts::testing

#define TS_REQUIRE_SHARED(var, rel)                                              \
  std::string var = ::ts::testing::shared_path(rel);                             \
  if (var.empty()) GTEST_SKIP() << "shared test data not found: " << (rel)      \
                                << " (set TOKENSERVE_SHARED or place ../shared)"
