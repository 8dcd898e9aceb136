#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tensor/dtype.h"
#include "test_util.h"

namespace ts::gguf {
namespace {

using tensor::DType;

std::vector<uint8_t> f32_bytes(std::vector<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

GgufWriter small_writer() {
  GgufWriter w;
  w.set("general.architecture", Value::make_string("llama"));
  w.set("llama.block_count", Value::make_u32(2));
  w.set("llama.rope.freq_base", Value::make_f32(10000.f));
  w.set("tokenizer.ggml.tokens", Value::make_string_array({"<unk>", "<s>", "</s>", "a", "b"}));
  w.set("tokenizer.ggml.scores", Value::make_f32_array({0, 0, 0, -1.5, -2.5}));
  w.set("tokenizer.ggml.token_type", Value::make_i32_array({2, 3, 3, 1, 1}));
  w.set("flag", Value::make_bool(true));
  EXPECT_TRUE(w.add_tensor("a", static_cast<uint32_t>(DType::kF32), {3, 2},
                           f32_bytes({1, 2, 3, 4, 5, 6})).ok());
  EXPECT_TRUE(w.add_tensor("b", static_cast<uint32_t>(DType::kF32), {8}, f32_bytes({7, 8, 9, 10, 11, 12, 13, 14})).ok());
  return w;
}

TEST(Gguf, WriteReadRoundTrip) {
  auto bytes = small_writer().to_bytes();
  auto r = GgufFile::from_bytes(bytes);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 2);
  EXPECT_FLOAT_EQ(*f.get_float("llama.rope.freq_base"), 10000.f);
  EXPECT_EQ(f.get_bool("flag"), true);
  ASSERT_NE(f.get_string_array("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")->at(4), "b");
  EXPECT_DOUBLE_EQ(f.get_float_array("tokenizer.ggml.scores")->at(4), -2.5);
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type")->at(1), 3);
  EXPECT_EQ(f.get_string("llama.block_count"), std::nullopt);  // wrong type
  EXPECT_EQ(f.find("missing"), nullptr);
  ASSERT_EQ(f.tensors().size(), 2u);
  const TensorInfo* a = f.find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->cols(), 3);
  EXPECT_EQ(a->rows(), 2);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 32, reinterpret_cast<uintptr_t>(f.find_tensor("b")->data) % 32);
  float v[6];
  std::memcpy(v, a->data, sizeof v);
  EXPECT_EQ(v[5], 6.f);
  std::memcpy(v, f.find_tensor("b")->data, 20);
  EXPECT_EQ(v[0], 7.f);
  EXPECT_EQ(v[4], 11.f);
}

TEST(Gguf, WriteToFileAndOpen) {
  std::string path = ::ts::testing::temp_dir() + "/x.gguf";
  ASSERT_TRUE(small_writer().write(path).ok());
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->tensors().size(), 2u);
}

TEST(Gguf, MissingFileIsNotFound) {
  auto r = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/model.gguf"), std::string::npos);
}

TEST(Gguf, EveryTruncationIsRefusedCleanly) {
  auto bytes = small_writer().to_bytes();
  // Any strict prefix must fail with a message (the last tensor's data is needed).
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = GgufFile::from_bytes(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
    EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(Gguf, BadMagicAndVersion) {
  auto bytes = small_writer().to_bytes();
  auto b1 = bytes;
  b1[0] = 'X';
  auto r1 = GgufFile::from_bytes(b1);
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("magic"), std::string::npos);
  auto b2 = bytes;
  b2[4] = 9;
  auto r2 = GgufFile::from_bytes(b2);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("version 9"), std::string::npos);
}

// Patches the 8 bytes at `off` with v.
void put_u64(std::vector<uint8_t>& b, size_t off, uint64_t v) { std::memcpy(b.data() + off, &v, 8); }

TEST(Gguf, AbsurdCountsAreRefusedWithoutAllocating) {
  auto bytes = small_writer().to_bytes();
  auto b = bytes;
  put_u64(b, 8, uint64_t{1} << 60);  // tensor count
  auto r = GgufFile::from_bytes(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor count"), std::string::npos);
  b = bytes;
  put_u64(b, 16, uint64_t{1} << 62);  // kv count
  r = GgufFile::from_bytes(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("metadata count"), std::string::npos);
  b = bytes;
  put_u64(b, 24, uint64_t{1} << 50);  // first key length
  r = GgufFile::from_bytes(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("past the end"), std::string::npos);
}

TEST(Gguf, HostileArrayLengthRefused) {
  GgufWriter w;
  w.set("arr", Value::make_string_array({"x"}));
  auto b = w.to_bytes();
  // header 24 + key (8 + 3) + type 4 + elem type 4 -> array length at 43
  put_u64(b, 43, uint64_t{1} << 40);
  auto r = GgufFile::from_bytes(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot fit"), std::string::npos);
}

TEST(Gguf, UnknownTensorTypeAndMisalignedOffset) {
  GgufWriter w;
  ASSERT_TRUE(w.add_tensor("t", 0, {8}, std::vector<uint8_t>(32)).ok());
  auto b = w.to_bytes();
  // tensor info: name len(8) + "t"(1) + n_dims(4) + dim(8) + type(4) + offset(8), after 24-byte header
  size_t type_off = 24 + 8 + 1 + 4 + 8;
  auto b1 = b;
  uint32_t bad = 99;
  std::memcpy(b1.data() + type_off, &bad, 4);
  auto r = GgufFile::from_bytes(b1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("unknown type 99"), std::string::npos);
  auto b2 = b;
  put_u64(b2, type_off + 4, 3);
  r = GgufFile::from_bytes(b2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not aligned"), std::string::npos);
  auto b3 = b;
  put_u64(b3, type_off + 4, 1 << 20);
  r = GgufFile::from_bytes(b3);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside"), std::string::npos);
}

TEST(Gguf, RequireComputeTypes) {
  // Types without kernels are refused with the tensor and the type named.
  for (DType t : {DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS, DType::kIQ3_S, DType::kIQ1_S,
                  DType::kIQ1_M, DType::kTQ1_0, DType::kTQ2_0, DType::kMXFP4}) {
    const auto traits = *tensor::type_traits(static_cast<uint32_t>(t));
    GgufWriter w;
    ASSERT_TRUE(w.add_tensor("blk.0.w", static_cast<uint32_t>(t), {256},
                             std::vector<uint8_t>(256 / traits.block_size * traits.type_size))
                    .ok());
    auto b = w.to_bytes();
    EXPECT_TRUE(GgufFile::from_bytes(b).ok());
    auto r = GgufFile::from_bytes(b, {.require_compute_types = true});
    ASSERT_FALSE(r.ok()) << traits.name;
    EXPECT_NE(r.status().message().find("'blk.0.w' has type " + std::string(traits.name)), std::string::npos)
        << r.status().message();
  }
  // Every type with kernels loads.
  for (DType t : {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ5_K,
                  DType::kIQ4_NL, DType::kIQ4_XS}) {
    const auto traits = *tensor::type_traits(static_cast<uint32_t>(t));
    GgufWriter w;
    ASSERT_TRUE(w.add_tensor("w", static_cast<uint32_t>(t), {256},
                             std::vector<uint8_t>(256 / traits.block_size * traits.type_size))
                    .ok());
    EXPECT_TRUE(GgufFile::from_bytes(w.to_bytes(), {.require_compute_types = true}).ok()) << traits.name;
  }
}

TEST(Gguf, RandomCorruptionNeverCrashes) {
  auto bytes = small_writer().to_bytes();
  std::mt19937 rng(42);
  int refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = bytes;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    auto r = GgufFile::from_bytes(b);
    if (!r.ok()) {
      ++refused;
      EXPECT_FALSE(r.status().message().empty());
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(Gguf, ReadsStoriesV3) {
  TS_REQUIRE_SHARED(path, "models/stories260K/stories260K-f32.gguf");
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")->size(), 512u);
  const TensorInfo* t = f.find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->cols(), 172);
  EXPECT_EQ(t->rows(), 64);
}

TEST(Gguf, ReadsVersion1) {
  TS_REQUIRE_SHARED(path, "models/stories260K/tinyllamas-stories-260k-f32.gguf");
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->version(), 1u);
  EXPECT_EQ((*r)->tensors().size(), 48u);
  EXPECT_EQ((*r)->get_string_array("tokenizer.ggml.tokens")->size(), 512u);
}

TEST(Gguf, ReadsEveryVocabFile) {
  TS_REQUIRE_SHARED(dir, "models/llama.cpp-vocab");
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-qwen2.gguf", "ggml-vocab-gemma-4.gguf",
                           "ggml-vocab-bert-bge.gguf", "ggml-vocab-gpt-2.gguf"}) {
    auto r = GgufFile::open(dir + "/" + name);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
    EXPECT_GT((*r)->get_string_array("tokenizer.ggml.tokens")->size(), 1000u) << name;
  }
}

TEST(Gguf, ReadsGoldenQuantizedModels) {
  TS_REQUIRE_SHARED(path, "golden/models/tiny-llama3-q4_k_m.gguf");
  auto r = GgufFile::open(path, {.require_compute_types = true});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->find_tensor("token_embd.weight")->type, static_cast<uint32_t>(DType::kQ4_K));
}

}  // namespace
}  // namespace ts::gguf
