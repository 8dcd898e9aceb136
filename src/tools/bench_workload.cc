#include "tools/bench_workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace ts::tools {

namespace {

// Common short English words: most are one token in BPE and SentencePiece vocabularies, so a
// random sequence of them has a predictable length and a unique prefix.
constexpr std::string_view kWords[] = {
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child",
    "world", "school", "state", "family", "student", "group", "country", "problem", "hand", "part",
    "place", "case", "week", "company", "system", "program", "question", "work", "number", "night",
    "point", "home", "water", "room", "mother", "area", "money", "story", "fact", "month",
    "lot", "right", "study", "book", "eye", "job", "word", "business", "issue", "side",
    "kind", "head", "house", "service", "friend", "father", "power", "hour", "game", "line",
    "end", "member", "law", "car", "city", "name", "team", "minute", "idea", "kid",
    "body", "back", "parent", "face", "others", "level", "office", "door", "health", "person",
    "art", "war", "history", "party", "result", "change", "morning", "reason", "research", "girl",
    "guy", "moment", "air", "teacher", "force", "education", "foot", "boy", "age", "policy",
    "music", "market", "sense", "nation", "plan", "college", "interest", "death", "experience", "effect",
    "use", "class", "control", "care", "field", "development", "role", "effort", "rate", "heart",
    "drug", "show", "leader", "light", "voice", "wife", "police", "mind", "price", "report",
    "decision", "son", "view", "relationship", "town", "road", "arm", "difference", "value", "building",
    "action", "model", "season", "society", "tax", "director", "position", "player", "record", "paper",
    "space", "ground", "form", "event", "official", "matter", "center", "couple", "site", "project",
    "activity", "star", "table", "need", "court", "oil", "situation", "cost", "industry", "figure",
    "street", "image", "phone", "data", "picture", "practice", "piece", "land", "product", "doctor",
    "wall", "patient", "worker", "news", "test", "movie", "north", "love", "support", "technology",
    "step", "baby", "computer", "type", "attention", "film", "tree", "source", "organization", "hair",
    "window", "evidence", "population", "site", "opportunity", "blue", "green", "red", "small", "large",
    "good", "new", "first", "last", "long", "great", "little", "own", "other", "old",
    "big", "high", "different", "young", "important", "few", "public", "bad", "same", "able",
    "run", "walk", "open", "read", "write", "play", "move", "live", "bring", "happen",
    "stand", "lose", "pay", "meet", "include", "continue", "learn", "lead", "understand", "watch",
    "follow", "stop", "create", "speak", "allow", "add", "spend", "grow", "offer", "remember"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);
// Very short words for the last token or two of a prompt: single tokens even in tiny vocabularies.
constexpr std::string_view kFillers[] = {"a", "I", "of", "to", "in", "it", "is", "on"};
constexpr size_t kNumFillers = sizeof(kFillers) / sizeof(kFillers[0]);

uint64_t mix(uint64_t a, uint64_t b) {  // splitmix64 of a combined seed
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Result<std::vector<RequestSpec>> parse_replay(std::string_view text) {
  std::vector<RequestSpec> out;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view l = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    while (!l.empty() && (l.back() == '\r' || l.back() == ' ' || l.back() == '\t')) l.remove_suffix(1);
    while (!l.empty() && (l.front() == ' ' || l.front() == '\t')) l.remove_prefix(1);
    if (l.empty() || l.front() == '#') continue;
    auto where = [&] { return "replay line " + std::to_string(line_no) + ": "; };
    nlohmann::json j = nlohmann::json::parse(l, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument(where() + "not a JSON object");
    RequestSpec r;
    auto num = [&](const char* key, bool integer) -> Result<double> {
      auto it = j.find(key);
      if (it == j.end() || !it->is_number()) return invalid_argument(where() + "missing number '" + key + "'");
      if (integer && !it->is_number_integer()) return invalid_argument(where() + "'" + key + "' must be an integer");
      return it->get<double>();
    };
    // "arrival_s" is what `tokenserve usage --export-replay` writes; "offset" is accepted too.
    TS_ASSIGN_OR_RETURN(r.offset_s, num(j.contains("arrival_s") ? "arrival_s" : "offset", false));
    TS_ASSIGN_OR_RETURN(double in, num("input_tokens", true));
    TS_ASSIGN_OR_RETURN(double outp, num("output_tokens", true));
    if (outp == 0) outp = 1;  // a ledger row that generated nothing still costs one decode step
    if (r.offset_s < 0 || !std::isfinite(r.offset_s)) return invalid_argument(where() + "offset must be >= 0");
    if (in < 1 || outp < 1) return invalid_argument(where() + "token counts must be >= 1");
    r.input_tokens = static_cast<int64_t>(in);
    r.output_tokens = static_cast<int64_t>(outp);
    if (auto it = j.find("tier"); it != j.end() && !it->is_null()) {
      if (!it->is_string()) return invalid_argument(where() + "'tier' must be a string");
      r.tier = it->get<std::string>();
    }
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const RequestSpec& a, const RequestSpec& b) { return a.offset_s < b.offset_s; });
  return out;
}

Result<Workload> Workload::make(const Options& o) {
  Workload w;
  w.seed_ = o.seed;
  const std::string& s = o.scenario;
  auto shape = [&](int64_t in, int64_t out) {
    RequestSpec r;
    r.input_tokens = o.input_tokens > 0 ? o.input_tokens : in;
    r.output_tokens = o.output_tokens > 0 ? o.output_tokens : out;
    r.tier = o.tier;
    return r;
  };
  if (s.rfind("replay:", 0) == 0) {
    std::string path = s.substr(7);
    std::ifstream f(path);
    if (!f) return not_found("cannot read replay file " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    TS_ASSIGN_OR_RETURN(w.replay_, parse_replay(ss.str()));
    if (w.replay_.empty()) return invalid_argument("replay file " + path + " has no requests");
    for (RequestSpec& r : w.replay_) {
      if (r.tier.empty()) r.tier = o.tier;
      if (o.input_tokens > 0) r.input_tokens = o.input_tokens;
      if (o.output_tokens > 0) r.output_tokens = o.output_tokens;
    }
    w.name_ = "replay";
    return w;
  }
  if (s == "short-short") {
    w.shapes_ = {shape(kShortInput, kShortOutput)};
  } else if (s == "long-short") {
    w.shapes_ = {shape(kLongInput, kShortOutput)};
  } else if (s == "short-long") {
    w.shapes_ = {shape(kShortInput, kLongOutput)};
  } else if (s == "mixed") {
    w.shapes_ = {shape(kShortInput, kShortOutput), shape(kLongInput, kShortOutput),
                 shape(kShortInput, kLongOutput)};
  } else {
    return invalid_argument("unknown scenario '" + s +
                            "' (short-short, long-short, short-long, mixed, replay:FILE)");
  }
  // Overrides can make mixed shapes identical: keep one of each.
  std::vector<RequestSpec> uniq;
  for (const RequestSpec& r : w.shapes_) {
    bool dup = false;
    for (const RequestSpec& u : uniq) dup |= u.input_tokens == r.input_tokens && u.output_tokens == r.output_tokens;
    if (!dup) uniq.push_back(r);
  }
  w.shapes_ = std::move(uniq);
  w.name_ = s;
  return w;
}

RequestSpec Workload::at(int64_t index) const {
  if (!replay_.empty()) return replay_[static_cast<size_t>(index) % replay_.size()];
  if (shapes_.size() == 1) return shapes_[0];
  return shapes_[mix(seed_, static_cast<uint64_t>(index)) % shapes_.size()];
}

std::string Workload::describe() const {
  auto shape_str = [](const RequestSpec& r) {
    return "in " + std::to_string(r.input_tokens) + ", out " + std::to_string(r.output_tokens);
  };
  if (!replay_.empty()) {
    return "replay (" + std::to_string(replay_.size()) + " requests over " +
           std::to_string(static_cast<int64_t>(std::ceil(replay_.back().offset_s))) + " s)";
  }
  std::string d = name_ + " (";
  for (size_t i = 0; i < shapes_.size(); ++i) d += (i ? " | " : "") + shape_str(shapes_[i]);
  return d + ")";
}

PromptBuilder::PromptBuilder(TokenCounter counter, uint64_t seed, int64_t shared_prefix_tokens)
    : counter_(std::move(counter)), seed_(seed), prefix_target_(shared_prefix_tokens) {}

Status PromptBuilder::init() {
  if (counter_) {
    TS_ASSIGN_OR_RETURN(empty_tokens_, counter_(""));
    // Calibrate tokens per word on a sample so the first guess is close.
    std::mt19937_64 rng(mix(seed_, 0xCA11B));
    std::string sample;
    constexpr int kSample = 64;
    for (int i = 0; i < kSample; ++i) {
      if (i) sample.push_back(' ');
      sample.append(kWords[rng() % kNumWords]);
    }
    TS_ASSIGN_OR_RETURN(int64_t n, counter_(sample));
    tokens_per_word_.store(std::max(0.25, static_cast<double>(n - empty_tokens_) / kSample));
  } else {
    empty_tokens_ = 1;  // assume a BOS token
  }
  if (prefix_target_ > 0) {
    TS_ASSIGN_OR_RETURN(Prompt p, fit("", prefix_target_, mix(seed_, 0x5EED)));
    prefix_text_ = std::move(p.text);
    prefix_tokens_ = p.measured_tokens >= 0 ? p.measured_tokens : prefix_target_;
  }
  return ok_status();
}

Result<Prompt> PromptBuilder::build(int64_t tokens, uint64_t request_seed) const {
  return fit(prefix_text_, tokens, mix(seed_, request_seed + 1));
}

Result<Prompt> PromptBuilder::fit(const std::string& head, int64_t target, uint64_t seed) const {
  std::mt19937_64 rng(seed);
  std::vector<std::string_view> words;
  auto text_of = [&](int64_t k) {
    while (static_cast<int64_t>(words.size()) < k) words.push_back(kWords[rng() % kNumWords]);
    std::string t = head;
    for (int64_t i = 0; i < k; ++i) {
      if (!t.empty()) t.push_back(' ');
      t.append(words[static_cast<size_t>(i)]);
    }
    return t;
  };
  const int64_t base = head.empty() ? empty_tokens_ : prefix_tokens_;
  const int64_t need = std::max<int64_t>(1, target - base);
  if (!counter_) return Prompt{text_of(need), -1};

  double tpw = tokens_per_word_.load();
  int64_t k = std::max<int64_t>(1, std::llround(static_cast<double>(need) / tpw));
  Prompt best;
  int64_t best_score = INT64_MAX;
  int64_t lo = 0, hi = INT64_MAX;  // word counts known to be short / long
  bool fine = false;               // word granularity reached: adjust with fillers
  constexpr int kMaxCalls = 20;
  for (int call = 0; call < kMaxCalls; ++call) {
    std::string t = text_of(k);
    TS_ASSIGN_OR_RETURN(int64_t c, counter_(t));
    const int64_t diff = target - c;
    // Prefer exact, then the closest, then one that is short rather than long.
    const int64_t score = diff >= 0 ? 2 * diff : -2 * diff + 1;
    if (score < best_score) {
      best_score = score;
      best = Prompt{std::move(t), c};
    }
    if (diff == 0) break;
    if (c > base && call == 0) tpw = std::max(0.25, static_cast<double>(c - base) / static_cast<double>(k));
    if (diff > 0) lo = std::max(lo, k);
    else hi = std::min(hi, k);
    bool short_now = diff > 0;
    if (!fine && (diff > 1 || diff < -1)) {  // far: proportional step inside the bracket
      int64_t step = std::llround(static_cast<double>(diff) / tpw);
      if (step == 0) step = diff > 0 ? 1 : -1;
      const int64_t next = std::max<int64_t>(1, k + step);
      if (next > lo && next < hi) {
        k = next;
        continue;
      }
      fine = true;
      if (diff < 0 && lo > 0) {  // continue from the longest short text
        k = lo;
        short_now = true;
      }
    }
    if (short_now) {
      // Short: append a filler (one token nearly everywhere).
      text_of(k);
      words.insert(words.begin() + k, kFillers[rng() % kNumFillers]);
      ++k;
    } else {  // long: make the last word a filler, or drop it
      const bool last_is_filler =
          std::find(std::begin(kFillers), std::end(kFillers), words[static_cast<size_t>(k - 1)]) != std::end(kFillers);
      if (last_is_filler && k > 1) --k;
      else words[static_cast<size_t>(k - 1)] = kFillers[rng() % kNumFillers];
    }
  }
  tokens_per_word_.store(tpw);
  return best;
}

}  // namespace ts::tools
