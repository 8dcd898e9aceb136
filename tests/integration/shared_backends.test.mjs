// Fleet backends end to end: two `tokenserve serve` processes sharing one Redis limit
// (TOKENSERVE_TEST_REDIS), and `serve --ledger postgresql://...` (TOKENSERVE_TEST_PG) with a
// disconnect and a SIGTERM drain, checked through `tokenserve usage`. Each part skips with a
// message when its service is not configured (scripts/test.sh starts both).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, haveShared } from './server_harness.mjs';
import { completion, createKey, eventually, model, sseUsage, tempDir, uniq, usageReport } from './gov_helpers.mjs';

const REDIS = process.env.TOKENSERVE_TEST_REDIS || '';
const PG = process.env.TOKENSERVE_TEST_PG || '';

test('two servers sharing one Redis enforce one RPM limit', {
  skip: !haveShared ? 'shared test data not found' : !REDIS && 'TOKENSERVE_TEST_REDIS not set',
}, async () => {
  const dir = tempDir('redis');
  const ledger = path.join(dir, 'ledger.db');   // one SQLite ledger shared by both processes
  const tenant = uniq('fleet');                 // fresh Redis keys for this run
  const config = path.join(dir, 'gov.toml');
  const RPM = 10;
  fs.writeFileSync(config, `[tenants.${tenant}]\nrpm = ${RPM}\n`);
  const k = createKey(ledger, { tenant, app: 'a' });
  const args = ['--threads', '1', '--ledger', ledger, '--config', config, '--limits', REDIS];
  const [a, b] = await Promise.all([startServer(args), startServer(args)]);
  try {
    const t0 = Date.now();
    const rs = await Promise.all(Array.from({ length: 3 * RPM }, (_, i) =>
      completion(i % 2 ? a.url : b.url, k.key, { max_tokens: 1 })));
    const elapsedS = (Date.now() - t0) / 1000;
    const ok = rs.filter((r) => r.status === 200);
    for (const r of rs.filter((x) => x.status !== 200)) {
      assert.equal(r.status, 429, r.text);
      assert.equal(r.json.error.code, 'rate_limit_exceeded');
      assert.ok(r.headers.get('retry-after'));
    }
    // The bucket refills RPM tokens per minute: at most one more per 60/RPM seconds.
    const allowed = RPM + Math.floor(elapsedS / (60 / RPM));
    assert.ok(ok.length >= RPM && ok.length <= allowed,
      `admitted ${ok.length} across two servers; one limit allows ${RPM}..${allowed}`);
    assert.ok(rs.slice(0).some((r, i) => r.status === 200 && i % 2) && rs.some((r, i) => r.status === 200 && !(i % 2)),
      'both servers served some');
    const rep = await eventually(() => {
      const x = usageReport(ledger, { tenant });
      return x.totals.requests === ok.length ? x : null;
    });
    assert.ok(rep, 'both servers wrote their rows to the shared ledger');
  } finally {
    assert.equal((await a.stop()).code, 0);
    assert.equal((await b.stop()).code, 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('serve --ledger postgresql://: rows equal requests after a disconnect and SIGTERM', {
  skip: !haveShared ? 'shared test data not found' : !PG && 'TOKENSERVE_TEST_PG not set',
}, async () => {
  const dir = tempDir('pg');
  const tenant = uniq('pg');
  const k = createKey(PG, { tenant, app: 'a' });
  const s = await startServer(['--threads', '1', '--ledger', PG, '--drain-timeout', '20'], {});
  let used = 0;
  try {
    for (let i = 0; i < 3; ++i) {
      const r = await completion(s.url, k.key, { max_tokens: 4 + i });
      assert.equal(r.status, 200, r.text);
      used += r.json.usage.total_tokens;
    }
    // A client that leaves mid-stream.
    const ctl = new AbortController();
    const res = await fetch(`${s.url}/v1/completions`, {
      method: 'POST', signal: ctl.signal,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${k.key}` },
      body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 120, ignore_eos: true, stream: true }),
    });
    await res.body.getReader().read();
    ctl.abort();
    // One in flight at SIGTERM (its first chunk has arrived): the drain lets it finish.
    const res2 = await fetch(`${s.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${k.key}` },
      body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 60, ignore_eos: true, stream: true,
        stream_options: { include_usage: true } }),
    });
    assert.equal(res2.status, 200);
    const reader = res2.body.getReader();
    const dec = new TextDecoder();
    let text = dec.decode((await reader.read()).value);
    const stopped = s.stop('SIGTERM');
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value);
    }
    assert.equal((await stopped).code, 0, s.log());
    assert.ok(text.includes('data: [DONE]'));
    used += sseUsage(text).total_tokens;
    const rep = usageReport(PG, { tenant });
    assert.equal(rep.totals.requests, 5, JSON.stringify(rep));
    assert.ok(rep.totals.total_tokens >= used + 5, 'the disconnected stream is charged too');
  } finally {
    if (s.proc.exitCode === null) await s.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
