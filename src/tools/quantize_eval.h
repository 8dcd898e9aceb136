// Quality of a quantized model against its source: both models run the same token sequence
// (teacher forcing, one forward pass each, logits at every position) and their next-token
// distributions are compared. Used by the quantize tests and bench/quantize_report.
//
// Thread-safety: reentrant; each call loads its own models.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ts::tools {

struct LogitComparison {
  int64_t num_positions = 0;
  double top1_agreement = 0;   // share of positions where both argmax ids agree
  double mean_kl = 0;          // mean over positions of KL(P_ref || P_test), nats
  double max_kl = 0;
  double rel_rms_error = 0;    // RMS(logit_test - logit_ref) / RMS(logit_ref - mean), all positions
};

// Runs `tokens` through both models. Errors: load errors of either model (kUnimplemented for a
// type this build cannot compute with), kInvalidArgument when the vocabularies differ in size,
// the sequence is empty or longer than the models' context.
Result<LogitComparison> compare_models(const std::string& ref_path, const std::string& test_path,
                                       const std::vector<int32_t>& tokens, int num_threads = 1);

// Writes a copy of `in_path` whose tensors of types this build cannot compute with are decoded
// to F32 (reference dequantizers), so the model runs with exactly the weights the quantized file
// holds. This simulates a type before its kernels exist: it omits only the activation rounding
// those kernels would add. Errors: read/write errors, kUnimplemented for a type quantize cannot
// decode either.
Status write_decoded_copy(const std::string& in_path, const std::string& out_path);

// Tokenizes `text` with the model's tokenizer (BOS added when the vocabulary wants one).
Result<std::vector<int32_t>> tokenize_with_model(const std::string& model_path, const std::string& text);

}  // namespace ts::tools
