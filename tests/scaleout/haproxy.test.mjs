// deploy/haproxy/haproxy.cfg, run by a real HAProxy (Debian package `haproxy`) in front of two
// real replicas on loopback (SCALEOUT.md §6.3, §8 item 13): leastconn spreads, x-session-id
// sticks (consistent hash), the EPP header picks the endpoint (set-dst), /ready checks and
// retries + redispatch survive a kill -9, and HAProxy's Prometheus exporter answers. Skips when
// haproxy is not installed. Bounded; everything started is killed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { haveShared, sleep, startReplica, stopAll, pool, completion, freePort } from './harness.mjs';

const cfg = path.join(path.dirname(fileURLToPath(import.meta.url)), '../../deploy/haproxy/haproxy.cfg');
const haveHaproxy = spawnSync('haproxy', ['-v']).status === 0;
const skip = (!haveShared && 'shared models not found (set TOKENSERVE_SHARED)') || (!haveHaproxy && 'haproxy not installed');
let ha = null, a = null, b = null, url = '', metricsUrl = '';
after(() => { if (ha && ha.exitCode === null) ha.kill('SIGKILL'); stopAll(); });

before(async () => {
  if (skip) return;
  [a, b] = await Promise.all([startReplica('ha-a'), startReplica('ha-b')]);
  const [port, mport] = [await freePort(), await freePort()];
  url = `http://127.0.0.1:${port}`;
  metricsUrl = `http://127.0.0.1:${mport}/metrics`;
  const env = { ...process.env, TS_HAPROXY_BIND: `127.0.0.1:${port}`, TS_HAPROXY_METRICS: `127.0.0.1:${mport}`,
    TS_REPLICA_1: `127.0.0.1:${a.port}`, TS_REPLICA_2: `127.0.0.1:${b.port}` };
  const check = spawnSync('haproxy', ['-c', '-f', cfg], { env });
  assert.equal(check.status, 0, check.stdout.toString() + check.stderr.toString());
  ha = spawn('haproxy', ['-db', '-f', cfg], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  // Up, and both servers passed their /ready checks (rise 2, inter 1 s).
  for (let i = 0; i < 100; i++) {
    try {
      const m = await (await fetch(metricsUrl)).text();
      const up = m.split('\n').filter((l) => l.startsWith('haproxy_server_status{proxy="replicas"') && l.includes('state="UP"') && l.endsWith(' 1'));
      if (up.length === 2) break;
    } catch { /* not listening yet */ }
    await sleep(100);
  }
});

test('haproxy: leastconn spreads, x-session-id sticks, the EPP header picks the endpoint', { skip, timeout: 60000 }, async () => {
  const spread = await pool(12, 4, (i) => completion(url, { prompt: `Story ${i}`, max_tokens: 4 }));
  const by = {};
  for (const x of spread) { assert.equal(x.status, 200, x.body); by[x.servedBy] = (by[x.servedBy] || 0) + 1; }
  assert.deepEqual(Object.keys(by).sort(), ['ha-a', 'ha-b'], JSON.stringify(by));

  const where = {};
  for (let round = 0; round < 3; round++) {
    for (const s of ['u1', 'u2', 'u3', 'u4', 'u5', 'u6']) {
      const x = await completion(url, { prompt: 'Hi', max_tokens: 1 }, { 'x-session-id': s });
      assert.equal(x.status, 200, x.body);
      (where[s] ||= new Set()).add(x.servedBy);
    }
  }
  for (const [s, set] of Object.entries(where)) assert.equal(set.size, 1, `${s} moved: ${[...set]}`);
  assert.equal(new Set(Object.values(where).map((x) => [...x][0])).size, 2, 'sessions use both replicas');

  for (const [rep, other] of [[a, b], [b, a]]) {
    const x = await completion(url, { prompt: 'Hi', max_tokens: 1 },
      { 'x-gateway-destination-endpoint': `127.0.0.1:${rep.port},127.0.0.1:${other.port}` });
    assert.equal(x.status, 200, x.body);
    assert.equal(x.servedBy, rep.name);
  }
  const m = await (await fetch(metricsUrl)).text();
  assert.ok(m.split('\n').filter((l) => l.startsWith('haproxy_')).length > 100);
});

test('haproxy: kill -9 one replica: retries + redispatch answer every request, /ready check marks it down', { skip, timeout: 60000 }, async () => {
  await a.stop('SIGKILL');
  const res = await pool(12, 3, (i) => completion(url, { prompt: `After ${i}`, max_tokens: 2 }));
  for (const x of res) {
    assert.equal(x.status, 200, x.body);
    assert.equal(x.servedBy, 'ha-b');
  }
  let down = false;
  for (let i = 0; i < 50 && !down; i++) {
    const m = await (await fetch(metricsUrl)).text();
    down = m.split('\n').some((l) => l.startsWith('haproxy_server_status{proxy="replicas",server="r1",state="DOWN"}') && l.endsWith(' 1'));
    if (!down) await sleep(100);
  }
  assert.ok(down, 'r1 marked DOWN by the /ready check');
  ha.kill('SIGTERM');
  await b.stop();
});
