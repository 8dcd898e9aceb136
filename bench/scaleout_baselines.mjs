#!/usr/bin/env node
// Baselines table (SCALEOUT.md §8 item 12; a benchmark, not a test): the §8.4 workload through
//   gateway     `tokenserve gateway` (built-in picker: prefix + queue + KV, imbalance guard)
//   leastconn   HAProxy `balance leastconn` (deploy/haproxy/haproxy.cfg, default backend)
//   sessionhash HAProxy consistent hash on x-session-id (same file; the session id is the
//               shared prefix's group, as a chat product would send its conversation id)
//   roundrobin  the client sends request i to replica i mod N
// against the same real `tokenserve serve` replicas on loopback (restarted for every setup, so
// no setup inherits another's cache). Reports per setup: engine prefix-hit ratio (Σ Δhits / Σ
// Δqueries from the replicas' /metrics), TTFT p50/p95 (first SSE data chunk at the client),
// throughput (requests/s and completion tokens/s over the wall time), requests per replica.
//
// Workload (§8.4): G shared prefixes of >= 384 tokens x R requests each (in one shuffled
// order, the same for every setup), short suffixes,
// concurrency C, N replicas, each with a KV cache sized to hold about two prefixes (so a router
// that spreads every prefix over every replica thrashes the cache, as in production where the
// working set exceeds one replica's KV).
//
// Usage: TOKENSERVE_SHARED=/work/shared node bench/scaleout_baselines.mjs
// Env: TOKENSERVE_BIN (default build/tokenserve), REPLICAS (2), GROUPS (4), PER_GROUP (64),
//      CONCURRENCY (4), MAX_TOKENS (4), KV (2560KiB), SETUPS ("gateway leastconn sessionhash roundrobin").
// Bounded: a fixed request count per setup and a 120 s cap each; loopback only; every process
// it starts is killed on exit. HAProxy setups are skipped (with a line) when haproxy is absent.
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
process.env.TOKENSERVE_BIN ||= path.join(here, '../build/tokenserve');
const H = await import('../tests/scaleout/harness.mjs');
if (!H.haveShared) { console.error('scaleout_baselines: shared models not found (set TOKENSERVE_SHARED)'); process.exit(77); }

const N = Number(process.env.REPLICAS || 2), G = Number(process.env.GROUPS || 4), PER = Number(process.env.PER_GROUP || 64);
const C = Number(process.env.CONCURRENCY || 4), MAXT = Number(process.env.MAX_TOKENS || 4), KV = process.env.KV || '2560KiB';
const SETUPS = (process.env.SETUPS || 'gateway leastconn sessionhash roundrobin').split(/\s+/).filter(Boolean);
const haveHaproxy = spawnSync('haproxy', ['-v']).status === 0;
const cfg = path.join(here, '../deploy/haproxy/haproxy.cfg');
const words = ['lion', 'boat', 'moon', 'tree', 'star', 'fish', 'rain', 'bell'];
const prefixes = words.slice(0, G).map((w, i) => `Once upon a time there was a ${w} number ${i}. `.repeat(24));  // ~410 tokens

// Arrival order: the G x PER requests shuffled with a fixed seed (so every setup sees the same
// sequence, and round-robin is not accidentally aligned with the groups).
const order = Array.from({ length: G * PER }, (_, i) => i % G);
{
  let seed = 12345;
  const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
  for (let i = order.length - 1; i > 0; i--) { const j = Math.floor(rnd() * (i + 1)); [order[i], order[j]] = [order[j], order[i]]; }
}
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN; };
let ha = null;
process.on('exit', () => { if (ha && ha.exitCode === null) ha.kill('SIGKILL'); });

async function streamOnce(url, body, headers) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: H.modelName, max_tokens: MAXT, temperature: 0, stream: true, stream_options: { include_usage: true }, ...body }),
    signal: AbortSignal.timeout(60000),
  });
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let ttft = NaN, text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
    if (Number.isNaN(ttft) && text.includes('data: ')) ttft = performance.now() - t0;
  }
  let completion = 0;
  for (const ev of text.split('\n\n')) {
    if (!ev.startsWith('data: {')) continue;
    try { const j = JSON.parse(ev.slice(6)); if (j.usage) completion = j.usage.completion_tokens; } catch { /* partial */ }
  }
  return { status: r.status, ttft, completion, servedBy: r.headers.get('x-tokenserve-served-by') };
}

async function startHa(replicas) {
  const [port, mport] = [await H.freePort(), await H.freePort()];
  const env = { ...process.env, TS_HAPROXY_BIND: `127.0.0.1:${port}`, TS_HAPROXY_METRICS: `127.0.0.1:${mport}`,
    TS_REPLICA_1: `127.0.0.1:${replicas[0].port}`, TS_REPLICA_2: `127.0.0.1:${replicas[1 % replicas.length].port}` };
  ha = spawn('haproxy', ['-db', '-f', cfg], { env, stdio: ['ignore', 'ignore', 'ignore'] });
  for (let i = 0; i < 100; i++) {
    try {
      const m = await (await fetch(`http://127.0.0.1:${mport}/metrics`)).text();
      if (m.split('\n').filter((l) => l.startsWith('haproxy_server_status{proxy="replicas"') && l.includes('state="UP"') && l.endsWith(' 1')).length === 2) break;
    } catch { /* starting */ }
    await H.sleep(100);
  }
  return `http://127.0.0.1:${port}`;
}

async function runSetup(setup) {
  if ((setup === 'leastconn' || setup === 'sessionhash') && (!haveHaproxy || N !== 2)) {
    return { setup, skipped: !haveHaproxy ? 'haproxy not installed' : 'the HAProxy file lists 2 replicas (REPLICAS=2)' };
  }
  const replicas = await Promise.all(Array.from({ length: N }, (_, i) => H.startReplica(`b${i + 1}`, { args: ['--kv-cache-memory', KV] })));
  let gw = null, front = '';
  try {
    if (setup === 'gateway') {
      const ef = path.join(H.tmp, `bl-endpoints-${Date.now()}.yaml`);
      H.writeEndpoints(ef, replicas);
      gw = await H.startGateway(ef);
      for (let i = 0; i < 100 && H.metricSum(await H.metrics(gw.url), 'tokenserve_gateway_endpoint_up') !== N; i++) await H.sleep(50);
      front = gw.url;
    } else if (setup !== 'roundrobin') {
      front = await startHa(replicas);
    }
    const before = await Promise.all(replicas.map((r) => H.metrics(r.url)));
    const total = G * PER;
    const deadline = Date.now() + 120000;
    const t0 = performance.now();
    const res = await H.pool(total, C, async (i) => {
      if (Date.now() > deadline) return { status: 0, ttft: NaN, completion: 0 };
      const g = order[i];
      const url = setup === 'roundrobin' ? replicas[i % N].url : front;
      const headers = setup === 'sessionhash' ? { 'x-session-id': `group-${g}` } : {};
      return streamOnce(url, { prompt: prefixes[g] + ` Then ${i}.` }, headers);
    });
    const wall = (performance.now() - t0) / 1000;
    const after = await Promise.all(replicas.map((r) => H.metrics(r.url)));
    let dq = 0, dh = 0;
    replicas.forEach((_, k) => {
      dq += H.metricSum(after[k], 'tokenserve:prefix_cache_queries_total') - H.metricSum(before[k], 'tokenserve:prefix_cache_queries_total');
      dh += H.metricSum(after[k], 'tokenserve:prefix_cache_hits_total') - H.metricSum(before[k], 'tokenserve:prefix_cache_hits_total');
    });
    const ok = res.filter((x) => x.status === 200);
    const per = {};
    for (const x of ok) per[x.servedBy] = (per[x.servedBy] || 0) + 1;
    const ttfts = ok.map((x) => x.ttft).filter((x) => !Number.isNaN(x));
    return {
      setup, requests: total, ok: ok.length, hit_ratio: dq > 0 ? dh / dq : NaN,
      ttft_p50_ms: pct(ttfts, 0.5), ttft_p95_ms: pct(ttfts, 0.95), req_per_s: ok.length / wall,
      completion_tok_per_s: ok.reduce((s, x) => s + x.completion, 0) / wall, per_replica: per,
    };
  } finally {
    if (gw) await gw.stop();
    if (ha) { ha.kill('SIGKILL'); ha = null; }
    await Promise.all(replicas.map((r) => r.stop('SIGKILL')));
  }
}

console.log(`scaleout baselines: ${N} replicas (KV ${KV} each), ${G} prefixes x ${PER} requests, c=${C}, max_tokens ${MAXT}, ` +
            `host load ${(await import('node:os')).loadavg().map((x) => x.toFixed(2)).join(' ')}`);
console.log('| setup | hit ratio | TTFT p50 ms | TTFT p95 ms | req/s | completion tok/s | ok | per replica |');
console.log('|---|---|---|---|---|---|---|---|');
for (const s of SETUPS) {
  const r = await runSetup(s);
  if (r.skipped) { console.log(`| ${s} | skipped: ${r.skipped} |||||||`); continue; }
  console.log(`| ${r.setup} | ${r.hit_ratio.toFixed(3)} | ${r.ttft_p50_ms.toFixed(1)} | ${r.ttft_p95_ms.toFixed(1)} | ` +
              `${r.req_per_s.toFixed(1)} | ${r.completion_tok_per_s.toFixed(1)} | ${r.ok}/${r.requests} | ${JSON.stringify(r.per_replica)} |`);
}
H.stopAll();
