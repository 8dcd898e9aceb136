// Tensor element types as GGUF/ggml numbers them, and their block geometry.
// Pure data; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ts::tensor {

// ggml type ids (stable in the GGUF format).
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct TypeTraits {
  std::string_view name;  // "f32", "q8_0", ...
  int64_t block_size;     // elements per block (1 for plain types)
  size_t type_size;       // bytes per block
  bool compute;           // true when this build has dequantize + matmul kernels for it
};

// Traits of a known ggml type id (also ones we only size, never compute), or nullopt.
std::optional<TypeTraits> type_traits(uint32_t type_id);
// Name for messages: "q8_0", or "type#N" when unknown.
std::string type_name(uint32_t type_id);
// Parses the name of a computable type (case-insensitive): f32, f16, bf16, q8_0, q4_0, q4_1,
// q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs.
std::optional<DType> parse_dtype(std::string_view name);

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers).
inline size_t row_bytes(const TypeTraits& t, int64_t n) {
  return static_cast<size_t>(n / t.block_size) * t.type_size;
}

// Block layouts (identical to ggml's, little-endian).
constexpr int kQK4_0 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK_K = 256;
constexpr int kKScaleSize = 12;

struct BlockQ4_0 {  // 18 bytes: fp16 d, 16 bytes of nibbles (low nibbles = elements 0..15)
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
struct BlockQ8_0 {  // 34 bytes: fp16 d, 32 int8
  uint16_t d;
  int8_t qs[kQK8_0];
};
struct BlockQ4_K {  // 144 bytes
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {  // 210 bytes
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {  // activation blocks for K-quants: float d, 256 int8, 16 sums of 16
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
struct BlockQ4_1 {  // 20 bytes: fp16 d, fp16 m, 16 bytes of nibbles; x = d * q + m
  uint16_t d;
  uint16_t m;
  uint8_t qs[32 / 2];
};
struct BlockQ5_0 {  // 22 bytes: fp16 d, 32 high bits, 16 bytes of low nibbles; x = d * (q - 16)
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[32 / 2];
};
struct BlockQ5_1 {  // 24 bytes: fp16 d, fp16 m, 32 high bits, 16 bytes of low nibbles; x = d * q + m
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[32 / 2];
};
struct BlockQ2_K {  // 84 bytes: 16 (4-bit scale | 4-bit min) bytes, 2-bit quants, fp16 d, fp16 dmin
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {  // 110 bytes: high-bit mask, low 2 bits, 12 bytes of packed 6-bit scales, fp16 d
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ5_K {  // 176 bytes
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockIQ4_NL {  // 18 bytes: fp16 d, 16 bytes of nibbles indexing the non-linear table
  uint16_t d;
  uint8_t qs[32 / 2];
};
struct BlockIQ4_XS {  // 136 bytes: fp16 d, high 2 bits of 8 6-bit scales, low 4 bits, nibbles
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ6_K) == 210);

}  // namespace ts::tensor
