// Model::reserve: sizing the activation buffers (and making the quantized activation forms from
// zeros) before the first forward must not change any result, whether the batches that follow
// fit the reservation or outgrow it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/model.h"
#include "model_test_util.h"
#include "test_util.h"

namespace ts::model {
namespace {

using testing::SoloRunner;

class Reserve : public ::testing::TestWithParam<const char*> {};

// A prompt of n ids that every tiny golden model's vocabulary holds.
std::vector<int32_t> prompt_of(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(1 + (i * 37) % 200);
  return ids;
}

// The prompt's last 4 logit rows, then two greedy decode steps' logits, on a fresh KV cache.
std::vector<float> run(Model& m, const std::vector<int32_t>& prompt, ThreadPool* pool) {
  SoloRunner r(m);
  std::vector<float> out = r.feed(prompt, 0, 4, pool);
  const int64_t V = m.config().n_vocab;
  int32_t pos = static_cast<int32_t>(prompt.size());
  int32_t next = testing::argmax(out.data() + 3 * V, V);
  for (int step = 0; step < 2; ++step) {
    std::vector<float> l = r.feed({next}, pos++, 1, pool);
    next = testing::argmax(l.data(), V);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

TEST_P(Reserve, LeavesEveryLogitUnchanged) {
  TS_REQUIRE_SHARED(path, std::string("golden/models/") + GetParam() + ".gguf");
  auto plain = Model::load(path);
  auto reserved = Model::load(path);
  auto small = Model::load(path);
  ASSERT_TRUE(plain.ok() && reserved.ok() && small.ok()) << plain.status().to_string();
  (*reserved)->reserve(64);  // the prompt below fits
  (*small)->reserve(8);      // the prompt outgrows it
  ThreadPool pool(2);
  const std::vector<int32_t> prompt = prompt_of(40);
  const std::vector<float> want = run(**plain, prompt, &pool);
  for (Model* m : {reserved->get(), small->get()}) {
    const std::vector<float> got = run(*m, prompt, &pool);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
        << "logits differ after reserve() on " << GetParam();
  }
}

// Q5_0 (its own activation forms per batch size), K-quants with Q8_0 embeddings, a fused Q/K/V
// and gate|up (Phi-3), sliding-window layers (Gemma 3), and experts (Qwen3-MoE, whose expert
// matrices reserve() leaves to their first use).
INSTANTIATE_TEST_SUITE_P(GoldenModels, Reserve,
                         ::testing::Values("tiny-quant-q5_0", "tiny-qwen2-q4_k_m", "tiny-phi3-f16", "tiny-gemma3-q4_k_m",
                                           "tiny-qwen3moe-q8_0"),
                         [](const auto& info) { return testing::test_name(info.param); });

}  // namespace
}  // namespace ts::model
