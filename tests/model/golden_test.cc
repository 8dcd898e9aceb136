// ../shared/golden: small random-weight models (qwen2 with QKV bias + NeoX RoPE, Llama-3 GQA
// with a 128k BPE vocab, SentencePiece with an untied output; the second set: qwen3, qwen3moe,
// gemma3, phi3 and every common llama-quantize preset) with llama.cpp's reference outputs.
// One test per expected/ folder present, per ISA path this host can run (forced with
// tensor::set_isa before the model is loaded, so each path's layouts and kernels are used);
// models whose expected outputs are held back are still loaded and run.
//
// Greedy steps are compared with teacher forcing: the reference ids are fed back, so one near
// tie cannot derail the rest of a comparison; every step's argmax must equal the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "model/model.h"
#include "model_test_util.h"
#include "tensor/matrix.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace ts::model {
namespace {

using testing::read_float_lines;
using testing::read_ids;
using testing::SoloRunner;

std::string prompt_text(const std::string& path) {
  std::string s = ::ts::testing::read_file(path);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

std::vector<std::string> list_dir(const std::string& rel, bool dirs, const std::string& ext) {
  std::vector<std::string> out;
  std::string dir = ::ts::testing::shared_path(rel);
  if (dir.empty() || !fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (dirs ? e.is_directory() : e.path().extension() == ext) out.push_back(e.path().stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<tensor::Isa> host_isas() {
  std::vector<tensor::Isa> v;
  for (int i = 0; i <= static_cast<int>(tensor::highest_isa()); ++i) v.push_back(static_cast<tensor::Isa>(i));
  return v;
}

// Restores the process-wide ISA after a test forced one.
struct IsaScope {
  tensor::Isa saved = tensor::active_isa();
  explicit IsaScope(tensor::Isa isa) { tensor::set_isa(isa); }
  ~IsaScope() { tensor::set_isa(saved); }
};

using Param = std::tuple<std::string, tensor::Isa>;

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return testing::test_name(std::get<0>(info.param) + "_" + tensor::isa_name(std::get<1>(info.param)));
}

class GoldenExpected : public ::testing::TestWithParam<Param> {};

TEST_P(GoldenExpected, LogitsAndGreedyIds) {
  const auto& [stem, isa] = GetParam();
  IsaScope scope(isa);
  std::string dir = ::ts::testing::shared_path("golden/expected/" + stem);
  std::string model_path = ::ts::testing::shared_path("golden/models/" + stem + ".gguf");
  ASSERT_FALSE(model_path.empty()) << stem;
  auto m = Model::load(model_path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Model& model = **m;
  const int32_t V = model.config().n_vocab;

  auto prompt = model.tokenizer().encode(prompt_text(dir + "/prompt.txt"), true, true);
  EXPECT_EQ(prompt, read_ids(dir + "/prompt.ids")) << stem << ": prompt ids";
  prompt = read_ids(dir + "/prompt.ids");  // compare the forward pass on the reference ids

  ThreadPool pool(2);
  SoloRunner run(model, KvType::kF32, 8);
  auto logits = run.feed(prompt, 0, 1, &pool);
  auto expect = read_float_lines(dir + "/logits_last_prompt.f32kv.txt");
  ASSERT_EQ(expect.size(), 1u);
  ASSERT_EQ(static_cast<int32_t>(expect[0].size()), V);
  double max_diff = 0, mean_diff = 0;
  for (int32_t i = 0; i < V; ++i) {
    double d = std::fabs(logits[i] - expect[0][i]);
    max_diff = std::max(max_diff, d);
    mean_diff += d / V;
  }
  // README tolerances for an engine that rounds activations like ggml (F16 -> fp16-rounded
  // activations; quantized weights -> Q8_0 / Q8_K activations) with F32 K/V.
  const bool float_model = model.config().file_type <= 1;
  double tol = float_model ? 1e-2 : 0.05;
  // gemma3 (6 layers, embeddings x sqrt(n_embd), four norms per layer) is not a bit-exact
  // mirror of ggml here: a few fp16 activation roundings flip (max 0.010-0.018 depending on the
  // ISA's summation order, mean 6e-4 on every ISA). README's bound for a float engine is 0.1;
  // the mean check below keeps the comparison tight.
  if (model.config().arch == "gemma3" && float_model) tol = 0.1;
  std::printf("[ drift ] %s %s max %.3e mean %.3e\n", stem.c_str(), tensor::isa_name(isa), max_diff, mean_diff);
  EXPECT_LE(max_diff, tol) << stem << " mean " << mean_diff;
  if (float_model) {
    EXPECT_LE(mean_diff, 2e-3) << stem;
  }
  EXPECT_EQ(testing::argmax(logits.data(), V), testing::argmax(expect[0].data(), V));

  const auto ref = read_ids(dir + "/greedy.ids");
  ASSERT_FALSE(ref.empty());
  // Per-step top1-top2 gap of llama.cpp's default context (F16 K/V, flash attention), from
  // greedy_top.txt ("step id:logit x5 gap=G").
  std::vector<double> gap(ref.size(), 1e9);
  {
    std::istringstream in(::ts::testing::read_file(dir + "/greedy_top.txt"));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      size_t step = std::stoul(line);
      auto at = line.find("gap=");
      if (step < gap.size() && at != std::string::npos) gap[step] = std::stod(line.substr(at + 4));
    }
  }
  // F32 K/V mirrors ggml exactly: every step must match. With the F16 cache the README measures
  // llama.cpp's own two configurations apart by up to 2.2 logits on quantized files (8-bit
  // activation roundings flip on tiny upstream differences); the F16 path reproduces ggml's
  // flash-attention arithmetic, so only a step whose reference gap is below kF16NearTie may
  // differ there (reported, not silently skipped).
  constexpr double kF16NearTie = 0.5;
  for (KvType kv : {KvType::kF32, KvType::kF16}) {
    SoloRunner r(model, kv, 8);
    auto lg = r.feed(prompt, 0, 1, &pool);
    int32_t pos = static_cast<int32_t>(prompt.size());
    int mismatches = 0, near_tie_flips = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      int32_t got = testing::argmax(lg.data(), V);
      if (got != ref[i]) {
        if (kv == KvType::kF16 && gap[i] < kF16NearTie) {
          ++near_tie_flips;
          std::printf("[ note ] %s step %zu f16 KV: got %d want %d at a reference gap of %.3f\n", stem.c_str(), i, got,
                      ref[i], gap[i]);
        } else {
          ++mismatches;
          ADD_FAILURE() << stem << " step " << i << (kv == KvType::kF32 ? " f32" : " f16") << " KV: got " << got
                        << " want " << ref[i] << " (reference gap " << gap[i] << ")";
        }
      }
      if (i + 1 < ref.size()) lg = r.feed({ref[i]}, pos++, 1, &pool);
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_LE(near_tie_flips, 2) << stem << ": too many F16 near-tie flips";
  }

  // The same teacher-forced steps as one prefill-sized batch (prompt + reference ids, 40+ tokens:
  // the batched GEMM paths, AMX tiles from 16 tokens on), F32 K/V: each position's argmax must
  // be the reference id; only a step whose reference gap is a near tie may differ (the batched
  // attention sums in another order than one query at a time).
  std::vector<int32_t> batch = prompt;
  batch.insert(batch.end(), ref.begin(), ref.end() - 1);
  const int32_t n_ref = static_cast<int32_t>(ref.size());
  SoloRunner rb(model, KvType::kF32, 8);
  const auto lb = rb.feed(batch, 0, n_ref, &pool);
  int batched_flips = 0;
  for (int32_t i = 0; i < n_ref; ++i) {
    const int32_t got = testing::argmax(lb.data() + static_cast<size_t>(i) * V, V);
    if (got == ref[i]) continue;
    if (gap[i] < kF16NearTie) {
      ++batched_flips;
      std::printf("[ note ] %s step %d batched: got %d want %d at a reference gap of %.3f\n", stem.c_str(), i, got, ref[i],
                  gap[i]);
    } else {
      ADD_FAILURE() << stem << " step " << i << " batched: got " << got << " want " << ref[i] << " (gap " << gap[i] << ")";
    }
  }
  EXPECT_LE(batched_flips, 2) << stem << ": too many batched near-tie flips";
  if (isa == tensor::Isa::kAmx) {
    // The AMX tier's contract: the avx512 tier's bits (its tile GEMMs sum like the avx512 kernels).
    IsaScope avx512(tensor::Isa::kAvx512);
    auto m512 = Model::load(model_path);
    ASSERT_TRUE(m512.ok()) << m512.status().to_string();
    SoloRunner r512(**m512, KvType::kF32, 8);
    const auto l512 = r512.feed(batch, 0, n_ref, &pool);
    EXPECT_EQ(0, std::memcmp(lb.data(), l512.data(), lb.size() * sizeof(float))) << stem << ": amx logits != avx512";
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, GoldenExpected,
                         ::testing::Combine(::testing::ValuesIn(list_dir("golden/expected", true, "")),
                                            ::testing::ValuesIn(host_isas())),
                         param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenExpected);

class GoldenModel : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenModel, LoadsAndRuns) {
  auto path = ::ts::testing::shared_path("golden/models/" + GetParam() + ".gguf");
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << path << ": " << m.status().to_string();
  auto prompt = (*m)->tokenizer().encode("Once upon a time, in a small village,", true, true);
  ThreadPool pool(2);
  SoloRunner run(**m, KvType::kF16, 8);
  auto out = run.greedy(prompt, 8, &pool);
  EXPECT_EQ(out.size(), 8u);
  for (int32_t id : out) EXPECT_TRUE(id >= 0 && id < (*m)->config().n_vocab);
}

INSTANTIATE_TEST_SUITE_P(Shared, GoldenModel, ::testing::ValuesIn(list_dir("golden/models", false, ".gguf")),
                         [](const ::testing::TestParamInfo<std::string>& i) { return testing::test_name(i.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenModel);

}  // namespace
}  // namespace ts::model
