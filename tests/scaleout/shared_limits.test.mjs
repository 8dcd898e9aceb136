// Shared limits across two `tokenserve gateway` instances (SCALEOUT.md §4, §8 item 7) with a real
// Redis (TOKENSERVE_TEST_REDIS) for limits and a real PostgreSQL (TOKENSERVE_TEST_PG) for keys and
// the ledger: one RPM limit and one token quota hold however many gateways serve the key. The
// negative control (the same two gateways with per-process limits) shows the LiteLLM
// `limit x N` failure this avoids. Bounded: fixed request counts; everything started is killed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import {
  haveShared, tmp, sleep, startReplica, writeEndpoints, startGateway, stopAll, completion, metricSum, metrics, bin, freePort,
} from './harness.mjs';

const pg = process.env.TOKENSERVE_TEST_PG || '';
const redis = process.env.TOKENSERVE_TEST_REDIS || '';
const skip = (!haveShared && 'shared models not found (set TOKENSERVE_SHARED)') ||
  ((!pg || !redis) && 'TOKENSERVE_TEST_PG / TOKENSERVE_TEST_REDIS not set (eval "$(scripts/start_test_services.sh)")');
let ownRedis = null;
after(() => { if (ownRedis && ownRedis.exitCode === null) ownRedis.kill('SIGKILL'); stopAll(); });

const run = `s${process.pid}x${Date.now() % 1e6}`;  // tenants unique to this run (shared database)
const quota = 300;
const configFile = path.join(tmp, 'shared-gov.toml');
const endpointsFile = path.join(tmp, 'shared-endpoints.yaml');
let rep = null;

function key(tenant, extra = []) {
  return execFileSync(bin, ['keys', 'create', '--ledger', pg, '--tenant', tenant, '--app', 'app', ...extra], { cwd: tmp })
    .toString().trim().split('\n').pop();
}

function ledgerTotals(tenant) {
  return JSON.parse(execFileSync(bin, ['usage', '--ledger', pg, '--tenant', tenant, '--by', 'tenant', '--format', 'json'], { cwd: tmp })).totals;
}

// n requests, alternating between the gateways, `concurrency` at a time.
async function drive(gws, k, n, concurrency, body) {
  const out = [];
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < n) {
      const i = next++;
      const r = await completion(gws[i % gws.length].url, { prompt: `Hello ${i}`, max_tokens: 16, ...body },
        { authorization: `Bearer ${k}` });
      out.push({ gw: i % gws.length, status: r.status, code: r.status === 200 ? '' : JSON.parse(r.body).error.code });
    }
  }));
  return out;
}

before(async () => {
  if (skip) return;
  fs.writeFileSync(configFile, [`[tenants.${run}q]`, `quota = { tokens = ${quota}, period = "day" }`,
    `[tenants.${run}qc]`, `quota = { tokens = ${quota}, period = "day" }`, ''].join('\n'));
  rep = await startReplica('sl1');
  writeEndpoints(endpointsFile, [rep]);
});

async function pair(shared) {
  const args = ['--config', configFile, ...(shared ? ['--limits', redis] : [])];
  const o = { auth: true, ledger: pg };
  return Promise.all([startGateway(endpointsFile, args, o), startGateway(endpointsFile, args, o)]);
}

test('two gateways on one Redis: one RPM limit and one token quota; ledger rows in PostgreSQL', { skip, timeout: 90000 }, async () => {
  const gws = await pair(true);
  try {
    // RPM 6 on one key, 20 requests over both gateways at c=4: the shared bucket admits 6 (plus
    // what refills meanwhile: 6/min).
    const t0 = Date.now();
    const rpm = await drive(gws, key(`${run}r`, ['--rpm', '6']), 20, 4);
    const refill = Math.ceil(((Date.now() - t0) / 60000) * 6);
    const ok = rpm.filter((x) => x.status === 200);
    assert.ok(ok.length >= 6 && ok.length <= 6 + refill, `${ok.length} admitted (refill ${refill})`);
    assert.ok(rpm.filter((x) => x.status === 429).every((x) => x.code === 'rate_limit_exceeded'));
    assert.deepEqual([...new Set(ok.map((x) => x.gw))].sort(), [0, 1]);  // both gateways admitted some
    assert.deepEqual([...new Set(rpm.filter((x) => x.status === 429).map((x) => x.gw))].sort(), [0, 1]);  // and both refused

    // A 300-token daily quota for a tenant, requests one at a time: the tenant's tokens stay at
    // the quota plus at most one request's overshoot of its estimate.
    const q = await drive(gws, key(`${run}q`), 40, 1);
    const admitted = q.filter((x) => x.status === 200).length;
    assert.ok(admitted >= 5, `${admitted} admitted`);
    assert.ok(q.slice(-4).every((x) => x.status === 429 && x.code === 'insufficient_quota'), JSON.stringify(q.slice(-4)));
    for (const g of gws) assert.equal((await g.stop('SIGTERM')).code, 0);  // flush both ledgers' writers
    const t = ledgerTotals(`${run}q`);
    assert.equal(t.requests, admitted);  // one PostgreSQL row per admitted request, from both gateways
    assert.ok(t.prompt_tokens + t.completion_tokens <= quota + 40, JSON.stringify(t));
    assert.equal(ledgerTotals(`${run}r`).requests, ok.length);
    console.log(`shared: rpm admitted ${ok.length}/20, quota admitted ${admitted}/40, tokens ${t.prompt_tokens + t.completion_tokens}/${quota}`);
  } finally {
    for (const g of gws) await g.stop();
  }
});

test('negative control: the same two gateways with per-process limits let through limit x 2', { skip, timeout: 90000 }, async () => {
  const gws = await pair(false);
  try {
    const rpm = await drive(gws, key(`${run}rc`, ['--rpm', '6']), 20, 4);
    const ok = rpm.filter((x) => x.status === 200).length;
    assert.ok(ok >= 12, `${ok} admitted: each gateway has its own 6`);
    const q = await drive(gws, key(`${run}qc`), 40, 1);
    for (const g of gws) assert.equal((await g.stop('SIGTERM')).code, 0);
    const t = ledgerTotals(`${run}qc`);
    assert.equal(t.requests, q.filter((x) => x.status === 200).length);
    assert.ok(t.prompt_tokens + t.completion_tokens > 1.5 * quota, JSON.stringify(t));  // about twice the quota
    console.log(`per-process: rpm admitted ${ok}/20, quota admitted ${t.requests}/40, tokens ${t.prompt_tokens + t.completion_tokens}/${quota}`);
  } finally {
    for (const g of gws) await g.stop();
  }
});

test('Redis stopped: each tenant\'s configured outage mode applies on both gateways, with a metric and a log line', { skip, timeout: 60000 }, async () => {
  // A Redis of our own (the shared one must stay up for other tests), killed mid-test.
  const port = await freePort();
  ownRedis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore', cwd: tmp });
  const url = `redis://127.0.0.1:${port}`;
  for (let i = 0; i < 50; i++) {
    try { execFileSync('redis-cli', ['-u', url, 'ping'], { stdio: 'pipe' }); break; } catch { await sleep(100); }
  }
  const cfg = path.join(tmp, 'outage-gov.toml');
  fs.writeFileSync(cfg, ['[limits]', 'on_outage = "open"', `[tenants.${run}closed]`, 'on_limit_outage = "closed"',
    'rpm = 100', `[tenants.${run}open]`, 'rpm = 100', ''].join('\n'));
  const o = { auth: true, ledger: pg };
  const args = ['--config', cfg, '--limits', url];
  const gws = await Promise.all([startGateway(endpointsFile, args, o), startGateway(endpointsFile, args, o)]);
  try {
    const closedKey = key(`${run}closed`), openKey = key(`${run}open`);
    const call = (g, k) => completion(g.url, { prompt: 'Hi', max_tokens: 2 }, { authorization: `Bearer ${k}` });
    for (const g of gws) for (const k of [closedKey, openKey]) assert.equal((await call(g, k)).status, 200);
    ownRedis.kill('SIGKILL');
    await new Promise((r) => ownRedis.once('exit', r));
    for (const g of gws) {
      const c = await call(g, closedKey);
      assert.equal(c.status, 503, c.body);
      assert.equal(JSON.parse(c.body).error.code, 'limits_unavailable');
      assert.ok(c.headers.get('retry-after'));
      const op = await call(g, openKey);
      assert.equal(op.status, 200, op.body);  // fail-open: admitted, charges journaled
      const m = await metrics(g.url);
      assert.ok(metricSum(m, 'tokenserve_limit_fail_closed_refusals_total') >= 1, m);
      assert.ok(metricSum(m, 'tokenserve_limit_fail_open_admissions_total') >= 1, m);
      assert.ok(metricSum(m, 'tokenserve_limit_store_errors_total') >= 1, m);
      assert.match(g.log(), /limit store unavailable/);
    }
  } finally {
    for (const g of gws) await g.stop();
    await rep.stop();
  }
});
