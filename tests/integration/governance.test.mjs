// Governance end to end against a real `tokenserve serve` (stories260K, SQLite ledger in a temp
// dir, a governance config): every auth / limit / quota error body and header, /v1/usage/me,
// the admin API, a quota race, ledger rows after client disconnects and after SIGTERM with
// requests in flight, and quota counters surviving a restart.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, haveShared, bin, storiesModel } from './server_harness.mjs';
import {
  call, completion, createKey, eventually, model, promptTokens, sha256, sseUsage, tempDir, usageReport,
} from './gov_helpers.mjs';

const skip = !haveShared && 'shared test data not found';
const ADMIN_KEY = 'ts-admin-integration-test-key';
let dir, ledger, configPath, server;

function writeConfig(file, quotaTokens = 100) {
  fs.writeFileSync(file, `log_level = "info"
[admin]
key_sha256 = "${sha256(ADMIN_KEY)}"
[tenants.quota]
quota = { tokens = ${quotaTokens}, period = "day" }
[tenants.race]
quota = { tokens = 500, period = "day" }
[tenants.persist]
quota = { tokens = 200, period = "day" }
`);
}

before(async () => {
  if (!haveShared) return;
  dir = tempDir('gov');
  ledger = path.join(dir, 'ledger.db');
  configPath = path.join(dir, 'gov.toml');
  writeConfig(configPath);
  server = await startServer(['--threads', '1', '--ledger', ledger, '--config', configPath]);
});

after(async () => {
  if (server) {
    const r = await server.stop();
    assert.equal(r.code, 0, `server should exit 0 on SIGTERM, got ${JSON.stringify(r)}\n${server.log()}`);
  }
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

function assertError(r, status, code, type) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json && r.json.error, `OpenAI error body expected: ${r.text}`);
  assert.equal(r.json.error.code, code, r.text);
  if (type) assert.equal(r.json.error.type, type, r.text);
  assert.equal(typeof r.json.error.message, 'string');
  assert.ok(r.json.error.message.length > 10, r.text);
  assert.ok('param' in r.json.error, r.text);
  assert.ok(r.headers.get('x-request-id'), 'x-request-id on every response');
}

test('missing, unknown, disabled and expired keys are 401 invalid_api_key', { skip }, async () => {
  assertError(await completion(server.url, undefined), 401, 'invalid_api_key');
  assertError(await completion(server.url, 'ts-' + 'x'.repeat(40)), 401, 'invalid_api_key');

  const k = createKey(ledger, { tenant: 'acme', app: 'disabled' });
  assert.equal((await completion(server.url, k.key)).status, 200);
  const d = await call(server.url, `/admin/keys/${k.id}/disable`, { key: ADMIN_KEY, body: {} });
  assert.equal(d.status, 200, d.text);
  const r = await completion(server.url, k.key);
  assertError(r, 401, 'invalid_api_key');
  assert.match(r.json.error.message, /disabled/);

  const e = createKey(ledger, { tenant: 'acme', app: 'expiring', expires: '1s' });
  await new Promise((res) => setTimeout(res, 1300));
  const x = await completion(server.url, e.key);
  assertError(x, 401, 'invalid_api_key');
  assert.match(x.json.error.message, /expired/);
  assert.ok(!x.text.includes(e.key), 'the secret is never echoed');
});

test('every /v1 endpoint and /tokenize need a key; metrics and dashboard the admin key; health and ready none', { skip }, async () => {
  const k = createKey(ledger, { tenant: 'acme', app: 'open' });
  for (const [method, p, body] of [['GET', '/v1/models'], ['GET', `/v1/models/${model}`], ['GET', '/v1/usage/me'],
    ['POST', '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }],
    ['POST', '/tokenize', { prompt: 'hi' }], ['POST', '/detokenize', { tokens: [1] }]]) {
    assertError(await call(server.url, p, { method, body }), 401, 'invalid_api_key');
    const ok = await call(server.url, p, { method, body, key: k.key });
    assert.equal(ok.status, 200, `${p}: ${ok.text}`);
  }
  for (const p of ['/health', '/ready']) {
    assert.equal((await call(server.url, p, { method: 'GET' })).status, 200, p);
  }
  for (const p of ['/metrics', '/dashboard', '/dashboard/data']) {
    assertError(await call(server.url, p, { method: 'GET' }), 401, 'invalid_api_key');
    assert.equal((await call(server.url, p, { method: 'GET', key: k.key })).status, 401, `${p} with a tenant key`);
    assert.equal((await call(server.url, p, { method: 'GET', key: ADMIN_KEY })).status, 200, p);
  }
});

test('model and tier not allowed are 403', { skip }, async () => {
  const m = createKey(ledger, { tenant: 'acme', app: 'models', models: 'some-other-model' });
  assertError(await completion(server.url, m.key), 403, 'model_not_allowed');
  const t = createKey(ledger, { tenant: 'acme', app: 'tiers', tiers: 'interactive' });
  assertError(await completion(server.url, t.key, { tier: 'batch' }), 403, 'tier_not_allowed');
  assert.equal((await completion(server.url, t.key, { tier: 'interactive' })).status, 200);
});

test('RPM: headers on success (also SSE), 429 rate_limit_exceeded with Retry-After', { skip }, async () => {
  const k = createKey(ledger, { tenant: 'acme', app: 'rpm', rpm: 2 });
  const a = await completion(server.url, k.key, { stream: true, stream_options: { include_usage: true } },
    { headers: { 'x-request-id': 'trace-rpm-1' } });
  assert.equal(a.status, 200, a.text);
  assert.match(a.headers.get('content-type'), /text\/event-stream/);
  assert.equal(a.headers.get('x-request-id'), 'trace-rpm-1');
  assert.equal(a.headers.get('x-ratelimit-limit-requests'), '2');
  assert.equal(a.headers.get('x-ratelimit-remaining-requests'), '1');
  assert.ok(a.headers.get('x-ratelimit-reset-requests'));
  assert.ok(a.text.endsWith('data: [DONE]\n\n'));
  assert.equal(sseUsage(a.text).completion_tokens, 8);
  const b = await completion(server.url, k.key);
  assert.equal(b.status, 200);
  assert.equal(b.headers.get('x-ratelimit-remaining-requests'), '0');
  const c = await completion(server.url, k.key);
  assertError(c, 429, 'rate_limit_exceeded');
  assert.match(c.json.error.message, /requests per minute/);
  assert.ok(Number(c.headers.get('retry-after')) >= 1, 'Retry-After in seconds');
  assert.equal(c.headers.get('x-ratelimit-limit-requests'), '2');
  assert.equal(c.headers.get('x-ratelimit-remaining-requests'), '0');
  assert.ok(c.headers.get('x-ratelimit-reset-requests'));
});

test('TPM: 429 rate_limit_exceeded on tokens with Retry-After and token headers', { skip }, async () => {
  const k = createKey(ledger, { tenant: 'acme', app: 'tpm', tpm: 60 });
  const a = await completion(server.url, k.key, { max_tokens: 30 });
  assert.equal(a.status, 200, a.text);
  assert.equal(a.headers.get('x-ratelimit-limit-tokens'), '60');
  assert.ok(Number(a.headers.get('x-ratelimit-remaining-tokens')) <= 60 - 35 + 2);
  const b = await completion(server.url, k.key, { max_tokens: 30 });
  assertError(b, 429, 'rate_limit_exceeded');
  assert.match(b.json.error.message, /tokens per minute/);
  assert.ok(Number(b.headers.get('retry-after')) >= 1);
  assert.equal(b.headers.get('x-ratelimit-limit-tokens'), '60');
  assert.ok(b.headers.get('x-ratelimit-reset-tokens'));
});

test('quota: 429 insufficient_quota, x-quota-* headers and /v1/usage/me', { skip }, async () => {
  const k = createKey(ledger, { tenant: 'quota', app: 'q' });
  const reserve = promptTokens + 30;
  for (let i = 1; i <= 2; ++i) {
    const r = await completion(server.url, k.key, { max_tokens: 30 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.usage.total_tokens, reserve);
    assert.equal(r.headers.get('x-quota-limit-tokens'), '100');
    assert.equal(r.headers.get('x-quota-remaining-tokens'), String(100 - i * reserve));
    assert.ok(r.headers.get('x-quota-reset'));
  }
  const r = await completion(server.url, k.key, { max_tokens: 30 });
  assertError(r, 429, 'insufficient_quota', 'insufficient_quota');
  assert.ok(Number(r.headers.get('retry-after')) >= 1);
  const me = await call(server.url, '/v1/usage/me', { method: 'GET', key: k.key });
  assert.equal(me.status, 200, me.text);
  assert.equal(me.json.tenant, 'quota');
  assert.equal(me.json.app, 'q');
  assert.equal(me.json.key_id, k.id);
  const q = me.json.quotas.find((x) => x.scope === 'tenant');
  assert.equal(q.limit, 100);
  assert.equal(q.used, 2 * reserve);
  assert.equal(q.remaining, 100 - 2 * reserve);
  assert.equal(q.period, 'day');
  assertError(await call(server.url, '/v1/usage/me', { method: 'GET', key: 'ts-nope' }), 401, 'invalid_api_key');
});

test('quota race: concurrent requests never overspend; ledger equals the usage bodies', { skip }, async () => {
  const k = createKey(ledger, { tenant: 'race', app: 'r' });
  // 24 requests reserve 5 + 40 each against a 500-token quota, all at once; some stop early.
  const rs = await Promise.all(Array.from({ length: 24 }, (_, i) => completion(server.url, k.key,
    { max_tokens: 40, ignore_eos: i % 2 === 0, temperature: 1, seed: i })));
  const ok = rs.filter((r) => r.status === 200);
  const refused = rs.filter((r) => r.status !== 200);
  for (const r of refused) assertError(r, 429, 'insufficient_quota');
  assert.ok(ok.length >= 11, `at least 500/45 requests fit: ${ok.length}`);
  assert.ok(refused.length > 0, 'some requests must be refused');
  const used = ok.reduce((a, r) => a + r.json.usage.total_tokens, 0);
  assert.ok(used <= 500, `charged ${used} > quota 500`);
  const rep = await eventually(() => {
    const x = usageReport(ledger, { tenant: 'race' });
    return x.totals.requests === ok.length ? x : null;
  });
  assert.ok(rep, 'ledger rows for every admitted request');
  assert.equal(rep.totals.total_tokens, used);
  const me = await call(server.url, '/v1/usage/me', { method: 'GET', key: k.key });
  assert.equal(me.json.quotas[0].used, used, 'the counter holds exactly the settled usage');
});

test('admin API: create, list, rotate, usage report; guarded by the admin key', { skip }, async () => {
  assertError(await call(server.url, '/admin/keys', { method: 'GET' }), 401, 'invalid_admin_key');
  const user = createKey(ledger, { tenant: 'acme', app: 'nosy' });
  assertError(await call(server.url, '/admin/keys', { method: 'GET', key: user.key }), 401, 'invalid_admin_key');

  const c = await call(server.url, '/admin/keys', { key: ADMIN_KEY, body: { tenant: 'adm', app: 'a1', rpm: 5 } });
  assert.equal(c.status, 201, c.text);
  assert.match(c.json.key, /^ts-/);
  assert.equal(c.json.rpm, 5);
  const r1 = await completion(server.url, c.json.key, { max_tokens: 4 });
  assert.equal(r1.status, 200);
  assert.equal(r1.headers.get('x-ratelimit-limit-requests'), '5');
  const list = await call(server.url, '/admin/keys?tenant=adm', { method: 'GET', key: ADMIN_KEY });
  assert.equal(list.status, 200);
  assert.deepEqual(list.json.data.map((k) => k.id), [c.json.id]);
  assert.ok(!list.text.includes(c.json.key), 'secrets are never listed');

  const rot = await call(server.url, `/admin/keys/${c.json.id}/rotate`, { key: ADMIN_KEY, body: {} });
  assert.equal(rot.status, 201, rot.text);
  assert.equal(rot.json.replaces, c.json.id);
  assertError(await completion(server.url, c.json.key), 401, 'invalid_api_key');
  const r2 = await completion(server.url, rot.json.key, { max_tokens: 4 });
  assert.equal(r2.status, 200);

  const bad = await call(server.url, '/admin/keys', { key: ADMIN_KEY, body: { tenant: 'adm' } });
  assert.equal(bad.status, 400, bad.text);

  const rep = await eventually(async () => {
    const u = await call(server.url, '/admin/usage?by=tenant&tenant=adm', { method: 'GET', key: ADMIN_KEY });
    return u.json && u.json.totals.requests === 2 ? u : null;
  });
  assert.ok(rep, 'admin usage report shows both requests');
  assert.equal(rep.json.totals.total_tokens, r1.json.usage.total_tokens + r2.json.usage.total_tokens);
  assert.deepEqual(rep.json.rows.map((r) => r.tenant), ['adm']);
});

test('ledger rows equal requests after client disconnects mid-stream', { skip }, async () => {
  const k = createKey(ledger, { tenant: 'disc', app: 'd' });
  const aborted = await Promise.all(Array.from({ length: 4 }, async () => {
    const ctl = new AbortController();
    const res = await fetch(`${server.url}/v1/completions`, {
      method: 'POST', signal: ctl.signal,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${k.key}` },
      body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 120, ignore_eos: true, stream: true }),
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    await reader.read();  // the first chunk: the request is running
    ctl.abort();
    return true;
  }));
  assert.equal(aborted.length, 4);
  const done = [];
  for (let i = 0; i < 3; ++i) done.push(await completion(server.url, k.key, { max_tokens: 6 }));
  const rep = await eventually(() => {
    const x = usageReport(ledger, { tenant: 'disc' });
    return x.totals.requests === 7 ? x : null;
  }, { timeoutMs: 15000 });
  assert.ok(rep, `7 ledger rows expected: ${JSON.stringify(usageReport(ledger, { tenant: 'disc' }))}`);
  // Cancelled streams are charged their prompt and what they generated before the disconnect.
  assert.ok(rep.totals.prompt_tokens === 7 * promptTokens, JSON.stringify(rep.totals));
  assert.ok(rep.totals.completion_tokens >= 3 * 6 + 4, JSON.stringify(rep.totals));
  assert.ok(rep.totals.completion_tokens <= 3 * 6 + 4 * 120, JSON.stringify(rep.totals));
});

test('SIGTERM with requests in flight: every request gets a ledger row; quota survives a restart', { skip }, async () => {
  // A second server on its own ledger so that stopping it does not disturb the others.
  const d2 = tempDir('gov-term');
  const ledger2 = path.join(d2, 'ledger.db');
  const s = await startServer(['--threads', '1', '--ledger', ledger2, '--config', configPath, '--drain-timeout', '20']);
  try {
    const k = createKey(ledger2, { tenant: 'persist', app: 'p' });
    const first = await completion(s.url, k.key, { max_tokens: 10 });
    assert.equal(first.status, 200, first.text);
    // Streams in flight when SIGTERM arrives (each waits for its first chunk).
    const streams = await Promise.all(Array.from({ length: 3 }, async () => {
      const res = await fetch(`${s.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${k.key}` },
        body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 40, ignore_eos: true, stream: true,
          stream_options: { include_usage: true } }),
      });
      assert.equal(res.status, 200);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let text = dec.decode((await reader.read()).value);
      return { reader, dec, text };
    }));
    const exited = s.stop('SIGTERM');
    const bodies = await Promise.all(streams.map(async (st) => {
      for (;;) {
        const { value, done } = await st.reader.read();
        if (done) break;
        st.text += st.dec.decode(value);
      }
      return st.text;
    }));
    const r = await exited;
    assert.equal(r.code, 0, `exit 0 after drain: ${JSON.stringify(r)}\n${s.log()}`);
    let used = first.json.usage.total_tokens;
    for (const b of bodies) {
      assert.ok(b.includes('data: [DONE]'), 'drained streams complete');
      used += sseUsage(b).total_tokens;
    }
    assert.match(s.log(), /ledger: 4 rows written/);
    const rep = usageReport(ledger2, { tenant: 'persist' });
    assert.equal(rep.totals.requests, 4, 'a ledger row per request, flushed before exit');
    assert.equal(rep.totals.total_tokens, used);

    // Restart on the same ledger: the quota counter is rebuilt from the ledger.
    const s2 = await startServer(['--threads', '1', '--ledger', ledger2, '--config', configPath]);
    try {
      const me = await call(s2.url, '/v1/usage/me', { method: 'GET', key: k.key });
      assert.equal(me.status, 200, me.text);
      assert.equal(me.json.quotas[0].used, used);
      assert.equal(me.json.quotas[0].remaining, 200 - used);
      const over = await completion(s2.url, k.key, { max_tokens: 200 - used });
      assertError(over, 429, 'insufficient_quota');
    } finally {
      assert.equal((await s2.stop()).code, 0);
    }
  } finally {
    if (s.proc.exitCode === null) await s.stop();
    fs.rmSync(d2, { recursive: true, force: true });
  }
});

test('SIGHUP reloads the config without dropping requests; a bad file keeps the old one', { skip }, async () => {
  const k = createKey(ledger, { tenant: 'quota', app: 'reload' });
  const limitNow = async () => (await call(server.url, '/v1/usage/me', { method: 'GET', key: k.key })).json.quotas[0].limit;
  assert.equal(await limitNow(), 100);
  const inflight = completion(server.url, k.key, { max_tokens: 100 - promptTokens - 1, ignore_eos: true });
  writeConfig(configPath, 100000);
  server.proc.kill('SIGHUP');
  assert.ok(await eventually(async () => (await limitNow()) === 100000), 'new quota after SIGHUP');
  const r = await inflight;
  assert.ok(r.status === 200 || r.status === 429, r.text);  // served or refused by the old quota, never dropped
  fs.writeFileSync(configPath, '[tenants.quota]\nquota = { tokens = -5, period = "day" }\n');
  server.proc.kill('SIGHUP');
  assert.ok(await eventually(() => /config reload failed/.test(server.log())), server.log());
  assert.match(server.log(), /gov\.toml:2:/);
  assert.equal(await limitNow(), 100000, 'the previous config stays');
  assert.equal((await completion(server.url, k.key, { max_tokens: 2 })).status, 200);
  writeConfig(configPath);
});

test('a bad config file or ledger URL fails start-up with one line and a non-zero exit', { skip }, () => {
  const bad = path.join(dir, 'bad.toml');
  fs.writeFileSync(bad, '[tenants.x]\nrpm = 5\nquota = { tokens = 10, period = "week" }\n');
  const r = spawnSync(bin, ['serve', '-m', storiesModel, '--port', '0', '--config', bad, '--ledger', path.join(dir, 'x.db')],
    { encoding: 'utf8', timeout: 30000 });
  assert.notEqual(r.status, 0);
  const errLines = r.stderr.trim().split('\n').filter((l) => /bad\.toml/.test(l));
  assert.equal(errLines.length, 1, r.stderr);
  assert.match(errLines[0], /bad\.toml:3: .*period/);
  const u = spawnSync(bin, ['serve', '-m', storiesModel, '--port', '0', '--limits', 'memcached://x', '--no-auth',
    '--ledger', path.join(dir, 'y.db')], { encoding: 'utf8', timeout: 30000 });
  assert.notEqual(u.status, 0);
  assert.match(u.stderr, /tokenserve serve: .*redis/i);
});
