#include "test_util.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace fs = std::filesystem;

namespace ts::testing {

std::string shared_dir() {
  if (const char* env = std::getenv("TOKENSERVE_SHARED"); env && *env) {
    if (fs::is_directory(env)) return env;
  }
  fs::path p = fs::path(TS_SOURCE_DIR).parent_path() / "shared";
  if (fs::is_directory(p)) return p.string();
  return "";
}

std::string shared_path(const std::string& rel) {
  std::string dir = shared_dir();
  if (dir.empty()) return "";
  fs::path p = fs::path(dir) / rel;
  return fs::exists(p) ? p.string() : "";
}

std::vector<std::string> golden_stems() {
  std::vector<std::string> out;
  std::string dir = shared_path("golden/expected");
  if (dir.empty() || !fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string temp_dir() {
  // mkdtemp: a new, empty directory every call. (A name from the pid alone could meet a
  // directory left by an earlier process with the same pid, and its files: seen as a stale
  // ledger in SqliteLedger.RowsPersistAcrossReopen.)
  std::string tmpl = (fs::temp_directory_path() / ("ts-test-" + std::to_string(::getpid()) + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return tmpl;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ts::testing
