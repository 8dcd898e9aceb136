// Tiers and the GIE header contract (SCALEOUT.md §8 items 13 and 15, §6.2 pool = gie) on
// loopback with real replicas and a real HAProxy (Debian package) as the external data plane:
//   - pool = gie: `tokenserve gateway --pool gie --pool-url <haproxy>`: HAProxy (leastconn) is the
//     InferencePool route; it echoes the x-gateway-inference-objective / -fairness-id it received
//     and says which server answered in x-gateway-destination-endpoint-served, which the gateway
//     records as served_by in its ledger.
//   - chained builtin: `--chain-url <haproxy>`: deploy/haproxy/haproxy.cfg's set-dst backend routes
//     by the x-gateway-destination-endpoint our picker emits.
//   - shedding: with --shed-batch-waiting, a saturated pool sheds batch (429 + Retry-After) while
//     interactive requests are served.
// Skips without the shared models (or, for the HAProxy parts, without haproxy). Bounded; every
// process started is killed in `after`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  haveShared, tmp, sleep, startReplica, writeEndpoints, startGateway, stopAll, pool, completion, metrics, metricSum,
  launch, bin, freePort, modelName,
} from './harness.mjs';

const deployCfg = path.join(path.dirname(fileURLToPath(import.meta.url)), '../../deploy/haproxy/haproxy.cfg');
const haveHaproxy = spawnSync('haproxy', ['-v']).status === 0;
const skip = !haveShared && 'shared models not found (set TOKENSERVE_SHARED)';
const skipHa = skip || (!haveHaproxy && 'haproxy not installed');
const procs = [];
let a = null, b = null;
const endpointsFile = path.join(tmp, 'tiers-endpoints.yaml');
after(() => { for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL'); stopAll(); });

before(async () => {
  if (skip) return;
  [a, b] = await Promise.all([startReplica('t-a', { args: ['--max-seqs', '1'] }), startReplica('t-b', { args: ['--max-seqs', '1'] })]);
  writeEndpoints(endpointsFile, [a, b]);
});

// HAProxy with `cfg` (text or a file) and env; resolves once every server in `backend` is UP.
async function startHaproxy(cfgFile, env, backend, servers) {
  const check = spawnSync('haproxy', ['-c', '-f', cfgFile], { env });
  assert.equal(check.status, 0, check.stdout.toString() + check.stderr.toString());
  const ha = spawn('haproxy', ['-db', '-f', cfgFile], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  procs.push(ha);
  for (let i = 0; i < 100; i++) {
    try {
      const m = await (await fetch(`http://${env.TS_HAPROXY_METRICS}/metrics`)).text();
      const up = m.split('\n').filter((l) => l.startsWith(`haproxy_server_status{proxy="${backend}"`) && l.includes('state="UP"') && l.endsWith(' 1'));
      if (up.length === servers) break;
    } catch { /* not listening yet */ }
    await sleep(100);
  }
  return ha;
}

async function gatewayWithKey(args, tenant, tiers = '') {
  const ledger = path.join(tmp, `tiers-gw-${Date.now()}.db`);
  const key = execFileSync(bin, ['keys', 'create', '--ledger', ledger, '--tenant', tenant, '--app', 'web',
    ...(tiers ? ['--tiers', tiers] : [])]).toString().trim().split('\n').pop();
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const g = launch(['gateway', '--host', '127.0.0.1', '--port', String(port), '--ledger', ledger, ...args], `${url}/ready`);
  await g.ready;
  return Object.assign(g, { url, ledger, key });
}

test('pool = gie: forwards to the InferencePool route with the tier headers; served endpoint recorded', { skip: skipHa, timeout: 60000 }, async () => {
  // The stand-in InferencePool route: HAProxy picks (leastconn), logs the GIE headers it received,
  // and names the serving endpoint the GIE way.
  const cfg = path.join(tmp, 'gie-haproxy.cfg');
  fs.writeFileSync(cfg, `
global
  log stderr format raw local0 info
defaults
  mode http
  log global
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  default-server inter 500ms fall 2 rise 1
frontend pool
  bind "\${TS_HAPROXY_BIND}"
  capture request header x-gateway-inference-objective len 32
  capture request header x-gateway-inference-fairness-id len 64
  capture request header x-gateway-destination-endpoint len 128
  capture request header x-request-id len 64
  log-format "seen path=%HP objective=%[capture.req.hdr(0)] fairness=%[capture.req.hdr(1)] dest=%[capture.req.hdr(2)] id=%[capture.req.hdr(3)] server=%si:%sp status=%ST"
  http-response set-header x-gateway-destination-endpoint-served %si:%sp
  default_backend replicas
backend replicas
  balance leastconn
  option httpchk GET /ready
  server a "\${TS_REPLICA_1}" check
  server b "\${TS_REPLICA_2}" check
frontend metrics
  bind "\${TS_HAPROXY_METRICS}"
  http-request use-service prometheus-exporter if { path /metrics }
`);
  const [port, mport] = [await freePort(), await freePort()];
  const env = { ...process.env, TS_HAPROXY_BIND: `127.0.0.1:${port}`, TS_HAPROXY_METRICS: `127.0.0.1:${mport}`,
    TS_REPLICA_1: `127.0.0.1:${a.port}`, TS_REPLICA_2: `127.0.0.1:${b.port}` };
  const ha = await startHaproxy(cfg, env, 'replicas', 2);
  let haLog = '';
  ha.stderr.on('data', (d) => { haLog += d; });
  const g = await gatewayWithKey(['--pool', 'gie', '--pool-url', `http://127.0.0.1:${port}`], 'acme');
  try {
    const auth = { authorization: `Bearer ${g.key}` };
    const sent = [];
    for (const tier of ['interactive', 'batch', 'interactive', 'batch']) {
      const r = await completion(g.url, { prompt: `gie ${tier}`, max_tokens: 2, tier }, auth);
      assert.equal(r.status, 200, r.body);
      const dest = r.headers.get('x-gateway-destination-endpoint-served');
      assert.ok([`127.0.0.1:${a.port}`, `127.0.0.1:${b.port}`].includes(dest), dest);
      assert.equal(r.servedBy, dest.endsWith(`:${a.port}`) ? 't-a' : 't-b');
      assert.equal(r.headers.get('x-tokenserve-route'), `rule=builtin; target=local:gie/${dest}; reason=picker`);
      sent.push({ tier, id: r.headers.get('x-request-id'), dest });
    }
    const s = await fetch(`${g.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...auth },
      body: JSON.stringify({ model: modelName, prompt: 'streamed', max_tokens: 3, stream: true }) });
    assert.equal(s.status, 200);
    assert.ok((await s.text()).trimEnd().endsWith('data: [DONE]'));
    assert.equal((await (await fetch(`${g.url}/router/decisions`)).json()).length, 0, 'no built-in pick in gie mode');
    // HAProxy saw the objective = the admitted tier, the fairness id = the key's tenant, and no
    // destination header (the pool's picker decides).
    for (let i = 0; i < 50 && haLog.split('\n').filter((l) => l.includes('seen path=/v1/completions')).length < 5; i++) await sleep(50);
    for (const x of sent) {
      const line = haLog.split('\n').find((l) => l.includes(`id=${x.id}`));
      assert.ok(line, `no HAProxy log line for ${x.id}:\n${haLog}`);
      assert.match(line, new RegExp(`objective=${x.tier} fairness=acme dest=- `));  // "-": header absent
      assert.match(line, new RegExp(`server=${x.dest.replace(/\./g, '\\.')} status=200`));
    }
    assert.equal(new Set(sent.map((x) => x.dest)).size, 2, 'leastconn used both replicas');
    // The ledger row of each request says which endpoint the data plane named.
    assert.equal((await g.stop()).code, 0);
    const rows = execFileSync(bin, ['gateway', 'decisions', '--ledger', g.ledger]).toString().trim().split('\n').map((l) => JSON.parse(l));
    for (const x of sent) {
      const row = rows.find((r) => r.request_id === x.id);
      assert.ok(row, x.id);
      assert.equal(row.ledger.served_by, `local:gie/${x.dest}`);
      assert.equal(row.target, `local:gie/${x.dest}`);
    }
  } finally {
    if (g.proc.exitCode === null) await g.stop();
    ha.kill('SIGKILL');
  }
});

test('pool = gie: the route down -> 502 with a clear error (no picker to fail over to); flags checked', { skip, timeout: 30000 }, async () => {
  const dead = await freePort();
  const g = await gatewayWithKey(['--pool', 'gie', '--pool-url', `http://127.0.0.1:${dead}`, '--no-auth'], 'x');
  try {
    const r = await completion(g.url, { prompt: 'hello', max_tokens: 2 });
    assert.equal(r.status, 502, r.body);
    assert.match(JSON.parse(r.body).error.message, /local:gie connect_error/);
  } finally {
    await g.stop();
  }
  for (const [args, msg] of [
    [['--pool', 'gie'], /--pool gie needs --pool-url/],
    [['--pool', 'gie', '--pool-url', 'http://127.0.0.1:1', '--endpoints', endpointsFile], /takes no --endpoints/],
    [['--pool', 'gie', '--pool-url', 'ftp://x'], /--pool-url: URL must start with http/],
    [['--pool', 'gie', '--pool-url', 'http://127.0.0.1:1/v1'], /no path/],
    [['--endpoints', endpointsFile, '--pool-url', 'http://127.0.0.1:1'], /only for --pool gie/],
    [[], /--endpoints FILE is required/],
  ]) {
    const r = spawnSync(bin, ['gateway', '--no-auth', '--port', '0', '--ledger', path.join(tmp, 'flags.db'), ...args], { timeout: 10000 });
    assert.notEqual(r.status, 0, args.join(' '));
    assert.match(r.stderr.toString(), msg, args.join(' '));
  }
});

test('chained builtin: HAProxy set-dst routes by the x-gateway-destination-endpoint our picker emits', { skip: skipHa, timeout: 60000 }, async () => {
  const [port, mport] = [await freePort(), await freePort()];
  const env = { ...process.env, TS_HAPROXY_BIND: `127.0.0.1:${port}`, TS_HAPROXY_METRICS: `127.0.0.1:${mport}`,
    TS_REPLICA_1: `127.0.0.1:${a.port}`, TS_REPLICA_2: `127.0.0.1:${b.port}` };
  const ha = await startHaproxy(deployCfg, env, 'replicas', 2);
  const g = await startGateway(endpointsFile, ['--chain-url', `http://127.0.0.1:${port}`]);
  try {
    for (let i = 0; i < 100 && metricSum(await metrics(g.url), 'tokenserve_gateway_endpoint_up') !== 2; i++) await sleep(50);
    // Two shared prefixes: the picker sends each to one replica; HAProxy must follow the header.
    const prefixes = ['Once upon a time there was a girl named Lily. '.repeat(6), 'The big dog ran to the park to play. '.repeat(6)];
    const res = await pool(12, 2, (i) => completion(g.url, { prompt: prefixes[i % 2] + `n${i}`, max_tokens: 2 }));
    const decisions = await (await fetch(`${g.url}/router/decisions`)).json();
    for (const r of res) {
      assert.equal(r.status, 200, r.body);
      const d = decisions.find((x) => x.request_id === r.headers.get('x-request-id'));
      assert.ok(d, 'decision recorded');
      assert.equal(r.servedBy, d.served_by, 'HAProxy routed to the endpoint our picker chose');
      assert.equal(d.decision.ranked[0].name, d.served_by);
    }
    assert.equal(new Set(res.map((r) => r.servedBy)).size, 2, 'both replicas used');
  } finally {
    assert.equal((await g.stop()).code, 0);
    ha.kill('SIGKILL');
  }
});

test('tier shedding: a saturated pool sheds batch with 429 + Retry-After while interactive is served', { skip, timeout: 60000 }, async () => {
  const g = await startGateway(endpointsFile, ['--shed-batch-waiting', '2']);
  try {
    for (let i = 0; i < 100 && metricSum(await metrics(g.url), 'tokenserve_gateway_endpoint_up') !== 2; i++) await sleep(50);
    // Saturate: 6 long interactive streams on two --max-seqs 1 replicas (1 running + 2 waiting each).
    const load = Array.from({ length: 6 }, (_, i) => completion(g.url, { prompt: `Load ${i}: once upon a time`, max_tokens: 400 }));
    let shed = null;
    for (let i = 0; i < 60 && !shed; i++) {
      await sleep(50);
      const r = await completion(g.url, { prompt: 'a batch job', max_tokens: 2, tier: 'batch' });
      if (r.status === 429) shed = r;
      else assert.equal(r.status, 200, r.body);
    }
    assert.ok(shed, 'batch was never shed while the pool was saturated');
    assert.equal(shed.headers.get('retry-after'), '1');
    const err = JSON.parse(shed.body).error;
    assert.equal(err.code, 'batch_shed');
    assert.match(shed.headers.get('x-tokenserve-route'), /^rule=builtin; target=none; reason=picker; batch shed/);
    // Interactive still goes through (queued behind the load, but admitted and served).
    const inter = completion(g.url, { prompt: 'an interactive question', max_tokens: 2 });
    const results = await Promise.all([...load, inter]);
    for (const r of results) assert.equal(r.status, 200, r.body);
    // Load gone: batch is served again.
    for (let i = 0; i < 100 && metricSum(await metrics(a.url), 'tokenserve:num_requests_running') + metricSum(await metrics(b.url), 'tokenserve:num_requests_running') > 0; i++) await sleep(50);
    await sleep(200);
    const after = await completion(g.url, { prompt: 'a batch job later', max_tokens: 2, tier: 'batch' });
    assert.equal(after.status, 200, after.body);
    const m = await metrics(g.url);
    assert.ok(metricSum(m, 'tokenserve_gateway_shed_total') >= 1, m);
  } finally {
    assert.equal((await g.stop()).code, 0);
  }
});
