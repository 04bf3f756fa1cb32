// tests/e2e/openai_embeddings.mjs - client.embeddings.create of the official
// `openai` npm package (pinned in package.json) against the real daemon. The
// SDK asks for base64 when the caller names no encoding_format and decodes it
// to float32 itself (resources/embeddings.js, core.js toFloat32Array), so the
// default call exercises graphserve's base64 and must equal an explicit
// "float" request number for number.
//
// Usage: node openai_embeddings.mjs GRAPHSERVE_BINARY SHARED_DIR
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startDaemon as spawnDaemon, stopDaemon } from './daemon.mjs';

const [bin, shared] = process.argv.slice(2);
assert.ok(bin && shared, 'usage: node openai_embeddings.mjs GRAPHSERVE_BINARY SHARED_DIR');
const model = `${shared}/models/stories260K.gguf`;

const startDaemon = (extra = []) => spawnDaemon(bin, ['-m', model, ...extra]);

let d, client;
before(async () => {
  d = await startDaemon();
  client = new OpenAI({ baseURL: `${d.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  await stopDaemon(d);
});

const texts = ['Once upon a time', 'Lily and Tom went to the park to play.'];
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

test('float: a list of texts, unit vectors, usage', async () => {
  const r = await client.embeddings.create({ model: 'stories260K', input: texts,
                                             encoding_format: 'float' });
  assert.equal(r.object, 'list');
  assert.equal(r.model, 'stories260K');
  assert.equal(r.data.length, 2);
  for (const [i, e] of r.data.entries()) {
    assert.equal(e.object, 'embedding');
    assert.equal(e.index, i);
    assert.equal(e.embedding.length, 64);
    assert.ok(Math.abs(norm(e.embedding) - 1) < 1e-5, `|v| = ${norm(e.embedding)}`);
  }
  assert.ok(r.usage.prompt_tokens > 10);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens);
});

test('the default (base64 on the wire, decoded by the SDK) equals float', async () => {
  const f = await client.embeddings.create({ model: 'stories260K', input: texts,
                                             encoding_format: 'float' });
  const dflt = await client.embeddings.create({ model: 'stories260K', input: texts });
  for (const i of [0, 1]) {
    const want = Array.from(new Float32Array(f.data[i].embedding));
    assert.deepEqual(dflt.data[i].embedding, want, `input ${i}`);
  }
});

test('base64 asked for explicitly is little-endian float32', async () => {
  const f = await client.embeddings.create({ model: 'stories260K', input: texts[1],
                                             encoding_format: 'float' });
  const b = await client.embeddings.create({ model: 'stories260K', input: texts[1],
                                             encoding_format: 'base64' });
  assert.equal(typeof b.data[0].embedding, 'string');
  const buf = Buffer.from(b.data[0].embedding, 'base64');
  assert.equal(buf.length, 4 * 64);
  const got = Array.from({ length: 64 }, (_, j) => buf.readFloatLE(4 * j));
  assert.deepEqual(got, Array.from(new Float32Array(f.data[0].embedding)));
});

test('token ids and lists of them', async () => {
  const r = await client.embeddings.create({ model: 'stories260K', input: [[1, 403, 407], [1, 261]],
                                             encoding_format: 'float' });
  assert.equal(r.data.length, 2);
  assert.equal(r.usage.prompt_tokens, 5);
  const one = await client.embeddings.create({ model: 'stories260K', input: [1, 403, 407],
                                               encoding_format: 'float' });
  assert.deepEqual(one.data[0].embedding, r.data[0].embedding);
});

test('errors: dimensions, an unknown model', async () => {
  await assert.rejects(client.embeddings.create({ model: 'stories260K', input: 'x', dimensions: 8 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'dimensions');
  await assert.rejects(client.embeddings.create({ model: 'text-embedding-3-small', input: 'x' }),
                       (e) => e instanceof OpenAI.NotFoundError);
});
