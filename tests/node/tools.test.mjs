// Tool calls through `edgegemma serve` with tiny-gemma4 and the official Gemma 4 chat template
// (shared/templates/google-gemma-4-31B-it.jinja): tool_choice "required" / named forces a call
// whose arguments validate against the function's parameters; the tool result goes back as a
// {role: "tool"} message and the conversation continues.
// Argument strings are enums: an unbounded free string lets the tiny model ramble until max_tokens
// (finish_reason "length", no call); maxLength bounds one (tested in tests/server_structured_test.cpp).
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, shared } from './server.mjs';
import { client, collect } from './client.mjs';
import { validate } from './schema.mjs';

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city.',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', enum: ['Paris', 'London', 'Rome'] },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city', 'unit'],
    },
  },
};
const addNumbers = {
  type: 'function',
  function: {
    name: 'add_numbers',
    description: 'Add two integers.',
    parameters: {
      type: 'object',
      properties: { a: { type: 'integer' }, b: { type: 'integer' } },
      required: ['a', 'b'],
    },
  },
};

function checkCall(call, tool) {
  assert.equal(call.type, 'function');
  assert.equal(typeof call.id, 'string');
  assert.ok(call.id.length > 0);
  assert.equal(call.function.name, tool.function.name);
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(validate(args, tool.function.parameters), [], call.function.arguments);
  return args;
}

describe('tool calls (tiny-gemma4, Gemma 4 template)', () => {
  let server, openai;
  before(async () => {
    server = await startServer({
      model: 'tiny-gemma4',
      args: ['--parallel', '2', '--chat-template', shared('templates', 'google-gemma-4-31B-it.jinja')],
    });
    openai = client(server);
  });
  after(async () => { if (server) await server.stop(); });

  const user = { role: 'user', content: 'What is the weather in Paris?' };

  test('tool_choice "required": finish_reason tool_calls, arguments validate; tool result round trip', async () => {
    const req = { model: 'tiny-gemma4', messages: [user], tools: [weather], tool_choice: 'required', temperature: 0, max_tokens: 200 };
    const r = await openai.chat.completions.create(req);
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
    assert.ok(Array.isArray(c.message.tool_calls) && c.message.tool_calls.length >= 1);
    const call = c.message.tool_calls[0];
    checkCall(call, weather);

    // The streamed form carries the same call (greedy).
    const s = await collect(await openai.chat.completions.create({ ...req, stream: true }));
    assert.equal(s.finish, 'tool_calls');
    let name = '', args = '';
    for (const ch of s.chunks) {
      for (const tc of ch.choices[0]?.delta?.tool_calls ?? []) {
        if (tc.index !== 0) continue;
        if (tc.function?.name) name += tc.function.name;
        if (tc.function?.arguments) args += tc.function.arguments;
      }
    }
    assert.equal(name, call.function.name);
    assert.deepEqual(JSON.parse(args), JSON.parse(call.function.arguments));

    // Send the tool result back: a normal answer.
    const follow = await openai.chat.completions.create({
      model: 'tiny-gemma4', tools: [weather], temperature: 0, max_tokens: 32,
      messages: [
        user,
        { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 21, unit: 'celsius' }) },
      ],
    });
    const f = follow.choices[0];
    assert.ok(['stop', 'length', 'tool_calls'].includes(f.finish_reason));
    assert.ok(f.finish_reason === 'tool_calls' || typeof f.message.content === 'string');
    // The tool result is part of the prompt.
    assert.ok(follow.usage.prompt_tokens > r.usage.prompt_tokens);
  });

  test('named tool_choice picks that function among two', async () => {
    for (const tool of [addNumbers, weather]) {
      const r = await openai.chat.completions.create({
        model: 'tiny-gemma4', messages: [{ role: 'user', content: 'Please help me.' }],
        tools: [weather, addNumbers], tool_choice: { type: 'function', function: { name: tool.function.name } },
        temperature: 0, max_tokens: 200,
      });
      assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0].message));
      checkCall(r.choices[0].message.tool_calls[0], tool);
    }
  });

  test('tool_choice "none": no tool calls', async () => {
    const r = await openai.chat.completions.create({
      model: 'tiny-gemma4', messages: [user], tools: [weather], tool_choice: 'none', temperature: 0, max_tokens: 24,
    });
    assert.ok(!r.choices[0].message.tool_calls || r.choices[0].message.tool_calls.length === 0);
    assert.notEqual(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(typeof r.choices[0].message.content, 'string');
  });
});
