// /metrics against a known workload on a real `tokenserve serve`: after N requests (streamed
// and not, completions and chat) the request counters and histogram counts equal N and the
// token counters equal the sums of the usage bodies; refusals land in request_errors_total and
// rate_limited_total; every request logs one JSON line with its x-request-id.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, haveShared } from './server_harness.mjs';
import crypto from 'node:crypto';
import { call, completion, createKey, metricSum, model, parseProm, sseUsage, tempDir } from './gov_helpers.mjs';

// With API keys on, /metrics and /dashboard/data need the metrics (or admin) key.
const METRICS_KEY = 'ts-metrics-integration-test-key';

const skip = !haveShared && 'shared test data not found';
let dir, server, key;

before(async () => {
  if (!haveShared) return;
  dir = tempDir('metrics');
  const ledger = path.join(dir, 'ledger.db');
  key = createKey(ledger, { tenant: 'metered', app: 'm', rpm: 100 }).key;
  const config = path.join(dir, 'gov.toml');
  fs.writeFileSync(config, `[metrics]\nkey_sha256 = "${crypto.createHash('sha256').update(METRICS_KEY).digest('hex')}"\n`);
  server = await startServer(['--threads', '1', '--ledger', ledger, '--config', config]);
});

after(async () => {
  if (server) assert.equal((await server.stop()).code, 0);
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('counters and histograms match the usage bodies of a known workload', { skip }, async () => {
  const before = parseProm((await call(server.url, '/metrics', { method: 'GET', key: METRICS_KEY })).text);
  assert.equal(metricSum(before, 'tokenserve:request_success_total'), 0);

  const usages = [];
  const ids = [];
  for (let i = 0; i < 8; ++i) {
    const rid = `metrics-test-${i}`;
    ids.push(rid);
    const headers = { 'x-request-id': rid };
    let r;
    if (i % 4 === 0) {
      r = await completion(server.url, key, { max_tokens: 5 + i, stream: true, stream_options: { include_usage: true } }, { headers });
      usages.push(sseUsage(r.text));
    } else if (i % 4 === 1) {
      r = await call(server.url, '/v1/chat/completions', { key, headers, body: {
        model, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 6, temperature: 0 } });
      usages.push(r.json.usage);
    } else {
      r = await completion(server.url, key, { max_tokens: 3 + i, ignore_eos: i % 2 === 0 }, { headers });
      usages.push(r.json.usage);
    }
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-request-id'), rid);
  }
  // Refusals before the engine: a bad body (400) and a bad key (401).
  assert.equal((await call(server.url, '/v1/completions', { key, body: '{"model":' })).status, 400);
  assert.equal((await completion(server.url, 'ts-wrong')).status, 401);

  const N = usages.length;
  const prompt = usages.reduce((a, u) => a + u.prompt_tokens, 0);
  const gen = usages.reduce((a, u) => a + u.completion_tokens, 0);
  const m = parseProm((await call(server.url, '/metrics', { method: 'GET', key: METRICS_KEY })).text);
  assert.equal(metricSum(m, 'tokenserve:request_success_total'), N);
  assert.equal(metricSum(m, 'tokenserve:prompt_tokens_total'), prompt);
  assert.equal(metricSum(m, 'tokenserve:generation_tokens_total'), gen);
  assert.equal(metricSum(m, 'tokenserve:prompt_tokens_total', { tenant: 'metered' }), prompt);
  for (const h of ['e2e_request_latency_seconds', 'time_to_first_token_seconds', 'request_queue_time_seconds',
    'request_prompt_tokens', 'request_generation_tokens']) {
    assert.equal(metricSum(m, `tokenserve:${h}_count`), N, h);
    assert.equal(metricSum(m, `tokenserve:${h}_bucket`, { le: '+Inf' }), N, `${h} +Inf bucket`);
  }
  assert.equal(metricSum(m, 'tokenserve:request_prompt_tokens_sum'), prompt);
  assert.equal(metricSum(m, 'tokenserve:request_generation_tokens_sum'), gen);
  assert.equal(metricSum(m, 'tokenserve:inter_token_latency_seconds_count'),
    usages.reduce((a, u) => a + Math.max(0, u.completion_tokens - 1), 0));
  assert.equal(metricSum(m, 'tokenserve:request_errors_total', { code: '400' }), 1);
  assert.equal(metricSum(m, 'tokenserve:request_errors_total', { code: '401' }), 1);
  assert.ok(m.some((s) => s.name === 'tokenserve:kv_cache_usage_perc'), 'engine gauges sampled');
  assert.ok(m.some((s) => s.name.startsWith('tokenserve:') && s.name.includes('spool')), 'ledger spool depth exported');

  const data = await call(server.url, '/dashboard/data', { method: 'GET', key: METRICS_KEY });
  assert.equal(data.json.totals.requests, N);
  assert.equal(data.json.totals.prompt_tokens, prompt);
  assert.equal(data.json.totals.generation_tokens, gen);

  // One JSON log line per request, carrying its x-request-id and tokens.
  const lines = server.log().split('\n').filter((l) => l.startsWith('{') && l.includes('"event":"request"'))
    .map((l) => JSON.parse(l));
  for (let i = 0; i < N; ++i) {
    const l = lines.find((x) => x.request_id === ids[i]);
    assert.ok(l, `log line for ${ids[i]}`);
    assert.equal(l.tenant, 'metered');
    assert.equal(l.prompt_tokens, usages[i].prompt_tokens);
    assert.equal(l.completion_tokens, usages[i].completion_tokens);
    assert.equal(l.status, 200);
  }
});

test('rate-limit refusals are counted', { skip }, async () => {
  const m0 = parseProm((await call(server.url, '/metrics', { method: 'GET', key: METRICS_KEY })).text);
  const dirKey = createKey(path.join(dir, 'ledger.db'), { tenant: 'limited', app: 'x', rpm: 1 }).key;
  assert.equal((await completion(server.url, dirKey, { max_tokens: 2 })).status, 200);
  assert.equal((await completion(server.url, dirKey, { max_tokens: 2 })).status, 429);
  const m = parseProm((await call(server.url, '/metrics', { method: 'GET', key: METRICS_KEY })).text);
  assert.equal(metricSum(m, 'tokenserve:rate_limited_total') - metricSum(m0, 'tokenserve:rate_limited_total'), 1);
  assert.equal(metricSum(m, 'tokenserve:request_errors_total', { code: '429' })
    - metricSum(m0, 'tokenserve:request_errors_total', { code: '429' }), 1);
});
