// Starting and stopping a real `frugal serve`, running `frugal run`, and small HTTP helpers for the
// end-to-end tests. Paths come from the environment run.sh sets: FRUGAL_BIN, FRUGAL_MODEL.
// FRUGAL_EXTRA_ARGS (e.g. "--device cuda") is added to every `serve` and `run` the tests start, so
// the same tests check another backend, with the reference run on that backend too.
import { spawn, execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';

export const FRUGAL_BIN = process.env.FRUGAL_BIN ?? 'build/bin/frugal';
export const MODEL = process.env.FRUGAL_MODEL;
export const MODEL_ID = 'tiny';
const EXTRA_ARGS = (process.env.FRUGAL_EXTRA_ARGS ?? '').split(/\s+/).filter(Boolean);
if (!MODEL) throw new Error('FRUGAL_MODEL is not set (run tests/server_e2e/run.sh)');

// Starts the server on a free loopback port; resolves once it answers /health.
export async function startServer(extraArgs = []) {
  const args = ['serve', '-m', MODEL, '--alias', MODEL_ID, '--port', '0', '-t', '2', ...EXTRA_ARGS, ...extraArgs];
  const proc = spawn(FRUGAL_BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${stderr}`)), 60000);
    proc.stderr.on('data', (d) => {
      stderr += d.toString();
      const m = stderr.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${stderr}`));
    });
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.ok) break;
    } catch {}
    await sleep(50);
  }
  return {
    proc,
    url,
    port,
    stderr: () => stderr,
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      const done = new Promise((resolve) => proc.on('exit', (code, sig) => resolve(code ?? sig)));
      proc.kill('SIGTERM');
      return done;
    },
  };
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

// `frugal run --json` with greedy decoding: the reference every API must match token for token.
export function frugalRun({ prompt, n, chat = false }) {
  const args = ['run', '-m', MODEL, '-p', prompt, '-n', String(n), '--temp', '0', '--json', '-t', '2'];
  if (chat) args.push('--chat');
  args.push(...EXTRA_ARGS);
  return JSON.parse(execFileSync(FRUGAL_BIN, args, { encoding: 'utf8' }));
}

// Token pieces (bytes) of token ids, through the server's /detokenize.
export async function pieces(url, tokens) {
  const r = await postJson(url, '/detokenize', { tokens, with_pieces: true });
  assert.equal(r.status, 200);
  return r.body.pieces.map((p) => Buffer.from(p.bytes));
}

export async function postJson(url, path, body, headers = {}) {
  const r = await fetch(url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = text;
  }
  return { status: r.status, body: parsed, headers: r.headers };
}

// One sample of a Prometheus metric (first line whose name matches), as a number.
export async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = line.match(/^([^{\s]+)(\{[^}]*\})?\s+(\S+)$/);
    if (m && m[1] === name) return Number(m[3]);
  }
  return undefined;
}
