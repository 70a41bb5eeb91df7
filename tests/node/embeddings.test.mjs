// POST /v1/embeddings with the official `openai` client (tests/fixtures/tiny-embeddinggemma, whose
// reference.json comes from sentence-transformers): the client's default (it asks for base64 and
// decodes the little-endian float32 bytes), encoding_format 'float' and 'base64', a list input,
// the `task` extension, `dimensions` (Matryoshka), usage counts, clear 400s; `serve -m EMB` alone
// answers chat routes with a 400; `serve -m CHAT --embedding-model EMB` serves both.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, repoRoot } from './server.mjs';
import { client } from './client.mjs';

const embDir = path.join(repoRoot, 'tests', 'fixtures', 'tiny-embeddinggemma');
const ref = JSON.parse(readFileSync(path.join(embDir, 'reference.json'), 'utf8'));
const cases = (prompt) => ref.cases.filter((c) => c.prompt_name === prompt);

function assertClose(actual, expected, tol = 1e-5) {
  assert.equal(actual.length, expected.length);
  for (let i = 0; i < expected.length; ++i)
    assert.ok(Math.abs(actual[i] - expected[i]) < tol, `[${i}] ${actual[i]} vs ${expected[i]}`);
}

function decodeBase64(s) {
  const b = Buffer.from(s, 'base64');
  const out = [];
  for (let i = 0; i < b.length; i += 4) out.push(b.readFloatLE(i));
  return out;
}

describe('embeddings only (serve -m tiny-embeddinggemma)', () => {
  let server, openai;
  before(async () => {
    server = await startServer({ model: embDir });
    openai = client(server);
  });
  after(async () => {
    if (!server) return;
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('client default (base64, decoded by the client) and a list input', async () => {
    const cs = cases(null);
    const r = await openai.embeddings.create({ model: 'tiny-embeddinggemma', input: cs.map((c) => c.text) });
    assert.equal(r.object, 'list');
    assert.equal(r.model, 'tiny-embeddinggemma');
    assert.equal(r.data.length, cs.length);
    r.data.forEach((d, i) => {
      assert.equal(d.object, 'embedding');
      assert.equal(d.index, i);
      assertClose(Array.from(d.embedding), cs[i].encode);
    });
    const tokens = cs.reduce((n, c) => n + c.input_ids.length, 0);
    assert.deepEqual(r.usage, { prompt_tokens: tokens, total_tokens: tokens });
  });

  test("encoding_format 'float' and 'base64' give the same vector", async () => {
    const c = cases(null)[0];
    const f = await openai.embeddings.create({ model: 'x', input: c.text, encoding_format: 'float' });
    assert.ok(Array.isArray(f.data[0].embedding));
    assertClose(f.data[0].embedding, c.encode);
    const b = await openai.embeddings.create({ model: 'x', input: c.text, encoding_format: 'base64' });
    assert.equal(typeof b.data[0].embedding, 'string');  // as sent: the caller decodes
    const decoded = decodeBase64(b.data[0].embedding);
    assert.equal(decoded.length, 64);
    // The bytes are the float vector's own float32 values.
    assert.deepEqual(decoded, f.data[0].embedding.map((x) => Math.fround(x)));
  });

  test('task (extension) and dimensions (Matryoshka, re-normalised)', async () => {
    for (const task of ['query', 'document']) {
      const c = cases(task)[1];
      const r = await openai.embeddings.create({ model: 'x', input: c.text, encoding_format: 'float', task });
      assertClose(r.data[0].embedding, c.encode);
      assert.equal(r.usage.prompt_tokens, c.input_ids.length);
    }
    const c = cases(null)[2];
    for (const d of [32, 16]) {
      const r = await openai.embeddings.create({ model: 'x', input: c.text, dimensions: d });
      assertClose(Array.from(r.data[0].embedding), c.truncated[String(d)]);
    }
  });

  test('bad requests are 400s naming the field', async () => {
    const bad = async (body, param) => {
      await assert.rejects(openai.embeddings.create({ model: 'x', encoding_format: 'float', ...body }), (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, String(e));
        assert.equal(e.status, 400);
        if (param) assert.equal(e.param, param, e.message);
        return true;
      });
    };
    await bad({ input: 'x', dimensions: 20 }, 'dimensions');
    await bad({ input: 'x', task: 'nonsense' }, 'task');
    await bad({ input: [] }, 'input');
    await bad({ input: [1, 2, 3] }, 'input');
    await bad({ input: 'x', encoding_format: 'int8' }, 'encoding_format');
    await bad({ input: 'a '.repeat(5000) }, 'input');  // over the 2048-token limit
  });

  test('chat routes answer a clear 400 without a chat model', async () => {
    await assert.rejects(openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }), (e) => {
      assert.equal(e.status, 400);
      assert.match(e.message, /embedding model/);
      return true;
    });
    const models = await openai.models.list();
    assert.deepEqual(models.data.map((m) => m.id), ['tiny-embeddinggemma']);
  });
});

describe('chat and embeddings (serve -m tiny-gemma3 --embedding-model ...)', () => {
  let server, openai;
  before(async () => {
    server = await startServer({ model: 'tiny-gemma3', args: ['--embedding-model', embDir] });
    openai = client(server);
  });
  after(async () => {
    if (!server) return;
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test('both routes work', async () => {
    const c = await openai.chat.completions.create({
      model: 'tiny-gemma3', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4, temperature: 0,
    });
    assert.ok(c.choices[0].message.content !== undefined);
    const e = cases('query')[0];
    const r = await openai.embeddings.create({ model: 'tiny-embeddinggemma', input: e.text, task: 'query' });
    assertClose(Array.from(r.data[0].embedding), e.encode);
    const ids = (await openai.models.list()).data.map((m) => m.id);
    assert.deepEqual(ids, ['tiny-gemma3', 'tiny-embeddinggemma']);
  });
});
