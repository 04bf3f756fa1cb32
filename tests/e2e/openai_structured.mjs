// tests/e2e/openai_structured.mjs - structured outputs through the official
// `openai` npm package (pinned, with zod, in package.json) against the real
// daemon serving Qwen2's architecture with random weights, whose output only
// the grammar can make valid: zodResponseFormat with parse(), the streaming
// helper's parsed result, and json_object mode.
//
// Usage: node openai_structured.mjs GRAPHSERVE_BINARY SHARED_DIR
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { startDaemon as spawnDaemon, stopDaemon } from './daemon.mjs';

const [bin, shared] = process.argv.slice(2);
assert.ok(bin && shared, 'usage: node openai_structured.mjs GRAPHSERVE_BINARY SHARED_DIR');
const model = `${shared}/models/arch/qwen2-tiny-Q4_K_M.gguf`;
const startDaemon = () => spawnDaemon(bin, ['-m', model, '--backend', 'cpu']);

let d, client;
before(async () => {
  d = await startDaemon();
  client = new OpenAI({ baseURL: `${d.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  await stopDaemon(d);
});

// Bounded strings and lists, so that a model that never chooses to close a
// string still finishes within max_tokens. The bounds are patterns of ASCII
// letters: JSON Schema's maxLength counts code points (as the grammar does),
// zod's .max() counts UTF-16 units, so a bounded string holding a character
// outside the BMP is valid to the schema and too long to zod.
const Pet = z.object({
  name: z.string().regex(/^[A-Za-z ]{1,10}$/),
  species: z.enum(['cat', 'dog', 'parrot']),
  age: z.number().int().min(0).max(30),
  vaccinated: z.boolean(),
  toys: z.array(z.string().regex(/^[a-z]{1,6}$/)).max(3),
});
const messages = [{ role: 'user', content: 'Describe a pet.' }];

test('parse() with zodResponseFormat returns an object the schema accepts', async () => {
  let parsedSome = 0;
  for (const seed of [1, 2, 3]) {
    const c = await client.beta.chat.completions.parse({
      model: 'qwen2-tiny-Q4_K_M', messages, seed, temperature: 1, max_tokens: 600,
      response_format: zodResponseFormat(Pet, 'pet'),
    });
    const m = c.choices[0].message;
    assert.equal(c.choices[0].finish_reason, 'stop');
    assert.ok(m.parsed, `nothing parsed from ${m.content}`);
    Pet.parse(m.parsed); // zod's own check, beside parse()'s
    assert.deepEqual(m.parsed, JSON.parse(m.content));
    parsedSome++;
  }
  assert.equal(parsedSome, 3);
});

test('a streamed schema-constrained answer concatenates to the parsed object', async () => {
  const stream = client.beta.chat.completions.stream({
    model: 'qwen2-tiny-Q4_K_M', messages, seed: 9, temperature: 1, max_tokens: 600,
    response_format: zodResponseFormat(Pet, 'pet'),
  });
  let text = '';
  stream.on('content.delta', ({ delta }) => { text += delta; });
  const final = await stream.finalChatCompletion();
  const m = final.choices[0].message;
  assert.equal(final.choices[0].finish_reason, 'stop');
  assert.equal(text, m.content);
  assert.deepEqual(m.parsed, Pet.parse(JSON.parse(text)));
});

test('json_object mode answers a JSON object', async () => {
  const c = await client.chat.completions.create({
    model: 'qwen2-tiny-Q4_K_M', messages, seed: 4, temperature: 1, max_tokens: 600,
    response_format: { type: 'json_object' },
  });
  const ch = c.choices[0];
  assert.equal(ch.finish_reason, 'stop', ch.message.content);
  const v = JSON.parse(ch.message.content);
  assert.equal(typeof v, 'object');
  assert.ok(v !== null && !Array.isArray(v));
});

test('a schema the server cannot enforce is a BadRequestError naming the keyword', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: 'qwen2-tiny-Q4_K_M', messages, max_tokens: 8,
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'x', schema: { type: 'object', not: { required: ['a'] } } },
      },
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
           /'not' at #/.test(e.message) && e.param === 'response_format.json_schema.schema');
});
