// --trust-gateway (SCALEOUT.md §4, §6.1) on loopback: a real replica that accepts only the
// identity `tokenserve gateway` signs with the shared secret; the gateway authenticates API keys.
// The replica's ledger then carries the gateway's tenant/app; unsigned, forged, late and
// tier-mismatched requests are refused. The signatures made here (node:crypto) also check that
// the wire format matches gateway/trust.h. Bounded; everything started is killed in `after`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import {
  haveShared, modelName, modelPath, tmp, sleep, writeEndpoints, startGateway, stopAll, completion, metricSum, metrics, launch,
  bin, freePort,
} from './harness.mjs';

const skip = !haveShared && 'shared models not found (set TOKENSERVE_SHARED)';
after(stopAll);

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
