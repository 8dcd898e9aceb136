#include "router/picker.h"

#include <algorithm>
#include <cstdio>

#include "gateway/json_text.h"

namespace ts::router {

namespace {
std::string fmt_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}
}  // namespace

nlohmann::json Decision::to_json() const {
  nlohmann::json r = nlohmann::json::array();
  for (const Candidate& c : ranked)
    r.push_back({{"name", c.name}, {"score", c.score}, {"prefix", c.prefix}, {"queue", c.queue}, {"kv", c.kv},
                 {"load", c.load}, {"stale", c.stale}, {"prefix_blocks", c.prefix_blocks}});
  return {{"ranked", r},
          {"filtered_out", filtered_out},
          {"guard_applied", guard_applied},
          {"shed", shed},
          {"prompt_blocks", prompt_blocks},
          {"took_us", std::chrono::duration_cast<std::chrono::microseconds>(took).count()}};
}

void Decision::append_json(std::string& out) const {
  using namespace gateway;  // json_text.h; keys in to_json()'s (sorted) order
  out += '{';
  append_json_key(out, "filtered_out", true);
  out += '[';
  for (size_t i = 0; i < filtered_out.size(); ++i) {
    if (i) out += ',';
    append_json_string(out, filtered_out[i]);
  }
  out += ']';
  append_json_key(out, "guard_applied");
  append_json_bool(out, guard_applied);
  append_json_key(out, "prompt_blocks");
  append_json_int(out, prompt_blocks);
  append_json_key(out, "ranked");
  out += '[';
  for (size_t i = 0; i < ranked.size(); ++i) {
    const Candidate& c = ranked[i];
    out += i ? ",{" : "{";
    append_json_key(out, "kv", true);
    append_json_double(out, c.kv);
    append_json_key(out, "load");
    append_json_double(out, c.load);
    append_json_key(out, "name");
    append_json_string(out, c.name);
    append_json_key(out, "prefix");
    append_json_double(out, c.prefix);
    append_json_key(out, "prefix_blocks");
    append_json_int(out, c.prefix_blocks);
    append_json_key(out, "queue");
    append_json_double(out, c.queue);
    append_json_key(out, "score");
    append_json_double(out, c.score);
    append_json_key(out, "stale");
    append_json_bool(out, c.stale);
    out += '}';
  }
  out += ']';
  append_json_key(out, "shed");
  append_json_bool(out, shed);
  append_json_key(out, "took_us");
  append_json_int(out, std::chrono::duration_cast<std::chrono::microseconds>(took).count());
  out += '}';
}

std::string render_chat_prompt(const nlohmann::json& messages) {
  std::string out;
  if (!messages.is_array()) return out;
  for (const auto& m : messages) {
    if (!m.is_object()) continue;
    out += "<|";
    if (auto r = m.find("role"); r != m.end() && r->is_string()) out += r->get<std::string>();
    out += "|>\n";
    if (auto c = m.find("content"); c != m.end()) {
      if (c->is_string()) {
        out += c->get<std::string>();
      } else if (c->is_array()) {
        for (const auto& part : *c)
          if (part.is_object())
            if (auto t = part.find("text"); t != part.end() && t->is_string()) out += t->get<std::string>();
      }
    }
    out += "\n";
  }
  return out;
}

Picker::Picker(PickerOptions opts)
    : opts_(opts), index_(opts.prefix), rng_(opts.seed ? opts.seed : std::random_device{}()) {}

Decision Picker::pick(const PickRequest& req, const std::vector<EndpointState>& endpoints, Clock::time_point now) {
  auto t0 = Clock::now();
  Decision d;
  d.block_hashes = prefix_block_hashes(req.model, req.tenant, req.prompt, opts_.prefix.block_chars);
  d.prompt_blocks = static_cast<int64_t>(d.block_hashes.size());

  std::vector<const EndpointState*> eligible;
  for (const EndpointState& e : endpoints) {
    if (e.ejected) {
      d.filtered_out.push_back(e.name + ": ejected");
    } else if (!e.ready) {
      d.filtered_out.push_back(e.name + ": not ready");
    } else if (auto m = e.labels.find("model"); m != e.labels.end() && !req.model.empty() && m->second != req.model) {
      d.filtered_out.push_back(e.name + ": serves model " + m->second);
    } else {
      eligible.push_back(&e);
    }
  }

  std::lock_guard lock(mu_);
  double max_waiting = 0, min_load = 0, max_load = 0, min_waiting = 0;
  bool any_fresh = false;
  std::vector<Candidate> cands;
  for (const EndpointState* e : eligible) {
    Candidate c;
    c.name = e->name;
    c.stale = !e->has_metrics || now - e->scraped_at > opts_.stale_after;
    double running = e->running, waiting = e->waiting;
    // The gateway's own count covers requests sent since the last scrape.
    double inflight = static_cast<double>(e->in_flight);
    if (inflight > running + waiting) waiting = std::max(waiting, inflight - running);
    c.load = waiting + running;
    c.queue = waiting;  // raw for now, normalised below
    c.kv = std::clamp(1.0 - e->kv_usage, 0.0, 1.0);
    c.prefix_blocks = static_cast<int64_t>(index_.match(e->name, d.block_hashes));
    c.prefix = d.prompt_blocks > 0 ? static_cast<double>(c.prefix_blocks) / static_cast<double>(d.prompt_blocks) : 0;
    if (!c.stale) {
      max_waiting = std::max(max_waiting, waiting);
      if (!any_fresh) {
        min_load = max_load = c.load;
        min_waiting = waiting;
      }
      min_waiting = std::min(min_waiting, waiting);
      min_load = std::min(min_load, c.load);
      max_load = std::max(max_load, c.load);
      any_fresh = true;
    }
    cands.push_back(c);
  }
  d.min_waiting = min_waiting;
  if (req.batch && opts_.shed_batch_waiting > 0 && any_fresh && min_waiting >= opts_.shed_batch_waiting) {
    d.shed = true;
    d.filtered_out.push_back("batch shed: every endpoint has waiting >= " + fmt_num(opts_.shed_batch_waiting));
    d.took = Clock::now() - t0;
    return d;
  }
  d.guard_applied = opts_.imbalance_guard && any_fresh && max_load - min_load > opts_.guard_abs &&
                    max_load > opts_.guard_rel * min_load;
  for (Candidate& c : cands) {
    c.queue = max_waiting > 0 ? 1.0 - std::min(c.queue, max_waiting) / max_waiting : 1.0;
    if (c.stale) {
      c.score = 0;
    } else if (d.guard_applied) {
      // Least-loaded wins; queue/kv only break near-ties.
      c.score = 1.0 - (max_load > 0 ? c.load / max_load : 0) + 1e-3 * (c.queue + c.kv);
    } else {
      c.score = opts_.weight_prefix * c.prefix + opts_.weight_queue * c.queue + opts_.weight_kv * c.kv;
    }
  }
  // Random tie-break: shuffle, then a stable sort by (fresh first, score).
  std::shuffle(cands.begin(), cands.end(), rng_);
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.stale != b.stale) return !a.stale;
    return a.score > b.score;
  });
  d.ranked = std::move(cands);
  d.took = Clock::now() - t0;
  return d;
}

void Picker::record(const std::string& endpoint, const Decision& d) {
  std::lock_guard lock(mu_);
  index_.record(endpoint, d.block_hashes);
}

void Picker::forget(const std::string& endpoint) {
  std::lock_guard lock(mu_);
  index_.erase(endpoint);
}

}  // namespace ts::router
