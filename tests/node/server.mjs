// Test helper: starts `edgegemma serve` on a free loopback port and stops it.
//
// The binary comes from EG_CLI_PATH (set by CTest to $<TARGET_FILE:edgegemma>), else build/edgegemma
// in the repository; fixtures from EG_SHARED_DIR, else ../shared next to the repository (read only).
// The server prints exactly one line "edgegemma serve: listening on http://HOST:PORT" on stdout
// when it is ready; its stderr (logs) is kept and shown when something fails.
import { spawn } from 'node:child_process';
import { readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
export const cliPath = process.env.EG_CLI_PATH || path.join(repoRoot, 'build', 'edgegemma');
export const sharedDir = process.env.EG_SHARED_DIR || path.resolve(repoRoot, '..', 'shared');

/// A fixture path under the shared folder (never written).
export function shared(...parts) {
  return path.join(sharedDir, ...parts);
}

const running = new Set();
process.on('exit', () => {
  for (const p of running) p.kill('SIGKILL');
});

/// Starts `edgegemma serve -m MODEL --host 127.0.0.1 --port 0 ...args`.
/// model: a folder name under shared/models (e.g. "tiny-gemma3") or a path.
/// Resolves to {url, baseURL, pid, proc, stderr(), stop()} once the listening line is printed;
/// rejects (with the server's stderr) when it exits first or is not ready in `readyTimeoutMs`.
export async function startServer({ model = 'tiny-gemma3', args = [], readyTimeoutMs = 120000 } = {}) {
  if (!existsSync(cliPath)) throw new Error(`edgegemma binary not found: ${cliPath} (set EG_CLI_PATH)`);
  const modelPath = model.includes('/') ? model : shared('models', model);
  const argv = ['serve', '-m', modelPath, '--host', '127.0.0.1', '--port', '0', ...args];
  const proc = spawn(cliPath, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(proc);
  let stderr = '';
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => {
    stderr += d;
    if (stderr.length > 200000) stderr = stderr.slice(-100000);
  });
  let stopping = false;
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => {
    running.delete(proc);
    if (!stopping) {
      // Not asked to stop: a crash. Show why (the tests then fail on connection errors).
      console.error(`# edgegemma serve (pid ${proc.pid}) exited unexpectedly: code ${code}, signal ${signal}\n` +
                    `# stderr tail:\n${stderr.slice(-3000)}`);
    }
    resolve({ code, signal });
  }));

  const url = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      stopping = true;
      reject(new Error(`server not ready after ${readyTimeoutMs} ms: ${argv.join(' ')}\nstderr:\n${stderr.slice(-4000)}`));
      proc.kill('SIGKILL');
    }, readyTimeoutMs);
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^edgegemma serve: listening on (http:\/\/\S+)\n/m);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`server exited (code ${code}, signal ${signal}) before listening: ${argv.join(' ')}\nstderr:\n${stderr.slice(-4000)}`));
    });
  });

  return {
    url,
    baseURL: url + '/v1',
    pid: proc.pid,
    proc,
    exited,
    stderr: () => stderr,
    /// SIGTERM, then SIGKILL after `graceMs`; resolves to {code, signal}.
    async stop(graceMs = 15000) {
      if (proc.exitCode !== null || proc.signalCode !== null) return exited;
      stopping = true;
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
      const r = await exited;
      clearTimeout(timer);
      return r;
    },
  };
}

/// POST JSON (or a raw string / Buffer body) with fetch; resolves to {status, headers, text, json}.
export async function post(server, route, body, headers = {}) {
  const res = await fetch(server.url + route, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, headers: res.headers, text, json };
}

export async function get(server, route, headers = {}) {
  const res = await fetch(server.url + route, { headers });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, headers: res.headers, text, json };
}

/// Resident set size of a process in KiB (VmRSS of /proc/PID/status).
export function rssKiB(pid) {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+)\s+kB/m);
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
