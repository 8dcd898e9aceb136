// tokenserve generate -m MODEL -p TEXT -n N [--temp --top-k --top-p --min-p --seed --threads
// --ignore-eos --kv-type --speculative off|ngram|draft --draft-model --draft-tokens --ngram-min
// --ngram-max]: streams the continuation to stdout through the engine, then one
// stats line on stderr.
#include <algorithm>
#include <chrono>

#include "cli/cli_util.h"
#include "cli/spec_flags.h"
#include "tensor/matrix.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ts::cli {

int cmd_generate(int argc, char** argv) {
  CLI::App app("Generate a continuation of a prompt", "generate");
  std::string model_path, prompt, kv_type = "f16";
  int n = 64, threads = 0, top_k = 40;
  float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = false, no_bos = false, special = false, verbose = false;
  app.add_option("-m,--model", model_path, "GGUF model")->required();
  app.add_option("-p,--prompt", prompt, "prompt text")->required();
  app.add_option("-n,--n-predict", n, "tokens to generate (default 64)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--temp", temp, "temperature; 0 = greedy (default 0.8)")->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-k", top_k, "top-k (default 40; 0 = off)");
  app.add_option("--top-p", top_p, "top-p (default 0.95)")->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--min-p", min_p, "min-p (default 0.05)")->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--repeat-penalty", repeat_penalty, "repetition penalty (default 1.0 = off)");
  app.add_option("-s,--seed", seed, "sampling seed (default: random)");
  app.add_option("-t,--threads", threads, "compute threads (default: all cores)");
  app.add_option("--kv-type", kv_type, "KV cache type: f16 (default), q8_0, f32");
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-generation tokens");
  app.add_flag("--no-bos", no_bos, "do not add BOS");
  app.add_flag("--special", special, "parse special-token text in the prompt");
  app.add_flag("-v,--verbose", verbose, "log engine start-up details");
  std::string isa;
  app.add_option("--isa", isa, kIsaHelp);
  SpecFlags spec_flags;
  spec_flags.add(app);
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (int rc = apply_isa("generate", isa); rc >= 0) return rc;

  if (!verbose) log::set_level(log::Level::kWarn);
  auto kvt = model::parse_kv_type(kv_type);
  if (!kvt.ok()) return fail("generate", kvt.status().message(), 2);
  auto m = model::Model::load(model_path);
  if (!m.ok()) return fail("generate", m.status().message());
  model::Model& model = **m;
  std::fprintf(stderr, "%s\n", tensor::isa_summary().c_str());
  {
    const model::WeightMemory wm = model.weight_memory();
    log::info("weights: " + std::to_string(wm.resident >> 20) + " MiB resident; " + std::to_string(wm.released >> 20) +
              " MiB of mapped file pages released after repacking");
  }
  std::vector<int32_t> ids = model.tokenizer().encode(prompt, !no_bos, special);
  if (ids.empty()) return fail("generate", "the prompt tokenized to nothing", 2);
  const int64_t need = static_cast<int64_t>(ids.size()) + n;
  if (need > model.config().n_ctx_train) {
    return fail("generate", "prompt (" + std::to_string(ids.size()) + " tokens) + " + std::to_string(n) +
                                " new tokens exceed the model's context of " +
                                std::to_string(model.config().n_ctx_train), 2);
  }
  engine::EngineOptions eo;
  eo.kv_type = *kvt;
  eo.num_threads = threads;
  eo.max_batch_tokens = std::max<int32_t>(512, static_cast<int32_t>(ids.size()));
  // One sequence's peak over every KV group (sliding-window layers hold only their window).
  eo.num_kv_blocks = static_cast<int32_t>(
      model::kv_footprint(model::KvLayout::windowed(model.config()), model.config(), eo.kv_type, eo.block_size)
          .peak_blocks(need, eo.max_batch_tokens) + 1);
  if (app.count("--seed")) eo.seed = seed;
  std::unique_ptr<model::Model> draft_model;  // --speculative draft; outlives the engine
  if (Status st = spec_flags.apply(eo, draft_model); !st.ok()) return fail("generate", st.message(), 2);
  auto eng = engine::Engine::create(model, eo);
  if (!eng.ok()) return fail("generate", eng.status().message());

  engine::Request req;
  req.id = "generate";
  req.prompt_tokens = ids;
  req.sampling.temperature = temp;
  req.sampling.top_k = top_k;
  req.sampling.top_p = top_p;
  req.sampling.min_p = temp > 0 ? min_p : 0.0f;
  req.sampling.repetition_penalty = repeat_penalty;
  req.sampling.max_tokens = n;
  req.sampling.ignore_eos = ignore_eos;
  if (app.count("--seed")) req.sampling.seed = seed;
  auto h = (*eng)->submit(std::move(req));
  if (!h.ok()) return fail("generate", h.status().message());
  engine::Event last;
  while (true) {
    auto ev = (*h)->next(std::chrono::milliseconds(1000));
    if (!ev) {
      if ((*h)->done()) break;
      continue;
    }
    if (!ev->text.empty()) {
      std::fwrite(ev->text.data(), 1, ev->text.size(), stdout);
      std::fflush(stdout);
    }
    if (ev->finish == engine::FinishReason::kError) {
      std::printf("\n");
      return fail("generate", ev->error.message());
    }
    if (ev->request_done) {
      last = std::move(*ev);
      break;
    }
  }
  std::printf("\n");
  using Sec = std::chrono::duration<double>;
  const auto& t = last.timings;
  const double prompt_s = Sec(t.first_token - t.arrival).count();
  const double gen_s = Sec(t.finished - t.first_token).count();
  const int64_t p = last.usage.prompt_tokens, g = last.usage.completion_tokens;
  std::fprintf(stderr, "prompt: %lld tokens, %.1f tokens/s; generation: %lld tokens, %.1f tokens/s\n",
               static_cast<long long>(p), prompt_s > 0 ? p / prompt_s : 0.0, static_cast<long long>(g),
               g > 1 && gen_s > 0 ? (g - 1) / gen_s : 0.0);
  if (eo.spec.mode != engine::SpecMode::kOff) {
    const engine::EngineStats st = (*eng)->stats();
    std::fprintf(stderr, "speculative (%s): %lld drafted, %lld accepted (%.1f%%), %lld steps\n",
                 engine::spec_mode_name(eo.spec.mode), static_cast<long long>(st.spec_num_draft_tokens),
                 static_cast<long long>(st.spec_num_accepted_tokens),
                 st.spec_num_draft_tokens > 0 ? 100.0 * st.spec_num_accepted_tokens / st.spec_num_draft_tokens : 0.0,
                 static_cast<long long>(st.num_steps));
  }
  return 0;
}

}  // namespace ts::cli
