// The official `openai` npm client against a real `frugal serve`: chat, completions, streaming
// with usage, n, seeds, logprobs, structured output; greedy output equal to `frugal run`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, frugalRun, pieces, MODEL_ID } from './helpers.mjs';

const N = 24;
let server;
let client;
let logFile;

before(async () => {
  logFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'frugal-e2e-')), 'requests.jsonl');
  server = await startServer(['--parallel', '4', '--log-requests', logFile]);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  assert.equal(await server.stop(), 0);
});

test('models.list names the served model', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [MODEL_ID]);
});

test('greedy chat equals frugal run --chat token for token', async () => {
  for (const prompt of ['Tell me a story', 'What is 2+2?']) {
    const ref = frugalRun({ prompt, n: N, chat: true });
    const res = await client.chat.completions.create({
      model: MODEL_ID,
      messages: [{ role: 'user', content: prompt }],
      max_completion_tokens: N,
      temperature: 0,
      logprobs: true,
    });
    const choice = res.choices[0];
    assert.equal(choice.message.role, 'assistant');
    assert.equal(choice.message.content, ref.text);
    assert.equal(res.usage.completion_tokens, ref.tokens.length);
    assert.equal(res.usage.prompt_tokens, ref.prompt_tokens.length);
    const got = choice.logprobs.content.map((c) => Buffer.from(c.bytes));
    assert.deepEqual(got, await pieces(server.url, ref.tokens));
    assert.equal(choice.finish_reason, ref.stop_reason === 'length' ? 'length' : 'stop');
  }
});

test('greedy completion equals frugal run token for token', async () => {
  const prompt = 'Once upon a time';
  const ref = frugalRun({ prompt, n: N });
  const res = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: N, temperature: 0, logprobs: 0 });
  assert.equal(res.choices[0].text, ref.text);
  assert.equal(res.usage.completion_tokens, ref.tokens.length);
  const got = res.choices[0].logprobs.tokens.length;
  assert.equal(got, ref.tokens.length);
});

test('chat streaming: role first, one id, finish chunk, usage chunk, same text', async () => {
  const prompt = 'Stream this';
  const ref = frugalRun({ prompt, n: N, chat: true });
  const stream = await client.chat.completions.create({
    model: MODEL_ID,
    messages: [{ role: 'user', content: prompt }],
    max_tokens: N,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 3);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.ok(chunks.slice(1).every((c) => c.choices.every((ch) => ch.delta.role === undefined)));
  assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
  assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, ref.tokens.length);
  const finish = chunks.at(-2).choices[0];
  assert.ok(['stop', 'length'].includes(finish.finish_reason));
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(text, ref.text);
});

test('completion streaming gives the same text', async () => {
  const prompt = 'The sky';
  const ref = frugalRun({ prompt, n: N });
  const stream = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: N, temperature: 0, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, ref.text);
});

test('n choices with a seed are reproducible and distinct per choice', async () => {
  const req = {
    model: MODEL_ID,
    messages: [{ role: 'user', content: 'Pick words' }],
    max_tokens: 12,
    temperature: 1.0,
    n: 3,
    seed: 1234,
  };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  assert.ok(new Set(a.choices.map((c) => c.message.content)).size > 1);
});

test('stop strings end the text before them', async () => {
  const prompt = 'Count';
  const ref = frugalRun({ prompt, n: N, chat: true });
  assert.ok(ref.text.length >= 6, 'reference text too short to cut');
  const stop = ref.text.slice(4, 6);
  const res = await client.chat.completions.create({
    model: MODEL_ID,
    messages: [{ role: 'user', content: prompt }],
    max_tokens: N,
    temperature: 0,
    stop: [stop],
  });
  assert.equal(res.choices[0].message.content, ref.text.slice(0, ref.text.indexOf(stop)));
  assert.equal(res.choices[0].finish_reason, 'stop');
});

test('top_logprobs are sorted and contain the greedy token first', async () => {
  const res = await client.chat.completions.create({
    model: MODEL_ID,
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 5,
    temperature: 0,
    logprobs: true,
    top_logprobs: 3,
  });
  for (const t of res.choices[0].logprobs.content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    assert.ok(t.logprob <= 0);
  }
});

test('response_format json_schema yields JSON that fits the schema', async () => {
  const res = await client.chat.completions.create({
    model: MODEL_ID,
    messages: [{ role: 'user', content: 'Give me JSON' }],
    max_tokens: 200,
    temperature: 0.7,
    seed: 7,
    response_format: {
      type: 'json_schema',
      json_schema: {
        name: 'answer',
        schema: {
          type: 'object',
          properties: { ok: { type: 'boolean' }, color: { enum: ['red', 'blue'] }, count: { type: 'integer' } },
          required: ['ok', 'color', 'count'],
        },
      },
    },
  });
  const obj = JSON.parse(res.choices[0].message.content);
  assert.equal(typeof obj.ok, 'boolean');
  assert.ok(['red', 'blue'].includes(obj.color));
  assert.ok(Number.isInteger(obj.count));
  const any = await client.chat.completions.create({
    model: MODEL_ID,
    messages: [{ role: 'user', content: 'JSON please' }],
    max_tokens: 200,
    temperature: 0,
    response_format: { type: 'json_object' },
  });
  if (any.choices[0].finish_reason === 'stop') {
    assert.equal(typeof JSON.parse(any.choices[0].message.content), 'object');
  } else {
    assert.ok(any.choices[0].message.content.startsWith('{'));
  }
});

test('the request log has one line per request with the run --json timing schema', async () => {
  const lines = fs.readFileSync(logFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.ok(lines.length >= 5);
  const ref = frugalRun({ prompt: 'schema', n: 2 });
  for (const l of lines) {
    // One schema: the same keys as `frugal run --json`.
    assert.deepEqual(Object.keys(l.timings).sort(), Object.keys(ref.timings).sort());
    for (const key of ['queue_ms', 'ttft_ms', 'tpot_ms', 'total_ms']) assert.ok(key in l.timings);
    assert.ok(l.prompt_tokens > 0);
    assert.equal(l.api, 'openai');
  }
});
