#!/usr/bin/env node
// Gateway overhead (SCALEOUT.md §8 item 14; a benchmark, not a test). On loopback at
// concurrency C, the same requests straight to an upstream and through `tokenserve gateway`
// (built-in picker, --no-auth, SQLite ledger: the whole per-request path), interleaved in
// blocks so machine noise hits both alike. Two upstreams:
//   replica  a real `tokenserve serve` (stories-shaped synth model), 1-token completions
//   static   a minimal node HTTP server in its own process answering a fixed 1-token
//            completion at once (the engine's own variance removed: what is left is the
//            gateway), and an SSE stream whose first event is sent at once and the rest
//            SSE_GAP_MS later
// Reports per upstream: latency p50/p99 direct and via the gateway and their difference (the
// "added" figures; targets p50 < 1 ms, p99 < 5 ms), and for streams the time to the first SSE
// byte direct vs via the gateway (target delta < 2 ms; the gap after the first event shows the
// event was not held back).
//
// Usage: TOKENSERVE_SHARED=/work/shared node bench/scaleout_overhead.mjs
// Env: TOKENSERVE_BIN (default build/tokenserve), CONCURRENCY (8), REQUESTS (400 per path and
//      upstream), BLOCK (50), SSE_GAP_MS (30), UPSTREAMS ("static replica"). REPLICA_ARGS (extra serve flags for the replica).
// Reading the c=8 figure (measured on the 2-core Zen 4 host, session 7): client, gateway and
// upstream form a closed loop on two shared cores that is CPU-bound at c=8, so by Little's law
// the added p50 is about C x (gateway CPU per request) / 2 cores: 8 x 338/375/400 us / 2 =
// 1.35/1.50/1.60 ms predicted vs 1.25/1.51/1.69 ms measured (replica upstream, 1-token JSON).
// p50 < 1 ms at c=8 therefore needs the gateway below ~250 us CPU per request (it is 300-400 us:
// worker threads ~59 %, io thread ~20 %, ledger + audit writer threads ~21 % of it; kernel ~45 %).
// Session scale7 (2-core Zen 3, host shared with other sessions' compilers: direct p50 7 ms for the
// static upstream, so the "added" columns are noise there): old/new builds alternated in one run
// (GATEWAYS="bin:OLD bin:NEW bin:OLD bin:NEW", 300 requests each; CPU in 10 ms ticks, so +-33 us) gave CPU/request
// 667/700 -> 633/667 us (static JSON), 1167/1167 -> 1167/1133 (static SSE), 1033/1033 -> 1033/967
// (replica JSON), 1100/1200 -> 1067/1067 (replica SSE) after the routing inputs stopped copying
// (p95 TTFT cached, pool load summed in place) and Server-Timing "pre" p50 0.05-0.08 -> 0.03-0.05
// ms. A per-process profile of the old build (perf record -p, cpu-clock, static upstream): workers 52 %, io thread
// 20 %, ledger + audit writers + poller 28 %; malloc/free ~9 % of it in the workers; kernel 35 %.
// Session scale9 (2-core Zen 3, AVX2, host shared with another session's builds: load 2.5-3.5):
// GATEWAYS="default bin:OLD" (OLD = main b23c5df), REQUESTS=800, same run, CPU/request new vs old:
// static JSON 450 vs 475 us, static SSE 838 vs 975, replica JSON 575 vs 663, replica SSE 738 vs
// 813; added p50 1.27 vs 1.54 ms (static JSON), 0.71 vs 0.82 (static SSE first byte), 2.31 vs
// 3.54 (replica JSON). The change: the ledger and audit writers commit at most every 100 ms
// under load (they were ~21 % of the gateway's CPU at one SQLite transaction per 10 ms each:
// WAL page writes + auto-checkpoints) and the journal line is written without a JSON tree. A
// steady c=8 load (node:http client, static upstream, 8 s, old/new alternated twice) gave
// 345/356 -> 321/318 us per request. Still above the ~250 us that p50 < 1 ms needs; what is left
// (perf, dwarf call graphs): libcurl multi + socket syscalls ~49 % of the process, the client
// connection's read/write ~18 %, SQLite inserts ~12 %, JSON records (decision, audit) ~10 %.
// Session scale10 (2-core Intel Sapphire Rapids-class KVM, AVX-512; quiet host), REQUESTS=800,
// GATEWAYS="default bin:MAIN" (MAIN = main 83aa8a8), three runs: added p50 static JSON
// 0.06/0.23/0.14 ms (main 0.31/0.13/0.13), replica JSON 0.85/1.10/0.83 (main 0.84/0.90/1.13);
// SSE first-byte delta static 0.23/0.26/0.54 (main 0.29/0.32/0.51), replica 1.06/0.84/0.86 (main
// 1.01/0.98/1.34); added p99 -3.6..11 ms either build (direct p99 itself 5-22 ms: fetch's own CPU
// on the shared cores; not a stable figure, and > 5 ms in 3 of 6 JSON rows of the new build).
// This bench's CPU/request (163 vs 175 us static JSON) includes the idle polling of the whole
// interleaved run; the steady-load figure is scaleout_gateway_cpu.mjs's: 136 us (main) -> 85 us
// per request after this session's audit-row text writer and time-ordered request ids.
// Session scale12 (2-core AMD Zen 5 PVM guest; host shared with two other sessions' builds and
// benchmarks: load 4.5-8, no idle CPU; syscalls cost more here, 35 % of the gateway's CPU is
// kernel): REQUESTS=800, node:http client, six runs. Added p50 static JSON 1.04-1.58 ms,
// replica JSON 1.23-2.60; per request (client total - gateway's upstream call) static
// 1.15-1.96, replica 0.69-1.14; added p99 -10.8..10.6 ms, per-request p99 4.0-22 ms. Where the
// tail is (Server-Timing + perf sched timehist over a run): the gateway's own steps queue/pre/post
// p99 <= 0.34 ms; its io thread's wake-up delay p99 0.5-1.1 ms, max 4-9 ms; the node client's
// max 5-16 ms, the replica's io threads' max 6-7 ms, while other sessions' compilers and
// benchmarks held the cores. The replica answers 0.5-1 ms slower (its p50 as the gateway times
// it vs direct) when the gateway runs beside it on the two cores.
// Session scale14 (2-core Zen 5 PVM guest, host load 4.4-8 from other sessions), REQUESTS=800,
// GATEWAYS="bin:MAIN default --io-rt-priority,1" (MAIN = main a06fc1e; this build: the native
// upstream transport for the local replicas, router/upstream_native.h). Per-request added p50
// (client total - the gateway's upstream call) static JSON 1.14/1.27/1.31 ms (main) vs
// 0.96/1.16/1.07 (this), replica JSON 0.81/1.18/1.43 vs 0.68/0.69/1.08; SSE first-byte added p50
// static 0.74/0.92/0.72 vs 0.41/0.61/0.57, replica 3.89/2.20/1.31 vs 2.68/2.07/0.69 (three runs,
// the replica's own direct p50 7-9 ms and p99 36-110 ms on this load: the p99 columns are noise).
// --io-rt-priority 1 on the gateway is no help here: its io thread (demoted by the guard under
// this load, and promoted again between blocks) preempts the node client and the static upstream
// on the two shared cores, so the upstream call gets faster (0.84 -> 0.22 ms p50) while the
// client's own wait grows (per-request added p50 2.71 ms static JSON, 0.84 replica).
// Bounded: fixed request counts, a 120 s cap per upstream; loopback only; everything it starts is
// killed on exit.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
process.env.TOKENSERVE_BIN ||= path.join(here, '../build/tokenserve');
const H = await import('../tests/scaleout/harness.mjs');
const { startStatic } = await import('./scaleout_static_upstream.mjs');
if (!H.haveShared) { console.error('scaleout_overhead: shared models not found (set TOKENSERVE_SHARED)'); process.exit(77); }
const C = Number(process.env.CONCURRENCY || 8), REQ = Number(process.env.REQUESTS || 400), BLOCK = Number(process.env.BLOCK || 50);
const GAP = Number(process.env.SSE_GAP_MS || 30);
const UPSTREAMS = (process.env.UPSTREAMS || 'static replica').split(/\s+/).filter(Boolean);
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN; };
const kids = [];
process.on('exit', () => { for (const k of kids) if (k.exitCode === null) k.kill('SIGKILL'); });

// One request; resolves to {status, total, first, timing}: total = until the body's end, first
// = until the first SSE data line, timing = the gateway's Server-Timing parts (absent direct and
// from older builds). CLIENT picks the HTTP client: "http" (default: node:http on kept-alive
// connections, at most C of them per origin; a lean client, as a load generator on its own
// machine would be) or "fetch" (undici's fetch, what sessions up to scale10 used: several times
// the client CPU per request, which on the two shared cores lands in both paths' tails).
const CLIENT = process.env.CLIENT || 'http';
const agent = new http.Agent({ keepAlive: true, maxSockets: C });
const parseTiming = (h) => {
  const timing = {};
  for (const m of (h || '').matchAll(/(\w+);dur=([0-9.]+)/g)) timing[m[1]] = Number(m[2]);
  return timing;
};
function oneHttp(url, stream) {
  const body = JSON.stringify({ model: H.modelName, prompt: 'Once upon a time', max_tokens: 1, temperature: 0, stream });
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request(`${url}/v1/completions`, {
      method: 'POST', agent, timeout: 30000,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      res.setEncoding('utf8');
      let first = NaN, text = '';
      res.on('data', (d) => {
        text += d;
        if (Number.isNaN(first) && text.includes('data: ')) first = performance.now() - t0;
      });
      res.on('end', () => resolve({ status: res.statusCode, total: performance.now() - t0, first,
                                    timing: parseTiming(res.headers['server-timing']) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
    req.end(body);
  });
}
async function oneFetch(url, stream) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: H.modelName, prompt: 'Once upon a time', max_tokens: 1, temperature: 0, stream }),
    signal: AbortSignal.timeout(30000),
  });
  let first = NaN;
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
    if (Number.isNaN(first) && text.includes('data: ')) first = performance.now() - t0;
  }
  return { status: r.status, total: performance.now() - t0, first, timing: parseTiming(r.headers.get('server-timing')) };
}
const one = CLIENT === 'fetch' ? oneFetch : oneHttp;
if (CLIENT !== 'fetch' && CLIENT !== 'http') throw new Error(`CLIENT must be http or fetch, not ${CLIENT}`);

// CPU time (user + system, ms) a process has used so far (Linux /proc; NaN elsewhere).
function cpuMs(pid) {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) * 1000 / 100;  // clock ticks (USER_HZ 100)
  } catch { return NaN; }
}

// SPLIT=1 (a diagnostic; default off: two procfs reads per request and thread cost the client
// CPU): each request through a gateway also records how long, while it ran, this client's main
// thread and the gateway's io thread(s) sat runnable without a CPU (run_delay growth,
// /proc/.../schedstat), so the slowest requests' added time can be split into the client's own
// wait for a CPU, the gateway io thread's wait, and the rest (the gateway's own work and the
// loopback hops). The waits can overlap each other and the upstream call, so the split is a
// guide, not a partition.
const SPLIT = process.env.SPLIT === '1';
const runDelayMs = (f) => { try { return Number(fs.readFileSync(f, 'utf8').split(' ')[1]) / 1e6; } catch { return NaN; } };
const SELF = `/proc/${process.pid}/task/${process.pid}/schedstat`;
const ioFilesOf = (pid) => H.threadsOf(pid).filter((t) => {
  try { return fs.readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').trim() === 'ts-http-io'; } catch { return false; }
}).map((t) => `/proc/${pid}/task/${t}/schedstat`);
async function timed(url, stream, ioFiles) {
  if (!SPLIT || !ioFiles.length) return one(url, stream);
  const sum = () => ioFiles.reduce((a, f) => a + runDelayMs(f), 0);
  const c0 = runDelayMs(SELF), g0 = sum();
  const x = await one(url, stream);
  return Object.assign(x, { clientWait: runDelayMs(SELF) - c0, ioWait: sum() - g0 });
}

// Interleaved blocks: direct, then each gateway in turn. Returns {direct, via: [per gateway],
// timings: [their Server-Timing parts], own: [per-request added ms], parts: [SPLIT's waits]}.
async function measure(up, gws, stream) {
  const direct = [], via = gws.map(() => []), timings = gws.map(() => []), own = gws.map(() => []), parts = gws.map(() => []);
  const ioFiles = gws.map((g) => (SPLIT ? ioFilesOf(g.proc.pid) : []));
  const deadline = Date.now() + 120000;
  for (let done = 0; done < REQ && Date.now() < deadline; done += BLOCK) {
    for (const [url, out, files] of [[up.url, direct, []], ...gws.map((g, i) => [g.url, via[i], ioFiles[i]])]) {
      const res = await H.pool(BLOCK, C, () => timed(url, stream, files));
      const gi = via.indexOf(out);
      for (const x of res) {
        if (x.status !== 200) continue;
        out.push(stream ? x.first : x.total);
        if (gi >= 0 && x.timing.upstream !== undefined) {
          timings[gi].push(x.timing);
          if (!stream) {
            own[gi].push(x.total - x.timing.upstream);
            if (x.clientWait !== undefined) parts[gi].push({ own: x.total - x.timing.upstream, client: x.clientWait, io: x.ioWait });
          }
        }
      }
    }
  }
  return { direct, via, timings, own, parts };
}

// "total = client wait + gateway io wait + rest" over the slowest 2 % (by added time) and over all.
function splitLine(ps) {
  const f = (x) => x.toFixed(2);
  const line = (xs) => {
    const m = (k) => xs.reduce((a, p) => a + p[k], 0) / Math.max(1, xs.length);
    return `${f(m('own'))} = client wait ${f(m('client'))} + gateway io wait ${f(m('io'))} + rest ${f(m('own') - m('client') - m('io'))}`;
  };
  const sorted = [...ps].sort((a, b) => b.own - a.own);
  return `slowest 2 % (n ${Math.ceil(0.02 * ps.length)}): ${line(sorted.slice(0, Math.max(1, Math.ceil(0.02 * ps.length))))}; all: ${line(ps)}`;
}

console.log(`gateway overhead: c=${C}, ${REQ} requests per path, blocks of ${BLOCK}, client ${CLIENT}, client slice ${process.env.CLIENT_SLICE_US || 0} us, host load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}, ${os.cpus().length} cpus`);
// Gateways compared in the same run (GATEWAYS, space-separated setups): "default"; "no-hints"
// (--no-sched-hints: the kernel's default slices); "old-knobs" (2 io threads, a journal sync per
// row, no hints: this build with last session's settings); "bin:/path" (another tokenserve
// build, e.g. a copy of main's, with its defaults); or comma-separated gateway flags.
const GATEWAYS = (process.env.GATEWAYS || 'default').split(/\s+/).filter(Boolean);
// REPLICA_ARGS: extra `serve` flags for the replica upstream (e.g. "--io-rt-priority 0").
const REPLICA_ARGS = (process.env.REPLICA_ARGS || '').split(/\s+/).filter(Boolean);
const gwArgs = { default: [], 'no-hints': ['--no-sched-hints'],
  'old-knobs': ['--io-threads', '2', '--ledger-sync-ms', '0', '--no-sched-hints'] };
const splits = [], owns = [], splitsOwn = [];
// CLIENT_SLICE_US=N (default 0: off): the benchmark's own processes (this client and the static
// upstream, every thread) ask the scheduler for an N us slice (H.requestSlice: no priority
// change), as the gateway's io threads and the replica's do, so a woken client or static
// upstream preempts a long-slice thread (another session's compiler) at once. They stand in for
// a client and a server on other machines; their own wait for one of the two shared cores is
// then mostly out of both paths' latency, the gateway's and the replica's stays in.
const SLICE = Number(process.env.CLIENT_SLICE_US || 0);
if (SLICE) H.requestSlice(H.threadsOf(process.pid), SLICE);
console.log('| upstream | request | gateway | direct p50 | via gw p50 | added p50 | direct p99 | via gw p99 | added p99 | gw CPU/request | n |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|');
for (const u of UPSTREAMS) {
  const up = u === 'static' ? await startStatic(H, kids, GAP) : await H.startReplica('ovh', { args: REPLICA_ARGS });
  if (SLICE && u === 'static') H.requestSlice(H.threadsOf(up.proc.pid), SLICE);
  const ef = path.join(H.tmp, `ovh-endpoints-${u}.yaml`);
  H.writeEndpoints(ef, [up]);
  const gws = [];
  for (const g of GATEWAYS) {
    gws.push(g.startsWith('bin:') ? await H.startGateway(ef, [], { binary: g.slice(4) })
      : await H.startGateway(ef, gwArgs[g] || g.split(',')));
  }
  try {
    for (const gw of gws)
      for (let i = 0; i < 100 && H.metricSum(await H.metrics(gw.url), 'tokenserve_gateway_endpoint_up') !== 1; i++) await H.sleep(50);
    await measure(up, gws, false);  // warm-up round (not reported) ... then the figures:
    for (const stream of [false, true]) {
      // Each gateway's CPU over the measurement (its idle /ready and /metrics polling included)
      // per request it proxied: the figure least disturbed by other load on the host.
      const cpu0 = gws.map((g) => cpuMs(g.proc.pid));
      const { direct, via, timings, own, parts } = await measure(up, gws, stream);
      const cpu = gws.map((g, i) => (cpuMs(g.proc.pid) - cpu0[i]) * 1000 / Math.max(1, via[i].length));
      const f = (x) => x.toFixed(2);
      const d50 = pct(direct, 0.5), d99 = pct(direct, 0.99);
      via.forEach((v, i) => {
        const v50 = pct(v, 0.5), v99 = pct(v, 0.99);
        console.log(`| ${u} | ${stream ? 'SSE first byte' : '1-token JSON'} | ${GATEWAYS[i]} | ${f(d50)} | ${f(v50)} | ${f(v50 - d50)} | ` +
                    `${f(d99)} | ${f(v99)} | ${f(v99 - d99)} | ${cpu[i].toFixed(0)} us | ${direct.length}/${v.length} |`);
        if (parts[i].length) splitsOwn.push(`${u} ${GATEWAYS[i]}: ${splitLine(parts[i])}`);
        if (own[i].length) owns.push(`| ${u} | ${GATEWAYS[i]} | ${f(pct(own[i], 0.5))} | ${f(pct(own[i], 0.99))} | ${f(pct(timings[i].map((t) => t.upstream), 0.5))} / ${f(pct(timings[i].map((t) => t.upstream), 0.99))} | ${f(d50)} / ${f(d99)} | ${own[i].length} |`);
        if (timings[i].length) splits.push(`${u} ${stream ? 'SSE' : 'JSON'} ${GATEWAYS[i]}: ` + ['queue', 'pre', 'upstream', 'post']
          .map((k) => `${k} ${f(pct(timings[i].map((t) => t[k]), 0.5))}/${f(pct(timings[i].map((t) => t[k]), 0.99))}`).join(', ') +
          ` (n ${timings[i].length})`);
      });
    }
  } finally {
    for (const gw of gws) await gw.stop();
    await up.stop('SIGKILL');
  }
}
console.log('(ms; "added" = via gateway - direct at the same percentile)');
// Per request, through the gateway: the client's total minus the gateway's own timing of its
// upstream call (Server-Timing "upstream": request sent to body received, on the gateway's
// clock). What is left is what the gateway put on that request: the client-gateway hop both
// ways, the io thread's parse and write, the hand-off, admission, routing, the ledger hand-off
// and every wait for a CPU in those. Not in it: the upstream answering slower because the
// gateway used CPU on the shared cores (the percentile difference above keeps that), and the
// gateway-upstream connection (inside the upstream figure, as a direct client's is in its own).
if (owns.length) console.log('\nadded per request (client total - gateway upstream call), JSON:\n' +
  '| upstream | gateway | added p50 | added p99 | its upstream call p50 / p99 | direct p50 / p99 | n |\n|---|---|---|---|---|---|---|\n' +
  owns.join('\n'));
if (splitsOwn.length) console.log('where the added time went (ms, means):\n  ' + splitsOwn.join('\n  '));
// The gateway's Server-Timing parts, p50/p99 (ms): queue = io thread to worker hand-off, pre =
// parse + admission + routing, upstream = its call (to the head for SSE), post = after the call
// until the answer goes to the io thread. The client-observed time minus these is the io threads'
// reading and writing plus the client's own share (its wait for a CPU included).
if (splits.length) console.log('gateway Server-Timing p50/p99 (ms):\n  ' + splits.join('\n  '));
console.log(`host load at the end ${os.loadavg().map((x) => x.toFixed(2)).join(" ")}`);
H.stopAll();
