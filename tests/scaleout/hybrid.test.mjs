// Hybrid local/remote routing (SCALEOUT.md §8 items 8 and 9) on loopback: a real local replica
// behind `tokenserve gateway --rules`, and another real `tokenserve serve` (with API keys)
// standing in for the remote OpenAI-compatible "big" upstream. Checks x-tokenserve-route on
// every response, route_decisions rows joined to the ledger, `gateway explain` reproducing a
// saved decision, fallback when the remote dies, remote usage in the same ledger, and remote
// cooldowns shared by two gateways through a real Redis (TOKENSERVE_TEST_REDIS). Bounded: every
// loop has a count and a time limit; every process started is killed in `after`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import {
  haveShared, modelName, modelPath, tmp, sleep, startReplica, writeEndpoints, startGateway, stopAll, pool, completion,
  metricSum, metrics, launch, bin, freePort,
} from './harness.mjs';

const skip = !haveShared && 'shared models not found (set TOKENSERVE_SHARED)';
const redisUrl = process.env.TOKENSERVE_TEST_REDIS || '';
after(stopAll);

let local = null, big = null, gw = null, bigKey = '';
const endpointsFile = path.join(tmp, 'hybrid-endpoints.yaml');
const rulesFile = path.join(tmp, 'rules.toml');
const longPrompt = 'Once upon a time there was a little cat who liked to play in the garden. '.repeat(7);  // ~500 bytes

async function startBig(port) {
  const url = `http://127.0.0.1:${port}`;
  const h = launch(['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', String(port), '--threads', '1',
    '--replica-id', 'big', '--ledger', path.join(tmp, 'big.db')], `${url}/ready`);
  await h.ready;
  return Object.assign(h, { port, url });
}

function writeRules(file, bigPort, extra = '') {
  fs.writeFileSync(file, `
[remotes.big]
base_url = "http://127.0.0.1:${bigPort}/v1"
api_key_env = "TS_HYBRID_BIG_KEY"
cooldown_after_failures = 2
cooldown_s = 3

[[rules]]
id = "batch-local"
description = "batch stays on our replicas"
match = { tier = "batch" }
action = "local"

[[rules]]
id = "long-prompt"
match = { prompt_tokens_over = 100 }
action = "remote:big"
fallback = ["local"]

[[rules]]
id = "busy"
when = { waiting_per_replica_over = 4 }
action = "remote:big"
fallback = ["local"]
${extra}`);
}

const route = (x) => x.headers.get('x-tokenserve-route');

function decisions(ledger) {
  return execFileSync(bin, ['gateway', 'decisions', '--ledger', ledger]).toString().trim().split('\n')
    .filter(Boolean).map((l) => JSON.parse(l));
}

before(async () => {
  if (skip) return;
  const bigPort = await freePort();
  bigKey = execFileSync(bin, ['keys', 'create', '--ledger', path.join(tmp, 'big.db'), '--tenant', 'provider', '--app', 'gateway'])
    .toString().trim().split('\n').pop();
  assert.match(bigKey, /^ts-/);
  process.env.TS_HYBRID_BIG_KEY = bigKey;  // the gateway reads the remote's key from its environment
  [local, big] = await Promise.all([startReplica('r1', { args: ['--max-seqs', '1'] }), startBig(bigPort)]);
  writeEndpoints(endpointsFile, [local]);
  process.env.TS_HYBRID_BAD_KEY = 'ts-not-a-key-of-the-remote';
  writeRules(rulesFile, bigPort, `
[[rules]]
id = "bad-key"
match = { headers = { "x-route" = "badkey" } }
action = "remote:badkey"
fallback = ["local"]

[[rules]]
id = "bad-key-only"
match = { headers = { "x-route" = "badkey-only" } }
action = "remote:badkey"

[remotes.badkey]
base_url = "http://127.0.0.1:${bigPort}/v1"
api_key_env = "TS_HYBRID_BAD_KEY"
cooldown_after_failures = 100
`);
  gw = await startGateway(endpointsFile, ['--rules', rulesFile]);
  for (let i = 0; i < 100 && metricSum(await metrics(gw.url), 'tokenserve_gateway_endpoint_up') !== 1; i++) await sleep(50);
});

test('rules: prompt size, tier and local load pick the target; every response says why', { skip, timeout: 60000 }, async () => {
  const short = await completion(gw.url, { prompt: 'Hello' });
  assert.equal(short.status, 200, short.body);
  assert.equal(short.servedBy, 'r1');
  assert.equal(route(short), 'rule=default; target=local:r1; reason=no rule matched');

  const long = await completion(gw.url, { prompt: longPrompt, max_tokens: 4 });
  assert.equal(long.status, 200, long.body);
  assert.equal(long.servedBy, 'big');  // the remote answered (its own replica id)
  assert.match(route(long), /^rule=long-prompt; target=remote:big; reason=prompt_tokens \d+ > 100$/);
  assert.equal(JSON.parse(long.body).usage.completion_tokens, 4);

  const batch = await completion(gw.url, { prompt: longPrompt, tier: 'batch' });
  assert.equal(batch.status, 200, batch.body);
  assert.equal(batch.servedBy, 'r1');
  assert.equal(route(batch), 'rule=batch-local; target=local:r1; reason=tier batch');

  // Streamed through the remote: SSE relayed, usage metered (the gateway asks for it).
  const s = await fetch(`${gw.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: modelName, prompt: longPrompt, max_tokens: 3, stream: true }),
  });
  assert.equal(s.status, 200);
  assert.match(s.headers.get('x-tokenserve-route'), /target=remote:big/);
  const sse = await s.text();
  assert.match(sse, /"usage":\{[^}]*"completion_tokens":3/);
  assert.match(sse, /data: \[DONE\]/);

  // Local queue: 7 long requests straight at r1 (--max-seqs 1) make waiting 6 > 4 per replica.
  const ac = new AbortController();
  const preload = Array.from({ length: 7 }, (_, i) => fetch(`${local.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
    body: JSON.stringify({ model: modelName, prompt: `Busy ${i}`, max_tokens: 1000, ignore_eos: true }),
  }).then((r) => r.text()).catch(() => null));
  const t0 = Date.now();
  while (metricSum(await metrics(local.url), 'tokenserve:num_requests_waiting') < 5 && Date.now() - t0 < 5000) await sleep(10);
  await sleep(200);  // a few gateway scrapes
  const busy = await completion(gw.url, { prompt: 'Hello again', max_tokens: 2 });
  ac.abort();
  await Promise.all(preload);
  // The cancelled requests leave r1's queue; wait until the gateway's scrapes see it empty.
  for (const t1 = Date.now(); Date.now() - t1 < 5000; await sleep(20)) {
    const lm = await metrics(local.url);
    if (metricSum(lm, 'tokenserve:num_requests_waiting') + metricSum(lm, 'tokenserve:num_requests_running') === 0) break;
  }
  await sleep(200);
  assert.equal(busy.status, 200, busy.body);
  assert.equal(busy.servedBy, 'big');
  assert.match(route(busy), /^rule=busy; target=remote:big; reason=waiting_per_replica [0-9.]+ > 4$/);

  const m = await metrics(gw.url);
  assert.equal(metricSum(m, 'tokenserve_gateway_routed_total{rule="long-prompt",target="remote:big",code="200"}'), 2);
  assert.equal(metricSum(m, 'tokenserve_gateway_remote_cooldown_active'), 0);
});

test('bad requests and refusals still carry x-tokenserve-route', { skip, timeout: 30000 }, async () => {
  const r = await fetch(`${gw.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{nope' });
  assert.equal(r.status, 400);
  assert.match(r.headers.get('x-tokenserve-route'), /^rule=none; target=none; reason=/);
  const t = await completion(gw.url, { prompt: 'x', tier: 'gold' });
  assert.equal(t.status, 400);
  assert.equal(JSON.parse(t.body).error.code, 'invalid_value');
});

test('a remote refusing the gateway\'s key falls back, or answers 502 (never the client\'s 401)', { skip, timeout: 30000 }, async () => {
  const fb = await completion(gw.url, { prompt: 'Hi', max_tokens: 2 }, { 'x-route': 'badkey' });
  assert.equal(fb.status, 200, fb.body);
  assert.equal(fb.servedBy, 'r1');
  assert.match(route(fb), /^rule=bad-key; target=local:r1; reason=header x-route=badkey; fallback=remote:badkey -> local \(remote:badkey 401\)$/);
  const only = await completion(gw.url, { prompt: 'Hi', max_tokens: 2 }, { 'x-route': 'badkey-only' });
  assert.equal(only.status, 502, only.body);
  assert.equal(JSON.parse(only.body).error.code, 'upstream_unavailable');
  assert.match(JSON.parse(only.body).error.message, /refused the gateway's API key/);
  assert.match(route(only), /^rule=bad-key-only; target=none; reason=header x-route=badkey-only$/);
});

test('a remote\'s daily token budget: once spent (metered from its usage) the rule falls back to local', { skip, timeout: 30000 }, async () => {
  const rules = path.join(tmp, 'rules-budget.toml');
  fs.writeFileSync(rules, `[remotes.big]\nbase_url = "http://127.0.0.1:${big.port}/v1"\napi_key_env = "TS_HYBRID_BIG_KEY"\n` +
    'budget_tokens_per_day = 30\n[[rules]]\nid = "all-remote"\naction = "remote:big"\nfallback = ["local"]\n');
  const g = await startGateway(endpointsFile, ['--rules', rules]);
  try {
    const seen = [];
    let used = 0;
    let lastRoute = '';
    for (let i = 0; i < 10 && !seen.includes('r1'); i++) {
      const x = await completion(g.url, { prompt: 'Hello there', max_tokens: 8 });
      assert.equal(x.status, 200, x.body);
      seen.push(x.servedBy);
      lastRoute = route(x);
      if (x.servedBy === 'big') { const u = JSON.parse(x.body).usage; used += u.prompt_tokens + u.completion_tokens; }
      await sleep(50);  // the gateway charges the budget just after answering
    }
    const firstLocal = seen.indexOf('r1');
    assert.ok(firstLocal >= 1, `served: ${seen}`);
    assert.ok(seen.slice(0, firstLocal).every((s) => s === 'big'), `served: ${seen}`);
    assert.ok(used >= 30, `${used} remote tokens before the fallback`);  // not cut off early
    assert.equal(lastRoute, 'rule=all-remote; target=local:r1; reason=always');
  } finally {
    await g.stop();
  }
});

test('remote down: the fallback serves, is recorded, and the remote cools down after 2 failures', { skip, timeout: 60000 }, async () => {
  await big.stop('SIGKILL');
  const a = await completion(gw.url, { prompt: longPrompt, max_tokens: 2 });
  assert.equal(a.status, 200, a.body);
  assert.equal(a.servedBy, 'r1');
  assert.match(route(a), /^rule=long-prompt; target=local:r1; reason=prompt_tokens \d+ > 100; fallback=remote:big -> local \(remote:big connect_error\)$/);
  const b = await completion(gw.url, { prompt: longPrompt, max_tokens: 2 });
  assert.equal(b.status, 200, b.body);
  assert.equal(metricSum(await metrics(gw.url), 'tokenserve_gateway_remote_cooldown_active{remote="big"}'), 1);
  // Cooling: the remote is skipped without an attempt, straight to the fallback.
  const c = await completion(gw.url, { prompt: longPrompt, max_tokens: 2 });
  assert.equal(c.status, 200, c.body);
  assert.match(route(c), /^rule=long-prompt; target=local:r1; reason=prompt_tokens \d+ > 100$/);
  const dec = (await (await fetch(`${gw.url}/router/decisions`)).json()).pop();
  assert.equal(dec.attempts.length, 1);
  assert.equal(dec.attempts[0].target, 'local:r1');
});

test('ledger and route_decisions: one row each per request, joined by request id; explain agrees', { skip, timeout: 60000 }, async () => {
  await sleep(200);  // the gateway counts and audits a request just after its response is sent
  const mtext = await metrics(gw.url);
  const answered = metricSum(mtext, 'tokenserve_gateway_routed_total');
  assert.equal((await gw.stop('SIGTERM')).code, 0, gw.log());  // flushes the ledger and the audit rows
  const rows = decisions(gw.ledger);
  assert.equal(rows.length, answered, mtext + JSON.stringify(rows.map((r) => [r.rule_id, r.target, r.http_status])));
  const routed = rows.filter((r) => r.rule_id !== 'none');
  const remote = routed.filter((r) => r.target === 'remote:big');
  assert.equal(remote.length, 3);
  for (const r of remote) {
    assert.ok(r.ledger, `ledger row for ${r.request_id}`);
    assert.equal(r.usage_source, 'reported');
    assert.ok(r.ledger.completion_tokens >= 2, JSON.stringify(r));  // the remote's usage, metered here
    assert.equal(r.outcome, 'ok');
  }
  const fell = routed.filter((r) => r.fallback !== '' && r.rule_id === 'long-prompt');
  assert.equal(fell.length, 2);  // both failures before the cooldown started
  assert.equal(fell[0].fallback, 'remote:big -> local (remote:big connect_error)');
  assert.equal(fell[0].target, 'local:r1');
  assert.deepEqual(fell[0].alternatives.attempts.map((x) => `${x.target} ${x.result}`), ['remote:big connect_error', 'local:r1 ok']);
  assert.ok(fell[0].alternatives.picker.ranked.length >= 1);  // the local picker's scores
  assert.equal(fell[0].ledger.served_by, 'local:r1');  // the ledger row says so too
  assert.equal(fell[0].ledger.attempts, 2);
  for (const r of remote) assert.deepEqual([r.ledger.served_by, r.ledger.attempts], ['remote:big', 1]);
  const cooled = routed.filter((r) => (r.alternatives.route.skipped || []).includes('remote:big (cooling down)'));
  assert.equal(cooled.length, 1);
  const busy = routed.find((r) => r.rule_id === 'busy');
  assert.ok(busy.inputs.waiting_per_replica > 4, JSON.stringify(busy.inputs));
  // Every row's version is the rules file's hash.
  assert.equal(new Set(routed.map((r) => r.ruleset_version)).size, 1);

  // explain: the saved request with the saved inputs snapshot gives the same decision.
  const req = path.join(tmp, 'saved-request.json');
  const state = path.join(tmp, 'saved-state.json');
  fs.writeFileSync(req, JSON.stringify({ model: modelName, prompt: 'Hello again', max_tokens: 2 }));
  fs.writeFileSync(state, JSON.stringify(busy.inputs));
  const ex = JSON.parse(execFileSync(bin, ['gateway', 'explain', '--rules', rulesFile, '--request', req, '--state', state]).toString());
  assert.equal(ex.rule_id, 'busy');
  assert.equal(ex.target, 'remote:big');
  assert.deepEqual(ex.decision, busy.alternatives.route);
  assert.equal(ex.ruleset_version, busy.ruleset_version);
  // Without the busy state, the same request stays local.
  const calm = JSON.parse(execFileSync(bin, ['gateway', 'explain', '--rules', rulesFile, '--request', req]).toString());
  assert.equal(calm.rule_id, 'default');
  assert.equal(calm.target, 'local');
  // From the ledger by request id: every recorded decision re-evaluates to itself...
  for (const r of routed.filter((x) => x.rule_id !== 'none').slice(0, 6)) {
    const again = JSON.parse(execFileSync(bin, ['gateway', 'explain', '--rules', rulesFile, '--ledger', gw.ledger,
      '--request-id', r.request_id]).toString());
    assert.equal(again.same_decision, true, JSON.stringify(again));
    assert.equal(again.recorded.rule_id, r.rule_id);
  }
  // ... and a changed rules file shows which ones it would route differently.
  const stricter = path.join(tmp, 'rules-stricter.toml');
  fs.writeFileSync(stricter, fs.readFileSync(rulesFile, 'utf8').replace('waiting_per_replica_over = 4', 'waiting_per_replica_over = 40'));
  const changed = JSON.parse(execFileSync(bin, ['gateway', 'explain', '--rules', stricter, '--ledger', gw.ledger,
    '--request-id', busy.request_id]).toString());
  assert.equal(changed.same_decision, false);
  assert.equal(changed.rule_id, 'default');
  assert.equal(changed.recorded.rule_id, 'busy');
  // A route judged wrong later (here: the busy one, sent remote) goes into an eval suite with its
  // route decision, beside the ledger's failures (usage --export-suite --flag-request).
  const suite = path.join(tmp, 'judged-suite');
  const out = execFileSync(bin, ['usage', '--ledger', gw.ledger, '--export-suite', suite, '--flag-request', busy.request_id,
    '--flag-reason', 'route judged wrong: should have stayed local']).toString();
  assert.match(out, /wrote \d+ runnable cases .* and \d+ metadata-only records/);
  const pending = fs.readFileSync(path.join(suite, 'ledger-failures/PENDING.ndjson'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  const judged = pending.find((x) => x.request_id === busy.request_id);
  assert.ok(judged, 'the judged request is exported');
  assert.equal(judged.judgement, `route judged wrong: should have stayed local: rule busy (rules ${busy.ruleset_version}) ` +
    `sent it to remote:big (${busy.reason})`);
  assert.ok(pending.every((x) => x.judgement || x.http_status >= 400 || ['error', 'length'].includes(x.finish_reason)));
  let noId = null;
  try { execFileSync(bin, ['usage', '--ledger', gw.ledger, '--export-suite', path.join(tmp, 'x-suite'), '--flag-request', 'req-nope'], { stdio: 'pipe' }); } catch (e) { noId = e; }
  assert.equal(noId.status, 1);
  assert.match(noId.stderr.toString(), /--flag-request req-nope: no such request/);
  // A bad rules file is one line and exit 1.
  fs.writeFileSync(path.join(tmp, 'bad.toml'), '[[rules]]\nid = "x"\naction = "remote:ghost"\n');
  let err = null;
  try { execFileSync(bin, ['gateway', 'explain', '--rules', path.join(tmp, 'bad.toml'), '--request', req], { stdio: 'pipe' }); } catch (e) { err = e; }
  assert.equal(err.status, 1);
  assert.match(err.stderr.toString(), /bad\.toml:1: rule 'x' names remote 'ghost'/);
});

test('remote cooldown shared by two gateways through Redis; a 429 Retry-After sets its length', { skip: skip || (!redisUrl && 'TOKENSERVE_TEST_REDIS not set'), timeout: 60000 }, async () => {
  // A remote whose key allows 1 request a minute: its second answer is 429 + Retry-After.
  const port = await freePort();
  const db = path.join(tmp, 'strict.db');
  const key = execFileSync(bin, ['keys', 'create', '--ledger', db, '--tenant', 'provider', '--app', 'gw', '--rpm', '1'])
    .toString().trim().split('\n').pop();
  process.env.TS_HYBRID_BIG_KEY = key;
  const url = `http://127.0.0.1:${port}`;
  const strict = launch(['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', String(port), '--threads', '1',
    '--replica-id', 'strict', '--ledger', db], `${url}/ready`);
  await strict.ready;
  const rules2 = path.join(tmp, 'rules-shared.toml');
  writeRules(rules2, port);
  const prefix = `--limits`;
  const redisArg = [prefix, redisUrl];
  // A unique remote name per run keeps the shared Redis keys of other runs apart.
  const name = `big${process.pid}${Date.now() % 100000}`;
  fs.writeFileSync(rules2, fs.readFileSync(rules2, 'utf8').replaceAll('big', name));
  const [g1, g2] = await Promise.all([startGateway(endpointsFile, ['--rules', rules2, ...redisArg]),
    startGateway(endpointsFile, ['--rules', rules2, ...redisArg])]);
  try {
    const first = await completion(g1.url, { prompt: longPrompt, max_tokens: 2 });
    assert.equal(first.servedBy, 'strict', first.body);
    const second = await completion(g1.url, { prompt: longPrompt, max_tokens: 2 });  // 429 from the remote -> fallback
    assert.equal(second.status, 200, second.body);
    assert.equal(second.servedBy, 'r1');
    assert.match(route(second), new RegExp(`fallback=remote:${name} -> local \\(remote:${name} 429\\)`));
    const t0 = Date.now();
    let seen = -1;
    while (Date.now() - t0 < 1000) {
      if (metricSum(await metrics(g2.url), `tokenserve_gateway_remote_cooldown_active{remote="${name}"}`) === 1) { seen = Date.now() - t0; break; }
      await sleep(20);
    }
    assert.ok(seen >= 0, 'the second gateway sees the cooldown within 1 s');
    const third = await completion(g2.url, { prompt: longPrompt, max_tokens: 2 });
    assert.equal(third.servedBy, 'r1');
    assert.doesNotMatch(route(third), /fallback=/);  // skipped, not tried: the cooldown came from Redis
    // The cooldown key's TTL comes from Retry-After (up to 60 s for an RPM bucket).
    const ttl1 = Number(execFileSync('redis-cli', ['-u', redisUrl, 'PTTL', `ts:cd:${name}`]).toString().trim());
    assert.ok(ttl1 > 3000 && ttl1 <= 61000, `ttl ${ttl1}`);
    execFileSync('redis-cli', ['-u', redisUrl, 'DEL', `ts:cd:${name}`, `ts:cdf:${name}`]);
  } finally {
    await Promise.all([g1.stop(), g2.stop(), strict.stop()]);
  }
});
