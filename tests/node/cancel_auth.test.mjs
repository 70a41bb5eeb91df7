// Cancellation (a client that aborts a long stream frees its slot at once) and API-key auth of
// `edgegemma serve` (tiny-gemma3), with the official openai client.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, get, post, sleep } from './server.mjs';
import { client } from './client.mjs';

/// Reads one gauge/counter value (no labels) from GET /metrics.
async function metric(server, name) {
  const r = await get(server, '/metrics');
  assert.equal(r.status, 200);
  const m = r.text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
  assert.ok(m, `metric ${name} not in /metrics`);
  return Number(m[1]);
}

/// Streams a request to its end; returns ms from send to the first content delta.
async function ttftMs(openai, req) {
  const t0 = performance.now();
  let t = null;
  for await (const chunk of await openai.chat.completions.create({ ...req, stream: true })) {
    if (t === null && chunk.choices[0]?.delta?.content) t = performance.now() - t0;
  }
  if (t === null) throw new Error('stream ended without content');
  return t;
}

describe('cancellation (tiny-gemma3, --parallel 1)', () => {
  let server, openai;
  before(async () => {
    // One slot: a generation that kept running after its client left would block the next request.
    server = await startServer({ model: 'tiny-gemma3', args: ['--parallel', '1'] });
    openai = client(server);
  });
  after(async () => { if (server) await server.stop(); });

  const short = { model: 'tiny-gemma3', messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 8, temperature: 0 };

  test('aborting a long stream frees the slot; the next request is not slowed', async () => {
    // Baseline TTFT on the idle server (median of 3).
    const base = [];
    for (let i = 0; i < 3; i++) base.push(await ttftMs(openai, short));
    base.sort((a, b) => a - b);
    const baseline = base[1];
    const cancelledBefore = await metric(server, 'edgegemma_requests_cancelled_total');

    // A long generation: 2000 tokens, sampled (a tiny model may end a greedy answer early).
    const long = {
      model: 'tiny-gemma3', max_tokens: 2000, temperature: 1.0, seed: 3,
      messages: [{ role: 'user', content: 'Write a very long story about a king, his sons and the sea.' }],
    };
    const stream = await openai.chat.completions.create({ ...long, stream: true });
    let chunks = 0;
    const t0 = performance.now();
    let finished = null;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) chunks++;
      finished = chunk.choices[0]?.finish_reason ?? finished;
      if (chunks >= 8) break;  // leaving the loop aborts the request (stream.controller.abort())
    }
    const msPerToken = (performance.now() - t0) / chunks;
    assert.equal(finished, null, 'the long request ended by itself before it could be cancelled');
    assert.equal(chunks, 8);
    stream.controller.abort();
    assert.equal(await metric(server, 'edgegemma_slots_total'), 1);

    // The slot is freed quickly (a few token times; generous for a loaded machine).
    const tAbort = performance.now();
    let busy = 1;
    while (performance.now() - tAbort < 5000 && (busy = await metric(server, 'edgegemma_slots_busy')) !== 0) await sleep(20);
    assert.equal(busy, 0, 'slot still busy 5 s after the client aborted');
    assert.equal(await metric(server, 'edgegemma_requests_cancelled_total'), cancelledBefore + 1);

    // The next request's TTFT is not slowed by the cancelled generation. Had it kept running,
    // this request would wait for ~1990 more tokens (estimated from the stream's pace).
    const after = await ttftMs(openai, short);
    const remainingMs = (2000 - chunks) * msPerToken;
    // The floor (1 s, for a loaded machine) is capped at a third of the cancelled generation's
    // remaining time, so that on a fast machine (~1 ms/token: ~2 s left) the check stays strong.
    const bound = Math.max(10 * baseline, Math.min(1000, remainingMs / 3));
    console.log(`# cancel: baseline TTFT ${baseline.toFixed(0)} ms, after cancel ${after.toFixed(0)} ms, ` +
                `bound ${bound.toFixed(0)} ms, cancelled generation had ~${remainingMs.toFixed(0)} ms left`);
    assert.ok(bound < remainingMs / 2, `check too weak: bound ${bound} ms vs remaining ${remainingMs.toFixed(0)} ms`);
    assert.ok(after < bound, `TTFT after cancel ${after.toFixed(0)} ms, baseline ${baseline.toFixed(0)} ms`);
    const h = await get(server, '/health');
    assert.equal(h.json.status, 'ok');
  });
});

describe('auth (--api-key)', () => {
  let server;
  const KEY = 'sk-test-7f3a9c';
  before(async () => {
    server = await startServer({ model: 'tiny-gemma3', args: ['--api-key', KEY, '--parallel', '1'] });
  });
  after(async () => { if (server) await server.stop(); });

  const req = { model: 'tiny-gemma3', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, temperature: 0 };

  test('no key or a wrong key -> 401 AuthenticationError; the right key -> 200', async () => {
    const noKey = await post(server, '/v1/chat/completions', req);
    assert.equal(noKey.status, 401);
    assert.equal(typeof noKey.json?.error?.message, 'string');
    for (const bad of ['wrong-key', KEY + 'x']) {
      await assert.rejects(client(server, { apiKey: bad }).chat.completions.create(req), (err) => {
        assert.ok(err instanceof OpenAI.AuthenticationError, `${err.constructor.name}: ${err.message}`);
        assert.equal(err.status, 401);
        return true;
      });
    }
    await assert.rejects(client(server, { apiKey: 'wrong-key' }).models.list(), OpenAI.AuthenticationError);
    const ok = await client(server, { apiKey: KEY }).chat.completions.create(req);
    assert.equal(ok.object, 'chat.completion');
    const models = await client(server, { apiKey: KEY }).models.list();
    assert.ok(models.data.length >= 1);
  });
});

describe('queue full (--parallel 1 --queue 0)', () => {
  let server, openai;
  before(async () => {
    server = await startServer({ model: 'tiny-gemma3', args: ['--parallel', '1', '--queue', '0'] });
    openai = client(server);
  });
  after(async () => { if (server) await server.stop(); });

  test('a request while the only slot is busy and no queue is allowed -> 429 RateLimitError', async () => {
    const long = {
      model: 'tiny-gemma3', max_tokens: 2000, temperature: 1.0, seed: 3, stream: true,
      messages: [{ role: 'user', content: 'Write a very long story about a king, his sons and the sea.' }],
    };
    const stream = await openai.chat.completions.create(long);
    const it = stream[Symbol.asyncIterator]();
    let content = 0;
    while (content < 2) {
      const { value, done } = await it.next();
      assert.ok(!done, 'the long request ended early');
      if (value.choices[0]?.delta?.content) content++;
    }
    // The slot is busy now.
    const short = { model: 'tiny-gemma3', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, temperature: 0 };
    await assert.rejects(openai.chat.completions.create(short), (err) => {
      assert.ok(err instanceof OpenAI.RateLimitError, `${err.constructor.name}: ${err.message}`);
      assert.equal(err.status, 429);
      return true;
    });
    stream.controller.abort();
    // Once the slot is free again, requests are served.
    for (let i = 0; i < 100 && (await metric(server, 'edgegemma_slots_busy')) !== 0; i++) await sleep(50);
    const r = await openai.chat.completions.create(short);
    assert.equal(r.object, 'chat.completion');
  });
});
