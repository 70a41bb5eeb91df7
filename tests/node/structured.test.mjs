// Structured output of `edgegemma serve` (tiny-gemma3): response_format json_schema and
// json_object constrain decoding, so the content always parses and validates, even from a tiny
// model; unsupported schema features are a 400 (the openai client throws BadRequestError).
// The schema has one string (name), bounded by maxLength: a tiny model can ramble inside a free
// string until max_tokens (with the compact grammar, greedy tiny-gemma3 does for this prompt).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './server.mjs';
import { client, collect } from './client.mjs';
import { validate } from './schema.mjs';

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 24 },
    age: { type: 'integer' },
    color: { type: 'string', enum: ['red', 'green', 'blue'] },
    tags: { type: 'array', items: { type: 'string', enum: ['tall', 'old', 'kind', 'brave'] }, maxItems: 3 },
    married: { type: 'boolean' },
  },
  required: ['name', 'age', 'color', 'tags', 'married'],
  additionalProperties: false,
};

test('the test validator rejects what it should', () => {
  const good = { name: 'Ann', age: 3, color: 'red', tags: ['old'], married: false };
  assert.deepEqual(validate(good, person), []);
  assert.ok(validate({ ...good, age: 3.5 }, person).length > 0);
  assert.ok(validate({ ...good, name: 'x'.repeat(25) }, person).length > 0);
  assert.ok(validate({ ...good, color: 'pink' }, person).length > 0);
  assert.ok(validate({ ...good, tags: ['tall', 1] }, person).length > 0);
  assert.ok(validate({ ...good, tags: ['old', 'old', 'kind', 'tall'] }, person).length > 0);
  assert.ok(validate({ ...good, extra: 1 }, person).length > 0);
  const { name, ...noName } = good;
  assert.ok(validate(noName, person).length > 0);
  assert.ok(validate([good], person).length > 0);
});

describe('structured output (tiny-gemma3)', () => {
  let server, openai;
  before(async () => {
    server = await startServer({ model: 'tiny-gemma3', args: ['--parallel', '2'] });
    openai = client(server);
  });
  after(async () => { if (server) await server.stop(); });

  const schemaFormat = { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } };
  const ask = (content, extra) => ({
    model: 'tiny-gemma3', messages: [{ role: 'user', content }], max_tokens: 300, ...extra,
  });

  for (const [label, sampling] of [['greedy', { temperature: 0 }], ['sampled', { temperature: 1.0, seed: 7 }]]) {
    test(`json_schema (${label}): content parses and validates`, async () => {
      const r = await openai.chat.completions.create(ask('Describe a person as JSON.', { ...sampling, response_format: schemaFormat }));
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', `content: ${c.message.content}`);
      const v = JSON.parse(c.message.content);
      assert.deepEqual(validate(v, person), [], c.message.content);
    });
  }

  test('json_schema streamed equals non-streamed (greedy)', async () => {
    const req = ask('Give me a person.', { temperature: 0, response_format: schemaFormat });
    const plain = (await openai.chat.completions.create(req)).choices[0].message.content;
    const s = await collect(await openai.chat.completions.create({ ...req, stream: true }));
    assert.equal(s.text, plain);
    assert.deepEqual(validate(JSON.parse(s.text), person), []);
  });

  test('json_object: content parses as a JSON object', async () => {
    // Prompts whose greedy answer closes the object (others ramble inside a string until max_tokens).
    for (const prompt of ['{', 'What is your name? Answer in JSON.', 'Output JSON: {"name": "Bob"}']) {
      const r = await openai.chat.completions.create(ask(prompt, {
        temperature: 0, response_format: { type: 'json_object' } }));
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', `content: ${c.message.content}`);
      const v = JSON.parse(c.message.content);
      assert.equal(typeof v, 'object');
      assert.ok(v !== null && !Array.isArray(v), c.message.content);
    }
  });

  test('unsupported schema feature (pattern) is a 400 BadRequestError', async () => {
    const bad = { type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]+$' } }, required: ['code'] };
    await assert.rejects(
      openai.chat.completions.create(ask('Hi', {
        response_format: { type: 'json_schema', json_schema: { name: 'bad', schema: bad } } })),
      (err) => {
        assert.ok(err instanceof OpenAI.BadRequestError, `${err.constructor.name}: ${err.message}`);
        assert.equal(err.status, 400);
        assert.ok(/pattern/i.test(err.message), err.message);
        return true;
      });
    // The server is fine afterwards.
    const r = await openai.chat.completions.create(ask('Hi', { max_tokens: 4, temperature: 0 }));
    assert.equal(r.object, 'chat.completion');
  });
});
