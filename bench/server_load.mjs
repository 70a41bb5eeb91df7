#!/usr/bin/env node
// Bounded load test of `edgegemma serve` (loopback only): M concurrent streaming chat clients for
// T seconds. Each client loops: a streaming /v1/chat/completions request (short, varied prompts,
// max_tokens ~32, stream_options.include_usage), recording TTFT (send -> first content delta) and
// the completion tokens (usage). Reports requests, errors (any non-200, a broken stream, or one
// without a finish_reason / [DONE]), p50/p99 TTFT, total generated tok/s, and the server's RSS
// (VmRSS of /proc/PID/status) at start / middle / end.
//
//   node bench/server_load.mjs --url http://127.0.0.1:8080 --clients 4 --seconds 30 [--pid PID]
//   node bench/server_load.mjs --model ../shared/models/tiny-gemma3 --clients 4 --seconds 30 [--parallel 4]
//
// With --model it starts `edgegemma serve --port 0 --parallel N [-t THREADS]` itself (binary: --cli,
// else EG_CLI_PATH, else build/edgegemma; N defaults to the client count) and stops it at the end. --json prints the summary as one JSON object.
// Exit status 1 when any request failed. No npm dependencies (Node >= 18: fetch, ReadableStream).
// tests/node/load.test.mjs runs a short bounded version (runLoad) as a test.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const PROMPTS = [
  'Tell me a fortune.', 'Who was the king?', 'Describe the sea.', 'What did the farmer say?',
  'Write a line about the moon.', 'Where is the river?', 'Name three colours.', 'Why do birds sing?',
  'What is the old man doing?', 'Tell me about the village.', 'How do you make bread?',
  'Say something kind.', 'What happened in the morning?', 'Who lives in the castle?',
  'Describe a storm.', 'What is a good name for a dog?',
];

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

/// VmRSS of a process in KiB, or null when unknown.
export function rssKiB(pid) {
  if (!pid) return null;
  try {
    const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+)\s+kB/m);
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/// One streaming request; resolves to {ok, status, ttftMs, tokens, error}.
async function streamOnce(url, body, headers, timeoutMs) {
  const t0 = performance.now();
  let res;
  try {
    res = await fetch(url + '/v1/chat/completions', {
      method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    return { ok: false, status: 0, error: `fetch: ${e.message}` };
  }
  if (res.status !== 200) {
    const text = await res.text().catch(() => '');
    return { ok: false, status: res.status, error: `HTTP ${res.status}: ${text.slice(0, 200)}` };
  }
  let ttftMs = null, tokens = 0, finish = null, done = false, buf = '';
  const decoder = new TextDecoder();
  try {
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
          if (chunk.error) throw new Error(`error event: ${JSON.stringify(chunk.error)}`);
          const c = chunk.choices?.[0];
          if (c?.delta?.content && ttftMs === null) ttftMs = performance.now() - t0;
          if (c?.finish_reason) finish = c.finish_reason;
          if (chunk.usage) tokens = chunk.usage.completion_tokens;
        }
      }
    }
  } catch (e) {
    return { ok: false, status: 200, error: `stream: ${e.message}` };
  }
  if (!done || !finish) return { ok: false, status: 200, error: `stream ended without ${done ? 'finish_reason' : '[DONE]'}` };
  return { ok: true, status: 200, ttftMs, tokens };
}

/// Runs the load: {url, clients, seconds, pid, maxTokens, apiKey, timeoutMs, log} -> summary.
export async function runLoad({ url, clients = 4, seconds = 30, pid = null, maxTokens = 32, apiKey = null,
                                timeoutMs = 120000, log = () => {} }) {
  const headers = { 'Content-Type': 'application/json' };
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  const rss = { start: rssKiB(pid), middle: null, end: null, max: rssKiB(pid) };
  const ttfts = [], errors = [];
  let requests = 0, tokens = 0;
  const t0 = performance.now();
  const deadline = t0 + seconds * 1000;
  const sampler = setInterval(() => {
    const r = rssKiB(pid);
    if (r !== null) rss.max = Math.max(rss.max ?? 0, r);
  }, 250);
  const middle = setTimeout(() => { rss.middle = rssKiB(pid); }, seconds * 500);

  async function client(k) {
    for (let i = 0; performance.now() < deadline; i++) {
      const body = {
        messages: [{ role: 'user', content: PROMPTS[(k * 7 + i) % PROMPTS.length] }],
        max_tokens: maxTokens, stream: true, stream_options: { include_usage: true },
        temperature: 0.8, seed: k * 1000 + i,
      };
      const r = await streamOnce(url, body, headers, timeoutMs);
      requests++;
      if (!r.ok) {
        errors.push(r.error);
        log(`client ${k}: ${r.error}`);
        continue;
      }
      tokens += r.tokens;
      if (r.ttftMs !== null) ttfts.push(r.ttftMs);
    }
  }
  await Promise.all(Array.from({ length: clients }, (_, k) => client(k)));
  const wallS = (performance.now() - t0) / 1000;
  clearInterval(sampler);
  clearTimeout(middle);
  rss.end = rssKiB(pid);
  ttfts.sort((a, b) => a - b);
  return {
    clients, seconds, wall_s: +wallS.toFixed(2), requests, errors: errors.length, error_samples: errors.slice(0, 5),
    ttft_ms: { p50: +percentile(ttfts, 50).toFixed(1), p99: +percentile(ttfts, 99).toFixed(1),
               max: +(ttfts.at(-1) ?? NaN).toFixed(1) },
    generated_tokens: tokens, tok_per_s: +(tokens / wallS).toFixed(1),
    rss_mib: Object.fromEntries(Object.entries(rss).map(([k, v]) => [k, v === null ? null : +(v / 1024).toFixed(1)])),
  };
}

function parseArgs(argv) {
  const o = { clients: 4, seconds: 30, maxTokens: 32, parallel: null, json: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--url') o.url = v().replace(/\/+$/, '');
    else if (a === '--clients') o.clients = Number(v());
    else if (a === '--seconds') o.seconds = Number(v());
    else if (a === '--pid') o.pid = Number(v());
    else if (a === '--model') o.model = v();
    else if (a === '--cli') o.cli = v();
    else if (a === '--parallel') o.parallel = Number(v());
    else if (a === '--threads') o.threads = Number(v());
    else if (a === '--max-tokens') o.maxTokens = Number(v());
    else if (a === '--api-key') o.apiKey = v();
    else if (a === '--json') o.json = true;
    else if (a === '-h' || a === '--help') o.help = true;
    else throw new Error(`unknown argument ${a}`);
  }
  for (const k of ['clients', 'seconds', 'maxTokens']) {
    if (!(o[k] > 0)) throw new Error(`--${k.replace('maxTokens', 'max-tokens')} must be a positive number`);
  }
  if (!o.help && !o.url === !o.model) throw new Error('give exactly one of --url URL or --model DIR');
  return o;
}

async function main() {
  let o;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`server_load: ${e.message}`);
    process.exit(2);
  }
  if (o.help) {
    console.log('usage: node bench/server_load.mjs (--url URL [--pid PID] | --model DIR [--parallel N] [--threads N] [--cli PATH])\n' +
                '       [--clients M] [--seconds T] [--max-tokens N] [--api-key KEY] [--json]');
    return;
  }
  let server = null;
  if (o.model) {
    if (o.cli) process.env.EG_CLI_PATH = path.resolve(o.cli);
    const here = path.dirname(fileURLToPath(import.meta.url));
    const { startServer } = await import(pathToFileURL(path.join(here, '..', 'tests', 'node', 'server.mjs')).href);
    const args = ['--parallel', String(o.parallel ?? o.clients)];
    if (o.threads) args.push('-t', String(o.threads));
    server = await startServer({ model: path.resolve(o.model), args });
    o.url = server.url;
    o.pid = server.pid;
  }
  const s = await runLoad({ ...o, log: (m) => console.error(m) });
  if (server) await server.stop();
  if (o.json) {
    console.log(JSON.stringify(s));
  } else {
    console.log(`clients ${s.clients}, ${s.wall_s} s: ${s.requests} requests, ${s.errors} errors`);
    console.log(`TTFT p50 ${s.ttft_ms.p50} ms, p99 ${s.ttft_ms.p99} ms, max ${s.ttft_ms.max} ms`);
    console.log(`generated ${s.generated_tokens} tokens, ${s.tok_per_s} tok/s total`);
    if (s.rss_mib.start !== null) {
      console.log(`server RSS MiB: start ${s.rss_mib.start}, middle ${s.rss_mib.middle}, end ${s.rss_mib.end}, max ${s.rss_mib.max}`);
    } else {
      console.log('server RSS: unknown (give --pid)');
    }
  }
  process.exit(s.errors ? 1 : 0);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
