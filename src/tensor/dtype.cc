#include "tensor/dtype.h"

#include <cctype>
#include <string>

namespace ts::tensor {

std::optional<TypeTraits> type_traits(uint32_t id) {
  switch (static_cast<DType>(id)) {
    case DType::kF32: return TypeTraits{"f32", 1, 4, true};
    case DType::kF16: return TypeTraits{"f16", 1, 2, true};
    case DType::kBF16: return TypeTraits{"bf16", 1, 2, true};
    case DType::kQ4_0: return TypeTraits{"q4_0", 32, 18, true};
    case DType::kQ4_1: return TypeTraits{"q4_1", 32, 20, true};
    case DType::kQ5_0: return TypeTraits{"q5_0", 32, 22, true};
    case DType::kQ5_1: return TypeTraits{"q5_1", 32, 24, true};
    case DType::kQ8_0: return TypeTraits{"q8_0", 32, 34, true};
    case DType::kQ8_1: return TypeTraits{"q8_1", 32, 36, false};
    case DType::kQ2_K: return TypeTraits{"q2_k", 256, 84, true};
    case DType::kQ3_K: return TypeTraits{"q3_k", 256, 110, true};
    case DType::kQ4_K: return TypeTraits{"q4_k", 256, 144, true};
    case DType::kQ5_K: return TypeTraits{"q5_k", 256, 176, true};
    case DType::kQ6_K: return TypeTraits{"q6_k", 256, 210, true};
    case DType::kQ8_K: return TypeTraits{"q8_k", 256, 292, false};
    case DType::kIQ2_XXS: return TypeTraits{"iq2_xxs", 256, 66, false};
    case DType::kIQ2_XS: return TypeTraits{"iq2_xs", 256, 74, false};
    case DType::kIQ3_XXS: return TypeTraits{"iq3_xxs", 256, 98, false};
    case DType::kIQ1_S: return TypeTraits{"iq1_s", 256, 50, false};
    case DType::kIQ4_NL: return TypeTraits{"iq4_nl", 32, 18, true};
    case DType::kIQ3_S: return TypeTraits{"iq3_s", 256, 110, false};
    case DType::kIQ2_S: return TypeTraits{"iq2_s", 256, 82, false};
    case DType::kIQ4_XS: return TypeTraits{"iq4_xs", 256, 136, true};
    case DType::kIQ1_M: return TypeTraits{"iq1_m", 256, 56, false};
    case DType::kTQ1_0: return TypeTraits{"tq1_0", 256, 54, false};
    case DType::kTQ2_0: return TypeTraits{"tq2_0", 256, 66, false};
    case DType::kMXFP4: return TypeTraits{"mxfp4", 32, 17, false};
    case DType::kI8: return TypeTraits{"i8", 1, 1, false};
    case DType::kI16: return TypeTraits{"i16", 1, 2, false};
    case DType::kI32: return TypeTraits{"i32", 1, 4, false};
    case DType::kI64: return TypeTraits{"i64", 1, 8, false};
    case DType::kF64: return TypeTraits{"f64", 1, 8, false};
  }
  return std::nullopt;
}

std::string type_name(uint32_t id) {
  auto t = type_traits(id);
  return t ? std::string(t->name) : "type#" + std::to_string(id);
}

std::optional<DType> parse_dtype(std::string_view name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS}) {
    if (type_traits(static_cast<uint32_t>(d))->name == lower) return d;
  }
  return std::nullopt;
}

}  // namespace ts::tensor
