#include "structured/constraint.h"

#include <algorithm>
#include <list>
#include <map>
#include <mutex>
#include <numeric>

#include "structured/grammar.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace ts::structured {

// ---- TokenIndex ----

TokenIndex::TokenIndex(const tokenizer::Tokenizer& tok) : n_vocab_(tok.n_vocab()) {
  bytes_.resize(static_cast<size_t>(n_vocab_));
  text_.resize(static_cast<size_t>(n_vocab_));
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < n_vocab_; ++id) {
    text_[static_cast<size_t>(id)] = tok.token_bytes(id);
    if (tok.is_eog(id)) eog_.push_back(id);
    if (tok.is_control(id) || tok.is_eog(id)) continue;
    bytes_[static_cast<size_t>(id)] = text_[static_cast<size_t>(id)];
    if (!bytes_[static_cast<size_t>(id)].empty()) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)] ||
           (bytes_[static_cast<size_t>(a)] == bytes_[static_cast<size_t>(b)] && a < b);
  });
  // Pre-order trie from the sorted strings.
  std::vector<int32_t> path;  // node index per depth - 1
  std::vector<std::pair<int32_t, int32_t>> owner;  // (node, token)
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    size_t lcp = 0;
    if (prev) while (lcp < prev->size() && lcp < s.size() && (*prev)[lcp] == s[lcp]) ++lcp;
    while (path.size() > lcp) {
      trie_.end[static_cast<size_t>(path.back())] = static_cast<int32_t>(trie_.byte.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      path.push_back(static_cast<int32_t>(trie_.byte.size()));
      trie_.byte.push_back(static_cast<uint8_t>(s[d]));
      trie_.depth.push_back(static_cast<uint16_t>(std::min<size_t>(d + 1, 65535)));
      trie_.end.push_back(0);
    }
    owner.emplace_back(path.back(), id);
    max_depth_ = std::max<int32_t>(max_depth_, static_cast<int32_t>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    trie_.end[static_cast<size_t>(path.back())] = static_cast<int32_t>(trie_.byte.size());
    path.pop_back();
  }
  const size_t N = trie_.byte.size();
  trie_.tok_off.assign(N + 1, 0);
  for (const auto& [node, id] : owner) ++trie_.tok_off[static_cast<size_t>(node) + 1];
  for (size_t i = 0; i < N; ++i) trie_.tok_off[i + 1] += trie_.tok_off[i];
  trie_.tok.resize(owner.size());
  std::vector<int32_t> fill(trie_.tok_off.begin(), trie_.tok_off.end() - 1);
  for (const auto& [node, id] : owner) trie_.tok[static_cast<size_t>(fill[static_cast<size_t>(node)]++)] = id;
}

std::shared_ptr<const TokenIndex> TokenIndex::for_tokenizer(const tokenizer::Tokenizer& tok) {
  struct Key {
    const tokenizer::Tokenizer* ptr;
    int32_t n_vocab;
    std::string probe;  // a few token texts: an address reused by another tokenizer differs
    bool operator<(const Key& o) const {
      return std::tie(ptr, n_vocab, probe) < std::tie(o.ptr, o.n_vocab, o.probe);
    }
  };
  static std::mutex mu;
  static std::map<Key, std::weak_ptr<const TokenIndex>> cache;
  Key k{&tok, tok.n_vocab(), {}};
  for (int32_t i = 0; i < 16 && i < tok.n_vocab(); ++i) {
    k.probe += tok.token_bytes(tok.n_vocab() - 1 - i * 7919 % tok.n_vocab());
    k.probe += '\0';
  }
  std::lock_guard<std::mutex> l(mu);
  auto it = cache.find(k);
  if (it != cache.end()) {
    if (auto sp = it->second.lock()) return sp;
  }
  auto sp = std::make_shared<const TokenIndex>(tok);
  cache[k] = sp;
  return sp;
}

// ---- Constraint ----

Constraint::Constraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenIndex> index,
                       ConstraintSpec spec)
    : spec_(std::move(spec)), grammar_(std::move(g)), index_(std::move(index)),
      runtime_(std::make_unique<Runtime>(*grammar_, index_.get())) {}

Constraint::~Constraint() = default;

Result<std::shared_ptr<const Constraint>> compile(const ConstraintSpec& spec,
                                                  std::shared_ptr<const TokenIndex> index,
                                                  const CompileLimits& limits) {
  if (!index) return invalid_argument("constraint: no token index");
  if (static_cast<int64_t>(spec.source.size()) > limits.max_source_bytes)
    return invalid_argument("constraint source is larger than " + std::to_string(limits.max_source_bytes) + " bytes");
  GrammarAst ast;
  switch (spec.kind) {
    case ConstraintKind::kJsonObject:
    case ConstraintKind::kJsonSchema: {
      const std::string src = spec.kind == ConstraintKind::kJsonObject ? std::string("{\"type\":\"object\"}") : spec.source;
      TS_ASSIGN_OR_RETURN(std::string gbnf, schema_to_gbnf(src, "j-", limits));
      gbnf += "root ::= [ \\t\\n]{0,4} j-root\n";  // leading whitespace (e.g. after a reasoning block)
      auto parsed = parse_gbnf(gbnf, limits);
      if (!parsed.ok()) return invalid_argument("schema: " + parsed.status().message());
      ast = std::move(parsed).value();
      break;
    }
    case ConstraintKind::kGrammar: {
      TS_ASSIGN_OR_RETURN(ast, parse_gbnf(spec.source, limits));
      break;
    }
    case ConstraintKind::kRegex: {
      TS_ASSIGN_OR_RETURN(Node n, parse_regex(spec.source, limits));
      ast.rules.emplace_back("root", std::move(n));
      break;
    }
  }
  TS_ASSIGN_OR_RETURN(Grammar g, lower(ast, limits));
  auto gp = std::make_shared<const Grammar>(std::move(g));
  return std::shared_ptr<const Constraint>(std::make_shared<Constraint>(std::move(gp), std::move(index), spec));
}

Result<std::shared_ptr<const Constraint>> compile_cached(const ConstraintSpec& spec,
                                                         std::shared_ptr<const TokenIndex> index) {
  struct Entry {
    ConstraintSpec spec;
    const TokenIndex* index;
    std::shared_ptr<const Constraint> c;
  };
  static std::mutex mu;
  static std::list<Entry> lru;  // most recent first
  static std::multimap<size_t, std::list<Entry>::iterator> by_hash;
  constexpr size_t kCapacity = 16;  // each holds up to ~30 MB of memo tables
  const size_t h = std::hash<std::string>{}(std::to_string(static_cast<int>(spec.kind)) + '\0' + spec.source + '\0' +
                                            spec.start_after) ^ std::hash<const void*>{}(index.get());
  {
    std::lock_guard<std::mutex> l(mu);
    auto [b, e] = by_hash.equal_range(h);
    for (auto it = b; it != e; ++it) {
      const Entry& en = *it->second;
      if (en.index == index.get() && en.spec.kind == spec.kind && en.spec.source == spec.source &&
          en.spec.start_after == spec.start_after) {
        lru.splice(lru.begin(), lru, it->second);
        return en.c;
      }
    }
  }
  TS_ASSIGN_OR_RETURN(auto c, compile(spec, index));  // outside the lock: compiles run in parallel
  std::lock_guard<std::mutex> l(mu);
  lru.push_front(Entry{spec, index.get(), c});
  by_hash.emplace(h, lru.begin());
  while (lru.size() > kCapacity) {
    auto last = std::prev(lru.end());
    for (auto it = by_hash.begin(); it != by_hash.end(); ++it) {
      if (it->second == last) { by_hash.erase(it); break; }
    }
    lru.pop_back();
  }
  return c;
}

// ---- ConstraintState ----

struct ConstraintState::Impl {
  int32_t state = Runtime::kDead;
  uint64_t gen = 0;
  std::string bytes;                 // accepted bytes after the trigger (replayed after a reset)
  size_t matched = 0;                // trigger bytes matched so far (KMP state)
  std::vector<size_t> fail;          // KMP failure function of the trigger
  std::vector<uint64_t> mask;        // [num_mask_words]
  bool ended = false;                // an EOG token was accepted
  bool mask_fresh = false;           // `mask` holds the mask of the current state

  void sync(Runtime& rt) {
    if (rt.maybe_reset() || gen != rt.generation()) {
      state = rt.run(rt.initial(), bytes);
      gen = rt.generation();
    }
  }
  size_t kmp_next(const std::string& t, size_t m, char c) const {
    while (m > 0 && t[m] != c) m = fail[m - 1];
    if (t[m] == c) ++m;
    return m;
  }
};

ConstraintState::ConstraintState(std::shared_ptr<const Constraint> c)
    : c_(std::move(c)), impl_(std::make_unique<Impl>()) {
  const std::string& t = c_->spec().start_after;
  triggered_ = t.empty();
  impl_->fail.assign(t.size(), 0);
  for (size_t i = 1, k = 0; i < t.size(); ++i) {
    while (k > 0 && t[i] != t[k]) k = impl_->fail[k - 1];
    if (t[i] == t[k]) ++k;
    impl_->fail[i] = k;
  }
  Runtime& rt = c_->runtime();
  std::lock_guard<std::mutex> l(rt.mu());
  impl_->state = rt.initial();
  impl_->gen = rt.generation();
  impl_->mask.assign(static_cast<size_t>(c_->index().num_mask_words()), 0);
}

ConstraintState::~ConstraintState() = default;
ConstraintState::ConstraintState(ConstraintState&&) noexcept = default;
ConstraintState& ConstraintState::operator=(ConstraintState&&) noexcept = default;

std::span<const uint64_t> ConstraintState::mask() {
  if (impl_->mask_fresh) return impl_->mask;
  impl_->mask_fresh = true;
  Runtime& rt = c_->runtime();
  std::lock_guard<std::mutex> l(rt.mu());
  const uint64_t* m;
  if (!triggered_) {
    m = rt.trigger_mask(c_->spec().start_after, impl_->matched);
  } else if (impl_->ended) {
    std::fill(impl_->mask.begin(), impl_->mask.end(), 0);
    return impl_->mask;
  } else {
    impl_->sync(rt);
    m = rt.mask(impl_->state);
  }
  std::copy(m, m + impl_->mask.size(), impl_->mask.begin());
  return impl_->mask;
}

Status ConstraintState::accept(int32_t token) {
  const TokenIndex& idx = c_->index();
  if (token < 0 || token >= idx.n_vocab()) return invalid_argument("token id out of range");
  const bool eog = std::find(idx.eog_tokens().begin(), idx.eog_tokens().end(), token) != idx.eog_tokens().end();
  Runtime& rt = c_->runtime();
  std::lock_guard<std::mutex> l(rt.mu());
  if (impl_->ended) return invalid_argument("constraint: the sequence already ended");
  impl_->mask_fresh = false;
  if (!triggered_) {
    if (eog) return invalid_argument("constraint: end of generation before '" + c_->spec().start_after + "'");
    const std::string& t = c_->spec().start_after;
    const std::string& text = idx.token_text(token);
    size_t m = impl_->matched;
    for (size_t j = 0; j < text.size(); ++j) {
      m = impl_->kmp_next(t, m, text[j]);
      if (m == t.size()) {
        const std::string rest = text.substr(j + 1);
        const int32_t s = rt.run(rt.initial(), rest);
        if (s == Runtime::kDead) return invalid_argument("constraint: token " + std::to_string(token) + " is not allowed here");
        triggered_ = true;
        impl_->state = s;
        impl_->gen = rt.generation();
        impl_->bytes = rest;
        impl_->matched = 0;
        return Status();
      }
    }
    impl_->matched = m;
    return Status();
  }
  impl_->sync(rt);
  if (eog) {
    if (!rt.accepting(impl_->state)) return invalid_argument("constraint: end of generation before the value is complete");
    impl_->ended = true;
    return Status();
  }
  const std::string& b = idx.token_bytes(token);
  if (b.empty()) return invalid_argument("constraint: token " + std::to_string(token) + " produces no text");
  const int32_t s = rt.run(impl_->state, b);
  if (s == Runtime::kDead) return invalid_argument("constraint: token " + std::to_string(token) + " is not allowed here");
  impl_->state = s;
  impl_->bytes += b;
  return Status();
}

Status ConstraintState::reset(std::span<const int32_t> output_tokens) {
  {
    Runtime& rt = c_->runtime();
    std::lock_guard<std::mutex> l(rt.mu());
    impl_->state = rt.initial();
    impl_->gen = rt.generation();
    impl_->bytes.clear();
    impl_->matched = 0;
    impl_->ended = false;
    impl_->mask_fresh = false;
    triggered_ = c_->spec().start_after.empty();
  }
  for (int32_t t : output_tokens) TS_RETURN_IF_ERROR(accept(t));
  return Status();
}

bool ConstraintState::can_end() const {
  if (!triggered_) return false;
  Runtime& rt = c_->runtime();
  std::lock_guard<std::mutex> l(rt.mu());
  impl_->sync(rt);
  return rt.accepting(impl_->state);
}

bool ConstraintState::is_complete() const {
  if (!triggered_) return false;
  if (impl_->ended) return true;
  Runtime& rt = c_->runtime();
  std::lock_guard<std::mutex> l(rt.mu());
  impl_->sync(rt);
  return rt.accepting(impl_->state) && !rt.has_continuation(impl_->state);
}

bool ConstraintState::is_dead() {
  std::span<const uint64_t> m = mask();
  return std::all_of(m.begin(), m.end(), [](uint64_t w) { return w == 0; });
}

}  // namespace ts::structured
