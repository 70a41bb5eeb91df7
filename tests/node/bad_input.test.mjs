// Bad requests to `edgegemma serve` with raw fetch: each is the right 4xx with an OpenAI-style
// JSON error {"error": {"message", "type", ...}}, never a 5xx, and the server stays up.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post, get } from './server.mjs';

const CTX = 512;
const MAX_BODY_KB = 64;
const user = (content) => [{ role: 'user', content }];
const chat = (extra) => ({ model: 'tiny-gemma3', messages: user('Hello'), max_tokens: 4, ...extra });

// [label, route, body (object or raw string), expected status]
const table = [
  ['malformed JSON', '/v1/chat/completions', '{"messages": [', 400],
  ['body is not an object', '/v1/chat/completions', '[1, 2, 3]', 400],
  ['empty body', '/v1/chat/completions', '', 400],
  ['messages missing', '/v1/chat/completions', { model: 'tiny-gemma3' }, 400],
  ['messages not an array', '/v1/chat/completions', { messages: 'Hello' }, 400],
  ['empty messages', '/v1/chat/completions', { messages: [] }, 400],
  ['message not an object', '/v1/chat/completions', { messages: ['Hello'] }, 400],
  ['unknown role', '/v1/chat/completions', { messages: [{ role: 'wizard', content: 'Hello' }] }, 400],
  ['content of the wrong type', '/v1/chat/completions', { messages: [{ role: 'user', content: 42 }] }, 400],
  ['temperature "hot"', '/v1/chat/completions', chat({ temperature: 'hot' }), 400],
  ['negative temperature', '/v1/chat/completions', chat({ temperature: -1 }), 400],
  ['max_tokens "many"', '/v1/chat/completions', chat({ max_tokens: 'many' }), 400],
  ['negative max_tokens', '/v1/chat/completions', chat({ max_tokens: -5 }), 400],
  ['stream "yes"', '/v1/chat/completions', chat({ stream: 'yes' }), 400],
  ['stop of the wrong type', '/v1/chat/completions', chat({ stop: 42 }), 400],
  ['n = 2', '/v1/chat/completions', chat({ n: 2 }), 400],
  ['unknown preset', '/v1/chat/completions', chat({ preset: 'bogus' }), 400],
  ['unknown response_format', '/v1/chat/completions', chat({ response_format: { type: 'xml' } }), 400],
  ['tools not an array', '/v1/chat/completions', chat({ tools: 'get_weather' }), 400],
  ['content too long for the context', '/v1/chat/completions',
    { messages: user('the king and the queen '.repeat(CTX)) }, 400],
  ['body over the size limit', '/v1/chat/completions',
    { messages: user('x'.repeat(MAX_BODY_KB * 1024 + 4096)) }, 413],
  ['completions: prompt of the wrong type', '/v1/completions', { prompt: 42 }, 400],
  ['completions: prompt missing', '/v1/completions', { max_tokens: 4 }, 400],
  ['tokenize: content missing', '/tokenize', {}, 400],
  ['tokenize: add_special of the wrong type', '/tokenize', { content: 'a', add_special: 'yes' }, 400],
  ['user message without content', '/v1/chat/completions', { messages: [{ role: 'user' }] }, 400],
  ['seed of the wrong type', '/v1/chat/completions', chat({ seed: 'x' }), 400],
  ['logprobs (unsupported)', '/v1/chat/completions', chat({ logprobs: true }), 400],
  ['deeply nested JSON', '/v1/chat/completions', '{"messages": ' + '['.repeat(20000) + ']'.repeat(20000) + '}', 400],
  ['invalid UTF-8 in a string', '/v1/chat/completions',
    Buffer.concat([Buffer.from('{"messages": [{"role": "user", "content": "a'), Buffer.from([0xff, 0xfe, 0x80]), Buffer.from('"}]}')]), 400],
  ['include_usage "yes"', '/v1/chat/completions', chat({ stream: true, stream_options: { include_usage: 'yes' } }), 400],
  ['top_k of the wrong type', '/v1/chat/completions', chat({ top_k: 'x' }), 400],
  ['tool without a function', '/v1/chat/completions', chat({ tools: [{ type: 'function' }] }), 400],
  ['tool_choice required without tools', '/v1/chat/completions', chat({ tool_choice: 'required' }), 400],
  ['image content part (text only)', '/v1/chat/completions',
    { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400],
  ['conversation the chat template rejects', '/v1/chat/completions', { messages: [{ role: 'tool', content: 'x' }] }, 400],
  ['detokenize: id outside the vocabulary', '/detokenize', { tokens: [99999] }, 400],
  ['tokenize: with_pieces of the wrong type', '/tokenize', { content: 'a', with_pieces: 'x' }, 400],
  ['unknown route', '/v1/does-not-exist', chat({}), 404],
];

describe(`bad input (tiny-gemma3, --ctx ${CTX}, --max-body-kb ${MAX_BODY_KB})`, () => {
  let server;
  before(async () => {
    server = await startServer({ model: 'tiny-gemma3', args: ['--ctx', String(CTX), '--max-body-kb', String(MAX_BODY_KB), '--parallel', '2'] });
  });
  after(async () => { if (server) await server.stop(); });

  for (const [label, route, body, status] of table) {
    test(`${label} -> ${status}`, async () => {
      const r = await post(server, route, body);
      assert.ok(r.status < 500, `5xx: ${r.status} ${r.text.slice(0, 300)}`);
      assert.equal(r.status, status, r.text.slice(0, 300));
      assert.match(r.headers.get('content-type') || '', /application\/json/);
      assert.ok(r.json && r.json.error, `no {"error": ...} object: ${r.text.slice(0, 300)}`);
      assert.equal(typeof r.json.error.message, 'string');
      assert.ok(r.json.error.message.length > 0);
      assert.equal(typeof r.json.error.type, 'string');
    });
  }

  test('the context-length error names the problem', async () => {
    const r = await post(server, '/v1/chat/completions', { messages: user('the king and the queen '.repeat(CTX)) });
    assert.equal(r.status, 400);
    assert.match(`${r.json.error.code} ${r.json.error.message}`, /context/i);
  });

  test('the same table in a streaming request never starts a stream', async () => {
    const r = await post(server, '/v1/chat/completions', { ...chat({ temperature: 'hot' }), stream: true });
    assert.equal(r.status, 400);
    assert.ok(r.json && r.json.error);
  });

  test('the server stays up: health ok and a good request works after the table', async () => {
    const h = await get(server, '/health');
    assert.equal(h.status, 200);
    assert.equal(h.json.status, 'ok');
    const r = await post(server, '/v1/chat/completions', chat({ temperature: 0 }));
    assert.equal(r.status, 200, r.text.slice(0, 300));
    assert.equal(typeof r.json.choices[0].message.content, 'string');
    assert.equal(server.proc.exitCode, null);
  });
});
