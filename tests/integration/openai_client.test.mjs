// The official `openai` npm client against the real server (stories260K).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, haveShared } from './server_harness.mjs';

let server;
let client;
let modelId;

before(async () => {
  if (!haveShared) return;
  server = await startServer(['--no-auth']);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const models = await client.models.list();
  modelId = models.data[0].id;
});

after(async () => {
  if (server) {
    const r = await server.stop();
    assert.equal(r.code, 0, `server should exit 0 on SIGTERM, got ${JSON.stringify(r)}`);
  }
});

const skip = !haveShared && 'shared test data not found';

test('models list and retrieve', { skip }, async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, 'model');
  const m = await client.models.retrieve(modelId);
  assert.equal(m.id, modelId);
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e.status === 404);
});

test('completion, greedy, with usage', { skip }, async () => {
  const r = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 20, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.match(r.choices[0].text, /^, there was a little girl named Lily/);
  assert.ok(['length', 'stop'].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.prompt_tokens, 5);
  assert.equal(r.usage.completion_tokens, 20);
  assert.equal(r.usage.total_tokens, 25);
  assert.ok(r.usage.prompt_tokens_details && Number.isInteger(r.usage.prompt_tokens_details.cached_tokens));
});

test('streamed completion equals non-streamed, include_usage gives a final usage chunk', { skip }, async () => {
  const params = { model: modelId, prompt: 'Once upon a time', max_tokens: 24, temperature: 0 };
  const whole = await client.completions.create(params);
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.ok(usage, 'usage chunk');
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(usage.prompt_tokens, 5);
});

test('chat completion, streamed and not', { skip }, async () => {
  const messages = [{ role: 'user', content: 'Tell me a story.' }];
  const r = await client.chat.completions.create({ model: modelId, messages, max_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.usage.prompt_tokens > 5);
  const stream = await client.chat.completions.create({ model: modelId, messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let sawRole = false;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) sawRole = true;
      if (c.delta.content) text += c.delta.content;
    }
  }
  assert.ok(sawRole);
  assert.equal(text, r.choices[0].message.content);
  assert.equal(usage.completion_tokens, r.usage.completion_tokens);
});

test('n > 1 with a seed gives n choices, reproducibly', { skip }, async () => {
  const params = { model: modelId, prompt: 'Once upon a time', max_tokens: 12, temperature: 1.0, n: 3, seed: 42 };
  const a = await client.completions.create(params);
  const b = await client.completions.create(params);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index).sort(), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.equal(a.usage.prompt_tokens, 5);
  assert.ok(a.usage.completion_tokens >= 3 && a.usage.completion_tokens <= 36, JSON.stringify(a.usage));
  if (a.choices.every((c) => c.finish_reason === 'length')) assert.equal(a.usage.completion_tokens, 36);
});

test('stop string ends the text before it', { skip }, async () => {
  const whole = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 30, temperature: 0 });
  const full = whole.choices[0].text;
  const idx = full.indexOf('Lily');
  assert.ok(idx > 0, full);
  const r = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: ['Lily'] });
  assert.equal(r.choices[0].text, full.slice(0, idx));
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: ['Lily'], stream: true });
  let text = '';
  for await (const chunk of s) for (const c of chunk.choices) text += c.text;
  assert.equal(text, full.slice(0, idx));
});

test('logprobs in both APIs', { skip }, async () => {
  const r = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.token_logprobs.length, 5);
  assert.equal(lp.top_logprobs.length, 5);
  for (const v of lp.token_logprobs) assert.ok(v <= 0);
  const c = await client.chat.completions.create({ model: modelId, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = c.choices[0].logprobs.content;
  assert.equal(content.length, c.usage.completion_tokens);
  for (const e of content) {
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 2);
  }
});

test('errors come back as OpenAI errors with the right status', { skip }, async () => {
  await assert.rejects(client.completions.create({ model: 'nope', prompt: 'x', max_tokens: 2 }),
    (e) => e.status === 404 && typeof e.error?.message === 'string');
  await assert.rejects(client.completions.create({ model: modelId, prompt: 'x', max_tokens: 2, temperature: -1 }),
    (e) => e.status === 400 && e.error?.param === 'temperature');
  await assert.rejects(client.completions.create({ model: modelId, prompt: 'x', max_tokens: 100000 }),
    (e) => e.status === 400 && /context/i.test(e.error?.message));
  await assert.rejects(client.chat.completions.create({ model: modelId, messages: 'not-a-list', max_tokens: 2 }),
    (e) => e.status === 400);
});
