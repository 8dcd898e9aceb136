// `tokenserve quantize`: rewrites a GGUF model with its weights in another type, choosing each
// tensor's type the way llama.cpp's llama-quantize does for the same preset, so a file made here
// and one made by llama-quantize from the same source hold the same types and (for the
// reference quantizers, see tensor/quantizer.h) the same bytes.
//
// Per-tensor rules (a port of llama-quantize's logic, without an importance matrix):
//  - only tensors of 2+ dimensions whose name ends in "weight" are converted; norms, biases,
//    other 1-D tensors and the MoE router (ffn_gate_inp) keep their type and bytes;
//  - output.weight (and token_embd.weight when the model has no output.weight, i.e. tied
//    embeddings) becomes Q6_K, or Q8_0 when its rows do not fit the preset's block size;
//  - the _M/_L mixes and IQ4 presets raise attn_v (also attn_qkv / attn_kv_b), ffn_down and
//    attn_output in the layers llama-quantize picks (use_more_bits, first-layer bumps, GQA >= 4,
//    8-expert models), counting layers from tensor names for MoE models;
//  - rows not divisible by 256 fall back to the legacy 32-block types (Q2_K, Q3_K -> Q4_0,
//    Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL), and rows not divisible by 32
//    to F16. (llama-quantize aborts when a 32-block target such as Q4_0 meets such rows; we
//    fall back to F16 instead and say so in the plan.)
// Tensors are written in llama-quantize's order (by layer number, then name); all metadata is
// copied, general.file_type is set to the preset's llama ftype and general.quantization_version
// to 2; split keys are dropped; the input's alignment is kept.
//
// Thread-safety: the functions are reentrant; quantize_file uses its own thread pool.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tensor/dtype.h"

namespace ts::gguf { class GgufFile; }

namespace ts::tools {

// A llama-quantize preset ("file type").
struct QuantPreset {
  std::string_view name;        // canonical spelling, e.g. "Q4_K_M"
  uint32_t ftype;               // llama_ftype number written to general.file_type
  tensor::DType default_type;   // type of most tensors
  std::string_view summary;     // one line for --help
};

// Every preset this build offers, in --help order.
const std::vector<QuantPreset>& quant_presets();
// Case-insensitive lookup; accepts llama-quantize's aliases Q3_K (= Q3_K_M), Q4_K (= Q4_K_M)
// and Q5_K (= Q5_K_M). nullopt for anything else.
std::optional<QuantPreset> find_quant_preset(std::string_view name);

// The decision for one tensor.
struct TensorPlan {
  std::string name;
  std::vector<int64_t> shape;   // ggml order (shape[0] = row length)
  uint32_t from_type = 0;       // type in the input file
  uint32_t to_type = 0;         // type in the output file (== from_type: bytes copied as is)
  bool fallback = false;        // the rule's type did not fit the row length
};

struct QuantPlanOptions {
  // llama-quantize --pure: every quantizable tensor gets the preset's default type (fallbacks
  // still apply), no output/embedding/mix rules.
  bool pure = false;
  // llama-quantize --output-tensor-type / --token-embedding-type: the type of output.weight
  // (and, when no token type is given, of a tied token_embd) / of token_embd.weight, overriding
  // the rules. Must be a type quantize can write and fit the tensor's rows.
  std::optional<tensor::DType> output_type;
  std::optional<tensor::DType> token_embd_type;
};

// Chooses every tensor's output type, in output order. Errors: kInvalidArgument when the file
// lacks general.architecture, a MoE tensor's layer cannot be read from its name, or an override
// type does not fit its tensor.
Result<std::vector<TensorPlan>> plan_quantization(const gguf::GgufFile& in, const QuantPreset& preset,
                                                  const QuantPlanOptions& options = {});

struct QuantizeOptions {
  QuantPlanOptions plan;
  int num_threads = 0;          // <= 0: all hardware threads
  // Called on the calling thread after each tensor and during large ones: (tensors done,
  // tensors total, bytes of input processed, total input bytes, name of the current tensor).
  // Both counts only grow; the last call has done == total.
  std::function<void(int64_t, int64_t, uint64_t, uint64_t, const std::string&)> progress;
};

struct QuantizeSummary {
  std::vector<TensorPlan> tensors;
  uint64_t input_bytes = 0;     // tensor data bytes in the input
  uint64_t output_bytes = 0;    // tensor data bytes in the output
  int64_t num_elements = 0;     // weights in all tensors
  int num_fallbacks = 0;
  int num_requantized = 0;      // tensors converted from an already quantized type
};

// Reads `in_path`, converts the tensors as planned and writes `out_path` through a temporary
// file renamed into place, so no partial output is left on any error. Errors: kNotFound /
// kDataLoss (input unreadable or corrupt), kInvalidArgument (unknown architecture metadata,
// non-finite weights, write failure), kUnimplemented (a tensor that must be converted has a
// type this build cannot dequantize), each naming the tensor.
Result<QuantizeSummary> quantize_file(const std::string& in_path, const std::string& out_path,
                                      const QuantPreset& preset, const QuantizeOptions& options = {});

}  // namespace ts::tools
