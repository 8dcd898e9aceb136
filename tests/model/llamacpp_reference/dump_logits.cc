// Builds the llama.cpp reference logits of tests/model/llamacpp_reference/*.logits (not part of the
// build or the tests; the reference files are its output, kept in the repository). Links against
// the llama.cpp that bench/compare_llamacpp.sh builds (v0.5.0, de3ff81; the AVX2 build, as the
// golden set's references):
//   L=~/.cache/tokenserve/llama.cpp-node-llama-cpp-3.22.1
//   g++ -O2 -std=c++17 -I$L/include -I$L/ggml/include dump_logits.cc -L$L/build-avx2/bin \
//       -lllama -lggml -lggml-base -Wl,-rpath,$L/build-avx2/bin -o dump_logits
//   ./dump_logits MODEL.gguf IDS_FILE | head -2048 > OUT.logits
// IDS_FILE: the golden prompt.ids, greedy.ids, prompt.ids, greedy.ids of the model, in a row.
// As the golden set's procedure (../shared/golden/README.md): the ids decoded as one batch with
// llama.cpp's default context (F16 K/V, flash attention auto: on for the CPU), n_ctx = n_batch
// = n_ubatch = 128, 2 threads; prints the last position's logits, one per line, %.9g.
#include <cstdio>
#include <fstream>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: dump_logits MODEL.gguf IDS_FILE\n");
    return 2;
  }
  std::vector<llama_token> ids;
  {
    std::ifstream in(argv[2]);
    long long v;
    while (in >> v) ids.push_back(static_cast<llama_token>(v));
  }
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = 128;
  cp.n_threads = cp.n_threads_batch = 2;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr || ids.empty() || ids.size() > 128) return 1;
  if (llama_decode(ctx, llama_batch_get_one(ids.data(), static_cast<int32_t>(ids.size()))) != 0) return 1;
  const float* logits = llama_get_logits_ith(ctx, -1);
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (int32_t i = 0; i < n_vocab; ++i) std::printf("%.9g\n", logits[i]);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
