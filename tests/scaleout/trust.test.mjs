// --trust-gateway (SCALEOUT.md §4, §6.1) on loopback: a real replica that accepts only the
// identity `tokenserve gateway` signs with the shared secret; the gateway authenticates API keys.
// The replica's ledger then carries the gateway's tenant/app; unsigned, forged, late and
// tier-mismatched requests are refused. The signatures made here (node:crypto) also check that
// the wire format matches gateway/trust.h. Bounded; everything started is killed in `after`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  haveShared, modelName, modelPath, tmp, sleep, writeEndpoints, startGateway, stopAll, completion, metricSum, metrics, launch,
  bin, freePort,
} from './harness.mjs';

const skip = !haveShared && 'shared models not found (set TOKENSERVE_SHARED)';
const haveRedis = spawnSync('redis-server', ['--version']).status === 0 && spawnSync('redis-cli', ['--version']).status === 0;
const skipRedis = skip || (!haveRedis && 'redis-server / redis-cli not installed (scripts/start_test_services.sh installs them)');
let ownRedis = null;
after(() => { if (ownRedis && ownRedis.exitCode === null) ownRedis.kill('SIGKILL'); stopAll(); });

const secret = 'trust-test-secret-' + crypto.randomBytes(8).toString('hex');
const secretFile = path.join(tmp, 'gateway.secret');
const repLedger = path.join(tmp, 'trusted-replica.db');
let rep = null, gw = null, key = '';

function sign({ t = 'acme', a = 'chat', tier = 'interactive', rid = 'req-' + crypto.randomUUID(), ts = Date.now(), withSecret = secret } = {}) {
  const sig = crypto.createHmac('sha256', withSecret).update(`v1\n${t}\n${a}\n${tier}\n${rid}\n${ts}`).digest('hex');
  return `TokenserveGateway v1;t=${t};a=${a};tier=${tier};rid=${rid};ts=${ts};sig=${sig}`;
}

before(async () => {
  if (skip) return;
  fs.writeFileSync(secretFile, secret + '\n');
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  rep = launch(['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', String(port), '--threads', '1', '--replica-id', 'tr1',
    '--ledger', repLedger, '--trust-gateway', '--gateway-secret-file', secretFile], `${url}/ready`);
  await rep.ready;
  Object.assign(rep, { name: 'tr1', port, url });
  const endpoints = path.join(tmp, 'trust-endpoints.yaml');
  writeEndpoints(endpoints, [rep]);
  const gwLedger = path.join(tmp, 'trust-gateway.db');
  key = execFileSync(bin, ['keys', 'create', '--ledger', gwLedger, '--tenant', 'acme', '--app', 'chat']).toString().trim().split('\n').pop();
  const gport = await freePort();
  const gurl = `http://127.0.0.1:${gport}`;
  gw = launch(['gateway', '--endpoints', endpoints, '--host', '127.0.0.1', '--port', String(gport), '--ledger', gwLedger,
    '--gateway-secret-file', secretFile], `${gurl}/ready`);
  await gw.ready;
  Object.assign(gw, { url: gurl });
});

test('through the gateway: the replica serves the signed tenant/app and records them', { skip, timeout: 60000 }, async () => {
  for (const tier of ['interactive', 'batch']) {
    const r = await completion(gw.url, { prompt: 'Hello', tier }, { authorization: `Bearer ${key}` });
    assert.equal(r.status, 200, r.body);
    assert.equal(r.servedBy, 'tr1');
  }
  const noKey = await completion(gw.url, { prompt: 'Hello' });
  assert.equal(noKey.status, 401);  // the gateway still authenticates its clients
  assert.equal((await rep.stop('SIGTERM')).code, 0);  // flushes the replica's ledger
  const apps = JSON.parse(execFileSync(bin, ['usage', '--ledger', repLedger, '--by', 'app', '--format', 'json']));
  assert.deepEqual(apps.rows.map((x) => [x.app, x.requests]), [['acme/chat', 2]], JSON.stringify(apps));
  // Started again for the refusal checks (same port, same secret).
  const again = launch(['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', String(rep.port), '--threads', '1',
    '--replica-id', 'tr1', '--ledger', repLedger, '--trust-gateway', '--gateway-secret-env', 'TS_TRUST_TEST_SECRET'],
    `${rep.url}/ready`, 30000, { TS_TRUST_TEST_SECRET: secret });
  await again.ready;
  rep = Object.assign(again, { name: 'tr1', port: rep.port, url: rep.url });
});

test('direct to the replica: unsigned, API-key, forged, late and tier-mismatched requests are refused', { skip, timeout: 30000 }, async () => {
  const call = (authorization, body = {}) => completion(rep.url, { prompt: 'Hi', ...body }, authorization ? { authorization } : {});
  const good = await call(sign());
  assert.equal(good.status, 200, good.body);  // node's HMAC matches the C++ one
  const cases = [
    ['unsigned', null, 401],
    ['a client API key', `Bearer ${key}`, 401],
    ['wrong secret', sign({ withSecret: 'guess' }), 401],
    ['tampered tenant', sign().replace('t=acme', 't=evil'), 401],
    ['too old', sign({ ts: Date.now() - 10 * 60 * 1000 }), 401],
  ];
  for (const [what, auth, status] of cases) {
    const r = await call(auth);
    assert.equal(r.status, status, `${what}: ${r.body}`);
    assert.equal(JSON.parse(r.body).error.code, 'invalid_gateway_signature', what);
  }
  const tier = await call(sign({ tier: 'interactive' }), { tier: 'batch' });
  assert.equal(tier.status, 403, tier.body);
  assert.match(JSON.parse(tier.body).error.message, /signed tier 'interactive'/);
});

test('direct to the replica: a replayed signed header set is refused inside its validity window', { skip, timeout: 30000 }, async () => {
  const call = (authorization) => completion(rep.url, { prompt: 'Hi', max_tokens: 2 }, { authorization });
  const captured = sign();
  const first = await call(captured);
  assert.equal(first.status, 200, first.body);
  for (let k = 0; k < 2; k++) {
    const again = await call(captured);
    assert.equal(again.status, 401, again.body);
    const e = JSON.parse(again.body).error;
    assert.equal(e.code, 'replayed_gateway_signature');
    assert.match(e.message, /replays a signature already used/);
  }
  // Concurrent replays of one fresh header: exactly one is served.
  const fresh = sign();
  const burst = await Promise.all(Array.from({ length: 4 }, () => call(fresh)));
  assert.deepEqual(burst.map((r) => r.status).sort(), [200, 401, 401, 401], burst.map((r) => r.body).join('\n'));
  // Each gateway request signs anew: distinct headers keep working.
  for (let k = 0; k < 3; k++) assert.equal((await call(sign())).status, 200);
});

// Replay across replicas: replicas sharing a Redis (--limits) claim each signature there (SET NX,
// TTL = the rest of the signature window), so a header captured from one replica is refused by
// the other; a replica without Redis only knows its own seen-set (the negative control). Redis
// stopped: the local guard alone decides, and the limit store error counter says so.
test('replay to ANOTHER replica: refused when the replicas share Redis, and the local guard stays when Redis is down', { skip: skipRedis, timeout: 90000 }, async () => {
  const rport = await freePort();  // a Redis of our own: it is killed mid-test
  ownRedis = spawn('redis-server', ['--port', String(rport), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore', cwd: tmp });
  const redisUrl = `redis://127.0.0.1:${rport}`;
  for (let i = 0; i < 50; i++) {
    try { execFileSync('redis-cli', ['-u', redisUrl, 'ping'], { stdio: 'pipe' }); break; } catch { await sleep(100); }
  }
  const start = async (name, extra) => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const h = launch(['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', String(port), '--threads', '1',
      '--replica-id', name, '--ledger', path.join(tmp, `${name}.db`), '--trust-gateway', '--gateway-secret-file', secretFile,
      ...extra], `${url}/ready`);
    await h.ready;
    return Object.assign(h, { name, port, url });
  };
  const [a, b, solo] = await Promise.all([start('ra', ['--limits', redisUrl]), start('rb', ['--limits', redisUrl]), start('rsolo', [])]);
  try {
    const call = (r, authorization) => completion(r.url, { prompt: 'Hi', max_tokens: 2 }, { authorization });
    const code = (r) => (r.status === 200 ? 200 : `${r.status} ${JSON.parse(r.body).error.code}`);
    // Captured from a, replayed to b (and back to a): refused by both.
    const h1 = sign();
    assert.equal(code(await call(a, h1)), 200);
    assert.equal(code(await call(b, h1)), '401 replayed_gateway_signature');
    assert.equal(code(await call(a, h1)), '401 replayed_gateway_signature');
    // The nonce lives in Redis for the rest of the 300 s window, no longer.
    const keys = execFileSync('redis-cli', ['-u', redisUrl, '--scan', '--pattern', '*gwn:*']).toString().trim().split('\n').filter(Boolean);
    assert.ok(keys.length >= 1, 'no nonce key in Redis');
    const ttl = Number(execFileSync('redis-cli', ['-u', redisUrl, 'pttl', keys[0]]).toString().trim());
    assert.ok(ttl > 250_000 && ttl <= 300_000, `nonce TTL ${ttl} ms`);
    // A signature made 200 s ago is still valid but lives only ~100 s more.
    const old = sign({ ts: Date.now() - 200_000 });
    assert.equal(code(await call(b, old)), 200);
    assert.equal(code(await call(a, old)), '401 replayed_gateway_signature');
    // Concurrent: one fresh header sent to both replicas at once is served exactly once.
    const h2 = sign();
    const burst = await Promise.all([a, b, a, b].map((r) => call(r, h2)));
    assert.deepEqual(burst.map(code).sort(), [200, '401 replayed_gateway_signature', '401 replayed_gateway_signature',
      '401 replayed_gateway_signature'], burst.map((r) => r.body).join('\n'));
    // Negative control: a replica without the shared store serves a header another replica used.
    const h3 = sign();
    assert.equal(code(await call(a, h3)), 200);
    assert.equal(code(await call(solo, h3)), 200);
    assert.equal(code(await call(solo, h3)), '401 replayed_gateway_signature');  // its own guard
    // Distinct signatures keep working on both.
    for (const r of [a, b, a, b]) assert.equal(code(await call(r, sign())), 200);

    // Failover through the gateway is not a replay: a stand-in in front of `a` passes the signed
    // request on (so `a` claims its nonce in Redis), then answers 503; the gateway fails over to
    // `b` with a freshly signed identity, which `b` serves. (Signing once per request instead of
    // per attempt would make `b` refuse it as replayed.)
    const standPort = await freePort();
    const forwarded = [];
    const stand = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => { body += d; });
      req.on('end', async () => {
        if (req.url === '/ready' || req.url === '/metrics') {
          const r = await fetch(a.url + req.url);
          res.writeHead(r.status, { 'content-type': r.headers.get('content-type') || 'text/plain' });
          return res.end(await r.text());
        }
        const r = await fetch(a.url + req.url, { method: req.method, headers: { 'content-type': 'application/json', authorization: req.headers.authorization }, body });
        forwarded.push({ status: r.status, auth: req.headers.authorization });
        await r.text();
        res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
        res.end(JSON.stringify({ error: { message: 'stand-in refusal after the replica served it', type: 'server_error' } }));
      });
    });
    await new Promise((r) => stand.listen(standPort, '127.0.0.1', r));
    const ef = path.join(tmp, 'trust-failover-endpoints.yaml');
    writeEndpoints(ef, [{ name: 'stand', port: standPort }, b]);
    const g = await startGateway(ef, ['--gateway-secret-file', secretFile, '--trust-destination-header']);
    try {
      const r = await completion(g.url, { prompt: 'Hi', max_tokens: 2 },
        { 'x-gateway-destination-endpoint': `127.0.0.1:${standPort},127.0.0.1:${b.port}` });
      assert.equal(r.status, 200, r.body);
      assert.equal(r.headers.get('x-gateway-destination-endpoint-served'), `127.0.0.1:${b.port}`);
      assert.equal(forwarded.length, 1);
      assert.equal(forwarded[0].status, 200);  // `a` really served (and claimed) the first attempt
    } finally {
      await g.stop();
      await new Promise((r) => stand.close(r));
    }

    // Redis gone: fresh headers are served (fail open), a replay to the same replica is still
    // refused by its own guard, one to the other replica is not (it cannot be known), and the
    // error shows in the limit store error counter.
    const errorsBefore = metricSum(await metrics(a.url), 'tokenserve_limit_store_errors_total');
    ownRedis.kill('SIGKILL');
    await new Promise((r) => ownRedis.once('exit', r));
    const h4 = sign();
    assert.equal(code(await call(a, h4)), 200);
    assert.equal(code(await call(a, h4)), '401 replayed_gateway_signature');
    assert.equal(code(await call(b, h4)), 200);
    assert.ok(metricSum(await metrics(a.url), 'tokenserve_limit_store_errors_total') > errorsBefore);
    assert.match(a.log(), /gateway nonce check in the shared limit store failed/);
  } finally {
    for (const r of [a, b, solo]) await r.stop();
  }
});

test('bad --trust-gateway flags are one line and exit 1', { skip, timeout: 30000 }, async () => {
  for (const args of [['--trust-gateway'], ['--trust-gateway', '--no-auth', '--gateway-secret-file', secretFile],
    ['--gateway-secret-file', secretFile], ['--trust-gateway', '--gateway-secret-env', 'TS_TRUST_TEST_UNSET']]) {
    const r = spawnSync(bin, ['serve', '-m', modelPath, '--port', '0', '--ledger', path.join(tmp, 'x.db'), ...args]);
    assert.equal(r.status, 1, args.join(' ') + r.stderr);
    const errors = r.stderr.toString().trim().split('\n').filter((l) => !/ info /.test(l));  // start-up info lines aside
    assert.equal(errors.length, 1, r.stderr.toString());
    assert.match(errors[0], /^tokenserve serve: .*(gateway|auth|TS_TRUST_TEST_UNSET)/);
  }
  await gw.stop();
  await rep.stop();
});
