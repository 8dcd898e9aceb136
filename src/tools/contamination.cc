#include "tools/contamination.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <map>
#include <unordered_map>

#include <unistd.h>

#include <nlohmann/json.hpp>

namespace ts::tools {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kNumHashes = 128;
constexpr int kBands = 32;
constexpr int kRows = kNumHashes / kBands;  // 4
constexpr int kShingle = 3;
using Signature = std::array<uint64_t, kNumHashes>;

uint64_t fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Hashes of the word n-grams of `w`; one whole-text hash when w has fewer than n words.
std::vector<uint64_t> gram_hashes(const std::vector<std::string>& w, int n) {
  std::vector<uint64_t> out;
  if (w.empty()) return out;
  const size_t nn = static_cast<size_t>(n);
  if (w.size() < nn) {
    uint64_t h = 14695981039346656037ull;
    for (const auto& x : w) h = fnv1a(fnv1a(h, x), "\x1f");
    out.push_back(h);
    return out;
  }
  for (size_t i = 0; i + nn <= w.size(); ++i) {
    uint64_t h = 14695981039346656037ull;
    for (size_t k = 0; k < nn; ++k) h = fnv1a(fnv1a(h, w[i + k]), "\x1f");
    out.push_back(h);
  }
  return out;
}

Signature minhash(const std::vector<std::string>& words) {
  Signature sig;
  sig.fill(std::numeric_limits<uint64_t>::max());
  std::vector<uint64_t> sh = gram_hashes(words, kShingle);
  std::sort(sh.begin(), sh.end());
  sh.erase(std::unique(sh.begin(), sh.end()), sh.end());
  for (uint64_t h : sh)
    for (int i = 0; i < kNumHashes; ++i)
      sig[static_cast<size_t>(i)] = std::min(sig[static_cast<size_t>(i)], splitmix64(h ^ splitmix64(static_cast<uint64_t>(i) + 1)));
  return sig;
}

uint64_t band_key(const Signature& s, int band) {
  uint64_t h = splitmix64(static_cast<uint64_t>(band) * 0x100000001b3ull);
  for (int r = 0; r < kRows; ++r) h = splitmix64(h ^ s[static_cast<size_t>(band * kRows + r)]);
  return h;
}

struct Doc {
  std::string where;  // "file:line"
  std::string text;
};

Status read_corpus(const std::string& path, std::vector<Doc>* docs) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found("corpus file '" + path + "' not found");
  if (fs::is_directory(path, ec)) return invalid_argument("corpus '" + path + "' is a folder; name files");
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument("corpus file '" + path + "' cannot be read");
  const bool jsonl = fs::path(path).extension() == ".jsonl";
  std::string line, para;
  int64_t num = 0, para_start = 0;
  while (std::getline(in, line)) {
    ++num;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const bool blank = line.find_first_not_of(" \t") == std::string::npos;
    if (jsonl) {
      if (blank) continue;
      std::string text = line;
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object()) {
        if (j.contains("text") && j["text"].is_string()) text = j["text"].get<std::string>();
        else if (j.contains("content") && j["content"].is_string()) text = j["content"].get<std::string>();
      }
      docs->push_back({path + ":" + std::to_string(num), std::move(text)});
      continue;
    }
    if (blank) {
      if (!para.empty()) docs->push_back({path + ":" + std::to_string(para_start), std::move(para)});
      para.clear();
      continue;
    }
    if (para.empty()) para_start = num;
    else para += '\n';
    para += line;
  }
  if (in.bad()) return invalid_argument("corpus file '" + path + "': read error");
  if (!para.empty()) docs->push_back({path + ":" + std::to_string(para_start), std::move(para)});
  return ok_status();
}

std::string case_text(const EvalCase& c) {
  std::string t = case_input_text(c);
  if (c.expected.is_string()) t += "\n" + c.expected.get<std::string>();
  return t;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

int64_t ContaminationReport::num_contaminated() const {
  int64_t n = 0;
  for (const auto& c : cases) n += c.contaminated;
  return n;
}

std::vector<std::string> normalize_words(const std::string& text) {
  std::vector<std::string> words;
  std::string cur;
  for (char ch : text) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if ((u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || u >= 0x80) cur += ch;
    else if (u >= 'A' && u <= 'Z') cur += static_cast<char>(u - 'A' + 'a');
    else if (!cur.empty()) {
      words.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

Result<ContaminationReport> check_contamination(const EvalSuite& suite,
                                                const std::vector<std::string>& corpus_files,
                                                const ContaminationOptions& o) {
  if (o.n < 1 || o.n > 64) return invalid_argument("--n must be in [1, 64]");
  if (!(o.jaccard > 0 && o.jaccard <= 1)) return invalid_argument("--jaccard must be in (0, 1]");
  if (!(o.max_overlap >= 0 && o.max_overlap < 1)) return invalid_argument("--max-overlap must be in [0, 1)");
  if (corpus_files.empty()) return invalid_argument("no corpus files given");
  std::vector<Doc> docs;
  for (const auto& f : corpus_files) TS_RETURN_IF_ERROR(read_corpus(f, &docs));

  ContaminationReport rep;
  rep.n = o.n;
  rep.corpus_files = corpus_files;
  rep.num_documents = static_cast<int64_t>(docs.size());
  // Corpus n-gram -> first document holding it; band key -> documents.
  std::unordered_map<uint64_t, uint32_t> grams;
  std::unordered_map<uint64_t, std::vector<uint32_t>> bands;
  std::vector<Signature> sigs(docs.size());
  for (uint32_t d = 0; d < docs.size(); ++d) {
    std::vector<std::string> w = normalize_words(docs[d].text);
    for (uint64_t h : gram_hashes(w, o.n)) grams.emplace(h, d);
    if (w.empty()) continue;
    sigs[d] = minhash(w);
    for (int b = 0; b < kBands; ++b) bands[band_key(sigs[d], b)].push_back(d);
  }
  for (const auto& layer : suite.layers) {
    for (const auto& c : layer.cases) {
      CaseContamination cc;
      cc.id = c.id;
      cc.layer = c.layer;
      cc.file = c.file;
      cc.line = c.line;
      std::vector<std::string> w = normalize_words(case_text(c));
      std::vector<uint64_t> hs = gram_hashes(w, o.n);
      int64_t hit = 0;
      for (uint64_t h : hs) {
        auto it = grams.find(h);
        if (it == grams.end()) continue;
        if (hit++ == 0) cc.match = docs[it->second].where;
      }
      cc.ngram_overlap = hs.empty() ? 0 : static_cast<double>(hit) / static_cast<double>(hs.size());
      if (!w.empty()) {
        Signature s = minhash(w);
        std::set<uint32_t> cand;
        for (int b = 0; b < kBands; ++b) {
          auto it = bands.find(band_key(s, b));
          if (it != bands.end()) cand.insert(it->second.begin(), it->second.end());
        }
        uint32_t best_doc = 0;
        for (uint32_t d : cand) {
          int same = 0;
          for (int i = 0; i < kNumHashes; ++i) same += s[static_cast<size_t>(i)] == sigs[d][static_cast<size_t>(i)];
          const double j = static_cast<double>(same) / kNumHashes;
          if (j > cc.max_jaccard) cc.max_jaccard = j, best_doc = d;
        }
        if (cc.max_jaccard >= o.jaccard) {
          cc.near_duplicate = true;
          cc.match = docs[best_doc].where;
        }
      }
      const bool overlap = cc.ngram_overlap > o.max_overlap;
      cc.contaminated = overlap || cc.near_duplicate;
      if (overlap) cc.reason = std::to_string(o.n) + "-gram overlap " + fmt("%.3f", cc.ngram_overlap);
      if (cc.near_duplicate)
        cc.reason += std::string(cc.reason.empty() ? "" : "; ") + "near duplicate (jaccard " +
                     fmt("%.2f", cc.max_jaccard) + ") of " + cc.match;
      rep.cases.push_back(std::move(cc));
    }
  }
  return rep;
}

std::string contamination_json(const ContaminationReport& r) {
  json j;
  j["n"] = r.n;
  j["corpus"] = r.corpus_files;
  j["documents"] = r.num_documents;
  j["contaminated"] = r.num_contaminated();
  j["cases"] = json::array();
  for (const auto& c : r.cases)
    j["cases"].push_back({{"id", c.id},
                          {"layer", c.layer},
                          {"ngram_overlap", c.ngram_overlap},
                          {"near_duplicate", c.near_duplicate},
                          {"max_jaccard", c.max_jaccard},
                          {"match", c.match},
                          {"contaminated", c.contaminated},
                          {"reason", c.reason}});
  return j.dump(2) + "\n";
}

std::string contamination_table(const ContaminationReport& r) {
  std::ostringstream o;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-18s %-24s %8s %8s %5s %5s  %s\n", "layer", "id",
                (std::to_string(r.n) + "-gram").c_str(), "jaccard", "dup", "cont", "match");
  o << buf;
  for (const auto& c : r.cases) {
    std::snprintf(buf, sizeof buf, "%-18s %-24s %8.3f %8.2f %5s %5s  %s\n", c.layer.c_str(),
                  c.id.c_str(), c.ngram_overlap, c.max_jaccard, c.near_duplicate ? "yes" : "no",
                  c.contaminated ? "YES" : "no", c.match.c_str());
    o << buf;
  }
  o << r.num_contaminated() << " of " << r.cases.size() << " cases contaminated (" << r.num_documents
    << " corpus documents)\n";
  return o.str();
}

Status write_clean_suite(const EvalSuite& suite, const ContaminationReport& r,
                         const std::string& out_dir) {
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)))
    return invalid_argument("--remove target '" + out_dir + "' exists and is not an empty folder");
  std::map<std::pair<std::string, std::string>, const CaseContamination*> by;
  for (const auto& c : r.cases) by[{c.layer, c.id}] = &c;
  const fs::path target = fs::absolute(out_dir, ec);
  const fs::path tmp = target.parent_path() / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  auto fail = [&](const std::string& why) {
    std::error_code e2;
    fs::remove_all(tmp, e2);
    return invalid_argument(why);
  };
  if (!fs::create_directories(tmp, ec)) return fail("cannot create " + tmp.string() + ": " + ec.message());
  json removed = json::array();
  for (const auto& layer : suite.layers) {
    if (!fs::create_directories(tmp / layer.name, ec)) return fail("cannot create layer folder " + layer.name);
    std::map<std::string, std::string> files;  // file name -> kept lines
    for (const auto& c : layer.cases) {
      const std::string name = fs::path(c.file).filename().string();
      std::string& body = files[name];
      auto it = by.find({c.layer, c.id});
      if (it != by.end() && it->second->contaminated) {
        removed.push_back({{"id", c.id}, {"layer", c.layer}, {"file", c.file}, {"line", c.line},
                           {"reason", it->second->reason}, {"ngram_overlap", it->second->ngram_overlap},
                           {"max_jaccard", it->second->max_jaccard}, {"match", it->second->match}});
        continue;
      }
      body += c.raw_line + "\n";
    }
    for (const auto& [name, body] : files) {
      std::ofstream f(tmp / layer.name / name, std::ios::binary);
      f << body;
      f.close();
      if (!f) return fail("cannot write " + (tmp / layer.name / name).string());
    }
  }
  {
    json rec = {{"source", suite.dir}, {"n", r.n}, {"corpus", r.corpus_files}, {"removed", removed}};
    std::ofstream f(tmp / "REMOVED.json", std::ios::binary);
    f << rec.dump(2) << "\n";
    f.close();
    if (!f) return fail("cannot write REMOVED.json");
  }
  if (fs::exists(target, ec)) fs::remove(target, ec);  // the empty folder checked above
  fs::rename(tmp, target, ec);
  if (ec) return fail("cannot move the cleaned suite into " + out_dir + ": " + ec.message());
  return ok_status();
}

}  // namespace ts::tools
