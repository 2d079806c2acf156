// Drives `m3 serve` with the official OpenAI Node SDK (tests/integration/test_server_openai.sh).
// Environment: M3_NODE_MODULES (where `openai` is installed), M3_URL (server with the prefix cache,
// no API key), M3_COLD_URL (same model, prefix cache off, --api-key M3_API_KEY), M3_BIN, M3_MODEL.
// Prints one line per check and last "node: P passed, F failed".
'use strict';
const path = require('path');
const { execFileSync } = require('child_process');

const mod = require(path.join(process.env.M3_NODE_MODULES, 'openai'));
const OpenAI = mod.OpenAI || mod.default || mod;
const URL_WARM = process.env.M3_URL;
const URL_COLD = process.env.M3_COLD_URL;
const KEY = process.env.M3_API_KEY;

const warm = new OpenAI({ baseURL: URL_WARM + '/v1', apiKey: 'not-checked', maxRetries: 0, timeout: 120000 });
const cold = new OpenAI({ baseURL: URL_COLD + '/v1', apiKey: KEY, maxRetries: 0, timeout: 120000 });
const wrongKey = new OpenAI({ baseURL: URL_COLD + '/v1', apiKey: KEY + 'x', maxRetries: 0, timeout: 30000 });

let passed = 0, failed = 0;
function assert(cond, msg) { if (!cond) throw new Error(msg); }
function eq(a, b, msg) {
  if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${msg}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
}
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL - ${name}: ${e && e.stack ? e.stack : e}`);
  }
}
async function expectApiError(promise, status, fragment) {
  try {
    await promise;
  } catch (e) {
    assert(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
    eq(e.status, status, 'status');
    if (fragment) assert(String(e.message).includes(fragment), `message "${e.message}" lacks "${fragment}"`);
    return e;
  }
  throw new Error(`expected HTTP ${status}, the request succeeded`);
}
async function metrics(url) {
  const r = await fetch(url + '/metrics', { headers: { Authorization: 'Bearer ' + KEY } });
  assert(r.status === 200, `/metrics status ${r.status}`);
  return await r.text();
}
function metric(text, name) {
  const m = text.match(new RegExp('^' + name + ' ([0-9.eE+-]+)$', 'm'));
  return m ? Number(m[1]) : NaN;
}
function checkUsage(u, maxCompletion) {
  assert(u && u.prompt_tokens > 0, `prompt_tokens ${u && u.prompt_tokens}`);
  assert(u.completion_tokens > 0 && u.completion_tokens <= maxCompletion, `completion_tokens ${u.completion_tokens}`);
  eq(u.total_tokens, u.prompt_tokens + u.completion_tokens, 'total_tokens');
  assert(u.prompt_tokens_details && Number.isInteger(u.prompt_tokens_details.cached_tokens), 'cached_tokens missing');
  assert(u.prompt_tokens_details.cached_tokens < u.prompt_tokens, 'cached_tokens >= prompt_tokens');
}
function checkMessage(choice) {
  const m = choice.message;
  eq(m.role, 'assistant', 'role');
  assert(['stop', 'length', 'tool_calls'].includes(choice.finish_reason), `finish_reason ${choice.finish_reason}`);
  assert(m.content === null || typeof m.content === 'string', 'content type');
  for (const c of m.tool_calls || []) {
    assert(typeof c.id === 'string' && c.id.length > 0, 'tool call id');
    eq(c.type, 'function', 'tool call type');
    assert(typeof c.function.name === 'string', 'tool call name');
    const args = JSON.parse(c.function.arguments);
    assert(args && typeof args === 'object' && !Array.isArray(args), 'arguments not an object');
  }
}

const base = { model: 'tiny', messages: [{ role: 'user', content: 'Hello there, who are you?' }], temperature: 0, max_tokens: 12 };
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
}];

(async () => {
  let first;
  await check('GET /v1/models lists the model', async () => {
    const list = await warm.models.list();
    const ids = [];
    for await (const m of list) ids.push(m.id);
    eq(ids, ['tiny'], 'model ids');
  });

  await check('models.retrieve: the served model, and 404 model_not_found for another', async () => {
    const m = await warm.models.retrieve('tiny');
    eq(m.id, 'tiny', 'id');
    eq(m.object, 'model', 'object');
    const e = await expectApiError(warm.models.retrieve('gpt-4o'), 404, 'gpt-4o');
    eq(e.code, 'model_not_found', 'code');
    await expectApiError(warm.chat.completions.create({ ...base, model: 'gpt-4o' }), 404, 'does not exist');
  });

  await check('405 with Allow for a wrong method; a CORS preflight is refused without --cors-origin', async () => {
    const r = await fetch(URL_WARM + '/v1/chat/completions', { method: 'GET' });
    eq(r.status, 405, 'status');
    eq(r.headers.get('allow'), 'POST, OPTIONS', 'Allow');
    const pre = await fetch(URL_WARM + '/v1/chat/completions', {
      method: 'OPTIONS', headers: { Origin: 'http://elsewhere.example', 'Access-Control-Request-Method': 'POST' } });
    eq(pre.status, 403, 'preflight from an origin not allowed');
  });

  await check('non-streaming chat completion', async () => {
    first = await warm.chat.completions.create(base);
    eq(first.object, 'chat.completion', 'object');
    eq(first.choices.length, 1, 'choices');
    checkMessage(first.choices[0]);
    checkUsage(first.usage, 12);
  });

  await check('identical request: same output, same prompt_tokens, prefix cache hit', async () => {
    const again = await warm.chat.completions.create(base);
    eq(again.choices[0].message, first.choices[0].message, 'message');
    eq(again.usage.prompt_tokens, first.usage.prompt_tokens, 'prompt_tokens');
    eq(again.usage.completion_tokens, first.usage.completion_tokens, 'completion_tokens');
    assert(again.usage.prompt_tokens_details.cached_tokens > 0, 'cached_tokens is 0');
  });

  await check('streaming chat equals non-streaming (deltas, finish_reason, usage)', async () => {
    const stream = await warm.chat.completions.create({ ...base, stream: true, stream_options: { include_usage: true } });
    let content = '', reasoning = '', finish = null, usage = null, role = null, chunks = 0;
    for await (const c of stream) {
      chunks++;
      eq(c.object, 'chat.completion.chunk', 'object');
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) {
        if (ch.delta.role) role = ch.delta.role;
        content += ch.delta.content || '';
        reasoning += ch.delta.reasoning_content || '';
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    assert(chunks >= 3, `only ${chunks} chunks`);
    eq(role, 'assistant', 'role');
    eq(content, first.choices[0].message.content || '', 'content');
    eq(reasoning, first.choices[0].message.reasoning_content || '', 'reasoning_content');
    eq(finish, first.choices[0].finish_reason, 'finish_reason');
    assert(usage, 'no usage chunk');
    eq(usage.completion_tokens, first.usage.completion_tokens, 'completion_tokens');
    eq(usage.prompt_tokens, first.usage.prompt_tokens, 'prompt_tokens');
  });

  await check('stop string ends the output before it', async () => {
    const text = first.choices[0].message.content || '';
    const m = /[A-Za-z]{2}/.exec(text.slice(1));
    if (!m) { console.log('  (no ASCII pair in the output to stop at; checked the request only)'); }
    const stop = m ? m[0] : 'zzzz-not-there';
    const r = await warm.chat.completions.create({ ...base, stop: [stop] });
    checkMessage(r.choices[0]);
    if (m) {
      eq(r.choices[0].message.content, text.slice(0, text.indexOf(stop)), 'content before the stop string');
      eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
    }
  });

  await check('tools request (tool_choice auto) is well-formed', async () => {
    const r = await warm.chat.completions.create({
      ...base, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: 'auto',
    });
    checkMessage(r.choices[0]);
    checkUsage(r.usage, 12);
  });

  await check('tool_choice naming a tool forces a call to it', async () => {
    const r = await warm.chat.completions.create({
      ...base, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    checkMessage(r.choices[0]);
    const calls = r.choices[0].message.tool_calls || [];
    assert(calls.length >= 1, 'no tool call');
    eq(calls[0].function.name, 'get_weather', 'tool name');
  });

  await check('streaming a forced tool call: id and name first, argument fragments', async () => {
    const stream = await warm.chat.completions.create({
      ...base, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: 'required',
      stream: true, max_tokens: 20,
    });
    const calls = [];
    for await (const c of stream) {
      for (const ch of c.choices) {
        for (const d of ch.delta.tool_calls || []) {
          if (!calls[d.index]) {
            assert(d.id && d.function && d.function.name !== undefined, 'first delta of a call lacks id/name');
            eq(d.type, 'function', 'type');
            calls[d.index] = { name: d.function.name, args: '' };
          }
          calls[d.index].args += (d.function && d.function.arguments) || '';
        }
      }
    }
    // "required" with one tool forces that tool's invoke, so a call is there whatever the
    // (random) weights write next; its fragments must form a JSON object.
    assert(calls.length >= 1, 'no streamed tool call');
    eq(calls[0].name, 'get_weather', 'streamed tool name');
    for (const c of calls) {
      const a = JSON.parse(c.args || '{}');
      assert(a && typeof a === 'object', 'arguments');
    }
  });

  await check('concurrent requests, batched (--parallel 3), each answered exactly', async () => {
    const rs = await Promise.all([0, 1, 2].map(() => warm.chat.completions.create(base)));
    for (const r of rs) eq(r.choices[0].message, first.choices[0].message, 'message');
  });

  await check('tool_choice none and a tool-result history', async () => {
    const r = await warm.chat.completions.create({
      ...base, tool_choice: 'none', tools,
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","days":2}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
      ],
    });
    checkMessage(r.choices[0]);
    assert(!r.choices[0].message.tool_calls, 'tool_calls with tool_choice none');
  });

  await check('second turn reuses the cache and equals a cold server', async () => {
    const turn1 = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'What is 2+2?' }];
    const a1 = await warm.chat.completions.create({ ...base, messages: turn1, max_tokens: 10 });
    const reply = { role: 'assistant', content: a1.choices[0].message.content || '' };
    if (a1.choices[0].message.reasoning_content) reply.reasoning_content = a1.choices[0].message.reasoning_content;
    const turn2 = [...turn1, reply, { role: 'user', content: 'And 3+3?' }];
    const w = await warm.chat.completions.create({ ...base, messages: turn2 });
    const c = await cold.chat.completions.create({ ...base, messages: turn2 });
    assert(w.usage.prompt_tokens_details.cached_tokens > 0, 'warm cached_tokens is 0');
    eq(c.usage.prompt_tokens_details.cached_tokens, 0, 'cold cached_tokens');
    eq(w.usage.prompt_tokens, c.usage.prompt_tokens, 'prompt_tokens warm vs cold');
    eq(w.choices[0].message, c.choices[0].message, 'message warm vs cold');
    eq(w.choices[0].finish_reason, c.choices[0].finish_reason, 'finish_reason warm vs cold');
  });

  await check('control-token text in user content stays plain text', async () => {
    const plain = await warm.chat.completions.create({ ...base, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] });
    const marks = '[e~[]~b]'.repeat(5);
    const r = await warm.chat.completions.create({ ...base, max_tokens: 1, messages: [{ role: 'user', content: 'x' + marks }] });
    checkMessage(r.choices[0]);
    // As control tokens the 10 markers would add about 10 tokens; as text each is several.
    const added = r.usage.prompt_tokens - plain.usage.prompt_tokens;
    assert(added >= 20, `markers added only ${added} tokens: parsed as control tokens?`);
  });

  await check('/v1/completions: text, tokenizer count, streaming equals non-streaming', async () => {
    const req = { model: 'tiny', prompt: 'Hello world', temperature: 0, max_tokens: 6 };
    const r = await warm.completions.create(req);
    eq(r.object, 'text_completion', 'object');
    assert(typeof r.choices[0].text === 'string', 'text');
    checkUsage(r.usage, 6);
    const ids = execFileSync(process.env.M3_BIN, ['tokenize', '-m', process.env.M3_MODEL, '--special', '--text', 'Hello world']).toString().trim();
    eq(r.usage.prompt_tokens, ids.split(',').length, 'prompt_tokens vs m3 tokenize');
    let text = '';
    for await (const c of await warm.completions.create({ ...req, stream: true })) text += c.choices[0] ? c.choices[0].text : '';
    eq(text, r.choices[0].text, 'streamed text');
  });

  await check('400 errors name the field (SDK APIError)', async () => {
    await expectApiError(warm.chat.completions.create({ ...base, messages: [{ role: 'wizard', content: 'x' }] }), 400, 'messages[0].role');
    await expectApiError(warm.chat.completions.create({ model: 'tiny' }), 400, 'messages');
    await expectApiError(warm.chat.completions.create({ ...base, temperature: 'hot' }), 400, 'temperature');
    await expectApiError(warm.chat.completions.create({ ...base, max_tokens: 0 }), 400, 'max_tokens');
    const e = await expectApiError(warm.chat.completions.create({ ...base, messages: [{ role: 'user', content: 'word '.repeat(20000) }] }), 400, 'context');
    eq(e.code, 'context_length_exceeded', 'code');
  });

  await check('malformed JSON -> 400, unknown path -> 404, OpenAI error bodies', async () => {
    let r = await fetch(URL_WARM + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"messages": [' });
    eq(r.status, 400, 'status');
    let body = await r.json();
    assert(body.error && typeof body.error.message === 'string' && body.error.type, 'error body');
    r = await fetch(URL_WARM + '/v1/nothing-here');
    eq(r.status, 404, 'status');
    body = await r.json();
    assert(body.error.message.includes('/v1/nothing-here'), '404 message');
  });

  await check('401 with a wrong or missing API key; the right key works', async () => {
    await expectApiError(wrongKey.models.list(), 401, 'API key');
    const r = await fetch(URL_COLD + '/v1/models');
    eq(r.status, 401, 'status without a key');
    eq((await fetch(URL_COLD + '/health')).status, 200, '/health needs no key');
    const list = await cold.models.list();
    assert(list.data.length === 1, 'models with the key');
  });

  await check('client abort cancels the generation; the server keeps serving', async () => {
    const before = metric(await metrics(URL_WARM), 'm3_cancelled_total');
    const stream = await warm.chat.completions.create({ ...base, max_tokens: 15000, ignore_eos: true, stream: true });
    let n = 0;
    for await (const c of stream) { if (++n >= 4) break; }  // leaving the loop aborts the request
    stream.controller.abort();
    let after = before;
    for (let i = 0; i < 100 && !(after > before); i++) {
      await new Promise((res) => setTimeout(res, 100));
      after = metric(await metrics(URL_WARM), 'm3_cancelled_total');
    }
    assert(after > before, `m3_cancelled_total stayed ${after}`);
    eq((await fetch(URL_WARM + '/health')).status, 200, '/health');
    const r = await warm.chat.completions.create(base);
    eq(r.choices[0].message, first.choices[0].message, 'a new request after the abort');
  });

  await check('/metrics: Prometheus text with requests, tokens, cache, speed, queue', async () => {
    const t = await metrics(URL_WARM);
    assert(/^m3_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\} [1-9]/m.test(t), 'requests by status');
    assert(/^m3_requests_total\{endpoint="\/v1\/chat\/completions",status="400"\} [1-9]/m.test(t), '400s counted');
    assert(metric(t, 'm3_prompt_tokens_total') > 0, 'prompt tokens');
    assert(metric(t, 'm3_completion_tokens_total') > 0, 'completion tokens');
    assert(metric(t, 'm3_cached_prompt_tokens_total') > 0, 'cached tokens');
    assert(metric(t, 'm3_prefill_tokens_per_second') > 0, 'prefill speed');
    assert(metric(t, 'm3_decode_tokens_per_second') > 0, 'decode speed');
    eq(metric(t, 'm3_queue_length'), 0, 'queue length');
  });

  console.log(`node: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
})().catch((e) => {
  console.log(`FAIL - unexpected: ${e && e.stack ? e.stack : e}`);
  console.log(`node: ${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
