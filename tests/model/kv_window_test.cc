// Window-only KV storage of sliding-window layers (KvLayout::windowed): the layout and the
// memory it reports, and forward passes whose sliding-window groups have released their old
// blocks (holes in the table, the released blocks poisoned with NaN and reused for new
// positions, as the engine's pool would) giving exactly the logits of the full-storage layout
// (every position stored, masked at attention), on the tiny gemma3 and on the shared golden
// gemma3 models, on every ISA path this host runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "model/kv_storage.h"
#include "model/model.h"
#include "model_test_util.h"
#include "tensor/matrix.h"
#include "test_util.h"
#include "tiny_gguf.h"
#include "tokenizer/tokenizer.h"

namespace ts::model {
namespace {

ModelConfig gemma3_1b_shape() {  // Gemma-3-1B: 26 layers, 1 KV head of 256, window 512
  ModelConfig c;
  c.n_layer = 26;
  c.n_head = 4;
  c.n_head_kv = 1;
  c.head_dim = 256;
  c.sliding_window = 512;
  c.swa_pattern = 6;
  return c;
}

TEST(KvLayout, Gemma3GroupsFullAndSlidingWindowLayers) {
  const ModelConfig c = gemma3_1b_shape();
  ASSERT_EQ(c.num_swa_layers(), 22);
  const KvLayout L = KvLayout::windowed(c);
  // 4 global layers (5, 11, 17, 23) set the group size; 22 sliding-window layers fill 6 groups.
  EXPECT_EQ(L.layers_per_group, 4);
  ASSERT_EQ(L.num_groups(), 7);
  EXPECT_EQ(L.group_window[0], 0);
  for (int g = 1; g < 7; ++g) EXPECT_EQ(L.group_window[static_cast<size_t>(g)], 512) << g;
  EXPECT_EQ(L.group_layers, (std::vector<int32_t>{4, 4, 4, 4, 4, 4, 2}));
  for (int l : {5, 11, 17, 23}) EXPECT_EQ(L.group_of_layer[static_cast<size_t>(l)], 0) << l;
  // Every (group, slot) holds at most one layer.
  std::set<std::pair<int, int>> used;
  for (int l = 0; l < 26; ++l) {
    EXPECT_EQ(c.layer_is_swa(l), L.group_of_layer[static_cast<size_t>(l)] > 0) << l;
    EXPECT_TRUE(used.insert({L.group_of_layer[static_cast<size_t>(l)], L.slot_of_layer[static_cast<size_t>(l)]}).second);
  }
  EXPECT_EQ(KvStorage::bytes_per_block(c, KvType::kF16, 16, L), 4u * 16 * 2 * 256 * 2);
}

TEST(KvLayout, ModelsWithoutSlidingWindowKeepOneGroup) {
  ModelConfig c = gemma3_1b_shape();
  c.sliding_window = 0;  // e.g. llama: no sliding-window layers
  const KvLayout w = KvLayout::windowed(c), f = KvLayout::full(c);
  EXPECT_EQ(w.num_groups(), 1);
  EXPECT_EQ(w.layers_per_group, 26);
  EXPECT_EQ(w.slot_of_layer, f.slot_of_layer);
  EXPECT_EQ(KvStorage::bytes_per_block(c, KvType::kQ8_0, 16, w), KvStorage::bytes_per_block(c, KvType::kQ8_0, 16));
  const KvFootprint fp = kv_footprint(w, c, KvType::kF16, 16);
  EXPECT_EQ(fp.bytes_for_tokens(1000), 63u * 16 * kv_bytes_per_token(c, KvType::kF16));
  EXPECT_EQ(fp.max_tokens_for_blocks(10, 512), 160);
}

TEST(KvFootprint, Gemma3LongSequenceHoldsFullLayersAndOneWindow) {
  const ModelConfig c = gemma3_1b_shape();
  const KvFootprint fp = kv_footprint(KvLayout::windowed(c), c, KvType::kF16, 16);
  const uint64_t slot_token = 2 * 256 * 2;  // K and V of one layer, one token, f16
  EXPECT_EQ(fp.full_bytes_per_token(), 4 * slot_token);
  EXPECT_EQ(fp.swa_blocks_cap(), 33);  // 512 positions not block-aligned span 33 blocks
  EXPECT_EQ(fp.swa_bytes_cap(), 6u * 33 * 4 * 16 * slot_token);
  // 32k tokens: 2048 blocks of the global group + 6 x 33 of the window groups, against 26
  // layers x 32768 positions with full storage (5.9x less; 6.5x is the bound of 4 of 26 layers).
  EXPECT_EQ(fp.blocks_for_tokens(32768), 2048 + 6 * 33);
  EXPECT_EQ(fp.bytes_for_tokens(32768), (2048u + 6 * 33) * 4 * 16 * slot_token);
  EXPECT_EQ(window_only_kv_bytes(c, KvType::kF16, 32768), fp.bytes_for_tokens(32768));
  EXPECT_GT(kv_bytes_per_token(c, KvType::kF16) * 32768, 5 * fp.bytes_for_tokens(32768));
  // Short sequences: every group grows alike.
  EXPECT_EQ(fp.blocks_for_tokens(100), 7 * 7);
  // The longest sequence 4000 blocks hold, with a 512-token prefill chunk in flight: each
  // window group then holds (512 + 512 - 2) / 16 + 1 = 65 blocks.
  const int64_t n = fp.max_tokens_for_blocks(4000, 512);
  EXPECT_EQ(n, (4000 - 6 * 65) * 16);
  // Shape-only (plan) gives the same footprint.
  const KvFootprint sp = kv_footprint(26, 22, 512, 1, 256, KvType::kF16, 16);
  EXPECT_EQ(sp.bytes_for_tokens(32768), fp.bytes_for_tokens(32768));
}

// A forward runner with window-only storage that manages its blocks like the engine: groups
// allocate fresh blocks as positions grow, and after each step a sliding-window group releases
// every block wholly before num_computed - window + 1 (poisoned with NaN, reused later).
struct WindowRunner {
  Model& model;
  KvStorage kv;
  std::vector<std::vector<int32_t>> tables;  // [group]
  std::vector<int32_t> free_ids;
  int32_t num_computed = 0;
  int64_t num_released = 0;
  WindowRunner(Model& m, KvType type, int32_t bs, int32_t num_blocks)
      : model(m), kv(std::move(KvStorage::create(m.config(), type, bs, num_blocks, KvLayout::windowed(m.config())).value())) {
    tables.resize(static_cast<size_t>(kv.layout().num_groups()));
    for (int32_t b = num_blocks - 1; b >= 0; --b) free_ids.push_back(b);
  }
  void poison(int32_t group, int32_t block) {
    const KvLayout& L = kv.layout();
    const size_t page = static_cast<size_t>(kv.block_size()) * kv.head_dim() * kv_elem_bytes(kv.type());
    for (int32_t l = 0; l < kv.n_layer(); ++l) {
      if (L.group_of_layer[static_cast<size_t>(l)] != group) continue;
      for (bool is_v : {false, true}) {
        for (int32_t h = 0; h < kv.n_head_kv(); ++h) {
          std::memset(kv.page_ptr(l, is_v, block, h), 0xFF, page);  // NaN in f32/f16
          if (kv.type() == KvType::kQ8_0)
            for (int32_t s = 0; s < kv.block_size(); ++s) *kv.scale_ptr(l, is_v, block, h, s) = NAN;
        }
      }
    }
  }
  std::vector<float> feed(const std::vector<int32_t>& tokens, int32_t num_logits, ThreadPool* pool) {
    const int32_t bs = kv.block_size(), n = static_cast<int32_t>(tokens.size());
    const size_t need = static_cast<size_t>((num_computed + n + bs - 1) / bs);
    for (auto& t : tables) {
      while (t.size() < need) {
        if (free_ids.empty()) throw std::runtime_error("window runner out of blocks");
        t.push_back(free_ids.back());
        free_ids.pop_back();
      }
    }
    std::vector<std::span<const int32_t>> spans(tables.begin(), tables.end());
    SeqSlice s{.num_tokens = n, .start_pos = num_computed, .block_table = tables[0], .num_logits = num_logits,
               .group_tables = spans};
    std::vector<float> logits(static_cast<size_t>(num_logits) * model.config().n_vocab);
    Status st = model.forward({.tokens = tokens, .seqs = std::span<const SeqSlice>(&s, 1)}, kv, logits.data(), pool);
    if (!st.ok()) throw std::runtime_error(st.to_string());
    num_computed += n;
    for (int32_t g = 0; g < kv.layout().num_groups(); ++g) {
      const int32_t w = kv.layout().group_window[static_cast<size_t>(g)];
      if (w <= 0) continue;
      const int32_t first = num_computed - w + 1;
      auto& t = tables[static_cast<size_t>(g)];
      for (int32_t b = 0; first > 0 && b < first / bs; ++b) {
        if (t[static_cast<size_t>(b)] == KvLayout::kNoBlock) continue;
        poison(g, t[static_cast<size_t>(b)]);
        free_ids.push_back(t[static_cast<size_t>(b)]);
        t[static_cast<size_t>(b)] = KvLayout::kNoBlock;
        ++num_released;
      }
    }
    return logits;
  }
  int32_t held(int32_t g) const {
    int32_t n = 0;
    for (int32_t b : tables[static_cast<size_t>(g)]) n += b != KvLayout::kNoBlock ? 1 : 0;
    return n;
  }
};

struct IsaScope {
  tensor::Isa saved = tensor::active_isa();
  explicit IsaScope(tensor::Isa isa) { tensor::set_isa(isa); }
  ~IsaScope() { tensor::set_isa(saved); }
};

// Feeds `prompt` in chunks of `chunk`, then `steps` single tokens (next = `forced[i]` when
// given, else the full-storage argmax) through both layouts; every logit must be identical.
// Returns the full-storage argmax of each step.
std::vector<int32_t> run_both(Model& model, KvType type, int32_t bs, const std::vector<int32_t>& prompt, int32_t chunk,
                              int32_t steps, const std::vector<int32_t>& forced, WindowRunner** out_runner,
                              std::unique_ptr<WindowRunner>& keep) {
  ThreadPool pool(2);
  const int32_t V = model.config().n_vocab;
  const int32_t total = static_cast<int32_t>(prompt.size()) + steps;
  testing::SoloRunner full(model, type, (total + bs - 1) / bs + 1, bs);
  keep = std::make_unique<WindowRunner>(model, type, bs, 4 * ((total + bs - 1) / bs + 1) * 8);
  WindowRunner& win = *keep;
  *out_runner = &win;
  std::vector<float> lf, lw;
  for (int32_t p = 0; p < static_cast<int32_t>(prompt.size()); p += chunk) {
    const int32_t e = std::min<int32_t>(static_cast<int32_t>(prompt.size()), p + chunk);
    std::vector<int32_t> part(prompt.begin() + p, prompt.begin() + e);
    lf = full.feed(part, p, e - p, &pool);
    lw = win.feed(part, e - p, &pool);
    for (size_t i = 0; i < lf.size(); ++i) {
      if (lf[i] != lw[i]) {
        ADD_FAILURE() << "prefill chunk at " << p << " logit " << i << ": full " << lf[i] << " window-only " << lw[i];
        return {};
      }
    }
    lf.erase(lf.begin(), lf.end() - V);
  }
  std::vector<int32_t> ids;
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int32_t i = 0; i < steps; ++i) {
    const int32_t top = testing::argmax(lf.data(), V);
    ids.push_back(top);
    const int32_t next = i < static_cast<int32_t>(forced.size()) ? forced[static_cast<size_t>(i)] : top;
    lf = full.feed({next}, pos++, 1, &pool);
    lw = win.feed({next}, 1, &pool);
    for (int32_t v = 0; v < V; ++v) {
      if (lf[static_cast<size_t>(v)] != lw[static_cast<size_t>(v)]) {
        ADD_FAILURE() << "decode step " << i << " (position " << pos - 1 << ") logit " << v << ": full "
                      << lf[static_cast<size_t>(v)] << " window-only " << lw[static_cast<size_t>(v)];
        return ids;
      }
    }
  }
  return ids;
}

using Param = std::tuple<KvType, int32_t, tensor::Isa>;

class TinyGemmaWindowOnly : public ::testing::TestWithParam<Param> {};

TEST_P(TinyGemmaWindowOnly, LogitsEqualFullStorageAndWindowGroupsStayBounded) {
  const auto& [type, bs, isa] = GetParam();
  IsaScope scope(isa);
  // 6 layers (5 sliding-window), window 5: not a multiple of any block size used here.
  const testing::TinySpec spec{.arch = "gemma3", .layers = 6, .head_dim = 16, .window = 5};
  auto m = Model::load(testing::write_tiny(spec, ::ts::testing::temp_dir() + "/gemma3-w5.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ((*m)->config().sliding_window, 5);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 23; ++i) prompt.push_back(3 + (i * 37) % 290);
  WindowRunner* win = nullptr;
  std::unique_ptr<WindowRunner> keep;
  run_both(**m, type, bs, prompt, 7, 40, {}, &win, keep);
  ASSERT_NE(win, nullptr);
  const KvLayout& L = win->kv.layout();
  ASSERT_EQ(L.num_groups(), 6);  // 1 global layer sets the group size: 1 + 5 groups
  const int32_t n = win->num_computed, nb = (n + bs - 1) / bs;
  const KvFootprint fp = kv_footprint(L, (*m)->config(), type, bs);
  EXPECT_EQ(win->held(0), nb);
  for (int32_t g = 1; g < L.num_groups(); ++g) {
    EXPECT_LE(win->held(g), fp.swa_blocks_cap()) << "group " << g;
    EXPECT_GE(win->held(g), 1);
  }
  EXPECT_GT(win->num_released, 0) << "no block was ever released: the comparison proves nothing";
  EXPECT_EQ(fp.blocks_for_tokens(n), win->held(0) + (L.num_groups() - 1) * fp.swa_blocks_cap());
}

// 20 layers: 3 global (5, 11, 17) and 17 sliding-window layers make groups of 3 layers, the last
// window group padded (2 layers in 3 slots): slots, padding and several layers per table.
TEST(TinyGemmaWindowOnlyGroups, SeveralLayersPerGroupWithPadding) {
  const testing::TinySpec spec{.arch = "gemma3", .layers = 20, .head_dim = 16, .window = 6};
  auto m = Model::load(testing::write_tiny(spec, ::ts::testing::temp_dir() + "/gemma3-l20.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const KvLayout L = KvLayout::windowed((*m)->config());
  ASSERT_EQ(L.layers_per_group, 3);
  ASSERT_EQ(L.num_groups(), 1 + 6);
  EXPECT_EQ(L.group_layers.back(), 2);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back(3 + (i * 53) % 290);
  for (KvType type : {KvType::kF16, KvType::kQ8_0}) {
    WindowRunner* win = nullptr;
    std::unique_ptr<WindowRunner> keep;
    run_both(**m, type, 4, prompt, 6, 24, {}, &win, keep);
    ASSERT_NE(win, nullptr);
    EXPECT_GT(win->num_released, 0);
    for (int32_t g = 1; g < L.num_groups(); ++g) EXPECT_LE(win->held(g), 3) << g;  // (6 - 1) / 4 + 1 + 1
  }
}

std::vector<tensor::Isa> host_isas() {
  std::vector<tensor::Isa> v;
  for (int i = 0; i <= static_cast<int>(tensor::highest_isa()); ++i) v.push_back(static_cast<tensor::Isa>(i));
  return v;
}

std::string param_name(const ::testing::TestParamInfo<Param>& i) {
  return std::string(kv_type_name(std::get<0>(i.param))) + "_bs" + std::to_string(std::get<1>(i.param)) + "_" +
         tensor::isa_name(std::get<2>(i.param));
}

INSTANTIATE_TEST_SUITE_P(Layouts, TinyGemmaWindowOnly,
                         ::testing::Combine(::testing::Values(KvType::kF32, KvType::kF16, KvType::kQ8_0),
                                            ::testing::Values(4, 8, 16), ::testing::ValuesIn(host_isas())),
                         param_name);

// The shared golden gemma3 models (window 8) with window-only KV: prompt + 32 greedy steps run
// well past the window; every logit equals the full-storage path's, and where llama.cpp's
// reference ids are present (F32 K/V, teacher forcing) every greedy step matches them.
class GoldenGemmaWindowOnly : public ::testing::TestWithParam<std::tuple<std::string, tensor::Isa>> {};

TEST_P(GoldenGemmaWindowOnly, MatchesFullStorageAndReference) {
  const auto& [stem, isa] = GetParam();
  IsaScope scope(isa);
  const std::string path = ::ts::testing::shared_path("golden/models/" + stem + ".gguf");
  if (path.empty() || !std::filesystem::exists(path)) GTEST_SKIP() << stem << " not in ../shared/golden";
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const std::string dir = ::ts::testing::shared_path("golden/expected/" + stem);
  std::vector<int32_t> prompt = (*m)->tokenizer().encode("Once upon a time, in a small village,", true, true);
  std::vector<int32_t> ref;
  if (!dir.empty() && std::filesystem::exists(dir + "/greedy.f32kv.ids")) {
    prompt = testing::read_ids(dir + "/prompt.ids");
    ref = testing::read_ids(dir + "/greedy.f32kv.ids");
  }
  ASSERT_GT((*m)->config().num_swa_layers(), 0);
  for (KvType type : {KvType::kF32, KvType::kF16}) {
    for (int32_t bs : {4, 16}) {
      WindowRunner* win = nullptr;
      std::unique_ptr<WindowRunner> keep;
      const auto ids = run_both(**m, type, bs, prompt, 5, 32, ref, &win, keep);
      ASSERT_NE(win, nullptr);
      EXPECT_GT(win->num_released, 0) << stem << " bs " << bs;
      if (type == KvType::kF32 && !ref.empty()) {
        EXPECT_EQ(ids, ref) << stem << " bs " << bs;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, GoldenGemmaWindowOnly,
                         ::testing::Combine(::testing::Values("tiny-gemma3-f16", "tiny-gemma3-q4_k_m"),
                                            ::testing::ValuesIn(host_isas())),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, tensor::Isa>>& i) {
                           return testing::test_name(std::get<0>(i.param) + "_" + tensor::isa_name(std::get<1>(i.param)));
                         });

// A hole where a query still looks is refused before anything is computed.
TEST(KvWindowForward, RefusesAHoleInsideTheWindow) {
  const testing::TinySpec spec{.arch = "gemma3", .layers = 6, .head_dim = 16, .window = 5};
  auto m = Model::load(testing::write_tiny(spec, ::ts::testing::temp_dir() + "/gemma3-w5h.gguf"));
  ASSERT_TRUE(m.ok());
  WindowRunner win(**m, KvType::kF32, 4, 64);
  std::vector<int32_t> p(9, 5);
  (void)win.feed(p, 1, nullptr);  // positions 0..8: first needed at 9 - 5 + 1 = 5, block 0 released
  ASSERT_EQ(win.tables[1][0], KvLayout::kNoBlock);
  ASSERT_NE(win.tables[1][1], KvLayout::kNoBlock);
  win.tables[1][1] = KvLayout::kNoBlock;  // block 1 (positions 4..7) is still in the window
  EXPECT_THROW((void)win.feed({6}, 1, nullptr), std::runtime_error);
  // Too few group tables.
  std::vector<std::span<const int32_t>> one(1, std::span<const int32_t>(win.tables[0]));
  SeqSlice s{.num_tokens = 1, .start_pos = 9, .block_table = win.tables[0], .num_logits = 1, .group_tables = one};
  std::vector<float> logits((*m)->config().n_vocab);
  const std::vector<int32_t> tok = {6};
  EXPECT_FALSE((*m)->forward({.tokens = tok, .seqs = std::span<const SeqSlice>(&s, 1)}, win.kv, logits.data(), nullptr).ok());
}

}  // namespace
}  // namespace ts::model
