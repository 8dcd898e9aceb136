#!/usr/bin/env node
// Metrics scrape cost on a busy replica (SCALEOUT.md §8 item 1, second clause; the bounded
// timed test is tests/scaleout/scrape.test.mjs, this is its longer benchmark): a real
// `tokenserve serve --max-seqs 2` on its default compute threads serving 8 concurrent long
// streams, scraped at 20 Hz from a worker thread like an endpoint picker does
// (tests/scaleout/scrape_load.mjs). Reports, per setup, the scrape latency p50/p99 (target p99
// < 5 ms) and the decode tokens/s with scraping on vs off (target: drop <= 5 %). Two setups, A/B
// in the same run, alternating ROUNDS times so host noise hits both alike:
//   hints     the default: compute threads SCHED_BATCH, HTTP io threads a short slice and,
//             since session 30, SCHED_RR (serve's --io-rt-priority 1 default, under the CPU and
//             wake-up guard of http/io_rt.h)
//   no-hints  --no-sched-hints (the kernel's defaults)
//   fair      --io-rt-priority 0: the default before session 30 (io threads on the fair scheduler)
//   rt-nolimit  --io-rt-max-wakeups 0: real-time io threads without the wake-up limit
// MODEL=path.gguf serves that model instead of the harness's 2-layer synth model. Session 30
// (quiet 2-core Zen 5, CLIENTS=rt): SmolLM2-135M shape (TOKENS=100, ROUNDS=2 RUNS=3) scrape p99
// 6.51 (fair) vs 2.96 ms (real-time), decode tok/s with scraping off 378 vs 406; Qwen2.5-0.5B
// shape (TOKENS=50, ROUNDS=4 RUNS=2) p99 6.21 vs 3.61 ms, decode off 141 vs 143. The synth model
// (ROUNDS=3 RUNS=4): default 3.73 ms / 6333 tok/s off, fair 4.04 / 6753, rt-nolimit 5.19 / 5862:
// its ~2600 io wake-ups a second per thread get the io threads demoted (the wake-up limit),
// which keeps most of the decode rate real-time io threads cost it (-13 % without the limit).
//
// Each setup is measured with each scrape client in CLIENTS (scrape_load.mjs measure()):
//   plain     the scraper thread at the default priority: on a 2-core host it waits for a CPU
//             behind the replica's compute threads and the load generator, and that wait is
//             timed as scrape latency (the figure earlier sessions reported)
//   rt        the scraper thread SCHED_FIFO (root): its own CPU wait drops out, the replica's
//             (render, its io threads' wait for a CPU, the loopback transfer) stays in: the
//             scrape latency a Prometheus or endpoint picker on its own machine would see. The
//             §8.1 clause ("a 20 Hz scrape has p99 < 5 ms") is judged on this figure; the plain
//             one is printed beside it, and the "replica share" line splits both.
//
// Usage: TOKENSERVE_SHARED=/work/shared node bench/scaleout_scrape.mjs
// Env: TOKENSERVE_BIN (default build/tokenserve), ROUNDS (3), RUNS (4 per mode and round),
//      TOKENS (400 per stream), REQUESTS (8), HZ (20), THREADS ("" = default, all cores),
//      CLIENTS ("plain rt").
// Session scale12 (2-core AMD Zen 5 PVM guest, host shared with two other sessions' builds and
// benchmarks, load 5.5-8.3, no idle CPU): SETUPS=hints ROUNDS=1 RUNS=4, main's build and one
// whose HTTP stream writes are coalesced alternated 3 times: plain p99 36.1/19.3/19.4 (main) vs
// 29.2/25.9/11.6 ms, rt p99 6.28/7.55/5.60 vs 6.50/21.7/8.27 ms (n 67-121 each, so p99 is near
// the maximum); decode drop -55..+27 % from run to run (the host, not scraping). The rt tail was
// the replica's io threads' wait for a CPU (slowest 2 %: io wait 2-7.6 of 4.9-10 ms, render
// 0.15-0.9 ms). SETUPS="hints io-nice" CLIENTS=rt ROUNDS=3 RUNS=4, load 8.3: p99 11.3 (hints) vs
// 6.0 ms (io-nice), replica io wait in the slowest 2 % 7.6 vs 5.0 ms. Not a verdict on §8.1 either
// way: on a host this loaded the clause measures the other tenants.
// Bounded: fixed counts; loopback only; every replica is killed on exit.
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
process.env.TOKENSERVE_BIN ||= path.join(here, '../build/tokenserve');
const H = await import('../tests/scaleout/harness.mjs');
const S = await import('../tests/scaleout/scrape_load.mjs');
if (!H.haveShared) { console.error('scaleout_scrape: shared models not found (set TOKENSERVE_SHARED)'); process.exit(77); }
const ROUNDS = Number(process.env.ROUNDS || 3), RUNS = Number(process.env.RUNS || 4), TOKENS = Number(process.env.TOKENS || 400);
const REQUESTS = Number(process.env.REQUESTS || 8), HZ = Number(process.env.HZ || 20);
const THREADS = process.env.THREADS ? ['--threads', process.env.THREADS] : [];
// MODEL: a GGUF to serve instead of the harness's 2-layer synth model (whose ~0.3 ms decode
// steps make every SSE write a wake-up per third of a millisecond: the extreme case).
const MODEL = process.env.MODEL || H.modelPath;
const MODEL_NAME = process.env.MODEL ? path.basename(MODEL, '.gguf') : H.modelName;

async function replica(extra) {
  const port = await H.freePort();
  const url = `http://127.0.0.1:${port}`;
  const h = H.launch(['serve', '-m', MODEL, '--host', '127.0.0.1', '--port', String(port), '--no-auth', '--replica-id', 'scrape',
    '--max-seqs', '2', '--ledger', path.join(H.tmp, `scrape-${port}.db`), ...THREADS, ...extra], `${url}/ready`);
  await h.ready;
  return Object.assign(h, { url });
}

// SETUPS picks which (space-separated; default "hints no-hints"). "idle-compute" is an
// experiment, not a serve option: the default replica, then every thread but its HTTP io threads
// moved to SCHED_IDLE with chrt(1) (threads they start later inherit it), so any runnable
// normal thread (the io threads, the scraper, the stream client) preempts compute at once.
// "short-compute" (an experiment too): the default replica, then every non-io thread given a
// 0.1 ms fair-scheduler slice request (sched_setattr sched_runtime via python3 ctypes), so a
// woken thread (the scraper, an io thread) waits at most that long behind a compute thread's
// protected slice. Measured (2-core Zen 4, --threads 1, lean client): one run p99 4.68 ms vs
// hints 6.17 ms, decode tok/s 7487 vs 6811; but the same slice requested by the compute threads
// themselves (engine loop + pool workers only), A/B twice per thread setting, gave no gain
// (threads 1: p99 6.49/5.97 vs 53.1/4.92; default: 7.66/9.71 vs 6.92/7.08), so it is not an option.
// "io-nice" (an experiment too): the default replica, then its HTTP io threads (ts-http-io)
// reniced to IO_NICE (default -10; needs CAP_SYS_NICE) with renice(1), so a woken io thread
// preempts the compute threads (and other processes' normal threads) at once; the io threads
// use little CPU, so the cost to others is small. It shortens only the replica's io wait, not
// the scraping client's own wait for a CPU. Measured (session scale9, 2-core Zen 3, host load
// ~3 from another session's builds; SETUPS="hints io-nice" ROUNDS=2 RUNS=3, same run): hints p99
// 7.86 ms (n 156), io-nice p99 8.86 ms (n 147); the slowest 2 % were render 0.30-0.33 + replica
// io wait 1.03/3.85 + scraper wait 4.54/4.19 ms: the client's own wait for a CPU dominates the
// tail, the render does not, so io-nice is not an option either.
// "io-rt": the replica with --io-rt-priority 1 (its HTTP io threads SCHED_RR under the CPU-budget
// guard, http/io_rt.h), the option io-nice and idle-compute were experiments for. Measured
// (session scale14, 2-core Zen 5 PVM guest, host load 4-6; SETUPS="hints io-rt" CLIENTS=rt
// ROUNDS=2 RUNS=3, one run): scrape p99 6.71 (hints) vs 6.42 ms (io-rt), the replica's share
// (render + its io threads' wait for a CPU) p99 8.39 vs 1.02 ms -- the io wait is gone from the
// tail, what is left is the loopback and the client side; decode tok/s with scraping off 3973 vs
// 3246 (-18 %), on 5106 vs 3076 (noisy, but lower every time): why the option is off by default.
const allSetups = { hints: [], 'no-hints': ['--no-sched-hints'], 'idle-compute': [], 'short-compute': [], 'io-nice': [],
  'io-rt': ['--io-rt-priority', '1'], fair: ['--io-rt-priority', '0'], 'rt-nolimit': ['--io-rt-max-wakeups', '0'] };
function ioNice(pid) {
  const dir = `/proc/${pid}/task`;
  const tids = fs.readdirSync(dir).filter((t) => fs.readFileSync(`${dir}/${t}/comm`, 'utf8').trim() === 'ts-http-io');
  for (const t of tids) execFileSync('renice', ['-n', String(process.env.IO_NICE || -10), '-p', t], { stdio: 'ignore' });
  return tids.length;
}
function shortCompute(pid) {
  const dir = `/proc/${pid}/task`;
  const tids = fs.readdirSync(dir).filter((t) => fs.readFileSync(`${dir}/${t}/comm`, 'utf8').trim() !== 'ts-http-io');
  H.requestSlice(tids, 100);
  return tids.length;
}
const clients = (process.env.CLIENTS || 'plain rt').split(/\s+/).filter(Boolean);
const setups = Object.fromEntries((process.env.SETUPS || 'hints no-hints').split(/\s+/).filter(Boolean)
  .flatMap((k) => clients.map((c) => [`${k}/${c}`, { extra: allSetups[k], base: k, client: c }])));
function idleCompute(pid) {
  const dir = `/proc/${pid}/task`;
  let n = 0;
  for (const t of fs.readdirSync(dir)) {
    if (fs.readFileSync(`${dir}/${t}/comm`, 'utf8').trim() === 'ts-http-io') continue;
    execFileSync('chrt', ['-i', '-p', '0', t]);
    n++;
  }
  return n;
}
const acc = Object.fromEntries(Object.keys(setups).map((k) => [k, { scrapes: [], waiting: [], off: [], on: [], parts: [] }]));
try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, { extra, base, client }] of Object.entries(setups)) {
      const rep = await replica(extra);
      try {
        if (base === 'idle-compute') idleCompute(rep.proc.pid);
        if (base === 'short-compute') shortCompute(rep.proc.pid);
        if (base === 'io-nice') ioNice(rep.proc.pid);
        const m = await S.measure({ url: rep.url, model: MODEL_NAME, runs: RUNS, tokens: TOKENS, requests: REQUESTS, hz: HZ,
                                    pid: rep.proc.pid, client });
        for (const k of Object.keys(m)) acc[name][k].push(...m[k]);
      } finally {
        await rep.stop('SIGKILL');
      }
    }
  }
} finally {
  H.stopAll();
}
console.log(`scrape cost: ${REQUESTS} streams x ${TOKENS} tokens at --max-seqs 2, ${ROUNDS} rounds x ${RUNS} runs per mode, ${HZ} Hz, ` +
            `host load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
for (const [name, m] of Object.entries(acc)) {
  const s = S.summary(m);
  console.log(`${name.padEnd(13)} scrape ms p50 ${s.p50.toFixed(2)} p99 ${s.p99.toFixed(2)} (n ${s.n}); decode tok/s off ${s.off.toFixed(0)} ` +
              `on ${s.on.toFixed(0)} drop ${s.drop.toFixed(1)} %`);
  console.log(`${''.padEnd(13)} ${s.split}`);
}
