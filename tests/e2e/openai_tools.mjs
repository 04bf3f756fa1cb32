// tests/e2e/openai_tools.mjs - tool calling through the official `openai` npm package
// (pinned in package.json) against the real daemon, for every call format graphserve
// writes: the random-weight Qwen2 architecture file carrying a golden chat template of
// each family (hermes: Qwen 2.5; llama3: Llama 3.1; mistral: Mistral Small 3.2;
// generic: Phi-3.5, whose template has no tool format). Its output is noise, so only
// the grammar makes the calls parse.
//
// Checked: chat.completions.create with tools and tool_choice "required" or a named
// function returns calls whose arguments validate against their schema (every seed
// tried); the streaming helper assembles the same calls from the deltas; runTools runs
// a local function, sends its result back and gets the next turn; parallel_tool_calls
// gives several calls with distinct ids; bad tool definitions are 400s naming them.
//
// Usage: node openai_tools.mjs GRAPHSERVE_BINARY SHARED_DIR
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startDaemon as spawnDaemon, stopDaemon, withTemplate } from './daemon.mjs';

const [bin, shared] = process.argv.slice(2);
assert.ok(bin && shared, 'usage: node openai_tools.mjs GRAPHSERVE_BINARY SHARED_DIR');
const startDaemon = (m) => spawnDaemon(bin, ['-m', m]);
const dir = mkdtempSync(join(tmpdir(), 'gs-tools-'));
after(() => rmSync(dir, { recursive: true, force: true }));

// The functions, with schemas whose every instance is short (bounded strings and
// integers), so that a random model always finishes its call within max_tokens.
const weatherSchema = {
  type: 'object',
  properties: {
    location: { type: 'string', maxLength: 12 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['location', 'unit'],
};
const addSchema = {
  type: 'object',
  properties: { a: { type: 'integer', minimum: 0, maximum: 999 }, b: { type: 'integer', minimum: 0, maximum: 999 } },
  required: ['a', 'b'],
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather at a place.', parameters: weatherSchema } },
  { type: 'function', function: { name: 'add', description: 'Adds two integers.', parameters: addSchema } },
];
const schemas = { get_weather: weatherSchema, add: addSchema };

// The keywords these schemas use, checked by hand: an oracle that owes nothing to the
// server's grammar.
function validate(schema, v, path = '#') {
  if (schema.enum) assert.ok(schema.enum.includes(v), `${path}: ${JSON.stringify(v)} not in the enum`);
  switch (schema.type) {
    case 'object': {
      assert.ok(v && typeof v === 'object' && !Array.isArray(v), `${path}: not an object`);
      for (const k of schema.required ?? []) assert.ok(k in v, `${path}: '${k}' missing`);
      for (const [k, x] of Object.entries(v)) {
        assert.ok(k in schema.properties, `${path}: '${k}' is not a property`);
        validate(schema.properties[k], x, `${path}/${k}`);
      }
      break;
    }
    case 'string':
      assert.equal(typeof v, 'string', `${path}: not a string`);
      if (schema.maxLength !== undefined) assert.ok([...v].length <= schema.maxLength, `${path}: too long`);
      break;
    case 'integer':
      assert.ok(Number.isInteger(v), `${path}: not an integer`);
      assert.ok(v >= schema.minimum && v <= schema.maximum, `${path}: ${v} out of range`);
      break;
    default:
      break;
  }
}

function checkCalls(calls, family, only) {
  assert.ok(calls?.length >= 1, `${family}: no tool calls`);
  for (const c of calls) {
    assert.equal(c.type, 'function');
    assert.match(c.id, family === 'mistral' ? /^[A-Za-z0-9]{9}$/ : /^call_[A-Za-z0-9]{24}$/);
    if (only) assert.equal(c.function.name, only);
    assert.ok(c.function.name in schemas, `${family}: unknown function ${c.function.name}`);
    validate(schemas[c.function.name], JSON.parse(c.function.arguments));
  }
  assert.equal(new Set(calls.map((c) => c.id)).size, calls.length, 'ids are unique');
}

const families = [
  { family: 'hermes', golden: 'Qwen-Qwen2.5-7B-Instruct' },
  { family: 'llama3', golden: 'meta-llama-Llama-3.1-8B-Instruct' },
  { family: 'mistral', golden: 'Mistral-Small-3.2-24B-Instruct-2506' },
  { family: 'generic', golden: 'microsoft-Phi-3.5-mini-instruct' },
];
// A short system message: Mistral's template has a long default one, and the random
// model's vocabulary is 512 tokens of a context of 2048.
const user = [{ role: 'system', content: 'You are helpful.' },
              { role: 'user', content: 'What is the weather in Paris, and what is 2 + 3?' }];

for (const { family, golden } of families) {
  test(`${family} (${golden})`, async (t) => {
    const tmpl = JSON.parse(readFileSync(`${shared}/golden/templates/${golden}.json`, 'utf8')).template;
    const model = withTemplate(`${shared}/models/arch/qwen2-tiny-Q4_K_M.gguf`, tmpl,
                               join(dir, `${family}.gguf`));
    const d = await startDaemon(model);
    const client = new OpenAI({ baseURL: `${d.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    try {
      await t.test('models.list says the format', async () => {
        const page = await client.models.list();
        assert.equal(page.data[0].meta.tool_call_format, family);
      });

      await t.test('tool_choice "required": every call parses and validates', async () => {
        for (let seed = 1; seed <= 8; seed++) {
          const r = await client.chat.completions.create({
            messages: user, tools, tool_choice: 'required', parallel_tool_calls: false,
            max_tokens: 400, seed,
          });
          const ch = r.choices[0];
          assert.equal(ch.finish_reason, 'tool_calls', `seed ${seed}`);
          assert.equal(ch.message.content, null, `seed ${seed}: content next to the call`);
          assert.equal(ch.message.tool_calls.length, 1);
          checkCalls(ch.message.tool_calls, family);
        }
      });

      await t.test('a named function: only its calls', async () => {
        for (let seed = 1; seed <= 4; seed++) {
          const r = await client.chat.completions.create({
            messages: user, tools, tool_choice: { type: 'function', function: { name: 'add' } },
            parallel_tool_calls: false, max_tokens: 400, seed,
          });
          checkCalls(r.choices[0].message.tool_calls, family, 'add');
          assert.equal(r.choices[0].finish_reason, 'tool_calls');
        }
      });

      await t.test('parallel_tool_calls: several calls, distinct ids and indexes', async () => {
        // The random model may end after its first call wherever the grammar lets it; a
        // bias against end-of-sequence (id 2 in this vocabulary) makes it go on more often.
        const body = { messages: user, tools, tool_choice: 'required', max_tokens: 500, logit_bias: { 2: -3 } };
        let found = null;
        for (let seed = 1; seed <= 40 && !found; seed++) {
          const r = await client.chat.completions.create({ ...body, seed });
          if (r.choices[0].finish_reason !== 'tool_calls') continue; // cut by max_tokens
          checkCalls(r.choices[0].message.tool_calls, family);
          if (r.choices[0].message.tool_calls.length >= 2) found = seed;
        }
        assert.ok(found, 'no seed of 40 gave two calls');
        // The same answer streamed: one index per call, in order.
        const stream = await client.chat.completions.create({ ...body, seed: found, stream: true });
        const firsts = [];
        for await (const chunk of stream) {
          for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) if (tc.id) firsts.push(tc.index);
        }
        assert.ok(firsts.length >= 2);
        assert.deepEqual(firsts, [...firsts.keys()]);
      });

      await t.test('the streaming helper assembles the calls the answer has', async () => {
        const body = { messages: user, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 400, seed: 7 };
        const whole = await client.chat.completions.create(body);
        const stream = client.beta.chat.completions.stream({ ...body, stream: true });
        const deltas = [];
        stream.on('chunk', (c) => deltas.push(c.choices[0]?.delta ?? {}));
        const final = await stream.finalChatCompletion();
        const strip = (calls) => calls.map((c) => [c.function.name, c.function.arguments]);
        const msg = final.choices[0].message;
        assert.deepEqual(strip(msg.tool_calls), strip(whole.choices[0].message.tool_calls));
        checkCalls(msg.tool_calls, family);
        assert.equal(final.choices[0].finish_reason, 'tool_calls');
        // OpenAI's delta shape: a call's first delta has index, id, type and name; the
        // next ones index and arguments alone; no markup in content.
        const calls = deltas.flatMap((dl) => dl.tool_calls ?? []);
        assert.deepEqual(Object.keys(calls[0]).sort(), ['function', 'id', 'index', 'type']);
        assert.equal(calls[0].function.arguments, '');
        for (const c of calls.slice(1)) assert.deepEqual(Object.keys(c).sort(), ['function', 'index']);
        assert.equal(deltas.map((dl) => dl.content ?? '').join(''), '');
      });

      await t.test('runTools runs the function and sends its result back', async () => {
        const seen = [];
        const runner = client.beta.chat.completions.runTools({
          messages: user, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 400, seed: 3,
          tools: [
            { type: 'function', function: { name: 'add', parameters: addSchema, parse: JSON.parse,
                                             function: ({ a, b }) => { seen.push([a, b]); return { sum: a + b }; } } },
          ],
        }, { maxChatCompletions: 2 });
        await runner.done();
        // Two turns: each called add, and the second was asked with the first's result.
        assert.equal(seen.length, 2);
        const roles = runner.messages.map((m) => m.role);
        assert.deepEqual(roles, ['system', 'user', 'assistant', 'tool', 'assistant', 'tool']);
        assert.equal(runner.messages[3].content, JSON.stringify({ sum: seen[0][0] + seen[0][1] }));
        // The model's next turn after the results, in text.
        const next = await client.chat.completions.create({
          messages: runner.messages, tools: [tools[1]], tool_choice: 'none', max_tokens: 8, seed: 1,
        });
        assert.equal(typeof next.choices[0].message.content, 'string');
        assert.equal(next.choices[0].message.tool_calls, undefined);
        assert.equal(next.choices[0].finish_reason, 'length');
      });

      await t.test('auto: text unless a call starts, never an error', async () => {
        const r = await client.chat.completions.create({ messages: user, tools, max_tokens: 32, seed: 1 });
        assert.ok(['length', 'stop', 'tool_calls'].includes(r.choices[0].finish_reason));
        if (r.choices[0].message.tool_calls) checkCalls(r.choices[0].message.tool_calls, family);
      });

      await t.test('bad tool definitions are 400s naming them', async () => {
        const bad = async (ts, param, re, extra = {}) => {
          await assert.rejects(
            client.chat.completions.create({ messages: user, tools: ts, max_tokens: 4, ...extra }),
            (e) => e instanceof OpenAI.BadRequestError && e.param === param && re.test(e.message),
            `${param} ${re}`);
        };
        await bad([{ type: 'function', function: { description: 'x' } }], 'tools[0].function.name', /required/);
        await bad([tools[0], tools[0]], 'tools[1].function.name', /unique/);
        await bad([{ type: 'function', function: { name: 'f', parameters: { type: 'string' } } }],
                  'tools[0].function.parameters', /object schema/);
        await bad([{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { not: { type: 'string' } } } } } }],
                  'tools[0].function.parameters', /'not'/);
        await bad(tools, 'tool_choice.function.name', /no function/,
                  { tool_choice: { type: 'function', function: { name: 'nope' } } });
      });

      await t.test('X-Ignored-Fields never lists the tool fields', async () => {
        const res = await fetch(`${d.url}/v1/chat/completions`, {
          method: 'POST', headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ messages: user, tools, tool_choice: 'none', parallel_tool_calls: true, max_tokens: 2, frobnicate: 1 }),
        });
        assert.equal(res.status, 200);
        assert.equal(res.headers.get('x-ignored-fields'), 'frobnicate');
      });
    } finally {
      await stopDaemon(d);
    }
  });
}
