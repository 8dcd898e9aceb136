// Structured outputs through the official `openai` client (unchanged) against the real server:
// chat.completions.parse with a JSON Schema response_format gives a parsed, valid object;
// streaming json_object; a bad schema is a 400 the SDK surfaces as BadRequestError.
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
  modelId = (await client.models.list()).data[0].id;
});

after(async () => {
  if (server) {
    const r = await server.stop();
    assert.equal(r.code, 0, `server should exit 0 on SIGTERM, got ${JSON.stringify(r)}`);
  }
});

const skip = !haveShared && 'shared test data not found';

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 4 },
    age: { type: 'integer', minimum: 1, maximum: 99 },
    pet: { type: 'string', enum: ['cat', 'dog'] },
  },
  required: ['name', 'age', 'pet'],
  additionalProperties: false,
};

test('chat.completions.parse with a json_schema response_format', { skip }, async () => {
  const r = await client.chat.completions.parse({
    model: modelId,
    messages: [{ role: 'user', content: 'Describe Lily' }],
    max_tokens: 70,
    seed: 9,
    n: 2,
    response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } },
  });
  assert.equal(r.choices.length, 2);
  for (const c of r.choices) {
    assert.equal(c.finish_reason, 'stop');
    const p = c.message.parsed;
    assert.ok(p && typeof p === 'object', `parsed: ${c.message.content}`);
    assert.deepEqual(Object.keys(p).sort(), ['age', 'name', 'pet']);
    assert.ok(typeof p.name === 'string' && [...p.name].length <= 4);
    assert.ok(Number.isInteger(p.age) && p.age >= 1 && p.age <= 99);
    assert.ok(['cat', 'dog'].includes(p.pet));
  }
});

test('streamed json_object content is one JSON object when it stops', { skip }, async () => {
  const stream = await client.chat.completions.create({
    model: modelId,
    messages: [{ role: 'user', content: 'Give me JSON' }],
    max_tokens: 70,
    seed: 2,
    stream: true,
    response_format: { type: 'json_object' },
  });
  let content = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(['stop', 'length'].includes(finish));
  if (finish === 'stop') assert.equal(typeof JSON.parse(content), 'object');
  else assert.equal(content.trimStart()[0], '{');
});

test('an unsupported schema keyword is a 400 naming it', { skip }, async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: modelId,
      messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', uniqueItems: true } } },
    }),
    (e) => e.status === 400 && /uniqueItems/.test(e.message) && e.param === 'response_format',
  );
});
