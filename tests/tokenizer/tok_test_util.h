// Helpers for the tokenizer tests: load a tokenizer from a shared GGUF once per process.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::tokenizer::testing {

// The tokenizer of the GGUF at `path` (absolute), loaded once and kept for the process.
// Fails the current test (and returns nullptr) when loading fails.
inline const Tokenizer* load_cached(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(path);
  if (it != cache.end()) return it->second.get();
  auto file = gguf::GgufFile::open(path);
  if (!file.ok()) {
    ADD_FAILURE() << path << ": " << file.status().to_string();
    return nullptr;
  }
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok.ok()) {
    ADD_FAILURE() << path << ": " << tok.status().to_string();
    return nullptr;
  }
  const Tokenizer* raw = tok->get();
  cache.emplace(path, std::move(tok).value());
  return raw;
}

}  // namespace ts::tokenizer::testing

// Loads the tokenizer of shared file `rel` into `var`, skipping when shared data is absent.
#define TS_LOAD_TOKENIZER(var, rel)                                        \
  TS_REQUIRE_SHARED(var##_path, rel);                                      \
  const ::ts::tokenizer::Tokenizer* var =                                  \
      ::ts::tokenizer::testing::load_cached(var##_path);                   \
  ASSERT_NE(var, nullptr)
