// The official `@anthropic-ai/sdk` and `ollama` npm clients against a real `frugal serve`:
// messages (plain and streamed, named events), count_tokens, Ollama chat/generate (NDJSON),
// tags and show; greedy output equal to `frugal run`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import { startServer, frugalRun, MODEL_ID } from './helpers.mjs';

const N = 20;
let server;
let anthropic;
let ollama;

before(async () => {
  server = await startServer(['--parallel', '2']);
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
  ollama = new Ollama({ host: server.url });
});

after(async () => {
  assert.equal(await server.stop(), 0);
});

test('anthropic messages: greedy text equals frugal run --chat', async () => {
  const prompt = 'Hello there';
  const ref = frugalRun({ prompt, n: N, chat: true });
  const msg = await anthropic.messages.create({
    model: MODEL_ID,
    max_tokens: N,
    temperature: 0,
    messages: [{ role: 'user', content: prompt }],
  });
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.content[0].type, 'text');
  assert.equal(msg.content[0].text, ref.text);
  assert.equal(msg.usage.output_tokens, ref.tokens.length);
  assert.equal(msg.usage.input_tokens, ref.prompt_tokens.length);
  assert.equal(msg.stop_reason, ref.stop_reason === 'length' ? 'max_tokens' : 'end_turn');
});

test('anthropic streaming: the named events in order, same text', async () => {
  const prompt = 'Hello there';
  const ref = frugalRun({ prompt, n: N, chat: true });
  const stream = await anthropic.messages.create({
    model: MODEL_ID,
    max_tokens: N,
    temperature: 0,
    messages: [{ role: 'user', content: prompt }],
    stream: true,
  });
  const types = [];
  let text = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta') text += ev.delta.text;
    if (ev.type === 'message_delta') assert.equal(ev.usage.output_tokens, ref.tokens.length);
  }
  const distinct = types.filter((t, i) => t !== types[i - 1]);
  assert.deepEqual(distinct.filter((t) => t !== 'ping'), [
    'message_start',
    'content_block_start',
    ...(types.includes('content_block_delta') ? ['content_block_delta'] : []),
    'content_block_stop',
    'message_delta',
    'message_stop',
  ]);
  assert.equal(text, ref.text);
  // The SDK's helper assembles the same message.
  const final = await anthropic.messages
    .stream({ model: MODEL_ID, max_tokens: N, temperature: 0, messages: [{ role: 'user', content: prompt }] })
    .finalMessage();
  assert.equal(final.content[0].text, ref.text);
});

test('anthropic count_tokens counts the rendered prompt', async () => {
  const prompt = 'Hello there';
  const ref = frugalRun({ prompt, n: 1, chat: true });
  const r = await anthropic.messages.countTokens({ model: MODEL_ID, messages: [{ role: 'user', content: prompt }] });
  assert.equal(r.input_tokens, ref.prompt_tokens.length);
});

test('ollama chat and generate: greedy text equals frugal run', async () => {
  const prompt = 'Why is the sky blue?';
  const ref = frugalRun({ prompt, n: N, chat: true });
  const chat = await ollama.chat({
    model: MODEL_ID,
    messages: [{ role: 'user', content: prompt }],
    stream: false,
    options: { temperature: 0, num_predict: N },
  });
  assert.equal(chat.message.role, 'assistant');
  assert.equal(chat.message.content, ref.text);
  assert.equal(chat.eval_count, ref.tokens.length);
  assert.equal(chat.done, true);
  const gen = await ollama.generate({ model: MODEL_ID, prompt, stream: false, options: { temperature: 0, num_predict: N } });
  assert.equal(gen.response, ref.text);
  const raw = frugalRun({ prompt, n: N });
  const genRaw = await ollama.generate({
    model: MODEL_ID,
    prompt,
    raw: true,
    stream: false,
    options: { temperature: 0, num_predict: N },
  });
  assert.equal(genRaw.response, raw.text);
  assert.deepEqual(genRaw.context, [...raw.prompt_tokens, ...raw.tokens]);
});

test('ollama streaming (NDJSON) gives the same text and a final done part', async () => {
  const prompt = 'Why is the sky blue?';
  const ref = frugalRun({ prompt, n: N, chat: true });
  const parts = [];
  for await (const part of await ollama.chat({
    model: MODEL_ID,
    messages: [{ role: 'user', content: prompt }],
    stream: true,
    options: { temperature: 0, num_predict: N },
  })) {
    parts.push(part);
  }
  assert.equal(parts.map((p) => p.message.content).join(''), ref.text);
  const last = parts.at(-1);
  assert.equal(last.done, true);
  assert.ok(['stop', 'length'].includes(last.done_reason));
  assert.ok(last.eval_duration >= 0 && last.total_duration > 0);
  let genText = '';
  for await (const part of await ollama.generate({ model: MODEL_ID, prompt, stream: true, options: { temperature: 0, num_predict: N } })) {
    genText += part.response;
  }
  assert.equal(genText, ref.text);
});

test('ollama tags and show describe the model', async () => {
  const tags = await ollama.list();
  assert.equal(tags.models.length, 1);
  assert.equal(tags.models[0].name, `${MODEL_ID}:latest`);
  assert.equal(tags.models[0].details.format, 'gguf');
  const show = await ollama.show({ model: MODEL_ID });
  assert.equal(show.model_info['general.architecture'], 'llama');
  assert.ok(show.template.includes('<|im_start|>'));
});
