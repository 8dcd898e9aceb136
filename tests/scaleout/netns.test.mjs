// Discovery across hosts (SCALEOUT.md §8 item 3, §6.4 harness): three real replicas, each in
// its own network namespace (a "host") on a bridge with private 10.213.x.0/24 addresses this
// test creates and deletes; `tokenserve gateway` in the root namespace reaches them over the
// bridge. It routes to all three, and editing the llm-d endpoints file removes and re-adds a
// replica without a restart within 2 s. Needs root and `ip netns` (skips otherwise). Everything
// it creates (processes, namespaces, links) is removed in `after`; loops are bounded.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { haveShared, modelPath, tmp, sleep, startGateway, stopAll, pool, completion, metrics, metricSum, bin } from './harness.mjs';

const tag = String(process.pid % 100000);
const subnet = `10.213.${20 + (process.pid % 200)}`;
const bridge = `tsb${tag}`;
const names = ['a', 'b', 'c'].map((x) => ({ ns: `ts${tag}${x}`, veth: `tv${tag}${x}`, addr: '', name: `n${x}` }));
names.forEach((n, i) => { n.addr = `${subnet}.${11 + i}`; });
const ip = (...args) => spawnSync('ip', args, { encoding: 'utf8' });

function canNetns() {
  if (process.getuid?.() !== 0) return 'needs root (ip netns)';
  const probe = `ts${tag}probe`;
  const r = ip('netns', 'add', probe);
  if (r.status !== 0) return `ip netns unavailable: ${r.stderr.trim()}`;
  ip('netns', 'del', probe);
  return false;
}
const skip = (!haveShared && 'shared models not found (set TOKENSERVE_SHARED)') || canNetns();
const procs = [];
let created = false;

function teardown() {
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  if (!created) return;
  for (const n of names) ip('netns', 'del', n.ns);  // also removes the veth pair
  ip('link', 'del', bridge);
}
after(async () => { teardown(); stopAll(); });
process.on('exit', teardown);

function must(...args) {
  const r = ip(...args);
  assert.equal(r.status, 0, `ip ${args.join(' ')}: ${r.stderr}`);
}

before(async () => {
  if (skip) return;
  created = true;
  must('link', 'add', bridge, 'type', 'bridge');
  must('addr', 'add', `${subnet}.1/24`, 'dev', bridge);
  must('link', 'set', bridge, 'up');
  for (const n of names) {
    must('netns', 'add', n.ns);
    must('link', 'add', n.veth, 'type', 'veth', 'peer', 'name', `${n.veth}p`);
    must('link', 'set', `${n.veth}p`, 'netns', n.ns);
    must('link', 'set', n.veth, 'master', bridge);
    must('link', 'set', n.veth, 'up');
    must('-n', n.ns, 'link', 'set', 'lo', 'up');
    must('-n', n.ns, 'addr', 'add', `${n.addr}/24`, 'dev', `${n.veth}p`);
    must('-n', n.ns, 'link', 'set', `${n.veth}p`, 'up');
  }
  // One replica per namespace, on its private address.
  await Promise.all(names.map(async (n) => {
    const p = spawn('ip', ['netns', 'exec', n.ns, bin, 'serve', '-m', modelPath, '--host', n.addr, '--port', '8000',
      '--threads', '1', '--no-auth', '--replica-id', n.name, '--ledger', path.join(tmp, `netns-${n.name}.db`)],
    { stdio: ['ignore', 'pipe', 'pipe'] });
    procs.push(p);
    let log = '';
    p.stdout.on('data', (d) => { log += d; });
    p.stderr.on('data', (d) => { log += d; });
    for (let i = 0; ; i++) {
      if (p.exitCode !== null) throw new Error(`replica ${n.name} exited:\n${log}`);
      if (/listening on|serving model/.test(log)) {
        try { if ((await fetch(`http://${n.addr}:8000/ready`, { signal: AbortSignal.timeout(2000) })).ok) break; } catch { /* not yet */ }
      }
      if (i > 600) throw new Error(`replica ${n.name} not ready:\n${log}`);
      await sleep(50);
    }
  }));
});

function writeEndpoints(file, list) {
  const lines = ['endpoints:'];
  for (const n of list) lines.push(`  - name: ${n.name}`, `    address: ${n.addr}`, '    port: 8000', '    labels:', '      app: tokenserve');
  fs.writeFileSync(file + '.tmp', lines.join('\n') + '\n');
  fs.renameSync(file + '.tmp', file);
}

test('gateway routes to replicas in three network namespaces; endpoints file edits apply within 2 s', { skip, timeout: 90000 }, async () => {
  const file = path.join(tmp, 'netns-endpoints.yaml');
  writeEndpoints(file, names);
  const gw = await startGateway(file);
  const up = async () => (await metrics(gw.url)).match(/tokenserve_gateway_endpoint_up\{endpoint="n[abc]"\} 1/g) || [];
  try {
    for (let i = 0; i < 100 && (await up()).length !== 3; i++) await sleep(50);
    assert.equal((await up()).length, 3);
    const res = await pool(30, 3, (i) => completion(gw.url, { prompt: `Host ${i}: a ${'cat dog '.repeat(i % 5)}` }));
    const by = {};
    for (const x of res) { assert.equal(x.status, 200, x.body); by[x.servedBy] = (by[x.servedBy] || 0) + 1; }
    assert.deepEqual(Object.keys(by).sort(), ['na', 'nb', 'nc'], JSON.stringify(by));
    const served = res[0].headers.get('x-gateway-destination-endpoint-served');
    assert.match(served, new RegExp(`^${subnet.replace(/\./g, '\\.')}\\.1[123]:8000$`));

    writeEndpoints(file, names.slice(0, 2));  // nc leaves the pool
    let t0 = Date.now();
    while ((await up()).length !== 2 && Date.now() - t0 < 2000) await sleep(50);
    assert.equal((await up()).length, 2, 'removed within 2 s');
    const two = await pool(12, 3, (i) => completion(gw.url, { prompt: `Two ${i}` }));
    for (const x of two) { assert.equal(x.status, 200, x.body); assert.notEqual(x.servedBy, 'nc'); }
    writeEndpoints(file, names);  // and comes back
    t0 = Date.now();
    while ((await up()).length !== 3 && Date.now() - t0 < 2000) await sleep(50);
    assert.equal((await up()).length, 3, 're-added within 2 s');
  } finally {
    assert.equal((await gw.stop()).code, 0);
  }
});
