// tests/e2e/openai_sdk_tls.mjs - the official `openai` npm package against the
// daemon serving HTTPS with a certificate from a test CA (run_sdk_tls.sh makes
// them and sets NODE_EXTRA_CA_CERTS): the SDK's default https agent verifies
// the chain, then completions, a chat stream and the SDK's error class for a
// bad key all work through graphserve's TLS terminator.
//
// Usage: node openai_sdk_tls.mjs GRAPHSERVE_BINARY SHARED_DIR CERT_DIR
import { readFileSync } from 'node:fs';
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startDaemon, stopDaemon } from './daemon.mjs';

const [bin, shared, certs] = process.argv.slice(2);
assert.ok(bin && shared && certs, 'usage: node openai_sdk_tls.mjs BINARY SHARED_DIR CERT_DIR');
const model = `${shared}/models/stories260K.gguf`;
const golden = (name) => JSON.parse(readFileSync(`${shared}/golden/server/${name}`, 'utf8'));

let d, url;
before(async () => {
  d = await startDaemon(bin, ['-m', model, '--api-key', 'sdk-key', '--tls-cert',
                              `${certs}/srv.pem`, '--tls-key', `${certs}/srv.key`]);
  url = d.url;
  assert.match(url, /^https:/);
});
after(async () => {
  await stopDaemon(d);
});

test('completions over https equal llama.cpp', async () => {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sdk-key', maxRetries: 0 });
  const r = await client.completions.create({
    model: 'stories260K', prompt: 'Once upon a time', max_tokens: 64, temperature: 0,
  });
  assert.equal(r.choices[0].text,
               golden('v1_completions__once-upon-a-time__temp0.json').choices[0].text);
});

test('chat stream over https ends with usage', async () => {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sdk-key', maxRetries: 0 });
  const stream = await client.chat.completions.create({
    model: 'stories260K', messages: [{ role: 'user', content: 'Tell me a story' }],
    max_tokens: 200, ignore_eos: true, stream: true, stream_options: { include_usage: true },
  });
  let text = '', usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 200);
  assert.ok(text.length > 100, text);
});

test('a wrong key is an AuthenticationError over https', async () => {
  const bad = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});
