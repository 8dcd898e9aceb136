// Speculative decoding end to end on a real `tokenserve serve --speculative ngram` (issue 13):
// greedy text equals a server without speculation, usage counts only emitted tokens, and the
// tokenserve:spec_decode_* counters on /metrics agree with each other and with the dashboard's
// totals. (The cost model decides how much is drafted; its exploration drafts on the first
// decode steps, so a repetitive prompt always yields some drafts.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, haveShared } from './server_harness.mjs';
import { call, metricSum, model, parseProm } from './gov_helpers.mjs';

const skip = !haveShared && 'shared test data not found';
let off, spec;

before(async () => {
  if (!haveShared) return;
  off = await startServer(['--threads', '1', '--no-auth']);
  spec = await startServer(['--threads', '1', '--no-auth', '--speculative', 'ngram']);
});

after(async () => {
  if (off) assert.equal((await off.stop()).code, 0);
  if (spec) assert.equal((await spec.stop()).code, 0);
});

const prompt = 'Tom had a red ball. He liked to throw the ball. Tom had a red ball. He liked to';

test('ngram speculation: same text, usage and spec_decode metrics on /metrics and the dashboard', { skip }, async () => {
  const lens = [40, 60, 80];
  let completion = 0;
  for (const max_tokens of lens) {
    const body = { model, prompt, max_tokens, temperature: 0, ignore_eos: true };
    const a = await call(off.url, '/v1/completions', { body });
    const b = await call(spec.url, '/v1/completions', { body });
    assert.equal(a.status, 200, a.text);
    assert.equal(b.status, 200, b.text);
    assert.equal(b.json.choices[0].text, a.json.choices[0].text);
    assert.equal(b.json.usage.completion_tokens, max_tokens);  // accepted drafts only, no more
    completion += b.json.usage.completion_tokens;
  }
  const prom = parseProm((await call(spec.url, '/metrics', { method: 'GET' })).text);
  const drafts = metricSum(prom, 'tokenserve:spec_decode_num_drafts_total');
  const drafted = metricSum(prom, 'tokenserve:spec_decode_num_draft_tokens_total');
  const accepted = metricSum(prom, 'tokenserve:spec_decode_num_accepted_tokens_total');
  const byPos = metricSum(prom, 'tokenserve:spec_decode_num_accepted_tokens_per_pos_total');
  assert.ok(drafts > 0, 'no drafts verified');
  assert.ok(drafted >= drafts);
  assert.ok(accepted <= drafted);
  assert.equal(byPos, accepted);
  assert.equal(metricSum(prom, 'tokenserve:generation_tokens_total'), completion);
  const offProm = parseProm((await call(off.url, '/metrics', { method: 'GET' })).text);
  assert.equal(metricSum(offProm, 'tokenserve:spec_decode_num_drafts_total'), 0);

  const d = (await call(spec.url, '/dashboard/data', { method: 'GET' })).json;
  assert.equal(d.totals.spec_draft_tokens, drafted);
  assert.equal(d.totals.spec_accepted_tokens, accepted);
  assert.ok(Math.abs(d.totals.spec_acceptance_rate - accepted / drafted) < 1e-9);
  const page = (await call(spec.url, '/dashboard', { method: 'GET' })).text;
  assert.ok(page.includes('spec_acceptance_rate') && page.includes('spec_accepted_tokens'));
});
