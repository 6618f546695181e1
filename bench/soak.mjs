#!/usr/bin/env node
// Soak test of `frugal serve`: many concurrent clients for a fixed time, a mix of valid,
// malformed and disconnecting requests over the three APIs, with the server's memory sampled.
//
//   node bench/soak.mjs --model M.gguf [--bin build/bin/frugal] [--clients 256] [--duration 600]
//        [--parallel 8] [--threads 0] [--seed 1] [--out soak.json]
//
// Each client loops until the time is up, picking a request kind with fixed weights (seeded):
//   valid (55%):       a streaming or plain chat request through OpenAI, Anthropic or Ollama;
//                      any status but 200, a broken stream or a missing end is an error
//   malformed (30%):   bad JSON, wrong field types, an unknown model, negative max_tokens, an
//                      oversized body, a bad path; anything but a 4xx answer is an error
//   disconnect (15%):  a streaming request aborted after its first chunk; the server must
//                      answer the next request normally (checked by the valid ones)
// At the end: requests and errors by kind, the server's RSS every 10 s, and that the server is
// still healthy with no running request and an empty KV cache. Exit status 1 on any error.
// Only 127.0.0.1 is contacted; every loop is bounded by the duration.
import fs from 'node:fs';

import { startServe } from './serve_process.mjs';

function parseArgs(argv) {
  const a = { bin: 'build/bin/frugal', model: '', clients: 256, duration: 600, parallel: 8, threads: 0, seed: 1, out: '' };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = argv[++i];
    if (k === '--bin') a.bin = v;
    else if (k === '--model') a.model = v;
    else if (k === '--clients') a.clients = Number(v);
    else if (k === '--duration') a.duration = Number(v);
    else if (k === '--parallel') a.parallel = Number(v);
    else if (k === '--threads') a.threads = Number(v);
    else if (k === '--seed') a.seed = Number(v);
    else if (k === '--out') a.out = v;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.model) throw new Error('--model PATH is required');
  return a;
}

// mulberry32: a small seeded generator, so a run's mix of requests can be repeated.
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function startServer(a) {
  const args = ['-m', a.model, '--alias', 'soak', '--parallel', String(a.parallel), '--max-queue', String(a.clients * 2),
    '--queue-timeout', String(a.duration + 120), '--max-body', '1MiB'];
  if (a.threads > 0) args.push('-t', String(a.threads));
  return startServe(a.bin, args, 120000);
}

const apis = {
  openai: (stream, n) => ['/v1/chat/completions',
    { model: 'soak', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: n, stream }],
  anthropic: (stream, n) => ['/v1/messages',
    { model: 'soak', max_tokens: n, messages: [{ role: 'user', content: 'Tell me a story' }], stream }],
  ollama: (stream, n) => ['/api/chat',
    { model: 'soak', messages: [{ role: 'user', content: 'Tell me a story' }], stream, options: { num_predict: n } }],
};

// The body of a streaming response read to its end; checks that the API's end marker arrived.
async function drain(res, api) {
  const text = await res.text();
  if (api === 'openai' && !text.includes('data: [DONE]')) throw new Error('stream without [DONE]');
  if (api === 'anthropic' && !text.includes('message_stop')) throw new Error('stream without message_stop');
  if (api === 'ollama' && !/"done":\s*true/.test(text)) throw new Error('stream without done:true');
  if (/"error"/.test(text) && api !== 'ollama') throw new Error(`error in stream: ${text.slice(0, 200)}`);
}

async function valid(url, r) {
  const api = ['openai', 'anthropic', 'ollama'][Math.floor(r() * 3)];
  const stream = r() < 0.6;
  const [path, body] = apis[api](stream, 4 + Math.floor(r() * 12));
  const res = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body), signal: AbortSignal.timeout(300000) });
  if (res.status !== 200) throw new Error(`${api}: HTTP ${res.status} ${(await res.text()).slice(0, 200)}`);
  if (stream) await drain(res, api);
  else JSON.parse(await res.text());
  return `valid_${api}_${stream ? 'stream' : 'plain'}`;
}

async function malformed(url, r) {
  const cases = [
    ['bad_json', '/v1/chat/completions', '{"model": "soak", "messages": [', 'application/json'],
    ['wrong_types', '/v1/chat/completions', JSON.stringify({ model: 'soak', messages: 'hello', max_tokens: 'x' })],
    ['unknown_model', '/v1/messages', JSON.stringify({ model: 'nope', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] })],
    ['negative_max_tokens', '/v1/chat/completions', JSON.stringify({ model: 'soak', messages: [{ role: 'user', content: 'x' }], max_tokens: -5 })],
    ['oversized_body', '/api/generate', JSON.stringify({ model: 'soak', prompt: 'x'.repeat(2 << 20) })],
    ['bad_path', '/v1/nothing-here', '{}'],
    ['empty_messages', '/api/chat', JSON.stringify({ model: 'soak', messages: [] })],
  ];
  const [kind, path, body] = cases[Math.floor(r() * cases.length)];
  const res = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body,
    signal: AbortSignal.timeout(60000) });
  await res.text();
  if (res.status < 400 || res.status >= 500) throw new Error(`${kind}: HTTP ${res.status}, expected 4xx`);
  return `malformed_${kind}`;
}

async function disconnect(url, r) {
  const api = ['openai', 'anthropic', 'ollama'][Math.floor(r() * 3)];
  const [path, body] = apis[api](true, 200);
  const ac = new AbortController();
  const res = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body), signal: ac.signal });
  if (res.status !== 200) throw new Error(`${api}: HTTP ${res.status}`);
  const reader = res.body.getReader();
  await reader.read();
  ac.abort();
  return `disconnect_${api}`;
}

async function main() {
  const a = parseArgs(process.argv);
  const server = await startServer(a);
  const t0 = Date.now();
  const end = t0 + a.duration * 1000;
  const counts = {};
  const errors = {};
  const examples = {};
  const rss = [{ t: 0, bytes: server.rssBytes() }];
  const sampler = setInterval(() => rss.push({ t: Math.round((Date.now() - t0) / 1000), bytes: server.rssBytes() }), 10000);
  const client = async (id) => {
    const r = rng(a.seed * 100003 + id);
    while (Date.now() < end) {
      const p = r();
      const kind = p < 0.55 ? valid : p < 0.85 ? malformed : disconnect;
      let label = kind.name;
      try {
        label = await kind(server.url, r);
        counts[label] = (counts[label] ?? 0) + 1;
      } catch (e) {
        if (kind === disconnect && e.name === 'AbortError') {
          counts[`disconnect`] = (counts.disconnect ?? 0) + 1;
          continue;
        }
        errors[label] = (errors[label] ?? 0) + 1;
        examples[label] ??= String(e.message ?? e).slice(0, 300);
      }
    }
  };
  await Promise.all(Array.from({ length: a.clients }, (_, i) => client(i)));
  clearInterval(sampler);
  rss.push({ t: Math.round((Date.now() - t0) / 1000), bytes: server.rssBytes() });
  // After the storm: healthy, nothing running, the KV cache empty.
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  const health = (await fetch(`${server.url}/health`)).status;
  const running = Number(metrics.match(/^vllm:num_requests_running\{[^}]*\} (\S+)$/m)?.[1] ?? NaN);
  const kv = Number(metrics.match(/^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)$/m)?.[1] ?? NaN);
  await server.stop();
  const total = Object.values(counts).reduce((x, y) => x + y, 0);
  const nerr = Object.values(errors).reduce((x, y) => x + y, 0);
  const result = { clients: a.clients, duration_s: a.duration, parallel: a.parallel, requests: total, errors: nerr,
    counts, error_kinds: errors, error_examples: examples, rss, end_state: { health, running, kv_cache_usage: kv } };
  if (a.out) fs.writeFileSync(a.out, JSON.stringify(result, null, 2));
  console.log(`| kind | requests | errors |\n|---|---:|---:|`);
  for (const k of [...new Set([...Object.keys(counts), ...Object.keys(errors)])].sort()) {
    console.log(`| ${k} | ${counts[k] ?? 0} | ${errors[k] ?? 0} |`);
  }
  console.log(`\nRSS (MiB) by time (s): ${rss.map((x) => `${x.t}:${(x.bytes / 1048576).toFixed(0)}`).join(' ')}`);
  console.log(`end: health ${health}, running ${running}, kv usage ${kv}; ${total} requests, ${nerr} errors`);
  for (const [k, v] of Object.entries(examples)) console.log(`first ${k} error: ${v}`);
  process.exit(nerr === 0 && health === 200 && running === 0 && kv === 0 ? 0 : 1);
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
