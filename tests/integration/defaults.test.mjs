// "The first request works" (issue 11): the official openai client's plain chat call, without
// max_tokens, against the real server with default settings on a 32k-context model, streaming
// and not; then the same model on a KV budget too small for its context (max_model_len capped,
// one log line) where a prompt that can never fit gets a 400 that says how much would.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, haveShared, bin, storiesModel } from './server_harness.mjs';

const skip = !haveShared && 'shared test data not found';
// Sampling is at the default temperature (1.0) and ends at EOS. Any seed passes; these were
// picked because their completions are short (tens of tokens), which keeps the test fast.
const SEED = 3;
const SHORT_SEEDS = [9, 14, 16, 18, 3, 17];
const CTX = 32768;
let tmp;
let model32k;
let server;      // default settings (--max-seqs 2 keeps the machine-sized pool small for a test)
let small;       // --kv-cache-memory 72MiB: 8192 tokens of KV (9 KiB per token)

function client(s) {
  return new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}

before(async () => {
  if (!haveShared) return;
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ts-defaults-'));
  model32k = path.join(tmp, 'ctx32k.gguf');
  // qwen2-shaped, 9 layers x 4 KV heads x 64: 9 KiB of f16 KV per token, so the full 32k context
  // needs 288 MiB, more than the old fixed 256 MiB default (which refused every request without
  // max_tokens: "request needs 2048 KV blocks but the pool has only 1820"). stories260K's vocab.
  const synth = spawnSync(bin, ['synth', '--arch', 'qwen2', '--layers', '9', '--embd', '256', '--heads', '4',
    '--kv-heads', '4', '--ffn', '512', '--ctx', String(CTX), '--type', 'q8_0', '--vocab-from', storiesModel,
    '-o', model32k], { encoding: 'utf8' });
  assert.equal(synth.status, 0, synth.stderr);
  server = await startServer(['--no-auth', '--max-seqs', '2'], { model: model32k });
  small = await startServer(['--no-auth', '--kv-cache-memory', '72MiB'], { model: model32k });
});

after(async () => {
  for (const s of [server, small]) {
    if (s) {
      const r = await s.stop();
      assert.equal(r.code, 0, `server should exit 0 on SIGTERM, got ${JSON.stringify(r)}`);
    }
  }
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('the default KV budget is sized from the machine, printed, and holds the whole 32k context', { skip }, async () => {
  const log = server.log();
  assert.match(log, /kv cache budget: .*MemAvailable .* - weights .*--kv-cache-memory overrides/);
  // Capped at 2 sequences x 32768 tokens x 9 KiB (the machine has more than 576 MiB free).
  assert.match(log, /capped at 2 sequences x 32768 tokens = 576\.0 MiB/);
  assert.doesNotMatch(log, /max_model_len capped/);
  const models = await client(server).models.list();
  assert.equal(models.data[0].max_model_len, CTX);
});

test('chat without max_tokens succeeds with default settings', { skip }, async () => {
  const c = client(server);
  const r = await c.chat.completions.create({
    model: 'ctx32k', messages: [{ role: 'user', content: 'Tell me a story.' }], seed: SEED,
  });
  assert.equal(r.object, 'chat.completion');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
  assert.ok(r.usage.completion_tokens >= 1);
  assert.ok(r.usage.prompt_tokens + r.usage.completion_tokens <= CTX);
});

test('streamed chat without max_tokens succeeds with default settings', { skip }, async () => {
  const c = client(server);
  const stream = await c.chat.completions.create({
    model: 'ctx32k', messages: [{ role: 'user', content: 'Tell me a story.' }], seed: SEED, stream: true,
    stream_options: { include_usage: true },
  });
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.ok(['stop', 'length'].includes(finish), String(finish));
  assert.ok(chunks >= 2);
  assert.ok(usage && usage.completion_tokens >= 1 && usage.prompt_tokens + usage.completion_tokens <= CTX);
  // Same seed, same tokens as the non-streamed call.
  const whole = await c.chat.completions.create({
    model: 'ctx32k', messages: [{ role: 'user', content: 'Tell me a story.' }], seed: SEED,
  });
  assert.equal(whole.usage.completion_tokens, usage.completion_tokens);
});

test('concurrent default requests are all served', { skip }, async () => {
  const c = client(small);  // 8192 tokens of KV shared by 6 requests that may each use all of it
  const rs = await Promise.all(SHORT_SEEDS.map((seed) => c.chat.completions.create({
    model: 'ctx32k', messages: [{ role: 'user', content: 'Tell me a story.' }], seed,
  })));
  for (const r of rs) assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
});

test('a small KV budget caps max_model_len with one log line and still serves default requests', { skip }, async () => {
  const log = small.log();
  const lines = log.split('\n').filter((l) => l.includes('max_model_len capped'));
  assert.equal(lines.length, 1, log);
  assert.match(lines[0], /capped from 32768 to 8192 tokens/);
  assert.match(log, /kv cache budget: 72\.0 MiB \(--kv-cache-memory\)/);
  const c = client(small);
  assert.equal((await c.models.list()).data[0].max_model_len, 8192);
  for (const stream of [false, true]) {
    const r = await c.chat.completions.create({
      model: 'ctx32k', messages: [{ role: 'user', content: 'Tell me a story.' }], seed: 14, stream,
    });
    if (stream) {
      let finish = null;
      for await (const chunk of r) for (const ch of chunk.choices) if (ch.finish_reason) finish = ch.finish_reason;
      assert.ok(['stop', 'length'].includes(finish));
    } else {
      assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    }
  }
});

test('a request that can never fit gets a 400 saying how much would', { skip }, async () => {
  const c = client(small);
  const long = 'a b c d '.repeat(3000);  // far more than 8192 tokens
  await assert.rejects(
    c.chat.completions.create({ model: 'ctx32k', messages: [{ role: 'user', content: long }] }),
    (e) => e.status === 400 && e.code === 'context_length_exceeded' &&
      /maximum context length is 8192 tokens/.test(e.message) &&
      /At most 8191 tokens fit in the messages/.test(e.message),
  );
  await assert.rejects(
    c.chat.completions.create({ model: 'ctx32k', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 9000 }),
    (e) => e.status === 400 && e.code === 'context_length_exceeded' && /max_tokens can be at most \d+/.test(e.message),
  );
});

test('serve --kv-type q8_0 roughly doubles the tokens a KV budget holds; a bad type is one line, exit 2', { skip }, async () => {
  const bad = spawnSync(bin, ['serve', '-m', model32k, '--no-auth', '--port', '0', '--kv-type', 'q4'], { encoding: 'utf8' });
  assert.equal(bad.status, 2, bad.stderr);
  assert.match(bad.stderr, /--kv-type.*unknown KV cache type 'q4'/);
  assert.equal(bad.stderr.trim().split('\n').length, 1, bad.stderr);
  // 9 layers x 4 KV heads x (64 int8 + one f32 scale) x K and V = 4,896 bytes a token (f16: 9,216).
  const q8 = await startServer(['--no-auth', '--kv-cache-memory', '72MiB', '--kv-type', 'q8_0'], { model: model32k });
  try {
    assert.match(q8.log(), /kv cache type: q8_0 \(4896 bytes per token\)/);
    const len = (await client(q8).models.list()).data[0].max_model_len;
    assert.ok(len > 1.8 * 8192 && len <= CTX, `max_model_len ${len}`);
    const r = await client(q8).chat.completions.create({
      model: 'ctx32k', messages: [{ role: 'user', content: 'Tell me a story.' }], seed: 14, max_tokens: 16,
    });
    assert.ok(r.usage.completion_tokens >= 1);
  } finally {
    const r = await q8.stop();
    assert.equal(r.code, 0);
  }
});
