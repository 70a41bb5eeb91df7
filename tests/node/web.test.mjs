// The web chat page (GET /) in headless Chromium (playwright-core driving /usr/bin/chromium or
// EG_CHROMIUM): send a question, see a streamed answer and the TTFT; Stop aborts a long answer;
// multi-turn; model text is inserted as text, never as HTML; HTTP errors are shown.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { startServer, get, sleep, repoRoot } from './server.mjs';
import path from 'node:path';

const chromiumPath = process.env.EG_CHROMIUM || '/usr/bin/chromium';

describe('web chat page (tiny-gemma3)', () => {
  let server, browser;
  const pageErrors = [];
  before(async () => {
    assert.ok(existsSync(chromiumPath), `no Chromium at ${chromiumPath} (apt-get install chromium, or set EG_CHROMIUM)`);
    server = await startServer({ model: 'tiny-gemma3', args: ['--parallel', '2'] });
    browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  });
  after(async () => {
    if (browser) await browser.close();
    if (server) await server.stop();
  });

  async function openPage() {
    const context = await browser.newContext();
    // Offline check: the page must not load anything but itself and the API.
    const external = [];
    await context.route('**/*', (route) => {
      const u = route.request().url();
      if (!u.startsWith(server.url)) {
        external.push(u);
        return route.abort();
      }
      return route.continue();
    });
    const p = await context.newPage();
    p.on('pageerror', (e) => pageErrors.push(String(e)));
    await p.goto(server.url + '/');
    return { p, external };
  }

  async function messages(p) {
    return p.$$eval('#messages .msg', (els) => els.map((e) => ({
      cls: e.className, text: e.querySelector('.content')?.textContent ?? '' })));
  }

  test('GET / serves the page as text/html, byte for byte src/server/web/index.html', async () => {
    const r = await get(server, '/');
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /text\/html/);
    // configure_file(@ONLY) must not have changed it (an at sign would be substituted).
    assert.equal(r.text, readFileSync(path.join(repoRoot, 'src', 'server', 'web', 'index.html'), 'utf8'));
    for (const id of ['prompt', 'send', 'stop', 'preset', 'system', 'messages', 'ttft', 'toks']) {
      assert.ok(r.text.includes(`id="${id}"`), `#${id} missing`);
    }
  });

  test('ask a question: streamed answer, TTFT and tok/s shown; second turn keeps history', async () => {
    const { p, external } = await openPage();
    await p.selectOption('#preset', 'precise');
    await p.fill('#system', 'Answer briefly.');
    await p.fill('#max-tokens', '24');
    await p.fill('#prompt', 'Who was the king?');
    const reqs = [];
    p.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) reqs.push(JSON.parse(r.postData())); });
    await p.click('#send');
    await p.waitForFunction(() => {
      const a = document.querySelectorAll('#messages .msg.assistant .content');
      return a.length === 1 && a[0].textContent.length > 0 && /^\d+$/.test(document.getElementById('ttft').textContent);
    }, null, { timeout: 60000 });
    await p.waitForFunction(() => !document.getElementById('send').disabled, null, { timeout: 60000 });
    assert.match(await p.textContent('#toks'), /^\d+(\.\d+)?$/);
    assert.equal(await p.inputValue('#prompt'), '');
    const req = reqs[0];
    assert.equal(req.stream, true);
    assert.equal(req.preset, 'precise');
    assert.equal(req.max_tokens, 24);
    assert.deepEqual(req.messages, [
      { role: 'system', content: 'Answer briefly.' }, { role: 'user', content: 'Who was the king?' }]);

    // Enter sends (Shift+Enter is a newline); the history goes with the second turn.
    const first = (await messages(p)).find((m) => m.cls.includes('assistant')).text;
    await p.focus('#prompt');
    await p.keyboard.type('And');
    await p.keyboard.press('Shift+Enter');
    await p.keyboard.type('the queen?');
    await p.keyboard.press('Enter');
    await p.waitForFunction(() => document.querySelectorAll('#messages .msg.assistant').length === 2
      && !document.getElementById('send').disabled, null, { timeout: 60000 });
    const second = reqs[1];
    assert.deepEqual(second.messages.map((m) => m.role), ['system', 'user', 'assistant', 'user']);
    assert.equal(second.messages[2].content, first);
    assert.equal(second.messages[3].content, 'And\nthe queen?');
    assert.deepEqual(external, []);
    await p.context().close();
  });

  test('Stop aborts a long answer and the server frees the slot', async () => {
    const { p } = await openPage();
    const metric = async (name) => {
      const m = (await get(server, '/metrics')).text.match(new RegExp(`^${name} (\\d+)$`, 'm'));
      assert.ok(m, `no ${name} in /metrics`);
      return Number(m[1]);
    };
    await p.selectOption('#preset', 'creative');
    await p.fill('#max-tokens', '3000');
    // Sampled (creative): an answer may end by itself (on the server) before Stop; then start a
    // new chat and retry until the server counts a cancellation. Stop is clicked inside the page
    // as soon as 20 characters are there: the tiny model runs at hundreds of tok/s, so a click
    // from the test process could land after the answer ended.
    let cancelled = false;
    for (let attempt = 0; attempt < 6 && !cancelled; attempt++) {
      if (attempt) await p.click('#clear');
      const before = await metric('edgegemma_requests_cancelled_total');
      await p.fill('#prompt', 'Write a very long story about the sea.');
      await p.click('#send');
      const state = await p.waitForFunction(() => {
        const a = document.querySelector('#messages .msg.assistant .content');
        if (!document.getElementById('send').disabled) return 'ended';
        if (a && a.textContent.length > 20) {
          const stop = document.getElementById('stop');
          if (stop.disabled) return false;
          stop.click();
          return 'stopped';
        }
        return false;
      }, null, { timeout: 60000, polling: 5 });
      if ((await state.jsonValue()) !== 'stopped') continue;
      // The page is idle at once, shows the partial answer marked [stopped], no error bubble.
      await p.waitForFunction(() => !document.getElementById('send').disabled, null, { timeout: 10000 });
      assert.equal(await p.isEnabled('#stop'), false);
      assert.equal(await p.textContent('#messages .msg.assistant .note'), '[stopped]');
      assert.equal((await messages(p)).filter((m) => m.cls.includes('error')).length, 0);
      const text1 = await p.textContent('#messages .msg.assistant .content');
      await sleep(300);
      assert.equal(await p.textContent('#messages .msg.assistant .content'), text1, 'text still growing after Stop');
      // The server's slots go idle again.
      let busy = -1;
      for (let i = 0; i < 100 && (busy = await metric('edgegemma_slots_busy')) !== 0; i++) await sleep(50);
      assert.equal(busy, 0);
      cancelled = (await metric('edgegemma_requests_cancelled_total')) > before;
    }
    assert.ok(cancelled, 'no attempt was cancelled on the server (every answer had ended before Stop)');
    await p.context().close();
  });

  test('model and user text is escaped; HTTP errors are shown', async () => {
    const { p } = await openPage();
    const html = '<img src=x onerror="window.__pwned=1"><b>bold</b>';
    await p.fill('#max-tokens', '4');
    await p.fill('#prompt', html);
    await p.click('#send');
    await p.waitForFunction(() => document.querySelectorAll('#messages .msg.assistant').length === 1
      && !document.getElementById('send').disabled, null, { timeout: 60000 });
    assert.equal(await p.textContent('#messages .msg.user .content'), html);
    assert.equal(await p.$$eval('#messages img, #messages b', (e) => e.length), 0);
    assert.equal(await p.evaluate(() => window.__pwned), undefined);

    // An invalid max_tokens value is ignored by the page, so force an error: an unknown preset.
    await p.evaluate(() => {
      const o = document.createElement('option');
      o.value = 'no-such-preset';
      o.textContent = 'bad';
      document.getElementById('preset').append(o);
    });
    await p.selectOption('#preset', 'no-such-preset');
    await p.fill('#prompt', 'Hello');
    await p.click('#send');
    await p.waitForSelector('#messages .msg.error', { timeout: 30000 });
    const err = await p.textContent('#messages .msg.error .content');
    assert.match(err, /HTTP 400/);
    assert.ok(err.length > 'HTTP 400: '.length);
    assert.equal(await p.isEnabled('#send'), true);
    await p.context().close();
    assert.deepEqual(pageErrors, []);
  });
});

describe('web chat page with --api-key', () => {
  const KEY = 'sk-web-test-41b7';
  let server, browser;
  before(async () => {
    server = await startServer({ model: 'tiny-gemma3', args: ['--parallel', '1', '--api-key', KEY] });
    browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  });
  after(async () => {
    if (browser) await browser.close();
    if (server) await server.stop();
  });

  test('without the key: a 401 error is shown; with the key (sent as Bearer): an answer', async () => {
    const p = await browser.newPage();
    await p.goto(server.url + '/');
    await p.fill('#max-tokens', '8');
    await p.fill('#prompt', 'Hello');
    await p.click('#send');
    await p.waitForSelector('#messages .msg.error', { timeout: 30000 });
    assert.match(await p.textContent('#messages .msg.error .content'), /HTTP 401/);
    let auth = null, sent = null;
    p.on('request', (r) => {
      if (!r.url().endsWith('/v1/chat/completions')) return;
      auth = r.headers().authorization;
      sent = JSON.parse(r.postData());
    });
    await p.fill('#api-key', KEY);
    await p.fill('#prompt', 'Hello');
    await p.click('#send');
    await p.waitForFunction(() => document.querySelectorAll('#messages .msg.assistant').length === 1
      && !document.getElementById('send').disabled, null, { timeout: 60000 });
    assert.equal(auth, `Bearer ${KEY}`);
    assert.equal((await p.$$('#messages .msg.error')).length, 1);
    // The failed turn was not kept: the second request carried one user message.
    assert.deepEqual(sent.messages, [{ role: 'user', content: 'Hello' }]);
    await p.close();
  });
});
