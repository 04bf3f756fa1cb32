// tests/e2e/anthropic_sdk.mjs - the official `@anthropic-ai/sdk` npm package (pinned in
// package.json) against the real daemon, with an API key as the SDK sends it (x-api-key):
// messages.create, messages.stream (the text events concatenated are the final message's
// text), messages.countTokens, errors surfacing as the SDK's typed errors, and tool use on
// the random Qwen2 file carrying Qwen 2.5's golden template (the SDK's tool_use blocks,
// the stream's input_json_delta pieces assembled by the SDK, a tool_result turn).
//
// Usage: node anthropic_sdk.mjs GRAPHSERVE_BINARY SHARED_DIR
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startDaemon as spawnDaemon, stopDaemon, withTemplate } from './daemon.mjs';

const [bin, shared] = process.argv.slice(2);
assert.ok(bin && shared, 'usage: node anthropic_sdk.mjs GRAPHSERVE_BINARY SHARED_DIR');
const modelPath = `${shared}/models/stories260K.gguf`;
const startDaemon = (extra = []) => spawnDaemon(bin, ['-m', modelPath, ...extra]);
const KEY = 'sdk-key';

let d, client;
before(async () => {
  d = await startDaemon(['--api-key', KEY]);
  // The SDK's baseURL is the host: it appends /v1/messages itself.
  client = new Anthropic({ baseURL: d.url, apiKey: KEY, maxRetries: 0 });
});
after(async () => {
  await stopDaemon(d);
});

const conversation = {
  model: 'stories260K',
  system: 'You tell stories.',
  messages: [{ role: 'user', content: 'Tell me about Lily.' }],
  temperature: 0,
};

test('messages.create: a message with text, stop_reason and usage', async () => {
  const msg = await client.messages.create({ ...conversation, max_tokens: 24 });
  assert.match(msg.id, /^msg_/);
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.model, 'stories260K');
  assert.equal(msg.content.length, 1);
  assert.equal(msg.content[0].type, 'text');
  assert.ok(msg.content[0].text.length > 0);
  assert.equal(msg.stop_reason, 'max_tokens');
  assert.equal(msg.stop_sequence, null);
  assert.equal(msg.usage.output_tokens, 24);
  assert.ok(msg.usage.input_tokens > 0);
  assert.match(msg._request_id ?? '', /^msg_/, 'the SDK reads the request-id header');
});

test('messages.stream: the text events make the final message', async () => {
  const whole = await client.messages.create({ ...conversation, max_tokens: 30 });
  const stream = client.messages.stream({ ...conversation, max_tokens: 30 });
  let text = '';
  const types = [];
  stream.on('text', (t) => { text += t; });
  stream.on('streamEvent', (e) => { types.push(e.type); });
  const final = await stream.finalMessage();
  assert.equal(text, final.content[0].text);
  assert.equal(text, whole.content[0].text);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 30);
  const prompt = (u) => u.input_tokens + u.cache_read_input_tokens;
  assert.equal(prompt(final.usage), prompt(whole.usage));
  assert.equal(final.usage.cache_creation_input_tokens, 0);
  assert.deepEqual(types.slice(0, 2), ['message_start', 'content_block_start']);
  assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
});

test('messages.create with stop_sequences stops there', async () => {
  const whole = await client.messages.create({ ...conversation, max_tokens: 40 });
  const words = whole.content[0].text.trim().split(/\s+/);
  const stop = words[Math.floor(words.length / 2)].replace(/[^A-Za-z]/g, '') || words[1];
  const msg = await client.messages.create({ ...conversation, max_tokens: 40,
                                             stop_sequences: [stop] });
  assert.equal(msg.stop_reason, 'stop_sequence');
  assert.equal(msg.stop_sequence, stop);
  assert.equal(msg.content[0].text, whole.content[0].text.slice(0,
               whole.content[0].text.indexOf(stop)));
});

test('messages.countTokens: the prompt the message reports', async () => {
  const { model, system, messages } = conversation;
  const count = await client.messages.countTokens({ model, system, messages });
  const msg = await client.messages.create({ ...conversation, max_tokens: 1 });
  // count_tokens counts the whole prompt; a message splits it into computed and cached.
  assert.equal(count.input_tokens, msg.usage.input_tokens + msg.usage.cache_read_input_tokens);
});

test('errors surface as the SDK\'s typed errors', async () => {
  await assert.rejects(
    client.messages.create({ ...conversation, max_tokens: 4, tools: [{ name: 't',
      input_schema: { type: 'object' } }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 &&
           e.error?.error?.type === 'invalid_request_error' && /tools/.test(e.message));
  await assert.rejects(
    client.messages.create({ ...conversation, model: 'claude-nonesuch', max_tokens: 4 }),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.error?.type === 'not_found_error');
  const bad = new Anthropic({ baseURL: d.url, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.messages.create({ ...conversation, max_tokens: 4 }),
                       (e) => e instanceof Anthropic.AuthenticationError);
  await assert.rejects(bad.messages.countTokens({ messages: conversation.messages,
                                                  model: 'stories260K' }),
                       (e) => e instanceof Anthropic.AuthenticationError);
});

test('tool use: tool_use blocks, streamed input, a tool_result turn', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gs-anthropic-tools-'));
  const tmpl = JSON.parse(readFileSync(
    `${shared}/golden/templates/Qwen-Qwen2.5-7B-Instruct.json`, 'utf8')).template;
  const model = withTemplate(`${shared}/models/arch/qwen2-tiny-Q4_K_M.gguf`, tmpl,
                             join(dir, 'qwen2.gguf'));
  const td = await spawnDaemon(bin, ['-m', model]);
  const tc = new Anthropic({ baseURL: td.url, apiKey: 'unused', maxRetries: 0 });
  try {
    // Enumerated values keep the noise model's calls short.
    const tools = [{
      name: 'get_weather', description: 'The weather in a city',
      input_schema: { type: 'object', additionalProperties: false, required: ['city'],
                      properties: { city: { enum: ['Paris', 'London'] } } },
    }];
    const ask = { model: 'qwen2', max_tokens: 200, temperature: 0, tools,
                  tool_choice: { type: 'tool', name: 'get_weather' },
                  messages: [{ role: 'user', content: 'Weather in Paris?' }] };
    const msg = await tc.messages.create(ask);
    assert.equal(msg.stop_reason, 'tool_use');
    const use = msg.content.find((b) => b.type === 'tool_use');
    assert.ok(use, JSON.stringify(msg.content));
    assert.match(use.id, /^toolu_/);
    assert.equal(use.name, 'get_weather');
    assert.ok(['Paris', 'London'].includes(use.input.city), JSON.stringify(use.input));
    assert.deepEqual(Object.keys(use.input), ['city']);

    const stream = tc.messages.stream(ask);
    let pieces = '';
    stream.on('inputJson', (delta) => { pieces += delta; });
    const final = await stream.finalMessage();
    const streamed = final.content.find((b) => b.type === 'tool_use');
    assert.equal(final.stop_reason, 'tool_use');
    assert.deepEqual(streamed.input, use.input, 'the SDK assembled another input');
    assert.deepEqual(JSON.parse(pieces), use.input);

    const next = await tc.messages.create({
      ...ask, tool_choice: { type: 'auto' }, max_tokens: 8,
      messages: [...ask.messages, { role: 'assistant', content: msg.content },
                 { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id,
                                             content: '18 degrees' }] }],
    });
    assert.equal(next.type, 'message');
    assert.ok(next.usage.input_tokens + next.usage.cache_read_input_tokens >
              msg.usage.input_tokens + msg.usage.cache_read_input_tokens);
    await assert.rejects(
      tc.messages.create({ ...ask, messages: [...ask.messages,
        { role: 'assistant', content: msg.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_other' }] }] }),
      (e) => e instanceof Anthropic.BadRequestError && /tool_use_id/.test(e.message));
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await stopDaemon(td);
  }
});
