// 8-bit KV (q8_0: int8 values, one f32 scale per token per head) against the F16 cache on the
// golden models: mean |logit difference| over the prompt's last position and 16 teacher-forced
// steps, printed per model (the figure issue #10 asks for), with bounds that catch a broken
// quantizer or reader (a wrong scale or layout moves logits by whole units, not hundredths).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "model/model.h"
#include "model_test_util.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace ts::model {
namespace {

using testing::read_ids;
using testing::SoloRunner;

using ::ts::testing::golden_stems;

class KvQ8Drift : public ::testing::TestWithParam<std::string> {};

TEST_P(KvQ8Drift, StaysCloseToF16Kv) {
  const std::string stem = GetParam();
  const std::string dir = ::ts::testing::shared_path("golden/expected/" + stem);
  auto m = Model::load(::ts::testing::shared_path("golden/models/" + stem + ".gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Model& model = **m;
  const int32_t V = model.config().n_vocab;
  const auto prompt = read_ids(dir + "/prompt.ids");
  const auto ref = read_ids(dir + "/greedy.ids");
  ASSERT_FALSE(prompt.empty());
  ThreadPool pool(2);
  SoloRunner f16(model, KvType::kF16, 8), q8(model, KvType::kQ8_0, 8), f32(model, KvType::kF32, 8);
  auto a = f16.feed(prompt, 0, 1, &pool), b = q8.feed(prompt, 0, 1, &pool), c = f32.feed(prompt, 0, 1, &pool);
  double sum_f32 = 0;  // the F16 cache's own distance from F32, for scale
  int32_t pos = static_cast<int32_t>(prompt.size());
  double sum_abs = 0, sum_mag = 0, max_abs = 0;
  int steps = 0, same_top1 = 0;
  const size_t n_steps = std::min<size_t>(ref.size(), 16);
  for (size_t i = 0; i < n_steps; ++i) {
    for (int32_t v = 0; v < V; ++v) {
      const double d = std::fabs(static_cast<double>(a[v]) - b[v]);
      sum_abs += d;
      sum_mag += std::fabs(a[v]);
      max_abs = std::max(max_abs, d);
      sum_f32 += std::fabs(static_cast<double>(a[v]) - c[v]);
    }
    same_top1 += testing::argmax(a.data(), V) == testing::argmax(b.data(), V);
    ++steps;
    if (i + 1 < n_steps) {
      a = f16.feed({ref[i]}, pos, 1, &pool);
      b = q8.feed({ref[i]}, pos, 1, &pool);
      c = f32.feed({ref[i]}, pos, 1, &pool);
      ++pos;
    }
  }
  const double mean_drift = sum_abs / (static_cast<double>(steps) * V);
  const double mean_mag = sum_mag / (static_cast<double>(steps) * V);
  std::printf("[ q8_0 KV ] %-20s mean |dlogit| vs f16 KV %.4f (%.2f%% of mean |logit| %.3f; f16 vs f32 KV %.4f), "
              "max %.3f, top-1 agrees %d/%d\n",
              stem.c_str(), mean_drift, 100 * mean_drift / mean_mag, mean_mag, sum_f32 / (static_cast<double>(steps) * V),
              max_abs, same_top1, steps);
  EXPECT_GT(mean_drift, 0.0) << "q8_0 KV gave bit-identical logits: is it really quantized?";
  EXPECT_LT(mean_drift / mean_mag, 0.08) << stem;  // measured 0.8-5.0% on these models
  EXPECT_GE(same_top1 * 4, steps * 3) << stem;
}

INSTANTIATE_TEST_SUITE_P(Shared, KvQ8Drift, ::testing::ValuesIn(golden_stems()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return testing::test_name(i.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(KvQ8Drift);

}  // namespace
}  // namespace ts::model
