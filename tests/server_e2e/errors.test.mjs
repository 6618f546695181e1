// Bad requests get 4xx with an error body in each API's own shape, and the server keeps serving;
// a client that disconnects mid-stream frees its sequence (watched through /metrics).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import { startServer, postJson, sleep, MODEL_ID } from './helpers.mjs';

const KEY = 'test-key-123';
const AUTH = { authorization: `Bearer ${KEY}` };
let server;

before(async () => {
  server = await startServer(['--parallel', '2', '-c', '256', '--api-key', KEY, '--max-body', '64K']);
});

after(async () => {
  assert.equal(await server.stop(), 0);
});

const chatBody = (extra = {}) => ({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra });
const anthBody = (extra = {}) => ({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra });
const ollamaBody = (extra = {}) => ({ model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], stream: false, ...extra });

function isOpenAIError(body) {
  return typeof body?.error?.message === 'string' && typeof body.error.type === 'string';
}
function isAnthropicError(body) {
  return body?.type === 'error' && typeof body.error?.type === 'string' && typeof body.error?.message === 'string';
}
function isOllamaError(body) {
  return typeof body?.error === 'string';
}

const cases = [
  // [name, path, body, status, shape]
  ['openai malformed JSON', '/v1/chat/completions', '{"model": ', 400, isOpenAIError],
  ['openai wrong type', '/v1/chat/completions', chatBody({ max_tokens: 'ten' }), 400, isOpenAIError],
  ['openai unknown model', '/v1/chat/completions', chatBody({ model: 'gpt-17' }), 404, isOpenAIError],
  ['openai negative max_tokens', '/v1/chat/completions', chatBody({ max_tokens: -5 }), 400, isOpenAIError],
  ['openai huge max_tokens', '/v1/chat/completions', chatBody({ max_tokens: 1e9 }), 400, isOpenAIError],
  ['openai prompt over context', '/v1/completions', { model: MODEL_ID, prompt: 'word '.repeat(400) }, 400, isOpenAIError],
  [
    'openai invalid schema',
    '/v1/chat/completions',
    chatBody({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'hiccup' } } } }),
    400,
    isOpenAIError,
  ],
  ['openai deep nesting', '/v1/chat/completions', '['.repeat(5000), 400, isOpenAIError],
  ['openai body too large', '/v1/chat/completions', JSON.stringify(chatBody({ user: 'x'.repeat(100000) })), 413, isOpenAIError],
  ['openai unknown path', '/v1/nothing', chatBody(), 404, isOpenAIError],
  ['anthropic malformed JSON', '/v1/messages', '{', 400, isAnthropicError],
  ['anthropic wrong type', '/v1/messages', anthBody({ max_tokens: 'x' }), 400, isAnthropicError],
  ['anthropic missing max_tokens', '/v1/messages', anthBody({ max_tokens: undefined }), 400, isAnthropicError],
  ['anthropic unknown model', '/v1/messages', anthBody({ model: 'claude-9' }), 404, isAnthropicError],
  ['anthropic prompt over context', '/v1/messages', anthBody({ messages: [{ role: 'user', content: 'w '.repeat(400) }] }), 400, isAnthropicError],
  ['ollama malformed JSON', '/api/chat', 'nope', 400, isOllamaError],
  ['ollama wrong type', '/api/chat', ollamaBody({ options: { num_predict: 'x' } }), 400, isOllamaError],
  ['ollama unknown model', '/api/chat', ollamaBody({ model: 'llama9' }), 404, isOllamaError],
  ['ollama invalid schema', '/api/chat', ollamaBody({ format: { type: 123 } }), 400, isOllamaError],
  ['ollama prompt over context', '/api/generate', { model: MODEL_ID, prompt: 'w '.repeat(400), stream: false }, 400, isOllamaError],
  // The kv_policy / kv_budget extension fields: an unknown policy, a budget that is neither a
  // count nor a fraction, and one the engine refuses (not above the default buffer of 64).
  ['openai unknown kv_policy', '/v1/chat/completions', chatBody({ kv_policy: 'lru' }), 400, isOpenAIError],
  ['openai kv_budget 1.5', '/v1/chat/completions', chatBody({ kv_policy: 'random', kv_budget: 1.5 }), 400, isOpenAIError],
  ['openai kv_budget under the buffer', '/v1/completions', { model: MODEL_ID, prompt: 'hi', kv_policy: 'snapkv', kv_budget: 16 }, 400, isOpenAIError],
  ['anthropic kv_policy not a string', '/v1/messages', anthBody({ kv_policy: 7 }), 400, isAnthropicError],
  ['anthropic kv policy without a budget', '/v1/messages', anthBody({ kv_policy: 'h2o' }), 400, isAnthropicError],
  ['ollama unknown kv_policy', '/api/chat', ollamaBody({ kv_policy: 'lru' }), 400, isOllamaError],
  ['ollama negative kv_budget', '/api/generate', { model: MODEL_ID, prompt: 'hi', stream: false, kv_policy: 'window', kv_budget: -3 }, 400, isOllamaError],
];

test('bad requests get 4xx in the API format and the server keeps serving', async () => {
  for (const [name, path, body, status, shape] of cases) {
    const r = await postJson(server.url, path, body, AUTH);
    assert.equal(r.status, status, `${name}: ${JSON.stringify(r.body)}`);
    assert.ok(shape(r.body), `${name}: ${JSON.stringify(r.body)}`);
  }
  const ok = await postJson(server.url, '/v1/chat/completions', chatBody(), AUTH);
  assert.equal(ok.status, 200);
});

test('a per-request kv_policy runs in every API; a window wider than the trace gives the full cache\'s text', async () => {
  // With a budget above prompt + max tokens no round fires and `window` keeps every token, so the
  // text is the keep-everything text; what differs is the path (a KV state of its own).
  const greedy = { temperature: 0 };
  const kv = { kv_policy: 'window', kv_budget: 200 };
  const oa = async (extra) => (await postJson(server.url, '/v1/chat/completions', chatBody({ max_tokens: 12, ...greedy, ...extra }), AUTH));
  const an = async (extra) => (await postJson(server.url, '/v1/messages', anthBody({ max_tokens: 12, ...greedy, ...extra }), AUTH));
  const ol = async (extra) => (await postJson(server.url, '/api/chat', ollamaBody({ options: { num_predict: 12, ...greedy }, ...extra }), AUTH));
  for (const [name, call, text] of [
    ['openai', oa, (b) => b.choices[0].message.content],
    ['anthropic', an, (b) => b.content[0].text],
    ['ollama', ol, (b) => b.message.content],
  ]) {
    const plain = await call({});
    const windowed = await call(kv);
    const random = await call({ kv_policy: 'random', kv_budget: 70 });
    for (const r of [plain, windowed, random]) assert.equal(r.status, 200, `${name}: ${JSON.stringify(r.body)}`);
    assert.equal(text(windowed.body), text(plain.body), name);
  }
});

test('wrong or missing API keys get 401 in each format; x-api-key works; /health is public', async () => {
  for (const [path, body, shape] of [
    ['/v1/chat/completions', chatBody(), isOpenAIError],
    ['/v1/messages', anthBody(), isAnthropicError],
    ['/api/chat', ollamaBody(), isOllamaError],
  ]) {
    const wrong = await postJson(server.url, path, body, { authorization: 'Bearer nope' });
    assert.equal(wrong.status, 401);
    assert.ok(shape(wrong.body), JSON.stringify(wrong.body));
    const missing = await postJson(server.url, path, body);
    assert.equal(missing.status, 401);
    const viaHeader = await postJson(server.url, path, body, { 'x-api-key': KEY });
    assert.equal(viaHeader.status, 200, JSON.stringify(viaHeader.body));
  }
  assert.equal((await fetch(`${server.url}/health`)).status, 200);
  assert.equal((await fetch(`${server.url}/metrics`)).status, 401);
});

test('the official clients raise their own typed errors', async () => {
  const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 });
  await assert.rejects(
    openai.chat.completions.create({ model: 'gpt-17', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && /gpt-17/.test(e.message),
  );
  await assert.rejects(
    openai.chat.completions.create({ model: MODEL_ID, messages: [{ role: 'user', content: 'x' }], max_tokens: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400,
  );
  const badKey = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(badKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  const anthropic = new Anthropic({ baseURL: server.url, apiKey: KEY, maxRetries: 0 });
  await assert.rejects(
    anthropic.messages.create({ model: 'claude-9', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.type === 'error',
  );
  const ollama = new Ollama({ host: server.url, headers: AUTH });
  await assert.rejects(ollama.chat({ model: 'llama9', messages: [{ role: 'user', content: 'x' }] }), (e) => {
    return e.status_code === 404 && /llama9/.test(e.error);
  });
});

async function waitFor(cond, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return true;
    await sleep(50);
  }
  return false;
}

test('a client disconnecting mid-stream frees its sequence', async () => {
  const authed = (path) =>
    fetch(`${server.url}${path}`, { headers: AUTH }).then((r) => r.text());
  const running = async () => {
    const text = await authed('/metrics');
    const m = text.match(/^vllm:num_requests_running\{[^}]*\} (\S+)$/m);
    return Number(m[1]);
  };
  const cancelled = async () => Number((await authed('/metrics')).match(/^frugal:requests_cancelled_total\{[^}]*\} (\S+)$/m)[1]);
  // Requests that finished normally (stop or length; a cancelled one counts as "abort" there): on
  // a fast backend a 200-token stream can end between the check that it runs and the abort. Every
  // request must then be counted as one or the other, and none may keep its sequence (cancellation
  // itself is pinned down by the engine's C++ tests).
  const succeeded = async () =>
    [...(await authed('/metrics')).matchAll(/^vllm:request_success_total\{[^}]*finished_reason="(?:stop|length)"\} (\S+)$/gm)].reduce((a, m) => a + Number(m[1]), 0);
  const before = await cancelled();
  const beforeOk = await succeeded();
  for (const [path, body] of [
    ['/v1/chat/completions', chatBody({ max_tokens: 200, ignore_eos: true, stream: true })],
    ['/v1/messages', anthBody({ max_tokens: 200, ignore_eos: true, stream: true })],
    ['/api/chat', ollamaBody({ stream: true, ignore_eos: true, options: { num_predict: 200 } })],
  ]) {
    const ac = new AbortController();
    const res = await fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...AUTH },
      body: JSON.stringify(body),
      signal: ac.signal,
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    const first = await reader.read();  // the stream has begun: the request ran
    assert.ok(!first.done && first.value.length > 0, `${path}: the stream sent nothing`);
    ac.abort();
    assert.ok(await waitFor(async () => (await running()) === 0, 10000), `${path}: the sequence was not freed`);
  }
  const cut = (await cancelled()) - before;
  assert.equal(cut + (await succeeded()) - beforeOk, 3, 'every aborted stream is counted once, as cancelled or finished');
  const usage = await authed('/metrics');
  assert.match(usage, /^vllm:kv_cache_usage_perc\{[^}]*\} 0$/m);
  const ok = await postJson(server.url, '/v1/chat/completions', chatBody(), AUTH);
  assert.equal(ok.status, 200);
});

test('tokenize and detokenize round-trip', async () => {
  const t = await postJson(server.url, '/tokenize', { content: 'hello world' }, AUTH);
  assert.equal(t.status, 200);
  assert.ok(t.body.tokens.length > 0);
  const d = await postJson(server.url, '/detokenize', { tokens: t.body.tokens }, AUTH);
  assert.equal(d.body.content.trim(), 'hello world');
  const bad = await postJson(server.url, '/detokenize', { tokens: [-1] }, AUTH);
  assert.equal(bad.status, 400);
});
