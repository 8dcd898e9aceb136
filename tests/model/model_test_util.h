// Helpers for model tests: sequential block tables and greedy decoding without the engine.
#pragma once

#include <algorithm>
#include <cctype>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.h"

namespace ts::model::testing {

inline std::vector<int32_t> read_ids(const std::string& path) {
  std::ifstream in(path);
  std::vector<int32_t> ids;
  long long v;
  while (in >> v) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

// Floats from a text file, skipping lines that start with '#'.
inline std::vector<std::vector<float>> read_float_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<float>> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::vector<float> row;
    double d;
    while (ss >> d) row.push_back(static_cast<float>(d));
    rows.push_back(std::move(row));
  }
  return rows;
}

// A gtest parameter name from a model stem (or "stem_isa"): every character not a letter or digit
// becomes '_'.
inline std::string test_name(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

inline int32_t argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);  // lowest index on ties
}

// One sequence decoded alone: prompt in one forward pass, then one token per step.
struct SoloRunner {
  Model& model;
  KvStorage kv;
  std::vector<int32_t> table;
  explicit SoloRunner(Model& m, KvType type = KvType::kF32, int32_t blocks = 64, int32_t bs = 16)
      : model(m), kv(std::move(KvStorage::create(m.config(), type, bs, blocks).value())) {
    table.resize(blocks);
    std::iota(table.begin(), table.end(), 0);
  }
  // Returns logits for the last `num_logits` tokens of `tokens` fed at start_pos.
  std::vector<float> feed(const std::vector<int32_t>& tokens, int32_t start_pos, int32_t num_logits,
                          ThreadPool* pool) {
    SeqSlice s{.num_tokens = static_cast<int32_t>(tokens.size()), .start_pos = start_pos,
               .block_table = table, .num_logits = num_logits};
    std::vector<float> logits(static_cast<size_t>(num_logits) * model.config().n_vocab);
    Status st = model.forward({.tokens = tokens, .seqs = std::span<const SeqSlice>(&s, 1)}, kv,
                              logits.data(), pool);
    if (!st.ok()) throw std::runtime_error(st.to_string());
    return logits;
  }
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int n, ThreadPool* pool) {
    std::vector<int32_t> out;
    auto logits = feed(prompt, 0, 1, pool);
    int32_t pos = static_cast<int32_t>(prompt.size());
    for (int i = 0; i < n; ++i) {
      int32_t next = argmax(logits.data(), model.config().n_vocab);
      out.push_back(next);
      if (i + 1 == n) break;
      logits = feed({next}, pos++, 1, pool);
    }
    return out;
  }
};

}  // namespace ts::model::testing
