// The §8.1 scrape clause's workload, shared by tests/scaleout/scrape.test.mjs (the bounded
// timed test) and bench/scaleout_scrape.mjs (the longer benchmark): a busy replica (REQUESTS
// concurrent long streams against --max-seqs 2, so two decode while the rest wait) scraped at
// `hz` like an endpoint picker does, from a worker thread (its own event loop, as a separate
// scraper process would have: the load generator's SSE parsing does not delay the scrapes it
// times). Runs alternate scraping off / on so host noise hits both alike.
//
// measure() returns {scrapes: [ms...], waiting: [num_requests_waiting per scrape], off: [tok/s
// per run], on: [tok/s per run]}, where tok/s
// is the completion tokens of all REQUESTS streams over the run's wall time (the replica's
// decode throughput). Every loop is bounded (fixed counts, a deadline per scrape and per run).
// SCRAPE_CLIENT_NICE=N (a diagnostic, default unset): the scraper thread runs at nice N (negative
// needs root), to see how much of the latency is the scraping client's own wait for a CPU on a
// host whose cores the replica keeps busy. Measured on a quiet 2-core host: N = -10 took the p50
// from 3.2 to 2.0 ms, and the p99 stayed at 6-12 ms.
//
// Each scrape is also split (the `parts` of measure()'s result, one entry per scrape, ms):
//   render  the replica's own render time (its Server-Timing header, handle_metrics)
//   io_wait how long the replica's HTTP io threads (ts-http-io) sat runnable without a CPU while
//           the scrape ran (the growth of their run_delay, /proc/PID/task/TID/schedstat; needs
//           `pid`, Linux only, NaN otherwise)
//   self_wait the same for the scraper thread itself (/proc/thread-self/schedstat)
// so the tail can be attributed to the server's render, the server's wait for a CPU or the
// client's own wait (what is left: loopback transfer, parsing, wake-ups). The parts are not
// disjoint: the two waits can overlap in time and a render preempted mid-way holds io wait, so
// `rest` (total minus the parts) can come out negative.
import http from 'node:http';
import { Worker } from 'node:worker_threads';

export const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN; };
export const median = (xs) => pct(xs, 0.5);

// One stream of `tokens` tokens; resolves to the completion tokens its usage reports (events
// may carry several tokens when the client reads late). node:http with a keep-alive agent, not
// fetch: this load generator shares the host's two cores with the replica and the scraper, and
// fetch's web streams cost it several times the CPU per event (a remote client's cost is not the
// replica's). Only the tail of the body is kept: the usage event is the last data event.
const streamAgent = new http.Agent({ keepAlive: true, maxSockets: 64 });
function stream(url, model, tokens) {
  const body = JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: tokens, ignore_eos: true, stream: true,
    stream_options: { include_usage: true } });
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}/v1/completions`, {
      method: 'POST', agent: streamAgent, timeout: 120000,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      res.setEncoding('utf8');
      let tail = '', all = res.statusCode === 200 ? null : '';
      res.on('data', (d) => {
        if (all !== null) { all += d; return; }
        tail = (tail + d).slice(-8192);
      });
      res.on('end', () => {
        if (all !== null) return reject(new Error(`stream answered ${res.statusCode}: ${all}`));
        const at = tail.lastIndexOf('"usage"');
        const start = tail.lastIndexOf('data: {', at);
        if (at < 0 || start < 0) return resolve(0);
        const u = JSON.parse(tail.slice(start + 6, tail.indexOf('\n', start))).usage;
        resolve(u ? u.completion_tokens : 0);
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('stream timed out')));
    req.on('error', reject);
    req.end(body);
  });
}

// The scraper thread: warms up (its first fetch sets up the HTTP client: not a scrape cost),
// then scrapes GET /metrics every 1/hz s while on ('on' / 'off' messages), posting each
// latency (ms); 'quit' ends it. Bounded by workerData.maxMs.
const scraperSource = `
const { parentPort, workerData } = require('node:worker_threads');
let on = false, quit = false;
parentPort.on('message', (m) => { if (m === 'on') on = true; else if (m === 'off') on = false; else quit = true; });
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
if (workerData.nice !== undefined) require('node:os').setPriority(0, workerData.nice);  // this thread only (Linux)
const fs = require('node:fs');
// client 'rt': this thread SCHED_FIFO (chrt; needs CAP_SYS_NICE), see measure().
if (workerData.rt) {
  const tid = fs.readlinkSync('/proc/thread-self').split('/').pop();
  require('node:child_process').execFileSync('chrt', ['-f', '-p', String(workerData.rt), tid], { stdio: 'ignore' });
}
// run_delay (ns waiting on a run queue, 2nd field of schedstat) of a thread, NaN if unreadable.
const runDelayMs = (f) => { try { return Number(fs.readFileSync(f, 'utf8').split(' ')[1]) / 1e6; } catch { return NaN; } };
let ioFiles = [];
if (workerData.pid) {
  try {
    const dir = '/proc/' + workerData.pid + '/task';
    ioFiles = fs.readdirSync(dir).filter((t) => { try { return fs.readFileSync(dir + '/' + t + '/comm', 'utf8').trim() === 'ts-http-io'; } catch { return false; } })
      .map((t) => dir + '/' + t + '/schedstat');
  } catch { ioFiles = []; }
}
const ioDelay = () => ioFiles.length ? ioFiles.reduce((a, f) => a + runDelayMs(f), 0) : NaN;
// GET /metrics on a kept-alive connection with node:http (a lean client, as Prometheus' or an
// endpoint picker's Go client is; fetch's own CPU per call would be timed as scrape latency).
const http = require('node:http');
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const get = (url) => new Promise((resolve, reject) => {
  const req = http.get(url, { agent, timeout: 5000 }, (res) => {
    res.setEncoding('utf8');
    let text = '';
    res.on('data', (d) => { text += d; });
    res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
    res.on('error', reject);
  });
  req.on('timeout', () => req.destroy(new Error('scrape timed out')));
  req.on('error', reject);
});
async function scrape() {
  const io0 = ioDelay(), self0 = runDelayMs('/proc/thread-self/schedstat');
  const t0 = performance.now();
  const r = await get(workerData.url + '/metrics');
  const m = r.text;
  const ms = performance.now() - t0;
  const io_wait = ioDelay() - io0, self_wait = runDelayMs('/proc/thread-self/schedstat') - self0;
  if (r.status !== 200 || !m.includes('tokenserve:num_requests_running')) throw new Error('bad scrape ' + r.status);
  const st = /render;dur=([0-9.]+)/.exec(r.headers['server-timing'] || '');
  let waiting = 0;  // summed over the per-tier series
  for (const w of m.matchAll(/^tokenserve:num_requests_waiting(?:\\{[^}]*\\})? (\\S+)$/gm)) waiting += Number(w[1]);
  return { ms, waiting, part: { render: st ? Number(st[1]) : NaN, io_wait, self_wait } };
}
(async () => {
  for (let i = 0; i < 5; i++) await scrape();
  parentPort.postMessage({ ready: true });
  const period = 1000 / workerData.hz;
  const deadline = Date.now() + workerData.maxMs;
  while (!quit && Date.now() < deadline) {
    if (!on) { await sleep(5); continue; }
    const { ms, waiting, part } = await scrape();
    parentPort.postMessage({ ms, waiting, part });
    await sleep(Math.max(0, period - ms));
  }
  parentPort.postMessage({ done: true });
})().catch((e) => parentPort.postMessage({ error: String(e) }));
`;

async function startScraper(url, hz, maxMs, sink, waitingSink, partSink, pid, rt) {
  const nice = process.env.SCRAPE_CLIENT_NICE !== undefined ? Number(process.env.SCRAPE_CLIENT_NICE) : undefined;
  const w = new Worker(scraperSource, { eval: true, workerData: { url, hz, maxMs, nice, pid, rt } });
  let error = null, readyResolve;
  const ready = new Promise((r) => { readyResolve = r; });
  const done = new Promise((resolve) => {
    w.on('message', (m) => {
      if (m.ready) readyResolve();
      if (m.ms !== undefined) { sink.push(m.ms); waitingSink.push(m.waiting); partSink.push(m.part); }
      if (m.error) error = m.error;
      if (m.done || m.error) { readyResolve(); resolve(); }
    });
    w.on('error', (e) => { error = String(e); readyResolve(); resolve(); });
    w.on('exit', () => { readyResolve(); resolve(); });
  });
  await ready;
  const check = () => { if (error) throw new Error(`scraper: ${error}`); };
  check();
  return {
    on() { check(); w.postMessage('on'); },
    off() { w.postMessage('off'); check(); },
    async quit() {
      w.postMessage('quit');
      await Promise.race([done, new Promise((r) => setTimeout(r, 6000))]);
      await w.terminate();
      check();
    },
  };
}

// runs: per mode; tokens: per stream; requests: concurrent streams; pid: the replica's (for io_wait).
// client: 'plain' (the scraper thread at the default priority, sharing the cores with the
// replica and the load generator, as on these 2-core hosts) or 'rt' (the scraper thread
// SCHED_FIFO priority 10, needs CAP_SYS_NICE: it runs as soon as it is runnable, as a scraper on
// its own machine would, so its own wait for a CPU, self_wait, drops out of the latency while the
// replica's, io_wait, stays in: the scrape latency as a remote Prometheus or endpoint picker
// sees it, from the request's write to the response's end).
export async function measure({ url, model, runs = 3, tokens = 600, requests = 8, hz = 20, pid = 0, client = 'plain' }) {
  const scrapes = [], waiting = [], off = [], on = [], parts = [];
  if (client !== 'plain' && client !== 'rt') throw new Error(`unknown scrape client '${client}'`);
  const scraper = await startScraper(url, hz, 600000, scrapes, waiting, parts, pid, client === 'rt' ? 10 : 0);
  try {
    await Promise.all(Array.from({ length: 2 }, () => stream(url, model, 32)));  // warm-up
    for (let run = 0; run < 2 * runs; run++) {
      const scraping = run % 2 === 1;
      if (scraping) scraper.on();
      const t0 = performance.now();
      const counts = await Promise.all(Array.from({ length: requests }, () => stream(url, model, tokens)));
      const secs = (performance.now() - t0) / 1000;
      if (scraping) scraper.off();
      const total = counts.reduce((a, b) => a + b, 0);
      if (total !== requests * tokens) throw new Error(`usage says ${total} completion tokens, not ${requests * tokens}`);
      (scraping ? on : off).push(total / secs);
    }
  } finally {
    await scraper.quit();
  }
  return { scrapes, waiting, off, on, parts };
}

// The figures the test and the benchmark print.
export function summary(m) {
  const drop = 100 * (median(m.off) - median(m.on)) / median(m.off);
  return { p50: pct(m.scrapes, 0.5), p99: pct(m.scrapes, 0.99), n: m.scrapes.length,
    off: median(m.off), on: median(m.on), drop, maxWaiting: Math.max(...m.waiting), split: split(m) };
}

// Where the time of the slowest scrapes went: the mean of each part over the slowest 2 % (at
// least one) next to the mean over all, as "total = render + io_wait + self_wait + rest" (ms).
export function split(m) {
  const idx = m.scrapes.map((ms, i) => i).sort((a, b) => m.scrapes[b] - m.scrapes[a]);
  const mean = (ids, f) => ids.reduce((a, i) => a + f(i), 0) / Math.max(1, ids.length);
  const line = (ids) => {
    const t = mean(ids, (i) => m.scrapes[i]);
    const r = mean(ids, (i) => m.parts[i].render), io = mean(ids, (i) => m.parts[i].io_wait), me = mean(ids, (i) => m.parts[i].self_wait);
    const f = (x) => x.toFixed(2);
    return `${f(t)} = render ${f(r)} + replica io wait ${f(io)} + scraper wait ${f(me)} + rest ${f(t - r - io - me)}`;
  };
  const tail = idx.slice(0, Math.max(1, Math.ceil(0.02 * idx.length)));
  // The replica's share of each scrape (its render plus its io threads' run-queue wait), as its
  // own distribution: what the scrape would cost a client that never waits for a CPU itself.
  const server = m.parts.map((p) => p.render + p.io_wait).filter(Number.isFinite);
  return `replica share (render + io wait) p50 ${pct(server, 0.5).toFixed(2)} p99 ${pct(server, 0.99).toFixed(2)}; ` +
    `slowest 2 % (n ${tail.length}): ${line(tail)}; all: ${line(idx)}`;
}
