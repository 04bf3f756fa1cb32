// tests/e2e/openai_responses.mjs - the Responses API (POST /v1/responses) through the
// official `openai` npm package (pinned in package.json) against the real daemon:
// client.responses.create with text, with text.format json_schema, and with function
// tools under tool_choice "required" (on the random-weight Qwen2 architecture file
// carrying Qwen 2.5's golden template, whose hermes format graphserve writes; its output
// is noise, so only the grammar makes the calls parse); client.responses.stream, whose
// deltas add up to the final output_text; previous_response_id with store: true;
// responses.retrieve and responses.del; a
// refused field as the SDK's BadRequestError and an unknown id as its NotFoundError.
//
// Usage: node openai_responses.mjs GRAPHSERVE_BINARY SHARED_DIR
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startDaemon as spawnDaemon, stopDaemon, withTemplate } from './daemon.mjs';

const [bin, shared] = process.argv.slice(2);
assert.ok(bin && shared, 'usage: node openai_responses.mjs GRAPHSERVE_BINARY SHARED_DIR');
const startDaemon = (m) => spawnDaemon(bin, ['-m', m]);
const dir = mkdtempSync(join(tmpdir(), 'gs-responses-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const schema = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 99 } },
  required: ['name', 'age'],
  additionalProperties: false,
};

test('stories260K: text, json_schema, stream, previous_response_id, errors', async (t) => {
  const d = await startDaemon(`${shared}/models/stories260K.gguf`);
  const client = new OpenAI({ baseURL: `${d.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  try {
    await t.test('responses.create: text', async () => {
      const r = await client.responses.create({
        model: 'stories260K', instructions: 'You tell stories.', input: 'Tell me about Lily.',
        max_output_tokens: 16, temperature: 0,
      });
      assert.equal(r.object, 'response');
      assert.match(r.id, /^resp_/);
      assert.equal(r.status, 'incomplete');
      assert.equal(r.incomplete_details.reason, 'max_output_tokens');
      assert.equal(r.output[0].type, 'message');
      assert.ok(r.output_text.length > 0, 'the SDK assembles output_text');
      assert.equal(r.usage.output_tokens, 16);
      assert.equal(r.usage.total_tokens, r.usage.input_tokens + 16);
    });

    await t.test('responses.create: text.format json_schema', async () => {
      const r = await client.responses.create({
        input: [{ role: 'user', content: [{ type: 'input_text', text: 'Who is Lily?' }] }],
        text: { format: { type: 'json_schema', name: 'person', schema, strict: true } },
        max_output_tokens: 100,
      });
      assert.equal(r.status, 'completed');
      const v = JSON.parse(r.output_text);
      assert.deepEqual(Object.keys(v).sort(), ['age', 'name']);
      assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 99);
      assert.ok(typeof v.name === 'string' && [...v.name].length <= 12);
    });

    await t.test('responses.stream: the deltas are the final output_text', async () => {
      const stream = client.responses.stream({
        input: 'Tell me about Lily.', max_output_tokens: 100,
        text: { format: { type: 'json_schema', name: 'person', schema } },
      });
      let text = '', seq = 0;
      const types = [];
      for await (const ev of stream) {
        types.push(ev.type);
        assert.equal(ev.sequence_number, seq++);
        if (ev.type === 'response.output_text.delta') text += ev.delta;
      }
      // This SDK's stream helper gives the final response without the output_text
      // convenience (only create() adds it): the message's text, read from output.
      const final = await stream.finalResponse();
      const finalText = final.output.filter((o) => o.type === 'message')
        .flatMap((o) => o.content).map((c) => c.text).join('');
      assert.equal(finalText, text);
      assert.equal(final.status, 'completed');
      assert.ok(text.length > 0);
      assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress',
        'response.output_item.added', 'response.content_part.added']);
      assert.equal(types.at(-1), 'response.completed');
      JSON.parse(text);
    });

    await t.test('previous_response_id with store: true continues the conversation', async () => {
      const first = await client.responses.create({
        input: 'Tell me about Lily.', store: true, max_output_tokens: 8, temperature: 0,
      });
      const alone = await client.responses.create({
        input: 'And then?', max_output_tokens: 4, temperature: 0,
      });
      const next = await client.responses.create({
        previous_response_id: first.id, input: 'And then?', max_output_tokens: 4, temperature: 0,
      });
      // The earlier turns are in the prompt: more tokens than the question alone.
      assert.ok(next.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens,
                `${next.usage.input_tokens} vs ${alone.usage.input_tokens}`);
      await assert.rejects(client.responses.create({ previous_response_id: next.id, input: 'x' }),
                           (e) => e instanceof OpenAI.NotFoundError && e.status === 404 &&
                                  e.code === 'previous_response_not_found');
    });

    await t.test('responses.retrieve and responses.del on a stored response', async () => {
      const made = await client.responses.create({
        input: 'Tell me about Lily.', store: true, max_output_tokens: 6, temperature: 0,
      });
      const got = await client.responses.retrieve(made.id);
      assert.equal(got.id, made.id);
      assert.deepEqual(got.output, made.output);
      assert.deepEqual(got.usage, made.usage);
      await client.responses.del(made.id);
      await assert.rejects(client.responses.retrieve(made.id),
                           (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
      await assert.rejects(client.responses.del(made.id),
                           (e) => e instanceof OpenAI.NotFoundError);
    });

    await t.test('a refused field is a BadRequestError naming it', async () => {
      await assert.rejects(
        client.responses.create({ input: 'x', reasoning: { effort: 'low' } }),
        (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'reasoning');
      await assert.rejects(
        client.responses.create({ input: 'x', tools: [{ type: 'web_search_preview' }] }),
        (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0]');
    });
  } finally {
    await stopDaemon(d);
  }
});

test('function tools, tool_choice "required" (hermes: Qwen 2.5\'s template)', async (t) => {
  const tmpl = JSON.parse(readFileSync(`${shared}/golden/templates/Qwen-Qwen2.5-7B-Instruct.json`,
                                       'utf8')).template;
  const model = withTemplate(`${shared}/models/arch/qwen2-tiny-Q4_K_M.gguf`, tmpl,
                             join(dir, 'hermes.gguf'));
  const d = await startDaemon(model);
  const client = new OpenAI({ baseURL: `${d.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const tools = [{ type: 'function', name: 'person', description: 'Records a person.',
                   parameters: schema, strict: true }];
  const input = [{ role: 'system', content: 'You are helpful.' },
                 { role: 'user', content: 'Record Lily, 7.' }];
  const check = (item) => {
    assert.equal(item.type, 'function_call');
    assert.equal(item.name, 'person');
    assert.match(item.call_id, /^call_/);
    const v = JSON.parse(item.arguments);
    assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 99, item.arguments);
    assert.ok(typeof v.name === 'string' && [...v.name].length <= 12, item.arguments);
  };
  try {
    let call;
    await t.test('responses.create: a function_call item that validates', async () => {
      const r = await client.responses.create({
        input, tools, tool_choice: 'required', parallel_tool_calls: false,
        max_output_tokens: 300, temperature: 0,
      });
      assert.equal(r.status, 'completed');
      const calls = r.output.filter((o) => o.type === 'function_call');
      assert.equal(calls.length, 1, JSON.stringify(r.output));
      check(calls[0]);
      call = calls[0];
    });

    await t.test('responses.stream: the arguments deltas are the final arguments', async () => {
      const stream = client.responses.stream({
        input, tools, tool_choice: 'required', parallel_tool_calls: false,
        max_output_tokens: 300, temperature: 0,
      });
      let args = '', seq = 0;
      const types = [];
      for await (const ev of stream) {
        assert.equal(ev.sequence_number, seq++);
        if (types.at(-1) !== ev.type) types.push(ev.type);
        if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
      }
      assert.deepEqual(types, ['response.created', 'response.in_progress',
        'response.output_item.added', 'response.function_call_arguments.delta',
        'response.function_call_arguments.done', 'response.output_item.done',
        'response.completed']);
      const final = await stream.finalResponse();
      const item = final.output.find((o) => o.type === 'function_call');
      check(item);
      assert.equal(item.arguments, args);
      assert.equal(item.arguments, call.arguments, 'greedy: the same call as not streamed');
    });

    await t.test('the call and its output go back as input items', async () => {
      const r = await client.responses.create({
        input: [...input, call, { type: 'function_call_output', call_id: call.call_id, output: '{"ok":true}' }],
        tools, max_output_tokens: 8, temperature: 0,
      });
      assert.ok(r.output.length >= 1);
    });
  } finally {
    await stopDaemon(d);
  }
});
