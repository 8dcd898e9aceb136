// https:// remotes (issue 14: the gateway's one HTTP client is libcurl, src/net/http_client.h).
// A real TLS server on loopback: node's https module with a certificate signed by a CA that this
// test generates with `openssl` (nothing is trusted from the system store), in front of
//   /real/v1/...    a real `tokenserve serve` (the "big" remote; requests are piped through),
//   /script/v1/...  scripted SSE answers: events with a pause between them (pass-through must
//                   not buffer), and a stream cut after its first event (clean SSE error).
// The gateway reaches it through `[remotes.*] base_url = "https://127.0.0.1:<port>/..."` with
// `ca_file`; a remote whose certificate does not verify (no ca_file) fails before the first byte
// and the rule's fallback serves. Bounded: every process started is killed in `after`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import {
  haveShared, modelName, modelPath, tmp, sleep, startReplica, writeEndpoints, startGateway, stopAll, metricSum, metrics,
  launch, bin, freePort, ledgerTotals,
} from './harness.mjs';

let haveOpenssl = true;
try { execFileSync('openssl', ['version'], { stdio: 'ignore' }); } catch { haveOpenssl = false; }
const skip = (!haveShared && 'shared models not found (set TOKENSERVE_SHARED)') || (!haveOpenssl && 'openssl not installed');

let local = null, big = null, gw = null, tls = null;
const dir = path.join(tmp, 'tls');
const caFile = path.join(dir, 'ca.pem');
const endpointsFile = path.join(tmp, 'https-endpoints.yaml');
const rulesFile = path.join(tmp, 'https-rules.toml');

after(async () => {
  if (tls) await new Promise((r) => { tls.closeAllConnections?.(); tls.close(r); });
  stopAll();
});

// A CA and a server certificate for 127.0.0.1 / localhost signed by it.
function makeCerts() {
  fs.mkdirSync(dir, { recursive: true });
  const run = (args) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  run(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2',
    '-subj', '/CN=tokenserve test CA', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign']);
  run(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1']);
  fs.writeFileSync(path.join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n');
  run(['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem',
    '-days', '2', '-extfile', 'ext.cnf']);
  return { key: fs.readFileSync(path.join(dir, 'server.key')), cert: fs.readFileSync(path.join(dir, 'server.pem')) };
}

const sse = (obj) => `data: ${JSON.stringify(obj)}\n\n`;
const chunk = (text) => ({ id: 'cmpl-s', object: 'text_completion', model: 'scripted', choices: [{ index: 0, text, finish_reason: null }] });

function scripted(req, res, body) {
  const mode = body.prompt;
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.write(sse(chunk('first')));
  if (mode === 'cut') { setTimeout(() => res.socket.destroy(), 100); return; }
  setTimeout(() => {
    res.write(sse(chunk(' second')));
    res.write(sse({ ...chunk(''), choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } }));
    res.end('data: [DONE]\n\n');
  }, 700);
}

before(async () => {
  if (skip) return;
  const { key, cert } = makeCerts();
  const bigPort = await freePort();
  const bigKey = execFileSync(bin, ['keys', 'create', '--ledger', path.join(tmp, 'https-big.db'), '--tenant', 'provider', '--app', 'gw'])
    .toString().trim().split('\n').pop();
  process.env.TS_HTTPS_BIG_KEY = bigKey;
  const bigUrl = `http://127.0.0.1:${bigPort}`;
  big = launch(['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', String(bigPort), '--threads', '1',
    '--replica-id', 'big', '--ledger', path.join(tmp, 'https-big.db')], `${bigUrl}/ready`);
  [local] = await Promise.all([startReplica('r1'), big.ready]);
  tls = https.createServer({ key, cert }, (req, res) => {
    if (req.url.startsWith('/real/')) {  // TLS termination in front of the real replica, streamed both ways
      const up = http.request({ host: '127.0.0.1', port: bigPort, path: req.url.slice(5), method: req.method, headers: req.headers },
        (ur) => { res.writeHead(ur.statusCode, ur.headers); ur.pipe(res); });
      up.on('error', () => res.destroy());
      req.pipe(up);
      return;
    }
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => scripted(req, res, JSON.parse(body)));
  });
  const tlsPort = await freePort();
  await new Promise((r) => tls.listen(tlsPort, '127.0.0.1', r));
  writeEndpoints(endpointsFile, [local]);
  fs.writeFileSync(rulesFile, `
[remotes.secure]
base_url = "https://127.0.0.1:${tlsPort}/real/v1"
ca_file = "${caFile}"
api_key_env = "TS_HTTPS_BIG_KEY"

[remotes.script]
base_url = "https://localhost:${tlsPort}/script/v1"
ca_file = "${caFile}"

[remotes.untrusted]
base_url = "https://127.0.0.1:${tlsPort}/real/v1"
api_key_env = "TS_HTTPS_BIG_KEY"

[[rules]]
id = "to-secure"
match = { headers = { "x-route" = "secure" } }
action = "remote:secure"

[[rules]]
id = "to-script"
match = { headers = { "x-route" = "script" } }
action = "remote:script"

[[rules]]
id = "to-untrusted"
match = { headers = { "x-route" = "untrusted" } }
action = "remote:untrusted"
fallback = ["local"]
`);
  gw = await startGateway(endpointsFile, ['--rules', rulesFile]);
  for (let i = 0; i < 100 && metricSum(await metrics(gw.url), 'tokenserve_gateway_endpoint_up') !== 1; i++) await sleep(50);
});

async function post(body, route, stream = false) {
  const r = await fetch(`${gw.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-route': route },
    body: JSON.stringify({ model: modelName, max_tokens: 6, temperature: 0, stream, ...body }),
    signal: AbortSignal.timeout(30000),
  });
  return r;
}

test('https remote verified with its ca_file: whole and streamed answers, usage metered', { skip, timeout: 60000 }, async () => {
  const r = await post({ prompt: 'Once upon a time' }, 'secure');
  const text = await r.text();
  assert.equal(r.status, 200, text);
  assert.equal(r.headers.get('x-tokenserve-served-by'), 'big');
  assert.match(r.headers.get('x-tokenserve-route'), /^rule=to-secure; target=remote:secure; /);
  const j = JSON.parse(text);
  assert.ok(j.usage.completion_tokens >= 1);

  const s = await post({ prompt: 'The cat' }, 'secure', true);
  assert.equal(s.status, 200);
  assert.match(s.headers.get('content-type'), /text\/event-stream/);
  const events = (await s.text()).split('\n\n').filter((e) => e.startsWith('data: '));
  assert.equal(events.at(-1), 'data: [DONE]');
  assert.ok(events.length >= 3, `events: ${events.length}`);
  const usage = events.map((e) => e.slice(6)).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d)).find((e) => e.usage);
  assert.ok(usage && usage.usage.completion_tokens >= 1, 'the remote was asked for usage in the stream');

  // The gateway's ledger has both, metered from the remote's usage (gateway drains on SIGTERM).
  const code = await gw.stop();
  assert.equal(code.code, 0);
  const totals = ledgerTotals(gw.ledger);
  assert.equal(totals.requests, 2);
  assert.equal(totals.completion_tokens, j.usage.completion_tokens + usage.usage.completion_tokens);
  gw = await startGateway(endpointsFile, ['--rules', rulesFile]);
  for (let i = 0; i < 100 && metricSum(await metrics(gw.url), 'tokenserve_gateway_endpoint_up') !== 1; i++) await sleep(50);
});

test('SSE over https passes through unbuffered; a stream cut mid-way ends with a clean SSE error', { skip, timeout: 30000 }, async () => {
  const t0 = Date.now();
  const r = await post({ prompt: 'slow' }, 'script', true);
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let got = '', firstAt = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    got += dec.decode(value);
    if (!firstAt && got.includes('"first"')) firstAt = Date.now();
  }
  const endAt = Date.now();
  assert.ok(firstAt > 0, got);
  // The scripted server pauses 700 ms after the first event: it must reach us before the pause ends.
  assert.ok(endAt - firstAt >= 450, `first event at +${firstAt - t0} ms, end at +${endAt - t0} ms (buffered?)`);
  assert.match(got, /" second"/);
  assert.ok(got.trimEnd().endsWith('data: [DONE]'));

  const c = await post({ prompt: 'cut' }, 'script', true);
  assert.equal(c.status, 200);
  const cut = await c.text();
  assert.match(cut, /"first"/);
  const last = cut.trim().split('\n\n').at(-1);
  assert.match(last, /^data: \{"error":\{/);
  assert.match(JSON.parse(last.slice(6)).error.message, /failed mid-stream/);
});

test('an https remote whose certificate does not verify fails before the first byte; the fallback serves', { skip, timeout: 30000 }, async () => {
  const r = await post({ prompt: 'Once upon a time' }, 'untrusted');
  assert.equal(r.status, 200, await r.clone().text());
  assert.equal(r.headers.get('x-tokenserve-served-by'), 'r1');
  assert.match(r.headers.get('x-tokenserve-route'),
    /^rule=to-untrusted; target=local:r1; .*fallback=remote:untrusted -> local \(remote:untrusted connect_error\)$/);
  const m = await metrics(gw.url);
  assert.match(m, /^tokenserve_gateway_upstream_attempts_total\{endpoint="remote:untrusted",result="connect_error"\} [1-9]/m);
});

test('a bad https ca_file is one line and exit 1', { skip, timeout: 30000 }, async () => {
  const bad = path.join(tmp, 'bad-ca-rules.toml');
  fs.writeFileSync(bad, '[remotes.x]\nbase_url = "https://127.0.0.1:1/v1"\nca_file = "/nonexistent/ca.pem"\n');
  const port = await freePort();
  let err = '';
  try {
    execFileSync(bin, ['gateway', '--endpoints', endpointsFile, '--no-auth', '--port', String(port), '--rules', bad,
      '--ledger', path.join(tmp, 'bad-ca.db')], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 10000 });
    assert.fail('the gateway started');
  } catch (e) {
    assert.equal(e.status, 1);
    err = e.stderr.toString();
  }
  assert.match(err, /ca_file: cannot read \/nonexistent\/ca\.pem/);
});
