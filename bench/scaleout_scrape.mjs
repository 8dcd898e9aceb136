#!/usr/bin/env node
// Metrics scrape cost on a busy replica (SCALEOUT.md §8 item 1, second clause; a benchmark
// because both figures need a quiet host): a real `tokenserve serve` decoding long streams,
// scraped at 20 Hz like an endpoint picker does. Reports the scrape latency p50/p99 (target p99
// < 5 ms) and the decode tokens/s with scraping on vs off (target: drop <= 5 %), alternating
// on/off runs so host noise hits both alike.
//
// Usage: TOKENSERVE_SHARED=/work/shared node bench/scaleout_scrape.mjs
// Env: TOKENSERVE_BIN (default build/tokenserve), RUNS (6 per mode), TOKENS (900; the test model has 1024 positions), STREAMS (2),
//      HZ (20). Bounded: fixed counts; loopback only; the replica is killed on exit.
import path from 'node:path';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
process.env.TOKENSERVE_BIN ||= path.join(here, '../build/tokenserve');
const H = await import('../tests/scaleout/harness.mjs');
if (!H.haveShared) { console.error('scaleout_scrape: shared models not found (set TOKENSERVE_SHARED)'); process.exit(77); }
const RUNS = Number(process.env.RUNS || 6), TOKENS = Number(process.env.TOKENS || 900), STREAMS = Number(process.env.STREAMS || 2);
const HZ = Number(process.env.HZ || 20);
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN; };

async function decode(url) {  // tokens/s of one stream after its first token
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: H.modelName, prompt: 'Once upon a time', max_tokens: TOKENS, ignore_eos: true, stream: true }),
  });
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let first = 0, events = 0, text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
    const parts = text.split('\n\n');
    text = parts.pop();
    for (const p of parts) if (p.startsWith('data: {')) { events++; if (!first) first = performance.now(); }
  }
  return (events - 1) / ((performance.now() - first) / 1000);
}

const rep = await H.startReplica('scrape', { args: ['--max-seqs', String(STREAMS)] });
const scrapes = [], on = [], off = [];
try {
  await decode(rep.url);  // warm-up
  for (let run = 0; run < 2 * RUNS; run++) {
    const scraping = run % 2 === 1;
    let stop = false;
    const scraper = scraping ? (async () => {
      while (!stop) {
        const t0 = performance.now();
        const m = await (await fetch(`${rep.url}/metrics`)).text();
        if (!m.includes('tokenserve:num_requests_running')) throw new Error('bad scrape');
        scrapes.push(performance.now() - t0);
        await H.sleep(Math.max(0, 1000 / HZ - (performance.now() - t0)));
      }
    })() : null;
    const rates = await Promise.all(Array.from({ length: STREAMS }, () => decode(rep.url)));
    stop = true;
    if (scraper) await scraper;
    (scraping ? on : off).push(rates.reduce((a, b) => a + b, 0));
  }
} finally {
  await rep.stop('SIGKILL');
  H.stopAll();
}
const med = (xs) => pct(xs, 0.5);
console.log(`scrape cost: ${STREAMS} streams x ${TOKENS} tokens, ${RUNS} runs per mode, ${HZ} Hz, host load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
console.log(`scrape latency ms: p50 ${pct(scrapes, 0.5).toFixed(2)} p99 ${pct(scrapes, 0.99).toFixed(2)} (n ${scrapes.length})`);
console.log(`decode tok/s (sum over streams, median of runs): scraping off ${med(off).toFixed(1)} on ${med(on).toFixed(1)} ` +
            `change ${(100 * (med(on) - med(off)) / med(off)).toFixed(1)} %`);
