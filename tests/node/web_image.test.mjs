// Images in the web page (GET /) in headless Chromium (playwright-core driving /usr/bin/chromium
// or EG_CHROMIUM), tiny-gemma4-mm: attaching a photo (#attach) sends a draft at once, so the server
// encodes it (media cache) and prefills it while the question is typed; after Enter the request
// finds the image encoded (no second encode) and its KV prefilled (cached prompt tokens past the
// image's 270 soft tokens); the next turn sends the image again and reuses everything before its
// new question. Asserted from /metrics and the page's per-answer .meta (usage), never timings.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { startServer, get, shared } from './server.mjs';

const chromiumPath = process.env.EG_CHROMIUM || '/usr/bin/chromium';

describe('web page: images encoded on attach (tiny-gemma4-mm)', () => {
  let server, browser;
  before(async () => {
    assert.ok(existsSync(chromiumPath), `no Chromium at ${chromiumPath} (apt-get install chromium, or set EG_CHROMIUM)`);
    server = await startServer({ model: 'tiny-gemma4-mm', args: ['--parallel', '1'] });
    browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  });
  after(async () => {
    if (browser) await browser.close();
    if (server) await server.stop();
  });

  const metric = async (name) => {
    const m = (await get(server, '/metrics')).text.match(new RegExp(`^${name} (\\d+)$`, 'm'));
    assert.ok(m, `no ${name} in /metrics`);
    return Number(m[1]);
  };
  const waitFor = async (cond, what) => {
    for (let i = 0; i < 300; ++i) {
      if (await cond()) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.fail(`timed out waiting for ${what}`);
  };
  const lastMeta = (p) => p.$$eval('#messages .msg.assistant .meta', (e) => {
    const m = e[e.length - 1];
    return { cached: Number(m.dataset.cached), prompt: Number(m.dataset.prompt) };
  });
  async function enterAndWait(p) {
    const n = await p.$$eval('#messages .msg.assistant', (e) => e.length);
    await p.keyboard.press('Enter');
    await p.waitForFunction((k) => document.querySelectorAll('#messages .msg.assistant .meta').length === k + 1
      && !document.getElementById('send').disabled, n, { timeout: 120000 });
  }

  test('attach, type, Enter; then a second turn', async () => {
    const p = await browser.newPage();
    const drafts = [];
    p.on('request', (r) => { if (r.url().endsWith('/v1/prefill')) drafts.push(JSON.parse(r.postData())); });
    await p.goto(server.url + '/');
    await p.selectOption('#preset', 'precise');
    await p.fill('#max-tokens', '8');
    await p.setInputFiles('#attach', shared('models', 'tiny-gemma4-mm', 'inputs', 'img_checker_300x800.png'));
    assert.equal(await p.$$eval('#attachments img', (e) => e.length), 1);
    // The attach alone sends a draft with the image, and the server encodes and prefills it.
    await waitFor(async () => (await metric('edgegemma_media_cache_inserted_total')) === 1, 'the image to be encoded');
    await waitFor(async () => (await metric('edgegemma_draft_prefills_total')) >= 1, 'the draft prefill');
    assert.ok(drafts.length >= 1);
    const part = drafts[0].messages.at(-1).content[0];
    assert.equal(part.type, 'image_url');
    assert.match(part.image_url.url, /^data:image\/png;base64,/);

    await p.focus('#prompt');
    await p.keyboard.type('What pattern is in this picture?', { delay: 20 });
    await p.waitForTimeout(300);
    await enterAndWait(p);
    const first = await lastMeta(p);
    assert.equal(await p.$$eval('#messages .msg.user img', (e) => e.length), 1, 'the message shows its image');
    assert.equal(await p.$$eval('#attachments img', (e) => e.length), 0, 'attachments are cleared after sending');
    assert.equal(await metric('edgegemma_media_cache_misses_total'), 1, 'the image was encoded more than once');
    assert.ok(await metric('edgegemma_media_cache_hits_total') >= 1);
    assert.ok(first.cached > 272, `only ${first.cached} of ${first.prompt} prompt tokens cached (the image was not prefilled)`);

    await p.keyboard.type('And its colours?', { delay: 20 });
    await p.waitForTimeout(300);
    await enterAndWait(p);
    const second = await lastMeta(p);
    assert.ok(second.cached >= first.prompt - 2, `second turn: ${second.cached} cached of ${second.prompt} (first prompt ${first.prompt})`);
    assert.equal(await metric('edgegemma_media_cache_misses_total'), 1);
    console.log(`# web image: first answer ${first.cached}/${first.prompt} prompt tokens cached; ` +
      `second ${second.cached}/${second.prompt}; ${drafts.length} drafts`);
    await p.close();
  });
});
