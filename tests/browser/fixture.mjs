// A fixed /dashboard/data payload (the shape ServerMetrics::dashboard_json() returns) and a
// /metrics text that agrees with it, for the standalone mode of the dashboard test.
// `version` changes the numbers so the test can see the page refresh.

export function makePayload(version = 1) {
  const bucketMs = 5000;
  const n = 120; // ten minutes of 5 s buckets
  const end = Date.UTC(2026, 0, 15, 12, 0, 0) + version * bucketMs;
  const t = Array.from({ length: n }, (_, i) => end - (n - 1 - i) * bucketMs);
  const wave = (i, base, amp, period) => +(base + amp * Math.sin((i + version) / period)).toFixed(3);
  // Batch traffic starts halfway: earlier buckets have no samples (null).
  const half = (i, v) => (i < n / 2 ? null : v);
  const series = {
    t,
    ttft_p50_ms: {
      interactive: t.map((_, i) => wave(i, 180, 40, 9)),
      batch: t.map((_, i) => half(i, wave(i, 900, 200, 13))),
    },
    ttft_p95_ms: {
      interactive: t.map((_, i) => wave(i, 420, 90, 9)),
      batch: t.map((_, i) => half(i, wave(i, 2200, 400, 13))),
    },
    tpot_p50_ms: {
      interactive: t.map((_, i) => wave(i, 24, 4, 7)),
      batch: t.map((_, i) => half(i, wave(i, 38, 6, 7))),
    },
    output_tokens_per_s: t.map((_, i) => wave(i, 350, 120, 11)),
    prompt_tokens_per_s: t.map((_, i) => wave(i, 900, 300, 11)),
    requests: t.map((_, i) => Math.round(wave(i, 12, 5, 8))),
    running: {
      interactive: t.map((_, i) => Math.round(wave(i, 10, 4, 10))),
      batch: t.map((_, i) => (i < n / 2 ? 0 : Math.round(wave(i, 6, 3, 10)))),
    },
    waiting: {
      interactive: t.map((_, i) => Math.max(0, Math.round(wave(i, 1, 2, 6)))),
      batch: t.map((_, i) => (i < n / 2 ? 0 : Math.round(wave(i, 14, 6, 15)))),
    },
    kv_cache_usage: t.map((_, i) => wave(i, 0.62, 0.2, 17)),
    prefix_hit_rate: t.map((_, i) => (i % 10 === 3 ? null : wave(i, 0.45, 0.15, 12))),
    errors: t.map((_, i) => (i % 17 === 0 ? 2 : 0)),
    rate_limited: t.map((_, i) => (i > 90 && i % 5 === 0 ? 3 : 0)),
    quota_rejected: t.map((_, i) => (i === 100 ? 1 : 0)),
    tokens_by_tenant: {
      acme: t.map((_, i) => Math.round(wave(i, 4000, 1500, 9))),
      globex: t.map((_, i) => Math.round(wave(i, 2500, 900, 14))),
      initech: t.map((_, i) => (i < 80 ? 0 : 1200)),
    },
  };
  const k = version; // moves every current value between versions
  return {
    model: "stories260K",
    generated_at_ms: end + 2500,
    tiers: ["interactive", "batch"],
    bucket_seconds: 5,
    window_seconds: 3600,
    current_window_seconds: 60,
    series,
    current: {
      ttft_p50_ms: { interactive: 187.25 + k, batch: 1043.5 + k },
      ttft_p95_ms: { interactive: 455.125 + k, batch: 2301 + k },
      tpot_p50_ms: { interactive: 23.75 + k, batch: null },
      requests: { interactive: 140 + k, batch: 31 },
      output_tokens_per_s: 351.5 + k,
      errors: 2,
      rate_limited: 3 * k,
      quota_rejected: 1,
      prefix_hit_rate: 0.4375,
      window_seconds: 60,
      running: { interactive: 9 + k, batch: 4, total: 13 + k },
      waiting: { interactive: 0, batch: 17, total: 17 },
      kv_cache_usage: 0.8125,
    },
    totals: {
      requests: 12000 + 10 * k,
      prompt_tokens: 1534567 + 100 * k,
      cached_prompt_tokens: 400000,
      generation_tokens: 987654 + 100 * k,
      errors: 42 + k,
      rate_limited: 17 + k,
      quota_rejected: 3,
      preemptions: 5,
      prefix_cache_queries: 1500000,
      prefix_cache_hits: 655000,
      ledger_spool_depth: 7,
    },
    usage: [
      { tenant: "acme", app: "chat", prompt_tokens: 400000 + k, completion_tokens: 200000, total_tokens: 600000 + k, requests: 5000 },
      { tenant: "globex", app: "summarize", prompt_tokens: 250000, completion_tokens: 90000, total_tokens: 340000, requests: 2100 },
      { tenant: "acme", app: "batch-eval", prompt_tokens: 120000, completion_tokens: 30000, total_tokens: 150000, requests: 800 },
      { tenant: "initech", app: "-", prompt_tokens: 50000, completion_tokens: 22000, total_tokens: 72000, requests: 300 },
    ],
  };
}

// /metrics text consistent with the payload's totals and current gauges.
export function metricsText(p) {
  const m = p.model;
  const lines = [];
  const add = (name, type, samples) => {
    lines.push(`# HELP ${name} fixture`, `# TYPE ${name} ${type}`);
    for (const [labels, v] of samples) lines.push(`${name}${labels} ${v}`);
  };
  add("tokenserve:request_success_total", "counter", [
    [`{model="${m}",tier="interactive",finished_reason="stop"}`, p.totals.requests - 100],
    [`{model="${m}",tier="batch",finished_reason="length"}`, 100],
  ]);
  add("tokenserve:prompt_tokens_total", "counter", [
    [`{model="${m}",tier="interactive",tenant="acme"}`, p.totals.prompt_tokens - 1000],
    [`{model="${m}",tier="batch",tenant="globex"}`, 1000],
  ]);
  add("tokenserve:generation_tokens_total", "counter", [
    [`{model="${m}",tier="interactive",tenant="acme"}`, p.totals.generation_tokens],
  ]);
  add("tokenserve:request_errors_total", "counter", [
    [`{code="429"}`, p.totals.rate_limited + p.totals.quota_rejected],
    [`{code="500"}`, p.totals.errors - p.totals.rate_limited - p.totals.quota_rejected],
  ]);
  add("tokenserve:rate_limited_total", "counter", [[`{tenant="acme"}`, p.totals.rate_limited]]);
  add("tokenserve:quota_rejected_total", "counter", [[`{tenant="globex"}`, p.totals.quota_rejected]]);
  add("tokenserve:num_preemptions_total", "counter", [[`{model="${m}"}`, p.totals.preemptions]]);
  add("tokenserve:prefix_cache_hits_total", "counter", [[`{model="${m}"}`, p.totals.prefix_cache_hits]]);
  add("tokenserve:num_requests_running", "gauge", [
    [`{model="${m}",tier="interactive"}`, p.current.running.interactive],
    [`{model="${m}",tier="batch"}`, p.current.running.batch],
  ]);
  add("tokenserve:num_requests_waiting", "gauge", [
    [`{model="${m}",tier="interactive"}`, p.current.waiting.interactive],
    [`{model="${m}",tier="batch"}`, p.current.waiting.batch],
  ]);
  add("tokenserve:kv_cache_usage_perc", "gauge", [[`{model="${m}"}`, p.current.kv_cache_usage]]);
  add("tokenserve:ledger_spool_depth", "gauge", [["", p.totals.ledger_spool_depth]]);
  return lines.join("\n") + "\n";
}
