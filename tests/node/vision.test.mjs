// Images through `edgegemma serve` with the official `openai` client (tiny-gemma4-mm): an
// image_url part with a base64 data: URL is answered, deterministically, differently for different
// images, streaming equals non-streaming; a remote URL is a 400 that says the server is offline.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { startServer, shared } from './server.mjs';
import { client, collect } from './client.mjs';

const image = (file, mime) =>
  `data:${mime};base64,${readFileSync(shared('models', 'tiny-gemma4-mm', 'inputs', file)).toString('base64')}`;
const ask = (url, extra = {}) => ({
  model: 'tiny-gemma4-mm',
  messages: [{ role: 'user', content: [{ type: 'text', text: 'Describe this.' }, { type: 'image_url', image_url: { url } }] }],
  temperature: 0, max_tokens: 12, ...extra,
});

describe('vision (tiny-gemma4-mm)', () => {
  let server, openai;
  before(async () => {
    server = await startServer({ model: 'tiny-gemma4-mm', args: ['--parallel', '2'] });
    openai = client(server);
  });
  after(async () => {
    if (!server) return;
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('an image as a data: URL', async () => {
    const png = image('img_checker_300x800.png', 'image/png');
    const a = await openai.chat.completions.create(ask(png));
    assert.equal(a.choices[0].message.role, 'assistant');
    assert.ok(a.choices[0].message.content.length > 0);
    // 270 soft tokens + <|image> / <image|> + the chat turn around them.
    assert.ok(a.usage.prompt_tokens > 272, JSON.stringify(a.usage));
    const b = await openai.chat.completions.create(ask(png));
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);
    const other = await openai.chat.completions.create(ask(image('img_shapes_640x480.jpg', 'image/jpeg')));
    assert.notEqual(other.usage.prompt_tokens, a.usage.prompt_tokens);
    const streamed = await collect(await openai.chat.completions.create(ask(png, { stream: true })));
    assert.equal(streamed.text, a.choices[0].message.content);
  });

  test('a remote image URL is a 400: the server is offline', async () => {
    await assert.rejects(openai.chat.completions.create(ask('https://example.com/cat.png')), (e) => {
      assert.equal(e.status, 400);
      assert.match(e.message, /offline by design/);
      return true;
    });
  });
});
