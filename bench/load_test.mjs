#!/usr/bin/env node
// Bounded loopback load test of `frugal serve`.
//
//   node bench/load_test.mjs --model M.gguf [--bin build/bin/frugal] [--clients 64] [--requests 20]
//        [--parallel 8] [--max-tokens 16] [--throughput-tokens 64] [--threads 0] [--out result.json]
//
// Phase 1 (stress): one server with --parallel P; C concurrent streaming clients each send R chat
// requests back to back. Counts errors, checks every stream ends properly, samples the server's
// resident memory, and reports client-side TTFT / TPOT / ITL with vLLM's benchmark names.
// Phase 2 (throughput): the same fixed workload (8 concurrent streams, --throughput-tokens each,
// EOS ignored) against a server with --parallel 1 and one with --parallel 8; aggregate output
// tokens per second of each and their ratio.
// Only 127.0.0.1 is contacted; every loop is bounded in count and time.
import fs from 'node:fs';

import { startServe } from './serve_process.mjs';

function parseArgs(argv) {
  const a = {
    bin: 'build/bin/frugal',
    model: '',
    clients: 64,
    requests: 20,
    parallel: 8,
    maxTokens: 16,
    throughputTokens: 64,
    throughputStreams: 8,
    threads: 0,
    ctx: 512,
    out: '',
    skipThroughput: false,
    skipStress: false,
    timeoutS: 1800,
  };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = argv[i + 1];
    const num = () => {
      i++;
      return Number(v);
    };
    if (k === '--bin') (a.bin = v), i++;
    else if (k === '--model') (a.model = v), i++;
    else if (k === '--clients') a.clients = num();
    else if (k === '--requests') a.requests = num();
    else if (k === '--parallel') a.parallel = num();
    else if (k === '--max-tokens') a.maxTokens = num();
    else if (k === '--throughput-tokens') a.throughputTokens = num();
    else if (k === '--throughput-streams') a.throughputStreams = num();
    else if (k === '--threads') a.threads = num();
    else if (k === '--ctx') a.ctx = num();
    else if (k === '--timeout') a.timeoutS = num();
    else if (k === '--out') (a.out = v), i++;
    else if (k === '--skip-throughput') a.skipThroughput = true;
    else if (k === '--skip-stress') a.skipStress = true;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.model) throw new Error('--model PATH is required');
  return a;
}

function startServer(a, parallel) {
  const args = ['-m', a.model, '--alias', 'bench', '--parallel', String(parallel), '-c', String(a.ctx),
    '--max-queue', String(a.clients * 2), '--queue-timeout', String(a.timeoutS)];
  if (a.threads > 0) args.push('-t', String(a.threads));
  return startServe(a.bin, args);
}

// One streaming chat request; resolves with client-side timings or throws on any protocol error.
async function streamChat(url, body, deadline) {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal: AbortSignal.timeout(Math.max(1000, deadline - Date.now())),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buf = '';
  let first = 0;
  let last = 0;
  const gaps = [];
  let usage = null;
  let done = false;
  let finish = null;
  for await (const part of res.body) {
    buf += decoder.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!event.startsWith('data: ')) continue;
      const data = event.slice(6);
      if (data === '[DONE]') {
        done = true;
        continue;
      }
      const j = JSON.parse(data);
      if (j.error) throw new Error(`stream error: ${j.error.message}`);
      if (j.usage) usage = j.usage;
      const ch = j.choices?.[0];
      if (ch?.finish_reason) finish = ch.finish_reason;
      if (ch?.delta?.content) {
        const now = performance.now();
        if (!first) first = now;
        else gaps.push(now - last);
        last = now;
      }
    }
  }
  if (!done) throw new Error('stream ended without [DONE]');
  if (!usage) throw new Error('stream had no usage chunk');
  if (!finish) throw new Error('stream had no finish_reason');
  const end = performance.now();
  const n = usage.completion_tokens;
  return {
    ttft: first ? first - t0 : end - t0,
    tpot: n > 1 && first ? (end - first) / (n - 1) : 0,
    gaps,
    tokens: n,
    latency: end - t0,
  };
}

function pct(xs, p) {
  if (!xs.length) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}
const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

async function stress(a) {
  const server = await startServer(a, a.parallel);
  const deadline = Date.now() + a.timeoutS * 1000;
  const rss = [];
  const sampler = setInterval(() => rss.push([Date.now(), server.rssBytes()]), 250);
  const results = [];
  const errors = [];
  const t0 = performance.now();
  const client = async (c) => {
    for (let r = 0; r < a.requests && Date.now() < deadline; r++) {
      try {
        results.push(
          await streamChat(server.url, {
            model: 'bench',
            messages: [{ role: 'user', content: `client ${c} request ${r}: tell me something` }],
            max_tokens: a.maxTokens,
            temperature: 0.8,
            seed: c * 1000 + r,
          }, deadline),
        );
      } catch (e) {
        errors.push(String(e.message ?? e));
      }
    }
  };
  await Promise.all(Array.from({ length: a.clients }, (_, c) => client(c)));
  const wall = (performance.now() - t0) / 1000;
  clearInterval(sampler);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  await server.stop();
  // Memory is "flat" when the peak after the first tenth of the run is within 5% (or 8 MiB) of the
  // level reached by then: steady state must not keep growing with the number of requests served.
  const tenth = rss[Math.floor(rss.length / 10)]?.[1] ?? 0;
  const late = rss.slice(Math.floor(rss.length / 10)).map((x) => x[1]);
  const peak = Math.max(0, ...late);
  const growth = peak - tenth;
  const tokens = results.reduce((s, r) => s + r.tokens, 0);
  return {
    clients: a.clients,
    requests_per_client: a.requests,
    parallel: a.parallel,
    completed: results.length,
    errors: errors.length,
    error_samples: errors.slice(0, 5),
    duration_s: wall,
    request_throughput: results.length / wall,
    output_throughput: tokens / wall,
    mean_ttft_ms: mean(results.map((r) => r.ttft)),
    median_ttft_ms: pct(results.map((r) => r.ttft), 50),
    p99_ttft_ms: pct(results.map((r) => r.ttft), 99),
    mean_tpot_ms: mean(results.map((r) => r.tpot).filter((x) => x > 0)),
    mean_itl_ms: mean(results.flatMap((r) => r.gaps)),
    rss_after_first_tenth_bytes: tenth,
    rss_peak_after_first_tenth_bytes: peak,
    rss_growth_bytes: growth,
    memory_flat: growth <= Math.max(8 << 20, 0.05 * tenth),
    server_requests_success: (metrics.match(/^vllm:request_success_total\{[^}]*finished_reason="(stop|length)"\} (\d+)/gm) || [])
      .map((l) => Number(l.split(' ').pop()))
      .reduce((x, y) => x + y, 0),
  };
}

async function throughput(a, parallel) {
  const server = await startServer(a, parallel);
  const deadline = Date.now() + a.timeoutS * 1000;
  const body = (i) => ({
    model: 'bench',
    messages: [{ role: 'user', content: `stream ${i}` }],
    max_tokens: a.throughputTokens,
    temperature: 0,
    ignore_eos: true,
  });
  await streamChat(server.url, body(-1), deadline);  // warm up
  const t0 = performance.now();
  const rs = await Promise.all(Array.from({ length: a.throughputStreams }, (_, i) => streamChat(server.url, body(i), deadline)));
  const wall = (performance.now() - t0) / 1000;
  await server.stop();
  const tokens = rs.reduce((s, r) => s + r.tokens, 0);
  return { parallel, streams: a.throughputStreams, tokens, duration_s: wall, output_throughput: tokens / wall };
}

async function main() {
  const a = parseArgs(process.argv);
  const out = { model: a.model, date: new Date().toISOString() };
  if (!a.skipStress) {
    out.stress = await stress(a);
    console.log('stress:', JSON.stringify(out.stress, null, 1));
  }
  if (!a.skipThroughput) {
    const one = await throughput(a, 1);
    const eight = await throughput(a, 8);
    out.throughput = { one, eight, speedup: eight.output_throughput / one.output_throughput };
    console.log('throughput:', JSON.stringify(out.throughput, null, 1));
  }
  if (a.out) fs.writeFileSync(a.out, JSON.stringify(out, null, 1) + '\n');
  const failed = (out.stress && (out.stress.errors > 0 || !out.stress.memory_flat ||
    out.stress.completed !== a.clients * a.requests));
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
