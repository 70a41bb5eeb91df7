#!/usr/bin/env node
// Soak test of `edgegemma serve` (loopback only, outside CI; docs/reliability.md): C concurrent
// clients (default 16) for a long time (default 30 minutes) send a mix of requests:
//
//   stream       streaming chat, 1-3 turns (shared system prompts: the prefix cache is exercised)
//   plain        non-streaming chat
//   completion   non-streaming /v1/completions
//   cancel       a streaming or non-streaming request the client abandons after the first
//                delta or after 20-400 ms (the server must cancel it and free its slot)
//   schema       response_format json_schema (stream or not); a finished answer must be JSON valid
//                against the schema (tests/node/schema.mjs, independent of the server's grammar)
//   oversized    a body over --max-body-kb: must be 413 with an OpenAI error object
//   invalid      a malformed request (bad type, unknown role, bad JSON): must be 400
//
// Each outcome has a kind. Expected kinds: ok, cancelled, rejected_413, rejected_400,
// schema_truncated (finish_reason "length" before the JSON closed). Every other kind (HTTP 5xx,
// 429, connection errors, a stream without [DONE] or finish_reason, an error event, a finished
// schema answer that is not valid, a timeout) is a wrong-kind error. The report gives the
// requests served, the count per kind, p50/p99 latency (whole request, and TTFT of streams) of
// the ok requests, and the server's RSS (VmRSS of /proc/PID/status) sampled every --sample-s
// seconds; after the warm-up (the first --warmup fraction of the run, default 0.2) RSS must be
// flat: the median of the last quarter of the post-warm-up samples may exceed the median of the
// first quarter by at most max(8 MiB, 5 %). Exit status 1 on any wrong-kind error, an RSS that
// is not flat, or a server that died.
//
//   node bench/server_soak.mjs                               # bundled tiny model, 30 min, 16 clients
//   node bench/server_soak.mjs --minutes 2 --clients 16 --json
//   node bench/server_soak.mjs --model ../shared/models/tiny-gemma4 --parallel 8 --threads 2
//   node bench/server_soak.mjs --url http://127.0.0.1:8080 --pid PID --max-body-kb 1024
//
// With --model (default: models/tiny-gemma3) it starts `edgegemma serve --port 0 --parallel P
// --max-body-kb K --prefix-cache-mb M [-t T]` itself (M defaults to 8: the prefix cache fills to
// its cap during the warm-up, so that what grows after it is not the cache by design) (binary: --cli, else EG_CLI_PATH, else build/edgegemma) and stops
// it at the end. No npm dependencies (Node >= 18).
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { rssKiB } from './server_load.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '..');

const SYSTEMS = ['Answer briefly.', 'You are a storyteller from a small village.', 'Reply in one sentence.'];
const PROMPTS = [
  'Tell me a fortune.', 'Who was the king?', 'Describe the sea.', 'What did the farmer say?',
  'Write a line about the moon.', 'Where is the river?', 'Name three colours.', 'Why do birds sing?',
  'What is the old man doing?', 'Tell me about the village.', 'How do you make bread?',
  'Say something kind.', 'What happened in the morning?', 'Who lives in the castle?',
];
const SCHEMAS = [
  { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' } },
    required: ['name', 'age'], additionalProperties: false },
  { type: 'object', properties: { colours: { type: 'array', items: { enum: ['red', 'green', 'blue'] }, minItems: 1, maxItems: 3 },
                                  ok: { type: 'boolean' } }, required: ['colours', 'ok'], additionalProperties: false },
  { type: 'array', items: { type: 'string', maxLength: 6 }, minItems: 1, maxItems: 2 },
];
const EXPECTED = new Set(['ok', 'cancelled', 'rejected_413', 'rejected_400', 'schema_truncated']);

// Deterministic per client: mulberry32.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

const median = (xs) => percentile([...xs].sort((a, b) => a - b), 50);

function conversation(r) {
  const msgs = [{ role: 'system', content: SYSTEMS[Math.floor(r() * SYSTEMS.length)] }];
  const turns = 1 + Math.floor(r() * 3);
  for (let t = 0; t < turns; t++) {
    msgs.push({ role: 'user', content: PROMPTS[Math.floor(r() * PROMPTS.length)] });
    if (t + 1 < turns) msgs.push({ role: 'assistant', content: 'The river runs past the old mill.' });
  }
  return msgs;
}

/// Reads an SSE stream; resolves to {done, finish, content, error, ttftMs}. `onDelta` may abort.
async function readSse(res, t0, onDelta) {
  let buf = '', done = false, finish = null, content = '', ttftMs = null, error = null;
  const decoder = new TextDecoder();
  for await (const bytes of res.body) {
    buf += decoder.decode(bytes, { stream: true });
    let sep;
    while ((sep = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, sep);
      buf = buf.slice(sep + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') { done = true; continue; }
        const chunk = JSON.parse(data);
        if (chunk.error) error = JSON.stringify(chunk.error).slice(0, 200);
        const c = chunk.choices?.[0];
        const piece = c?.delta?.content ?? c?.text;
        if (piece) {
          if (ttftMs === null) ttftMs = performance.now() - t0;
          content += piece;
          onDelta?.();
        }
        if (c?.finish_reason) finish = c.finish_reason;
      }
    }
  }
  return { done, finish, content, error, ttftMs };
}

/// One request of `type`; resolves to {kind, ms, ttftMs, detail}.
async function one(type, r, o) {
  const headers = { 'Content-Type': 'application/json' };
  if (o.apiKey) headers.Authorization = `Bearer ${o.apiKey}`;
  const t0 = performance.now();
  const ctrl = new AbortController();
  const timeout = setTimeout(() => ctrl.abort(new Error('timeout')), o.timeoutMs);
  let route = '/v1/chat/completions', body, cancelAfterMs = null, cancelOnDelta = false, schema = null;
  const maxTokens = 8 + Math.floor(r() * 40);
  switch (type) {
    case 'stream':
      body = { messages: conversation(r), max_tokens: maxTokens, stream: true, temperature: 0.8, seed: Math.floor(r() * 1e9) };
      break;
    case 'plain':
      body = { messages: conversation(r), max_tokens: maxTokens, temperature: 0.7, top_p: 0.9, seed: Math.floor(r() * 1e9) };
      break;
    case 'completion':
      route = '/v1/completions';
      body = { prompt: PROMPTS[Math.floor(r() * PROMPTS.length)], max_tokens: maxTokens, temperature: 0.5, seed: Math.floor(r() * 1e9) };
      break;
    case 'cancel':
      body = { messages: conversation(r), max_tokens: 200, stream: r() < 0.7, ignore_eos: true };
      if (body.stream && r() < 0.5) cancelOnDelta = true;
      else cancelAfterMs = 20 + Math.floor(r() * 380);
      break;
    case 'schema':
      schema = SCHEMAS[Math.floor(r() * SCHEMAS.length)];
      body = { messages: conversation(r), max_tokens: 160, stream: r() < 0.5, temperature: 0.7, seed: Math.floor(r() * 1e9),
               response_format: { type: 'json_schema', json_schema: { name: 's', schema } } };
      break;
    case 'oversized':
      body = { messages: [{ role: 'user', content: 'x'.repeat(o.maxBodyKb * 1024 + 1024 + Math.floor(r() * 4096)) }] };
      break;
    case 'invalid': {
      const bad = [
        '{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}',
        '{"messages": [{"role": "wizard", "content": "hi"}]}',
        '{"messages": [{"role": "user", "content": "hi"}',
        '{"messages": []}',
        '{"messages": [{"role": "user", "content": "hi"}], "n": 3}',
      ];
      body = bad[Math.floor(r() * bad.length)];
      break;
    }
  }
  const result = (kind, detail = '', ttftMs = null) => ({ kind, ms: performance.now() - t0, ttftMs, detail });
  let cancelTimer = null;
  try {
    if (cancelAfterMs !== null) cancelTimer = setTimeout(() => ctrl.abort(new Error('cancel')), cancelAfterMs);
    const res = await fetch(o.url + route, {
      method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body), signal: ctrl.signal });
    if (res.status !== 200) {
      const text = await res.text();
      let err = null;
      try { err = JSON.parse(text).error; } catch { /* not JSON */ }
      const typed = err && typeof err.message === 'string' && typeof err.type === 'string';
      if (res.status === 413 && type === 'oversized' && typed) return result('rejected_413');
      if (res.status === 400 && type === 'invalid' && typed) return result('rejected_400');
      return result(`http_${res.status}`, `${type}: ${text.slice(0, 160)}`);
    }
    if (type === 'oversized' || type === 'invalid') return result('accepted_bad_request', type);
    let content = '', finish = null, ttftMs = null;
    if (body.stream) {
      const s = await readSse(res, t0, () => { if (cancelOnDelta) ctrl.abort(new Error('cancel')); });
      if (s.error) return result('error_event', `${type}: ${s.error}`);
      if (!s.done || !s.finish) return result('broken_stream', `${type}: done ${s.done}, finish ${s.finish}`);
      ({ content, finish, ttftMs } = s);
    } else {
      const j = await res.json();
      const c = j.choices?.[0];
      content = c?.message?.content ?? c?.text;
      finish = c?.finish_reason;
      if (typeof content !== 'string' || !finish) return result('bad_response', `${type}: ${JSON.stringify(j).slice(0, 160)}`);
    }
    if (type === 'cancel') return result('ok_uncancelled');  // finished before the client gave up: fine
    if (schema) {
      if (finish === 'length') return result('schema_truncated');
      let v;
      try { v = JSON.parse(content); } catch { return result('schema_invalid', `not JSON: ${content.slice(0, 120)}`); }
      const errors = o.validate(v, schema);
      if (errors.length) return result('schema_invalid', errors.join('; ').slice(0, 160));
    }
    return result('ok', '', ttftMs);
  } catch (e) {
    const reason = ctrl.signal.aborted ? ctrl.signal.reason?.message : null;
    if (reason === 'cancel') return result('cancelled');
    if (reason === 'timeout') return result('timeout', type);
    return result('connection_error', `${type}: ${e.cause?.code ?? ''} ${e.message}`.slice(0, 160));
  } finally {
    clearTimeout(timeout);
    if (cancelTimer) clearTimeout(cancelTimer);
  }
}

const MIX = [['stream', 30], ['plain', 18], ['completion', 7], ['cancel', 15], ['schema', 15], ['oversized', 8], ['invalid', 7]];

function pick(r) {
  let x = r() * MIX.reduce((s, [, w]) => s + w, 0);
  for (const [t, w] of MIX) if ((x -= w) < 0) return t;
  return MIX[0][0];
}

/// Runs the soak: {url, pid, clients, seconds, sampleS, warmup, maxBodyKb, timeoutMs, validate} -> summary.
export async function runSoak(o) {
  const kinds = {}, samples = {}, lat = [], ttft = [];
  const rss = [];  // [seconds since start, MiB]
  let requests = 0;
  const t0 = performance.now();
  const deadline = t0 + o.seconds * 1000;
  const sample = () => {
    const k = rssKiB(o.pid);
    if (k !== null) rss.push([+((performance.now() - t0) / 1000).toFixed(1), +(k / 1024).toFixed(1)]);
  };
  sample();
  const sampler = setInterval(sample, o.sampleS * 1000);
  let lastLog = performance.now();
  async function client(k) {
    const r = rng(0x5eed + k * 7919);
    while (performance.now() < deadline) {
      const type = pick(r);
      const res = await one(type, r, o);
      requests++;
      kinds[res.kind] = (kinds[res.kind] ?? 0) + 1;
      if (!EXPECTED.has(res.kind) && res.kind !== 'ok_uncancelled') {
        samples[res.kind] ??= [];
        if (samples[res.kind].length < 5) samples[res.kind].push(res.detail);
      }
      if (res.kind === 'ok') {
        lat.push(res.ms);
        if (res.ttftMs !== null) ttft.push(res.ttftMs);
      }
      if (o.log && performance.now() - lastLog > 60000) {
        lastLog = performance.now();
        o.log(`soak: ${((lastLog - t0) / 1000).toFixed(0)} s, ${requests} requests, RSS ${rss.at(-1)?.[1]} MiB, ${JSON.stringify(kinds)}`);
      }
    }
  }
  await Promise.all(Array.from({ length: o.clients }, (_, k) => client(k)));
  clearInterval(sampler);
  sample();
  const wallS = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  ttft.sort((a, b) => a - b);
  // RSS after the warm-up: first vs last quarter of the samples.
  const post = rss.filter(([t]) => t >= o.seconds * o.warmup).map(([, m]) => m);
  const q = Math.max(1, Math.floor(post.length / 4));
  const first = post.length ? median(post.slice(0, q)) : null, last = post.length ? median(post.slice(-q)) : null;
  const growth = first !== null ? +(last - first).toFixed(1) : null;
  const flat = growth !== null && growth <= Math.max(8, 0.05 * first);
  const wrong = Object.entries(kinds).filter(([k]) => !EXPECTED.has(k) && k !== 'ok_uncancelled').reduce((s, [, n]) => s + n, 0);
  return {
    clients: o.clients, seconds: o.seconds, wall_s: +wallS.toFixed(1), requests, req_per_s: +(requests / wallS).toFixed(2),
    kinds, wrong_kind_errors: wrong, wrong_kind_samples: samples,
    latency_ms: { ok_requests: lat.length, p50: +(percentile(lat, 50) ?? NaN).toFixed(1), p99: +(percentile(lat, 99) ?? NaN).toFixed(1),
                  ttft_p50: +(percentile(ttft, 50) ?? NaN).toFixed(1), ttft_p99: +(percentile(ttft, 99) ?? NaN).toFixed(1) },
    rss_mib: { start: rss[0]?.[1] ?? null, max: rss.length ? Math.max(...rss.map(([, m]) => m)) : null, end: rss.at(-1)?.[1] ?? null,
               after_warmup_first_quarter: first, last_quarter: last, growth_after_warmup: growth, flat,
               samples: rss },
  };
}

function parseArgs(argv) {
  const o = { clients: 16, seconds: 1800, sampleS: 5, warmup: 0.2, parallel: 4, maxBodyKb: 256, prefixCacheMb: 8, timeoutMs: 300000, json: false,
              model: path.join(repoRoot, 'models', 'tiny-gemma3') };
  let haveUrl = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--url') { o.url = v().replace(/\/+$/, ''); haveUrl = true; }
    else if (a === '--pid') o.pid = Number(v());
    else if (a === '--model') o.model = v();
    else if (a === '--cli') o.cli = v();
    else if (a === '--clients') o.clients = Number(v());
    else if (a === '--minutes') o.seconds = Number(v()) * 60;
    else if (a === '--seconds') o.seconds = Number(v());
    else if (a === '--sample-s') o.sampleS = Number(v());
    else if (a === '--warmup') o.warmup = Number(v());
    else if (a === '--parallel') o.parallel = Number(v());
    else if (a === '--threads') o.threads = Number(v());
    else if (a === '--max-body-kb') o.maxBodyKb = Number(v());
    else if (a === '--prefix-cache-mb') o.prefixCacheMb = Number(v());
    else if (a === '--api-key') o.apiKey = v();
    else if (a === '--json') o.json = true;
    else if (a === '-h' || a === '--help') o.help = true;
    else throw new Error(`unknown argument ${a}`);
  }
  for (const k of ['clients', 'seconds', 'sampleS', 'parallel', 'maxBodyKb']) if (!(o[k] > 0)) throw new Error(`${k} must be positive`);
  if (!(o.warmup >= 0 && o.warmup < 1)) throw new Error('--warmup must be in [0, 1)');
  if (haveUrl) delete o.model;
  return o;
}

async function main() {
  let o;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`server_soak: ${e.message}`);
    process.exit(2);
  }
  if (o.help) {
    console.log(`usage: node bench/server_soak.mjs [--model DIR | --url URL --pid PID] [--minutes M | --seconds S] [--clients C]
       [--parallel P] [--threads T] [--max-body-kb K] [--prefix-cache-mb M] [--sample-s S] [--warmup F] [--cli PATH]
       [--api-key KEY] [--json]`);
    return;
  }
  ({ validate: o.validate } = await import(pathToFileURL(path.join(repoRoot, 'tests', 'node', 'schema.mjs')).href));
  let server = null;
  if (o.model) {
    if (o.cli) process.env.EG_CLI_PATH = path.resolve(o.cli);
    const { startServer } = await import(pathToFileURL(path.join(repoRoot, 'tests', 'node', 'server.mjs')).href);
    const args = ['--parallel', String(o.parallel), '--max-body-kb', String(o.maxBodyKb), '--prefix-cache-mb', String(o.prefixCacheMb)];
    if (o.threads) args.push('-t', String(o.threads));
    server = await startServer({ model: path.resolve(o.model), args });
    o.url = server.url;
    o.pid = server.pid;
  }
  o.log = (m) => console.error(m);
  const s = await runSoak(o);
  // The server must still be alive and healthy.
  let healthy = false;
  try { healthy = (await fetch(o.url + '/health')).status === 200; } catch { healthy = false; }
  s.server_healthy_at_end = healthy;
  if (server) {
    const r = await server.stop();
    s.server_exit = r;
  }
  const ok = s.wrong_kind_errors === 0 && s.rss_mib.flat && healthy;
  s.pass = ok;
  if (o.json) {
    console.log(JSON.stringify(s));
  } else {
    console.log(`soak: ${s.clients} clients, ${s.wall_s} s: ${s.requests} requests (${s.req_per_s}/s)`);
    console.log(`kinds: ${JSON.stringify(s.kinds)}; wrong-kind errors: ${s.wrong_kind_errors}`);
    for (const [k, v] of Object.entries(s.wrong_kind_samples)) console.log(`  ${k}: ${v.join(' | ')}`);
    const l = s.latency_ms;
    console.log(`latency of ${l.ok_requests} ok requests: p50 ${l.p50} ms, p99 ${l.p99} ms; stream TTFT p50 ${l.ttft_p50} ms, p99 ${l.ttft_p99} ms`);
    const m = s.rss_mib;
    console.log(`RSS MiB: start ${m.start}, max ${m.max}, end ${m.end}; after warm-up: first quarter ${m.after_warmup_first_quarter}, ` +
                `last quarter ${m.last_quarter}, growth ${m.growth_after_warmup} -> ${m.flat ? 'flat' : 'NOT FLAT'}`);
    console.log(`RSS over time (s: MiB): ${m.samples.filter((_, i) => i % Math.max(1, Math.floor(m.samples.length / 12)) === 0).map(([t, v]) => `${t}: ${v}`).join(', ')}`);
    console.log(`server healthy at the end: ${healthy}; ${ok ? 'PASS' : 'FAIL'}`);
  }
  process.exit(ok ? 0 : 1);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
