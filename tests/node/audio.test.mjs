// Audio through `edgegemma serve` with the official `openai` client (tiny-gemma4-mm): an
// input_audio part (base64 wav) is answered deterministically with 25 soft tokens per second,
// streaming equals non-streaming, a clip of another length gives another prompt length; an
// unsupported format is a 400. Exactness against transformers is tested in C++
// (tests/server_audio_test.cpp: the answer equals the Session's, whose ids equal transformers').
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { startServer, shared } from './server.mjs';
import { client, collect } from './client.mjs';

const clip = (file) => readFileSync(shared('models', 'tiny-gemma4-mm', 'inputs', file)).toString('base64');
const ask = (data, format = 'wav', extra = {}) => ({
  model: 'tiny-gemma4-mm',
  messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data, format } }, { type: 'text', text: 'Describe this.' }] }],
  temperature: 0, max_tokens: 12, ...extra,
});

describe('audio (tiny-gemma4-mm)', () => {
  let server, openai;
  before(async () => {
    server = await startServer({ model: 'tiny-gemma4-mm' });
    openai = client(server);
  });
  after(async () => {
    if (!server) return;
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('a wav clip as input_audio', async () => {
    const wav = clip('aud_chirp_1p3s.wav');
    const a = await openai.chat.completions.create(ask(wav));
    assert.ok(a.choices[0].message.content.length > 0);
    // 33 soft tokens (1.3 s) + <|audio> / <audio|> + the chat turn: the fixture's 51 prompt ids.
    assert.equal(a.usage.prompt_tokens, 51, JSON.stringify(a.usage));
    const b = await openai.chat.completions.create(ask(wav));
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);
    const other = await openai.chat.completions.create(ask(clip('aud_tone_noise_4p7s.wav')));
    assert.equal(other.usage.prompt_tokens, 136);
    const streamed = await collect(await openai.chat.completions.create(ask(wav, 'wav', { stream: true })));
    assert.equal(streamed.text, a.choices[0].message.content);
  });

  test('an unsupported format is a 400', async () => {
    await assert.rejects(openai.chat.completions.create(ask(clip('aud_chirp_1p3s.wav'), 'aiff')), (e) => {
      assert.equal(e.status, 400);
      assert.match(e.message, /unsupported input_audio format/);
      return true;
    });
  });
});
