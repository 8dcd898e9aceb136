// SCALEOUT.md §8 item 1, the scrape clause, as a bounded timed test: a real replica with
// --max-seqs 2 and its default compute threads (every core busy) serving 8 concurrent long
// streams, scraped at 20 Hz like an endpoint picker does: the scrape latency p99 must be
// < 5 ms and decode tokens/s may drop at most 5 % with scraping on vs off (runs alternate off /
// on; medians of the runs; tests/scaleout/scrape_load.mjs has the workload).
//
// Repeat policy (a 2-core CI host is shared with its own load generator): up to ATTEMPTS
// measurements, each complete on its own (fresh figures, both thresholds); the test passes on
// the first attempt that meets both and fails when none does, printing every attempt's
// figures. bench/scaleout_scrape.mjs is the longer benchmark of the same workload.
// Quiet host required: the clause is about this replica's own load. Before starting, the test
// samples /proc/stat for 1 s; when more than QUIET_MAX_BUSY_PCT (25) % of the CPU time is
// already busy (other builds or benchmarks on the machine), it is skipped with that figure
// rather than timing someone else's load. ctest runs it RUN_SERIAL, so under ctest the host is
// ours.
// Env: SCRAPE_ATTEMPTS (3), SCRAPE_RUNS (4 per mode), SCRAPE_TOKENS (400 per stream).
// Bounded: fixed counts and a 240 s test timeout; loopback only; the replica is killed in `after`.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { haveShared, modelName, modelPath, tmp, launch, freePort, stopAll, metrics, metricSum } from './harness.mjs';
import { measure, summary } from './scrape_load.mjs';

const QUIET_MAX_BUSY_PCT = Number(process.env.QUIET_MAX_BUSY_PCT || 25);
// Share of all CPUs' time (%) that was busy over `ms`, from /proc/stat (Linux); -1 elsewhere.
async function hostBusyPct(ms = 1000) {
  const read = () => {
    try {
      const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
      return { idle: f[3] + (f[4] || 0), total: f.reduce((a, b) => a + b, 0) };
    } catch { return null; }
  };
  const a = read();
  await new Promise((r) => setTimeout(r, ms));
  const b = read();
  if (!a || !b || b.total === a.total) return -1;
  return 100 * (1 - (b.idle - a.idle) / (b.total - a.total));
}
const busy = haveShared ? await hostBusyPct() : -1;
const skip = (!haveShared && 'shared models not found (set TOKENSERVE_SHARED)') ||
  (busy > QUIET_MAX_BUSY_PCT && `host not quiet: ${busy.toFixed(0)} % of CPU time busy before the test (limit ${QUIET_MAX_BUSY_PCT} %)`);
after(stopAll);

const ATTEMPTS = Number(process.env.SCRAPE_ATTEMPTS || 3), RUNS = Number(process.env.SCRAPE_RUNS || 4);
const TOKENS = Number(process.env.SCRAPE_TOKENS || 400);
const P99_MS = 5, MAX_DROP_PCT = 5;

test('20 Hz /metrics scrape under 8 long requests at --max-seqs 2: p99 < 5 ms, decode tokens/s drop <= 5 %', { skip, timeout: 240000 }, async () => {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const rep = launch(['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', String(port), '--no-auth',
    '--replica-id', 'scrape', '--max-seqs', '2', '--ledger', path.join(tmp, 'scrape.db')], `${url}/ready`);
  await rep.ready;
  try {
    const seen = [];
    for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
      const s = summary(await measure({ url, model: modelName, runs: RUNS, tokens: TOKENS, requests: 8, hz: 20 }));
      const line = `attempt ${attempt}: scrape p50 ${s.p50.toFixed(2)} ms p99 ${s.p99.toFixed(2)} ms (n ${s.n}); ` +
        `decode tok/s off ${s.off.toFixed(0)} on ${s.on.toFixed(0)} (drop ${s.drop.toFixed(1)} %); ` +
        `host load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`;
      console.log(line);
      seen.push(line);
      assert.ok(s.n >= 10 * RUNS, `too few scrapes (${s.n})`);  // the scraper really ran during the on runs
      assert.ok(s.maxWaiting >= 1, 'no request ever waited: not the intended load');  // 8 streams > 2 slots
      if (s.p99 < P99_MS && s.drop <= MAX_DROP_PCT) break;
      assert.ok(attempt < ATTEMPTS, `no attempt met p99 < ${P99_MS} ms and drop <= ${MAX_DROP_PCT} %:\n${seen.join('\n')}`);
    }
    const m = await metrics(url);  // and it all finished
    assert.equal(metricSum(m, 'tokenserve:num_requests_running') + metricSum(m, 'tokenserve:num_requests_waiting'), 0);
  } finally {
    await rep.stop('SIGKILL');
  }
});
