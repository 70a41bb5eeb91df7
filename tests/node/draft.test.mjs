// Prefill while typing in the web page (GET /), in headless Chromium (playwright-core driving
// /usr/bin/chromium or EG_CHROMIUM): a 300-character question is typed at human speed
// (EG_TYPE_DELAY_MS per key, default 100 ms: 300 characters in 30 s), Enter is pressed, and the
// answer's TTFT and cached prompt tokens (the page's .meta, from usage.prompt_tokens_details) are
// recorded, once with "Prefill while typing" off and once on. Asserted: with it on the page sent
// drafts to POST /v1/prefill and the server reports the request's prompt as cached (cache hit,
// /metrics edgegemma_draft_cache_hits_total); with it off no draft was sent. Timings are printed,
// never asserted (docs/server.md has the table). EG_DRAFT_MODEL: another model (default
// tiny-gemma3).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { startServer, get } from './server.mjs';

const chromiumPath = process.env.EG_CHROMIUM || '/usr/bin/chromium';
const model = process.env.EG_DRAFT_MODEL || 'tiny-gemma3';
const delay = Number(process.env.EG_TYPE_DELAY_MS || 100);

function question(start) {
  const base = `${start} Please explain, in plain words and without any lists, how a small town by the sea ` +
    'changes over one whole year: the fishing boats, the markets, the storms of winter, the visitors of ' +
    'summer, and what the old people who have lived there all their lives say about it.';
  return (base + ' '.repeat(300)).slice(0, 300).trimEnd().padEnd(300, '.');
}

describe(`web page: prefill while typing (${model})`, () => {
  let server, browser;
  before(async () => {
    assert.ok(existsSync(chromiumPath), `no Chromium at ${chromiumPath} (apt-get install chromium, or set EG_CHROMIUM)`);
    server = await startServer({ model, args: ['--parallel', '1'] });
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

  async function ask(p, text, draft) {
    if ((await p.isChecked('#draft')) !== draft) await p.click('#draft');
    const drafts = [];
    const onRequest = (r) => { if (r.url().endsWith('/v1/prefill')) drafts.push(JSON.parse(r.postData())); };
    p.on('request', onRequest);
    const hitsBefore = await metric('edgegemma_draft_cache_hits_total');
    await p.focus('#prompt');
    await p.keyboard.type(text, { delay });
    await p.waitForTimeout(300);  // a human's pause before Enter (the last draft is debounced 150 ms)
    const n = await p.$$eval('#messages .msg.assistant', (e) => e.length);
    await p.keyboard.press('Enter');
    await p.waitForFunction((k) => document.querySelectorAll('#messages .msg.assistant .meta').length === k + 1
      && !document.getElementById('send').disabled, n, { timeout: 120000 });
    p.off('request', onRequest);
    const meta = await p.$$eval('#messages .msg.assistant .meta', (e) => {
      const m = e[e.length - 1];
      return { ttft: Number(m.dataset.ttft), cached: Number(m.dataset.cached), prompt: Number(m.dataset.prompt), text: m.textContent };
    });
    return { ...meta, drafts, hits: (await metric('edgegemma_draft_cache_hits_total')) - hitsBefore };
  }

  test('a 300-character question typed at human speed: TTFT with and without draft prefill', async () => {
    const p = await browser.newPage();
    await p.goto(server.url + '/');
    await p.selectOption('#preset', 'precise');
    await p.fill('#max-tokens', '16');
    assert.equal(await p.isChecked('#draft'), true, 'prefill while typing is on by default');

    const qOff = question('Without drafts:');
    const qOn = question('With drafts, now:');
    assert.equal(qOff.length, 300);
    assert.equal(qOn.length, 300);
    const off = await ask(p, qOff, false);
    await p.click('#clear');
    const on = await ask(p, qOn, true);

    assert.equal(off.drafts.length, 0, 'drafts were sent with prefill while typing off');
    assert.equal(off.hits, 0);
    assert.ok(on.drafts.length > 0, 'no draft was sent while typing');
    assert.equal(on.drafts.at(-1).messages.at(-1).content.length <= 300, true);
    assert.match(on.text, /^TTFT \d+ ms · \d+ of \d+ prompt tokens cached$/);
    // The server found the draft's prefix: all but the held-back tail and the template's suffix.
    assert.equal(on.hits, 1, 'the server reports no draft cache hit');
    assert.ok(on.cached > on.prompt * 0.8, `only ${on.cached} of ${on.prompt} prompt tokens cached`);
    assert.ok(off.cached < off.prompt * 0.2, `${off.cached} of ${off.prompt} cached without drafts`);
    console.log(`# draft prefill (${model}, ${delay} ms/key): ` +
      `off: TTFT ${off.ttft} ms, ${off.cached}/${off.prompt} cached; ` +
      `on: TTFT ${on.ttft} ms, ${on.cached}/${on.prompt} cached, ${on.drafts.length} drafts sent`);
    await p.close();
  });
});
