// SHORT BOUNDED LOAD TEST (correctness under load, not a benchmark): 4 concurrent streaming
// clients for 10 s against `edgegemma serve --parallel 4` (tiny-gemma3) via bench/server_load.mjs.
// Asserts zero errors (every request 200 with a complete stream) and that the server's RSS does
// not keep growing (end <= middle + 10% + 32 MiB). Under AddressSanitizer (scripts/test --sanitize
// sets EG_SANITIZED=1) freed memory sits in ASan's quarantine, so RSS grows by design there and only
// the error checks apply (leaks are LeakSanitizer's job). The full load test and its numbers:
// docs/server.md "Load test".
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, get } from './server.mjs';
import { runLoad } from '../../bench/server_load.mjs';

test('load: 4 streaming clients x 10 s, no errors, RSS stable', async () => {
  const server = await startServer({ model: 'tiny-gemma3', args: ['--parallel', '4'] });
  try {
    const s = await runLoad({ url: server.url, pid: server.pid, clients: 4, seconds: 10, maxTokens: 32 });
    console.log(`# load: ${JSON.stringify(s)}`);
    assert.equal(s.errors, 0, `errors: ${JSON.stringify(s.error_samples)}`);
    assert.ok(s.requests >= 4, `only ${s.requests} requests`);
    assert.ok(s.generated_tokens > 0);
    assert.ok(s.rss_mib.middle !== null && s.rss_mib.end !== null);
    if (!process.env.EG_SANITIZED)
      assert.ok(s.rss_mib.end <= s.rss_mib.middle * 1.1 + 32, `RSS grew: ${JSON.stringify(s.rss_mib)}`);
    const h = await get(server, '/health');
    assert.equal(h.json.status, 'ok');
  } finally {
    await server.stop();
  }
});
