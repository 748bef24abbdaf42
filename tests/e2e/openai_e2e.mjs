// End-to-end test of `brigade serve` with the official `openai` npm client (and curl).
//
//   node tests/e2e/openai_e2e.mjs path/to/brigade
//
// Starts the server on the bundled demo model (any free port, via --port-file), runs the
// checks, stops it with SIGTERM and expects exit status 0. Exit 0 = all passed; 77 = skipped
// (node_modules missing: run `npm ci` in tests/e2e).
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

const here = dirname(fileURLToPath(import.meta.url));
if (!existsSync(join(here, 'node_modules', 'openai'))) {
  console.log('SKIP: tests/e2e/node_modules is missing (run `npm ci` in tests/e2e)');
  process.exit(77);
}
const { default: OpenAI } = await import('openai');

const binary = process.argv[2];
if (!binary || !existsSync(binary)) {
  console.error('usage: node openai_e2e.mjs path/to/brigade');
  process.exit(2);
}

const work = mkdtempSync(join(tmpdir(), 'brigade-e2e-'));
const portFile = join(work, 'port');
const server = spawn(binary, ['serve', '--port', '0', '--port-file', portFile, '--temp', '0',
                              '--threads', '2', '--api-key', 'e2e-key'],
                     { stdio: ['ignore', 'pipe', 'pipe'] });
let serverLog = '';
server.stdout.on('data', (d) => { serverLog += d; });
server.stderr.on('data', (d) => { serverLog += d; });
const exited = new Promise((resolve) => server.on('exit', (code) => resolve(code)));

async function waitForPort() {
  for (let i = 0; i < 1200; i++) {
    if (existsSync(portFile)) {
      const port = parseInt(readFileSync(portFile, 'utf8'), 10);
      if (port > 0) return port;
    }
    if (server.exitCode !== null) throw new Error('server exited early:\n' + serverLog);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('server did not start:\n' + serverLog);
}

const port = await waitForPort();
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ baseURL, apiKey: 'e2e-key', maxRetries: 0, timeout: 120000 });

let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`PASS ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

const user = (text) => [{ role: 'user', content: text }];

async function streamText(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta?.content) text += choice.delta.content;
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { text, finish, usage };
}

await check('models.list', async () => {
  const models = await client.models.list();
  const ids = models.data.map((m) => m.id);
  assert.ok(ids.includes('demo'), `models: ${ids}`);
});

await check('models.retrieve', async () => {
  const model = await client.models.retrieve('demo');
  assert.equal(model.id, 'demo');
  assert.equal(model.object, 'model');
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e.status === 404);
});

let reference;
await check('chat non-streaming with usage', async () => {
  const r = await client.chat.completions.create({
    model: 'demo', messages: user('Tell me a story about a cat.'), max_tokens: 24, temperature: 0,
  });
  reference = r;
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 24);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

await check('chat streaming equals non-streaming, include_usage', async () => {
  const s = await streamText({
    model: 'demo', messages: user('Tell me a story about a cat.'), max_tokens: 24, temperature: 0,
    stream_options: { include_usage: true },
  });
  assert.equal(s.text, reference.choices[0].message.content);
  assert.equal(s.finish, reference.choices[0].finish_reason);
  assert.ok(s.usage, 'a usage chunk');
  assert.equal(s.usage.completion_tokens, reference.usage.completion_tokens);
});

await check('stop string', async () => {
  const text = reference.choices[0].message.content;
  const stop = text.slice(8, 11);
  const r = await client.chat.completions.create({
    model: 'demo', messages: user('Tell me a story about a cat.'), max_tokens: 24, temperature: 0,
    stop: [stop],
  });
  assert.equal(r.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, 'stop');
});

// The demo model was trained to call tools (scripts/demo_tool_chats.py); reference.json holds
// the round trips PyTorch decoded greedily at training time: the weather in Paris and 12 plus 30.
const demoReference = JSON.parse(
  readFileSync(join(here, '..', '..', 'model', 'demo', 'reference.json'), 'utf8'));
const trips = demoReference.tool_calls.bf16.round_trips;
const weatherTools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Get the current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}, {
  type: 'function',
  function: {
    name: 'add', description: 'Add two numbers',
    parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } },
                  required: ['a', 'b'] },
  },
}];

// The second request of a round trip: the question, the call as the server gave it, the result.
function withResult(trip, call) {
  return [
    ...user(trip.case.question),
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: JSON.stringify(trip.case.result) },
  ];
}

await check('tool round trip: tool_calls, then an answer that uses the result', async () => {
  assert.deepEqual(trips[0].case.tools.map((t) => t.function.name), ['get_weather', 'add']);
  for (const trip of trips) {
    const first = await client.chat.completions.create({
      model: 'demo', messages: user(trip.case.question), tools: weatherTools, tool_choice: 'auto',
      max_tokens: 64, temperature: 0,
    });
    const choice = first.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(first));
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.ok(call.id.startsWith('call_'), call.id);
    assert.equal(call.function.name, trip.case.name);
    assert.deepEqual(JSON.parse(call.function.arguments), trip.case.arguments);
    assert.equal(first.usage.prompt_tokens, trip.call.prompt_ids.length);

    const second = await client.chat.completions.create({
      model: 'demo', messages: withResult(trip, call), tools: weatherTools, max_tokens: 64,
      temperature: 0,
    });
    const answer = second.choices[0];
    assert.equal(answer.finish_reason, 'stop');
    assert.equal(answer.message.tool_calls, undefined);
    assert.equal(answer.message.content, trip.answer.text);
    for (const part of trip.case.expect_in_answer) {
      assert.ok(answer.message.content.includes(part), `${answer.message.content} lacks ${part}`);
    }
  }
});

await check('tool round trip streamed: tool call deltas, then the answer', async () => {
  for (const trip of trips) {
    const stream = await client.chat.completions.create({
      model: 'demo', messages: user(trip.case.question), tools: weatherTools, max_tokens: 64,
      temperature: 0, stream: true,
    });
    const calls = [];
    let text = '';
    let finish = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      if (choice.delta?.content) text += choice.delta.content;
      for (const d of choice.delta?.tool_calls ?? []) {
        calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
        if (d.id) calls[d.index].id += d.id;
        if (d.function?.name) calls[d.index].function.name += d.function.name;
        if (d.function?.arguments) calls[d.index].function.arguments += d.function.arguments;
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(text, '');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, trip.case.name);
    assert.deepEqual(JSON.parse(calls[0].function.arguments), trip.case.arguments);
    const answer = await streamText({
      model: 'demo', messages: withResult(trip, calls[0]), tools: weatherTools, max_tokens: 64,
      temperature: 0,
    });
    assert.equal(answer.finish, 'stop');
    assert.equal(answer.text, trip.answer.text);
  }
});

await check('errors: unknown model 404, bad max_tokens 400, bad key 401', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages: user('Hi') }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(
    client.chat.completions.create({ model: 'demo', messages: user('Hi'), max_tokens: -5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
  const bad = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(
    bad.chat.completions.create({ model: 'demo', messages: user('Hi') }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

await check('two concurrent streams are not mixed', async () => {
  const prompts = ['Where do birds live?', 'Once upon a time there was a king.'];
  const solo = [];
  for (const p of prompts) {
    const r = await client.chat.completions.create({
      model: 'demo', messages: user(p), max_tokens: 40, temperature: 0 });
    solo.push(r.choices[0].message.content);
  }
  const both = await Promise.all(prompts.map((p) => streamText({
    model: 'demo', messages: user(p), max_tokens: 40, temperature: 0 })));
  assert.equal(both[0].text, solo[0]);
  assert.equal(both[1].text, solo[1]);
});

await check('text completions', async () => {
  const r = await client.completions.create({
    model: 'demo', prompt: 'The little girl', max_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.usage.completion_tokens > 0);
});

let haveCurl = true;
try { execFileSync('curl', ['--version'], { stdio: 'ignore' }); } catch { haveCurl = false; }
if (haveCurl) {
  await check('curl non-streaming and streaming', async () => {
    const body = JSON.stringify({ messages: user('Tell me a story about a cat.'), max_tokens: 24,
                                  temperature: 0 });
    const plain = JSON.parse(execFileSync('curl', ['-sS', `${baseURL}/chat/completions`,
      '-H', 'Content-Type: application/json', '-H', 'Authorization: Bearer e2e-key',
      '-d', body], { encoding: 'utf8' }));
    assert.equal(plain.choices[0].message.content, reference.choices[0].message.content);
    const sse = execFileSync('curl', ['-sSN', `${baseURL}/chat/completions`,
      '-H', 'Content-Type: application/json', '-H', 'Authorization: Bearer e2e-key',
      '-d', JSON.stringify({ ...JSON.parse(body), stream: true })], { encoding: 'utf8' });
    assert.ok(sse.trimEnd().endsWith('data: [DONE]'), sse);
    let text = '';
    for (const line of sse.split('\n')) {
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const c = JSON.parse(line.slice(6)).choices[0];
      if (c?.delta?.content) text += c.delta.content;
    }
    assert.equal(text, reference.choices[0].message.content);
  });
} else {
  console.log('SKIP curl checks: curl not found');
}

server.kill('SIGTERM');
const code = await exited;
if (code !== 0) {
  failed++;
  console.log(`FAIL server exit status ${code} after SIGTERM\n${serverLog}`);
} else {
  console.log('PASS server exits 0 on SIGTERM');
}
rmSync(work, { recursive: true, force: true });
if (failed) {
  console.log(`${failed} check(s) failed; server log:\n${serverLog}`);
  process.exit(1);
}
console.log('all e2e checks passed');
