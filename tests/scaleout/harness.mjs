// One-machine scale-out harness (SCALEOUT.md §6.4, loopback variant): real `tokenserve serve`
// replicas on 127.0.0.1 ephemeral ports behind a real `tokenserve gateway`. Everything started
// here is tracked and killed by stopAll(); every load loop is bounded in count and time.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { bin, freePort, storiesModel, haveShared } from '../integration/server_harness.mjs';

export { haveShared, bin, freePort, storiesModel };
const started = new Set();
export const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ts-scaleout-'));

// A synthetic model (stories260K's tokenizer, random weights, 1024-token context): stories260K
// itself has a 128-token context, too short for 384-token prefixes and long streams.
export const modelName = 'synth';
export const modelPath = path.join(tmp, 'synth.gguf');
if (haveShared) {
  execFileSync(bin, ['synth', '--vocab-from', storiesModel, '--layers', '2', '--embd', '256', '--heads', '4',
    '--ffn', '768', '--ctx', '1024', '--type', 'f32', '-o', modelPath], { stdio: 'ignore' });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function launch(args, readyUrl, timeoutMs = 30000, env = {}, binary = bin) {
  // cwd: the temp dir, so journals a PostgreSQL ledger keeps in the working directory stay there.
  const proc = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env }, cwd: tmp });
  started.add(proc);
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => { started.delete(proc); resolve({ code, signal }); }));
  const h = {
    proc, exited, log: () => log,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      const t = setTimeout(() => proc.kill('SIGKILL'), 15000);
      const r = await exited;
      clearTimeout(t);
      return r;
    },
  };
  h.ready = (async () => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`exited early (${proc.exitCode}):\n${log}`);
      // Only once the process says it holds its port ("listening on" / "gateway on"): polling a
      // port nobody holds yet can end in a TCP self-connect and a probe that never returns.
      if (/(listening on|gateway on|serving model .* on) http:\/\//.test(log)) {
        try { if ((await fetch(readyUrl, { signal: AbortSignal.timeout(5000) })).ok) return; } catch { /* not up */ }
      }
      if (Date.now() > deadline) { proc.kill('SIGKILL'); throw new Error(`not ready in time:\n${log}`); }
      await sleep(50);
    }
  })();
  return h;
}

// A replica named `name` (its x-tokenserve-served-by).
export async function startReplica(name, { port, args = [] } = {}) {
  port = port || await freePort();
  const url = `http://127.0.0.1:${port}`;
  const h = launch(['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', String(port), '--threads', '1',
    '--no-auth', '--replica-id', name, '--ledger', path.join(tmp, `${name}-${port}.db`), ...args], `${url}/ready`);
  await h.ready;
  return Object.assign(h, { name, port, url });
}

export function writeEndpoints(file, replicas) {
  const lines = ['endpoints:'];
  for (const r of replicas) lines.push(`  - name: ${r.name}`, `    address: 127.0.0.1`, `    port: ${r.port}`, '    labels:', '      app: tokenserve');
  fs.writeFileSync(file + '.tmp', lines.join('\n') + '\n');
  fs.renameSync(file + '.tmp', file);
}

// binary: another tokenserve build (benchmarks comparing builds in one run).
export async function startGateway(endpointsFile, args = [], { auth = false, ledger = '', binary = bin } = {}) {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  ledger = ledger || path.join(tmp, `gateway-${port}.db`);
  const h = launch(['gateway', '--endpoints', endpointsFile, '--host', '127.0.0.1', '--port', String(port),
    ...(auth ? [] : ['--no-auth']), '--ledger', ledger, ...args], `${url}/ready`, 30000, {}, binary);
  await h.ready;
  return Object.assign(h, { port, url, ledger });
}

// Asks the fair scheduler (EEVDF, Linux >= 6.12) for a `us`-microsecond slice for each thread
// id in `tids` (sched_setattr's sched_runtime, via python3 ctypes; policy and nice kept): a woken
// thread with a shorter slice than the running one's preempts it at once instead of waiting out
// the rest of that slice. Changes no priority. Throws where the call fails (older kernel).
const slicePy = `
import ctypes, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
us = int(sys.argv[1])
for tid in map(int, sys.argv[2:]):
    buf = ctypes.create_string_buffer(56)
    if libc.syscall(315, tid, buf, 56, 0) != 0: raise OSError(ctypes.get_errno(), 'sched_getattr')
    size, policy, flags, nice, prio, runtime, deadline, period = struct.unpack_from('IIQiIQQQ', buf)
    struct.pack_into('IIQiIQQQ', buf, 0, 56, policy, 0, nice, prio, us * 1000, 0, 0)
    if libc.syscall(314, tid, buf, 0) != 0: raise OSError(ctypes.get_errno(), 'sched_setattr')
`;
export function requestSlice(tids, us) {
  if (tids.length) execFileSync('python3', ['-c', slicePy, String(us), ...tids.map(String)]);
}
// Every thread id of a process (Linux).
export const threadsOf = (pid) => fs.readdirSync(`/proc/${pid}/task`);

export function stopAll() {
  for (const p of started) { try { p.kill('SIGKILL'); } catch { /* gone */ } }
  fs.rmSync(tmp, { recursive: true, force: true });
}

// Runs `n` tasks with at most `concurrency` at once; each task gets its index.
export async function pool(n, concurrency, task) {
  let next = 0;
  const results = new Array(n);
  await Promise.all(Array.from({ length: Math.min(n, concurrency) }, async () => {
    while (next < n) { const i = next++; results[i] = await task(i); }
  }));
  return results;
}

export async function completion(url, body, headers = {}, timeoutMs = 30000) {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: modelName, max_tokens: 8, temperature: 0, ...body }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  return { status: r.status, servedBy: r.headers.get('x-tokenserve-served-by'), headers: r.headers, body: await r.text() };
}

// Sum of a metric's samples in Prometheus text.
export function metricSum(text, name) {
  let s = 0, found = false;
  for (const line of text.split('\n')) {
    if (line.startsWith(name + '{') || line.startsWith(name + ' ')) {
      s += Number(line.slice(line.lastIndexOf(' ') + 1)); found = true;
    }
  }
  return found ? s : NaN;
}

// `tokenserve usage --format json` totals of a ledger.
export function ledgerTotals(ledger) {
  return JSON.parse(execFileSync(bin, ['usage', '--ledger', ledger, '--by', 'model', '--format', 'json'])).totals;
}

export async function metrics(url) { return (await fetch(`${url}/metrics`)).text(); }
