// tests/e2e/openai_sdk.mjs - the official `openai` npm package (pinned in
// package.json) against the real daemon: chat and completions, streaming and
// not, stop strings, n = 2, logprobs, usage, and the SDK's error classes.
//
// Usage: node openai_sdk.mjs GRAPHSERVE_BINARY SHARED_DIR
import { readFileSync } from 'node:fs';
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startDaemon as spawnDaemon, stopDaemon } from './daemon.mjs';

const [bin, shared] = process.argv.slice(2);
assert.ok(bin && shared, 'usage: node openai_sdk.mjs GRAPHSERVE_BINARY SHARED_DIR');
const model = `${shared}/models/stories260K.gguf`;
const startDaemon = (extra = []) => spawnDaemon(bin, ['-m', model, ...extra]);
const golden = (name) => JSON.parse(readFileSync(`${shared}/golden/server/${name}`, 'utf8'));

let d, client;
before(async () => {
  d = await startDaemon();
  client = new OpenAI({ baseURL: `${d.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  await stopDaemon(d);
});

test('models.list names the served model', async () => {
  const page = await client.models.list();
  assert.deepEqual(page.data.map((m) => m.id), ['stories260K']);
  const one = await client.models.retrieve('stories260K');
  assert.equal(one.id, 'stories260K');
  await assert.rejects(client.models.retrieve('gpt-4o'), (e) => e instanceof OpenAI.NotFoundError);
});

test('completions: greedy text equals llama.cpp, with usage', async () => {
  const r = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 64, temperature: 0,
  });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, golden('v1_completions__once-upon-a-time__temp0.json').choices[0].text);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.deepEqual([r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens], [5, 64, 69]);
});

test('completions: stop string', async () => {
  const r = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 64, temperature: 0, stop: ['Lily'],
  });
  assert.equal(r.choices[0].text, golden('v1_completions__stop.json').choices[0].text);
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('completions: streaming with n = 2 and usage', async () => {
  const stream = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 12, temperature: 0, n: 2,
    stream: true, stream_options: { include_usage: true },
  });
  const text = ['', ''], finish = [null, null];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text[c.index] += c.text;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  const whole = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 12, temperature: 0,
  });
  assert.deepEqual(text, [whole.choices[0].text, whole.choices[0].text]);
  assert.deepEqual(finish, ['length', 'length']);
  assert.equal(usage.completion_tokens, 24);
  assert.equal(usage.prompt_tokens, 5);
});

const messages = [
  { role: 'system', content: 'You are a storyteller.' },
  { role: 'user', content: 'Tell me about a dog.' },
];

test('chat: streamed deltas add up to the non-streamed message', async () => {
  const whole = await client.chat.completions.create({
    model: 'stories260K', messages, max_tokens: 32, temperature: 0,
  });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(whole.choices[0].message.content.length > 0);
  const stream = await client.chat.completions.create({
    model: 'stories260K', messages, max_tokens: 32, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', role = null, finish = null, usage = null, n = 0;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (n++ === 0) role = c.delta.role;
      text += c.delta.content ?? '';
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
});

test('chat: the SDK stream helper gives the same final message', async () => {
  const runner = client.beta.chat.completions.stream({
    model: 'stories260K', messages, max_tokens: 16, temperature: 0,
  });
  const final = await runner.finalChatCompletion();
  const whole = await client.chat.completions.create({
    model: 'stories260K', messages, max_tokens: 16, temperature: 0,
  });
  assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
});

test('chat: logprobs with top_logprobs', async () => {
  const r = await client.chat.completions.create({
    model: 'stories260K', messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const e of content) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.top_logprobs[0].token, e.token); // greedy picks the most likely
    assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
  }
});

test('errors surface as the SDK error classes', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'stories260K', messages: [], max_tokens: 1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'messages');
  await assert.rejects(
    client.completions.create({ model: 'stories260K', prompt: 'Once', max_tokens: 2047 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages, max_tokens: 1 }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
});

test('API keys: the SDK sends its key as a Bearer token', async () => {
  const k = await startDaemon(['--api-key', 'sk-test-123']);
  try {
    const bad = new OpenAI({ baseURL: `${k.url}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
    const good = new OpenAI({ baseURL: `${k.url}/v1`, apiKey: 'sk-test-123', maxRetries: 0 });
    const r = await good.chat.completions.create({ model: 'stories260K', messages, max_tokens: 2 });
    assert.equal(r.choices.length, 1);
  } finally {
    await stopDaemon(k);
  }
});
