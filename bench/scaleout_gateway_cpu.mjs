#!/usr/bin/env node
// Gateway CPU per proxied request (SCALEOUT.md §8.14's driver; a benchmark, not a test): a
// steady closed-loop load of C concurrent 1-token completions (node:http on kept-alive
// connections: a lean client, so the 2 shared cores go to the gateway and the upstream rather
// than to the load generator) through each gateway in GATEWAYS to the static upstream
// (scaleout_static_upstream.mjs), SECS seconds per gateway, the gateways alternated ROUNDS times
// in the same run so host noise hits both alike. Per gateway and round: requests/s, the
// gateway's CPU per request (user + system, /proc/PID/stat, 10 ms ticks) and its split by thread
// name (io thread, ledger and audit writers, poller...). By Little's law on this CPU-bound loop,
// the added latency at c=8 follows the gateway's CPU per request (scaleout_overhead.mjs).
//
// Usage: TOKENSERVE_SHARED=/work/shared node bench/scaleout_gateway_cpu.mjs
// Env: TOKENSERVE_BIN (default build/tokenserve), GATEWAYS ("default"; "bin:/path" = another
//      build, or comma-separated gateway flags), CONCURRENCY (8), SECS (6), ROUNDS (2),
//      STREAM (0; 1 = SSE requests), PROBE (a shell command run beside the first gateway's first
//      round, "{pid}" replaced by its pid, e.g. "perf record -g -e cpu-clock -p {pid} -o
//      /tmp/p.data -- sleep 5" or "timeout -s INT 5 strace -c -f -p {pid} -o /tmp/s.txt"; that
//      round's figures then include the probe's disturbance).
// Measured (session scale10, 2-core Sapphire Rapids-class KVM, SECS=6 ROUNDS=3, main 83aa8a8 vs
// this session's build alternated): 135/142/148 -> 92/89/89 us per request, 6044 -> 9409 req/s;
// io thread 103-105 -> 75-77 us, ledger + audit writer threads 39-44 -> 14 us.
// Session scale14 (2-core Zen 5 PVM guest, host load 5-9 from other sessions; SECS=5-6
// ROUNDS=3, main a06fc1e alternated with this build): 129/129/129 -> 95/103/98 and
// 128/128/130 -> 97/101/97 us per request after the native upstream transport (io thread
// 109-111 -> 78-83 us); SSE (STREAM=1) 571/468/409 -> 367/388/415. What is left on the io
// thread per 1-token request (strace, perf): ~8.5 system calls (the client's request and
// response, the upstream's request and response, two reads that find nothing -- asio retries a
// read speculatively after any read that returned data, and a wait instead costs an epoll_ctl --
// 1.2 epoll_wait, the ledger journal's write), 41 % of the process in the kernel, malloc/free ~9 %.
// Bounded: SECS per gateway and round; loopback only; everything it starts is killed on exit.
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
process.env.TOKENSERVE_BIN ||= path.join(here, '../build/tokenserve');
const H = await import('../tests/scaleout/harness.mjs');
const { startStatic } = await import('./scaleout_static_upstream.mjs');
const C = Number(process.env.CONCURRENCY || 8), SECS = Number(process.env.SECS || 6), ROUNDS = Number(process.env.ROUNDS || 2);
const STREAM = process.env.STREAM === '1';
const GATEWAYS = (process.env.GATEWAYS || 'default').split(/\s+/).filter(Boolean);
const kids = [];
process.on('exit', () => { for (const k of kids) if (k.exitCode === null) k.kill('SIGKILL'); });

// ms of CPU (user, system) per thread name of a process.
function threadCpu(pid) {
  const out = {};
  for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const st = fs.readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
      const name = st.slice(st.indexOf('(') + 1, st.lastIndexOf(')'));
      const f = st.slice(st.lastIndexOf(') ') + 2).split(' ');
      const o = (out[name] ||= { user: 0, sys: 0 });
      o.user += Number(f[11]) * 10;
      o.sys += Number(f[12]) * 10;
    } catch { /* thread gone */ }
  }
  return out;
}

const body = JSON.stringify({ model: H.modelName, prompt: 'Once upon a time', max_tokens: 1, temperature: 0, stream: STREAM });
function one(agent, port) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent, timeout: 10000,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.on('data', () => {});
      res.on('end', () => resolve(res.statusCode));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end(body);
  });
}
async function load(port, secs) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: C });
  const until = performance.now() + secs * 1000;
  let ok = 0, bad = 0;
  await Promise.all(Array.from({ length: C }, async () => {
    while (performance.now() < until) (await one(agent, port)) === 200 ? ok++ : bad++;
  }));
  agent.destroy();
  return { ok, bad };
}

const up = await startStatic(H, kids);
const ef = path.join(H.tmp, 'gwcpu-endpoints.yaml');
H.writeEndpoints(ef, [up]);
const gws = [];
for (const g of GATEWAYS)
  gws.push(g.startsWith('bin:') ? await H.startGateway(ef, [], { binary: g.slice(4) })
    : await H.startGateway(ef, g === 'default' ? [] : g.split(',')));
const rows = GATEWAYS.map(() => []);
try {
  for (const gw of gws) {
    for (let i = 0; i < 100 && H.metricSum(await H.metrics(gw.url), 'tokenserve_gateway_endpoint_up') !== 1; i++) await H.sleep(50);
    await load(gw.port, 1);  // warm-up
  }
  console.log(`gateway CPU: c=${C}, ${SECS} s per gateway x ${ROUNDS} rounds, ${STREAM ? 'SSE' : '1-token JSON'}, static upstream, ` +
              `host load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}, ${os.cpus().length} cpus`);
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, gw] of gws.entries()) {
      let perf = null;
      if (process.env.PROBE && round === 0 && i === 0) {
        perf = spawn('sh', ['-c', process.env.PROBE.replaceAll('{pid}', String(gw.proc.pid))], { stdio: 'ignore' });
        kids.push(perf);
      }
      const c0 = threadCpu(gw.proc.pid);
      const t0 = performance.now();
      const r = await load(gw.port, SECS);
      const secs = (performance.now() - t0) / 1000;
      const c1 = threadCpu(gw.proc.pid);
      if (perf && perf.exitCode === null) await new Promise((res) => perf.on('exit', res));
      const per = {};
      let user = 0, sys = 0;
      for (const [name, v] of Object.entries(c1)) {
        const u = v.user - (c0[name]?.user || 0), s = v.sys - (c0[name]?.sys || 0);
        user += u; sys += s;
        if (u + s > 0) per[name] = Math.round((u + s) * 1000 / Math.max(1, r.ok));
      }
      rows[i].push({ rps: r.ok / secs, us: (user + sys) * 1000 / Math.max(1, r.ok), user: user * 1000 / Math.max(1, r.ok), bad: r.bad, per });
      console.log(`  round ${round + 1} ${GATEWAYS[i]}: ${(r.ok / secs).toFixed(0)} req/s, CPU ${((user + sys) * 1000 / Math.max(1, r.ok)).toFixed(0)} us/request ` +
                  `(user ${(user * 1000 / Math.max(1, r.ok)).toFixed(0)}), errors ${r.bad}, by thread us: ${JSON.stringify(per)}`);
    }
  }
  const med = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)]; };
  console.log('| gateway | req/s (median) | CPU us/request (median) | rounds |');
  console.log('|---|---|---|---|');
  rows.forEach((rs, i) => console.log(`| ${GATEWAYS[i]} | ${med(rs.map((x) => x.rps)).toFixed(0)} | ${med(rs.map((x) => x.us)).toFixed(0)} | ` +
                                      `${rs.map((x) => x.us.toFixed(0)).join(' / ')} |`));
} finally {
  for (const gw of gws) await gw.stop('SIGKILL');
  await up.stop();
  H.stopAll();
}
