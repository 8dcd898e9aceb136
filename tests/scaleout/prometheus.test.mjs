// The autoscaling signal (SCALEOUT.md §8 item 11): a real Prometheus (Debian package
// `prometheus`) scrapes 3 real replicas, and the exact query of deploy/k8s/scaledobject.yaml's
// first trigger is evaluated through its HTTP API: under a short bounded burst it exceeds the
// threshold with ceil(value / threshold) >= 2 (KEDA would ask for >= 2 replicas), and it drops
// below activationThreshold within 60 s after the burst. Skips when prometheus is not installed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { haveShared, tmp, sleep, startReplica, stopAll, completion, freePort } from './harness.mjs';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '../..');
const havePrometheus = spawnSync('prometheus', ['--version']).status === 0;
const skip = (!haveShared && 'shared models not found (set TOKENSERVE_SHARED)') || (!havePrometheus && 'prometheus not installed');
let prom = null, promUrl = '', replicas = [];
after(() => { if (prom && prom.exitCode === null) prom.kill('SIGKILL'); stopAll(); });

// The first trigger of the ScaledObject, as written (a small reader for this flat YAML).
function scaledObjectTrigger() {
  const text = fs.readFileSync(path.join(root, 'deploy/k8s/scaledobject.yaml'), 'utf8');
  const first = text.slice(text.indexOf('triggers:')).split(/\n\s*- type: /)[1];
  const field = (k) => {
    const m = first.match(new RegExp(`\\n\\s*${k}: (.*)`));
    assert.ok(m, `no ${k} in the ScaledObject trigger`);
    return m[1].trim().replace(/^"(.*)"$/, '$1');
  };
  return { query: field('query'), threshold: Number(field('threshold')), activation: Number(field('activationThreshold')) };
}

async function evaluate(query) {
  const r = await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(query)}`);
  const j = await r.json();
  assert.equal(j.status, 'success', JSON.stringify(j));
  return j.data.result.length ? Number(j.data.result[0].value[1]) : NaN;
}

before(async () => {
  if (skip) return;
  replicas = await Promise.all(['p1', 'p2', 'p3'].map((n) => startReplica(n, { args: ['--max-seqs', '1'] })));
  const port = await freePort();
  promUrl = `http://127.0.0.1:${port}`;
  const cfg = path.join(tmp, 'prometheus.yml');
  // The pod label app=tokenserve, which Kubernetes service discovery would attach, set statically.
  fs.writeFileSync(cfg, ['global:', '  scrape_interval: 500ms', '  scrape_timeout: 400ms', 'scrape_configs:',
    '  - job_name: tokenserve', '    static_configs:', `      - targets: [${replicas.map((r) => `"127.0.0.1:${r.port}"`).join(', ')}]`,
    '        labels:', '          app: tokenserve', ''].join('\n'));
  prom = spawn('prometheus', [`--config.file=${cfg}`, `--storage.tsdb.path=${path.join(tmp, 'prom-data')}`,
    `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  prom.stderr.on('data', (d) => { log += d; });
  for (let i = 0; ; i++) {
    try {
      const t = await (await fetch(`${promUrl}/api/v1/targets`)).json();
      if (t.data.activeTargets.filter((x) => x.health === 'up').length === 3) break;
    } catch { /* starting */ }
    if (i > 200 || prom.exitCode !== null) throw new Error('prometheus did not scrape 3 targets:\n' + log);
    await sleep(100);
  }
});

test('KEDA query through a real Prometheus: over the threshold under a burst, below activation after', { skip, timeout: 120000 }, async () => {
  const { query, threshold, activation } = scaledObjectTrigger();
  assert.equal(query, 'sum(tokenserve:num_requests_waiting{app="tokenserve"})');
  assert.ok((await evaluate(query)) < activation, 'idle pool is below activation');
  // Burst: n long requests per replica (--max-seqs 1: n - 1 wait on each), bounded by max_tokens.
  // n follows this host's speed: one request is timed first, and n is chosen so that each
  // replica still has >= 3 waiting 1.5 s into the burst (several 500 ms scrapes), however fast
  // the host runs the tiny model. A fixed n let a fast CI host drain the queue between scrapes.
  const maxTokens = 600;
  const t1 = Date.now();
  const probe = await completion(replicas[0].url, { prompt: 'Probe', max_tokens: maxTokens, ignore_eos: true });
  assert.equal(probe.status, 200, probe.body);
  const perRequest = Math.max(0.02, (Date.now() - t1) / 1000);
  const n = Math.min(60, Math.max(5, Math.ceil(4 + 1.5 / perRequest)));
  const burst = Promise.all(Array.from({ length: 3 * n }, (_, i) =>
    completion(replicas[i % 3].url, { prompt: `Burst ${i}`, max_tokens: maxTokens, ignore_eos: true }, {}, 120000)));
  let peak = 0;
  const t0 = Date.now();
  let done = false;
  burst.then(() => { done = true; });
  while (!done && Date.now() - t0 < 60000) {
    const v = await evaluate(query);
    if (v > peak) peak = v;
    await sleep(200);
  }
  for (const x of await burst) assert.equal(x.status, 200, x.body);
  assert.ok(peak > threshold, `peak ${peak} > threshold ${threshold}`);
  assert.ok(Math.ceil(peak / threshold) >= 2, `desired replicas ceil(${peak}/${threshold}) >= 2`);
  const end = Date.now();
  let after = NaN;
  while (Date.now() - end < 60000) {
    after = await evaluate(query);
    if (after < activation) break;
    await sleep(250);
  }
  assert.ok(after < activation, `${after} < activationThreshold ${activation} within 60 s`);
  console.log(`${n} requests per replica (${perRequest.toFixed(2)} s each); KEDA query peak ${peak} (threshold ${threshold} -> ${Math.ceil(peak / threshold)} replicas), below activation ${((Date.now() - end) / 1000).toFixed(1)} s after the burst`);
  prom.kill('SIGTERM');
  for (const r of replicas) await r.stop();
});
