#!/usr/bin/env node
// The OpenAI-compatible server end to end (docs/serving.md "Server", e2e.serve.openai).
//
//   node openai_e2e.cjs --server colossal-serve-toy --tokenizer tokenizer.bin --npm third_party/npm
//                       [--clients 32] [--rounds 3] [--poisson 500] [--rate 150]
//
// Starts the server on a free loopback port and drives it with the official `openai` npm client
// and with raw HTTP: /v1/models, /health; completions and chat, streamed and not, streamed text
// and token ids equal to the non-streamed ones; seeds, n > 1, logprobs, stop strings, a prompt of
// token ids, the prefix cache's cached_tokens; every bad request's status and error body, the
// server serving on after them; a client that disconnects mid-stream has its request aborted and
// its blocks freed; then `clients` concurrent streaming clients × `rounds` requests each: no
// failure, no lost or duplicated chunk, every output equal to the same request run alone; /metrics
// after them; `poisson` requests arriving at a Poisson rate, at most `clients` at once, three
// rounds: the same, and the server's resident memory flat; SIGTERM stops the server. Exit 0 all passed, 1 a check failed, 77 skipped (the
// tokenizer or the openai package is absent).
'use strict';
const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');
const { createRequire } = require('module');

const SKIP = 77;
function arg(name, dflt) {
  const i = process.argv.indexOf('--' + name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}
const serverBin = arg('server');
// --plan PLAN: serverBin is colossal-run, serving a `mode: generate` plan (`colossal-run PLAN serve`)
// instead of the toy decoder.
const plan = arg('plan', '');
const tokenizer = arg('tokenizer');
const npmDir = arg('npm', path.join(__dirname, '..', '..', 'third_party', 'npm'));
const CLIENTS = Number(arg('clients', 32));
const ROUNDS = Number(arg('rounds', 3));
const POISSON = Number(arg('poisson', 500));  // requests per round of the Poisson load (0: none)
const RATE = Number(arg('rate', 150));        // their arrival rate, per second

if (!tokenizer || !fs.existsSync(tokenizer)) {
  console.log(`SKIPPED: the tokenizer ${tokenizer} is absent`);
  process.exit(SKIP);
}
let OpenAI;
try {
  OpenAI = createRequire(path.join(path.resolve(npmDir), 'package.json'))('openai');
  OpenAI = OpenAI.default || OpenAI.OpenAI || OpenAI;
} catch (e) {
  console.log(`SKIPPED: the openai npm package is not in ${npmDir} (scripts/install-deps.sh): ${e.message}`);
  process.exit(SKIP);
}
if (!serverBin || !fs.existsSync(serverBin)) {
  console.error(`error: the server binary ${serverBin} does not exist`);
  process.exit(1);
}

let passed = 0, failed = 0;
function check(cond, what, detail) {
  if (cond) {
    passed++;
  } else {
    failed++;
    console.log(`FAIL: ${what}${detail === undefined ? '' : ': ' + (typeof detail === 'string' ? detail : JSON.stringify(detail))}`);
  }
  return cond;
}
// Against a compiled plan (--plan), logprobs are compared to 1e-5: the paged attention kernels are
// batch-invariant, but the GEMMs (oneDNN sgemm) may round a row differently at another step size
// (a prefix-cache hit prefills fewer rows), by ~1e-7; tokens and text are compared exactly.
function near(a, b) {
  if (typeof a === 'number' && typeof b === 'number' && !(Number.isInteger(a) && Number.isInteger(b)))
    return Math.abs(a - b) <= 1e-5;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => near(x, b[i]));
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => near(a[k], b[k]));
  }
  return a === b;
}
function eq(a, b, what) {
  const sa = JSON.stringify(a), sb = JSON.stringify(b);
  const same = plan ? near(a, b) : sa === sb;
  return check(same, what, sa === sb ? undefined : `${sa.slice(0, 300)} != ${sb.slice(0, 300)}`);
}

// ------------------------------------------------------------------------------ the server
function startServer(extra = []) {
  const args = plan ? [plan, 'serve', '--tokenizer', tokenizer, '--port', '0', '--quiet', '--model-name', 'toy',
                       '--threads', '1']
                    : ['--tokenizer', tokenizer, '--port', '0', '--quiet', '--model-name', 'toy',
                       '--max-batch-tokens', '64', '--max-batch-seqs', '16', ...extra];
  const child = spawn(serverBin, args,
                      // The toy's kernels are tiny: one thread each, no OpenMP threads contending
                      // for the cores with the test's own.
                      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, OMP_NUM_THREADS: '1' } });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('the server did not say "listening on" in 30 s: ' + stderr)), 30000);
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ child, url: m[1], stderr: () => stderr });
      }
    });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`the server exited (${code}): ${stderr}`)); });
  });
}

// ------------------------------------------------------------------------------ raw HTTP
async function post(url, body, raw = false) {
  const r = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                               body: raw ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* a stream or not JSON */ }
  return { status: r.status, text, json, type: r.headers.get('content-type') };
}

/// A streamed answer read as server-sent events: the parsed chunks and whether it ended in [DONE].
async function rawStream(url, body) {
  const r = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  const events = text.split('\n\n').filter((e) => e.length);
  const chunks = [];
  let done = false, malformed = 0, afterDone = 0;
  for (const e of events) {
    if (!e.startsWith('data: ')) { malformed++; continue; }
    const data = e.slice(6);
    if (done) afterDone++;
    if (data === '[DONE]') { done = true; continue; }
    try { chunks.push(JSON.parse(data)); } catch (err) { malformed++; }
  }
  return { status: r.status, type: r.headers.get('content-type'), chunks, done, malformed, afterDone };
}

async function metrics(base) {
  const text = await (await fetch(base + '/metrics')).text();
  const value = (name) => {
    const m = new RegExp('^' + name + '(?:\\{[^}]*\\})? (\\S+)$', 'm').exec(text);
    return m ? Number(m[1]) : NaN;
  };
  return { text, value };
}

/// /metrics once the gauges say nothing runs (the engine updates them just after the step that
/// sent the last tokens), or after 2 s.
async function settled(base) {
  const t0 = Date.now();
  for (;;) {
    const m = await metrics(base);
    if ((m.value('colossal_requests_running') === 0 && m.value('colossal_requests_waiting') === 0 &&
         m.value('colossal_kv_cache_usage_ratio') === 0) || Date.now() - t0 > 2000) return m;
    await new Promise((res) => setTimeout(res, 20));
  }
}

// ------------------------------------------------------------------------------ folding answers
/// The text, token ids, finish reasons and logprobs of a non-streamed answer, per choice.
function whole(resp, chat) {
  return resp.choices.map((c) => ({
    text: chat ? c.message.content : c.text,
    token_ids: c.token_ids,
    finish_reason: c.finish_reason,
    logprobs: chat ? (c.logprobs ? c.logprobs.content.map((t) => [t.token, t.logprob]) : null)
                   : (c.logprobs ? c.logprobs.token_logprobs : null),
  }));
}
/// The same from streamed chunks; `bad` counts chunks after a choice finished, finishes twice.
function folded(chunks, chat, n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push({ text: '', token_ids: [], finish_reason: null, logprobs: null, bad: 0 });
  let usage = null;
  for (const ch of chunks) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices || []) {
      const o = out[c.index];
      if (!o) { out.push({ bad: 1 }); continue; }
      if (o.finish_reason) o.bad++;
      o.text += chat ? (c.delta && c.delta.content) || '' : c.text;
      if (c.token_ids) o.token_ids.push(...c.token_ids);
      if (c.logprobs) {
        o.logprobs = o.logprobs || [];
        if (chat) o.logprobs.push(...c.logprobs.content.map((t) => [t.token, t.logprob]));
        else o.logprobs.push(...c.logprobs.token_logprobs);
      }
      if (c.finish_reason) o.finish_reason = c.finish_reason;
    }
  }
  return { choices: out, usage };
}
function strip(choices) { return choices.map(({ bad, ...rest }) => rest); }

// ------------------------------------------------------------------------------ the checks
async function basics(client, base) {
  const models = await client.models.list();
  eq(models.data.map((m) => m.id), ['toy'], '/v1/models lists the model');
  const health = await fetch(base + '/health');
  check(health.status === 200, '/health answers 200', health.status);

  const story = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.';
  const cases = [
    ['completions, greedy', false, { prompt: story, max_tokens: 40, temperature: 0 }],
    ['completions, seeded top-p', false, { prompt: 'The cat', max_tokens: 30, temperature: 0.9, top_p: 0.9, seed: 7 }],
    ['completions, seeded top-k min-p penalty', false,
     { prompt: 'One day', max_tokens: 30, temperature: 1.1, top_k: 40, min_p: 0.05, repetition_penalty: 1.2, seed: 11 }],
    ['completions, token ids, logprobs 2', false, { prompt: [1, 400, 300, 259, 77], max_tokens: 20, temperature: 0, logprobs: 2 }],
    ['completions, n 3 seeded', false, { prompt: 'Tom had a', max_tokens: 16, temperature: 1.0, seed: 5, n: 3 }],
    ['chat, greedy', true, { messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me about a dog.' }],
                             max_tokens: 30, temperature: 0, ignore_eos: true }],
    ['chat, seeded, logprobs', true, { messages: [{ role: 'user', content: 'Hi there' }], max_tokens: 25, temperature: 0.8,
                                        seed: 3, logprobs: true, top_logprobs: 2 }],
  ];
  const results = {};
  for (const [name, chat, params] of cases) {
    const body = { model: 'toy', return_token_ids: true, ...params };
    const api = chat ? client.chat.completions : client.completions;
    const resp = await api.create(body);
    const a = whole(resp, chat);
    const n = params.n || 1;
    check(resp.choices.length === n, `${name}: ${n} choice(s)`, resp.choices.length);
    const total = a.reduce((s, c) => s + c.token_ids.length, 0);
    check(resp.usage.completion_tokens === total, `${name}: usage.completion_tokens = the token_ids`, [resp.usage, total]);
    check(resp.usage.total_tokens === resp.usage.prompt_tokens + resp.usage.completion_tokens, `${name}: total_tokens`);
    check(a.every((c) => c.finish_reason === 'stop' || c.finish_reason === 'length'), `${name}: finish_reason`, a);
    check(a.every((c) => c.text.length > 0), `${name}: some text`, a);
    if (params.logprobs)
      check(a.every((c) => c.logprobs && c.logprobs.length === c.token_ids.length), `${name}: one logprob per token`, a[0].logprobs);
    if (chat) check(resp.object === 'chat.completion' && resp.choices[0].message.role === 'assistant', `${name}: a chat.completion`);
    else check(resp.object === 'text_completion', `${name}: a text_completion`);
    // The same request again gives the same answer (greedy, or the seed).
    const again = whole(await api.create(body), chat);
    eq(again, a, `${name}: repeated, the same answer`);
    // Streamed through the client: the deltas add up to the answer.
    const chunks = [];
    for await (const ch of await api.create({ ...body, stream: true, stream_options: { include_usage: true } })) chunks.push(ch);
    const s = folded(chunks, chat, n);
    eq(strip(s.choices), a, `${name}: streamed (openai client) = not streamed`);
    check(s.choices.every((c) => c.bad === 0), `${name}: nothing after a finish`);
    eq(s.usage && s.usage.completion_tokens, resp.usage.completion_tokens, `${name}: streamed usage`);
    // Raw: every event parses and the stream ends in [DONE].
    const raw = await rawStream(base + (chat ? '/v1/chat/completions' : '/v1/completions'), { ...body, stream: true });
    check(raw.status === 200 && /text\/event-stream/.test(raw.type), `${name}: raw stream status and type`, [raw.status, raw.type]);
    check(raw.done && raw.malformed === 0 && raw.afterDone === 0, `${name}: raw stream ends in data: [DONE]`, raw);
    eq(strip(folded(raw.chunks, chat, n).choices), a, `${name}: streamed (raw) = not streamed`);
    results[name] = { resp, a, body };
  }
  // n = 3: choice 0 is the request with n = 1 and the same seed; the others differ from it.
  const n3 = results['completions, n 3 seeded'];
  const soloResp = await client.completions.create({ ...n3.body, n: 1 });
  eq(n3.a[0], whole(soloResp, false)[0], 'n 3: choice 0 = n 1 with the same seed');
  check(n3.a[1].text !== n3.a[0].text || n3.a[2].text !== n3.a[0].text, 'n 3: the choices are independent samples');
  eq(n3.resp.usage.prompt_tokens, soloResp.usage.prompt_tokens, 'n 3: the prompt counted once');

  // Stop strings: the answer ends before the first occurrence, finish_reason stop.
  const greedy = results['completions, greedy'];
  const text = greedy.a[0].text;
  const chars = Array.from(text);  // code points: a stop string never splits a surrogate pair
  const k = Math.floor(chars.length / 2);
  const stop = chars.slice(k, k + 3).join('');
  const cut = text.indexOf(stop);
  const stopped = await client.completions.create({ ...greedy.body, stop: [stop, 'zzzz-never'] });
  eq(stopped.choices[0].text, text.slice(0, cut), `stop ${JSON.stringify(stop)}: the text before it`);
  eq(stopped.choices[0].finish_reason, 'stop', 'stop string: finish_reason stop');
  const chunks = [];
  for await (const ch of await client.completions.create({ ...greedy.body, stop: [stop, 'zzzz-never'], stream: true })) chunks.push(ch);
  eq(folded(chunks, false, 1).choices[0].text, text.slice(0, cut), 'stop string, streamed: the same text');
  check(stopped.choices[0].token_ids.length < greedy.a[0].token_ids.length, 'stop string: fewer tokens');

  // A stop token id: the first generated token.
  const first = greedy.a[0].token_ids[0];
  const st = await client.completions.create({ ...greedy.body, stop: [first] });
  eq([st.choices[0].token_ids, st.choices[0].finish_reason], [[first], 'stop'], 'stop token id: ends at it, kept in token_ids');

  // Prefix cache: the same prompt again reports its full-block prefix as cached, same output.
  const long = 'Lily and Ben went to the park. They saw a big red ball. ' .repeat(3);
  const p1 = await client.completions.create({ model: 'toy', prompt: long, max_tokens: 8, temperature: 0, return_token_ids: true });
  const p2 = await client.completions.create({ model: 'toy', prompt: long, max_tokens: 8, temperature: 0, return_token_ids: true });
  const L = p1.usage.prompt_tokens;
  eq(p2.usage.prompt_tokens_details.cached_tokens, 16 * Math.floor((L - 1) / 16), `prefix cache: cached_tokens of a ${L}-token prompt`);
  eq(p2.choices[0].token_ids, p1.choices[0].token_ids, 'prefix cache: the same tokens');
}

async function badRequests(client, base) {
  const url = base + '/v1/completions', chatUrl = base + '/v1/chat/completions';
  const msgs = [{ role: 'user', content: 'hi' }];
  const cases = [
    ['malformed JSON', url, '{"model": "toy", "prompt": ', 400, null, 'invalid_json', true],
    ['a body that is not an object', url, '[1, 2, 3]', 400, null, 'invalid_json', true],
    ['malformed messages: no content', chatUrl, { model: 'toy', messages: [{ role: 'user' }] }, 400, 'messages', 'missing_field'],
    ['malformed messages: not a list', chatUrl, { model: 'toy', messages: 'hi' }, 400, 'messages', 'invalid_type'],
    ['malformed messages: a number content', chatUrl, { model: 'toy', messages: [{ role: 'user', content: 5 }] }, 400, 'messages', 'invalid_type'],
    ['temperature < 0', url, { model: 'toy', prompt: 'x', temperature: -0.5 }, 400, 'temperature', 'invalid_value'],
    ['temperature < 0, chat', chatUrl, { model: 'toy', messages: msgs, temperature: -1 }, 400, 'temperature', 'invalid_value'],
    ['top_p > 1', url, { model: 'toy', prompt: 'x', top_p: 1.5 }, 400, 'top_p', 'invalid_value'],
    ['top_p 0', url, { model: 'toy', prompt: 'x', top_p: 0 }, 400, 'top_p', 'invalid_value'],
    ['max_tokens 0', url, { model: 'toy', prompt: 'x', max_tokens: 0 }, 400, 'max_tokens', 'invalid_value'],
    ['max_tokens -1, chat', chatUrl, { model: 'toy', messages: msgs, max_tokens: -1 }, 400, 'max_tokens', 'invalid_value'],
    ['prompt + max_tokens beyond the context', url, { model: 'toy', prompt: 'x', max_tokens: 100000 }, 400, 'max_tokens', 'context_length_exceeded'],
    ['a token id outside the vocabulary', url, { model: 'toy', prompt: [1, 512] }, 400, 'prompt', 'invalid_value'],
    ['unknown model', url, { model: 'gpt-4o', prompt: 'x' }, 404, 'model', 'model_not_found'],
    ['unknown model, chat', chatUrl, { model: 'nope', messages: msgs }, 404, 'model', 'model_not_found'],
    ['an unknown route', base + '/v1/nothing', { model: 'toy' }, 404, null, 'not_found'],
  ];
  for (const [name, u, body, status, param, code, raw] of cases) {
    const r = await post(u, raw ? body : body, !!raw);
    const e = r.json && r.json.error;
    check(r.status === status, `${name}: HTTP ${status}`, [r.status, r.text]);
    check(e && typeof e.message === 'string' && e.message.length > 0 && typeof e.type === 'string' &&
          'param' in e && 'code' in e, `${name}: {"error": {message, type, param, code}}`, r.text);
    if (e) eq([e.param, e.code], [param, code], `${name}: param and code`);
  }
  // Through the openai client: the error object arrives as an APIError.
  try {
    await client.chat.completions.create({ model: 'toy', messages: msgs, top_p: 2 });
    check(false, 'client: top_p 2 throws');
  } catch (err) {
    eq([err.status, err.param, err.code], [400, 'top_p', 'invalid_value'], 'client: top_p 2 is an APIError 400');
  }
  try {
    await client.completions.create({ model: 'other', prompt: 'x' });
    check(false, 'client: an unknown model throws');
  } catch (err) {
    eq([err.status, err.code], [404, 'model_not_found'], 'client: an unknown model is a 404');
  }
  // And the server goes on serving.
  const after = await client.completions.create({ model: 'toy', prompt: 'After the errors', max_tokens: 5, temperature: 0 });
  check(after.choices[0].text.length > 0, 'a request after the bad ones is served');
}

/// On a server whose steps take 5 ms (so that 300 tokens take 1.5 s): a streaming and a
/// non-streaming client that go away have their requests aborted and blocks freed.
async function disconnect(base) {
  // A compiled plan's context is 512: the longest generation it holds; the toy's 300 tokens take 1.5 s.
  const maxTokens = plan ? 480 : 300;
  const body = { model: 'toy', prompt: 'A long story', max_tokens: maxTokens, temperature: 0.7, seed: 1, ignore_eos: true };
  for (const stream of [true, false]) {
    const what = `a ${stream ? 'streaming' : 'non-streaming'} client that disconnects`;
    const before = await metrics(base);
    const ctl = new AbortController();
    const t0 = Date.now();
    try {
      const r = await fetch(base + '/v1/completions', {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ctl.signal,
        body: JSON.stringify({ ...body, stream }),
      });
      if (stream) {
        const reader = r.body.getReader();
        for (let got = 0; got < 3; got++) if ((await reader.read()).done) break;
      } else {
        await new Promise((res) => setTimeout(res, plan ? 50 : 300));
      }
    } catch (e) { /* the abort */ }
    ctl.abort();
    const gone = Date.now();
    let m;
    for (;;) {
      await new Promise((res) => setTimeout(res, 50));
      m = await metrics(base);
      if ((m.value('colossal_requests_running') === 0 && m.value('colossal_kv_cache_usage_ratio') === 0) || Date.now() - gone > 5000) break;
    }
    check(m.value('colossal_requests_running') === 0 && m.value('colossal_requests_waiting') === 0,
          `${what}: its request is aborted`, m.text.slice(0, 400));
    eq(m.value('colossal_kv_cache_usage_ratio'), 0, `${what}: its blocks are freed`);
    eq(m.value('colossal_request_aborted_total') - before.value('colossal_request_aborted_total'), 1, `${what}: counted as aborted`);
    const made = m.value('colossal_generation_tokens_total') - before.value('colossal_generation_tokens_total');
    check(made < maxTokens, `${what}: generation stopped early`, made);
    console.log(`${what}: aborted within ${Date.now() - gone} ms, after ${made} of ${maxTokens} tokens`);
  }
}

/// `clients` concurrent streaming clients, `rounds` requests each; every answer against the same
/// request run alone (non-streamed, one at a time).
async function concurrency(client, base) {
  const prompts = ['Once upon a time', 'The little dog', 'Sara liked to', 'In the big forest there', 'Tim and his mom',
                   'It was a sunny day', 'The bird flew', 'Max found a box'];
  const requests = [];
  for (let i = 0; i < CLIENTS * ROUNDS; i++) {
    const chat = i % 4 === 3;
    const sampled = i % 3 === 1;
    const params = { model: 'toy', max_tokens: 8 + (i * 7) % 41, temperature: sampled ? 0.9 : 0, return_token_ids: true };
    if (sampled) params.seed = 100 + i;
    if (chat) params.messages = [{ role: 'user', content: prompts[i % prompts.length] }];
    else params.prompt = prompts[i % prompts.length];
    requests.push({ chat, params });
  }
  const solo = [];
  const t0 = Date.now();
  for (const r of requests) {
    const api = r.chat ? client.chat.completions : client.completions;
    solo.push(whole(await api.create(r.params), r.chat)[0]);
  }
  const soloSeconds = (Date.now() - t0) / 1000;
  let failures = 0, mismatches = 0, tokens = 0, chunks = 0;
  const t1 = Date.now();
  await Promise.all(Array.from({ length: CLIENTS }, async (_, c) => {
    for (let k = 0; k < ROUNDS; k++) {
      const i = c * ROUNDS + k;
      const r = requests[i];
      try {
        let got;
        if (c % 2 === 0) {  // the openai client
          const api = r.chat ? client.chat.completions : client.completions;
          const list = [];
          for await (const ch of await api.create({ ...r.params, stream: true })) list.push(ch);
          got = folded(list, r.chat, 1);
          chunks += list.length;
        } else {  // raw, checking the [DONE] end
          const raw = await rawStream(base + (r.chat ? '/v1/chat/completions' : '/v1/completions'), { ...r.params, stream: true });
          if (raw.status !== 200 || !raw.done || raw.malformed || raw.afterDone) throw new Error('bad stream ' + JSON.stringify(raw).slice(0, 300));
          got = folded(raw.chunks, r.chat, 1);
          chunks += raw.chunks.length;
        }
        const o = got.choices[0];
        tokens += o.token_ids.length;
        if (o.bad || JSON.stringify(strip([o])[0]) !== JSON.stringify(solo[i])) {
          mismatches++;
          if (mismatches <= 3) console.log(`mismatch on request ${i}: ${JSON.stringify(strip([o])[0]).slice(0, 200)} vs ${JSON.stringify(solo[i]).slice(0, 200)}`);
        }
      } catch (err) {
        failures++;
        if (failures <= 3) console.log(`request ${i} failed: ${err.message}`);
      }
    }
  }));
  const seconds = (Date.now() - t1) / 1000;
  eq(failures, 0, `${CLIENTS} concurrent streaming clients x ${ROUNDS}: failures`);
  eq(mismatches, 0, `${CLIENTS} x ${ROUNDS}: outputs equal to solo runs (no lost or duplicated chunk)`);
  console.log(`concurrency: ${requests.length} streamed requests from ${CLIENTS} clients in ${seconds.toFixed(2)} s ` +
              `(${(requests.length / seconds).toFixed(1)} requests/s, ${(tokens / seconds).toFixed(0)} tokens/s, ${chunks} chunks); ` +
              `the same requests one at a time: ${soloSeconds.toFixed(2)} s`);
  const m = await settled(base);
  eq([m.value('colossal_requests_running'), m.value('colossal_requests_waiting'), m.value('colossal_kv_cache_usage_ratio')],
     [0, 0, 0], '/metrics after the load: nothing running or waiting, no block held');
  check(m.value('colossal_time_to_first_token_seconds_count') > 0 && m.value('colossal_time_per_output_token_seconds_count') > 0,
        '/metrics: TTFT and TPOT histograms');
  check(m.value('colossal_prefix_cache_hits_total') > 0, '/metrics: prefix-cache hits');
  check(/# TYPE colossal_time_to_first_token_seconds histogram/.test(m.text) &&
        /colossal_time_to_first_token_seconds_bucket\{model_name="[^"]+",le="\+Inf"\}/.test(m.text) &&
        /colossal_time_to_first_token_seconds_count\{model_name="[^"]+"\} /.test(m.text),
        '/metrics: Prometheus histogram text, labelled by model_name like every other series');
}

/// A deterministic stream of numbers in [0, 1) (a 32-bit LCG), for arrival times and requests.
function lcg(seed) {
  let x = seed >>> 0;
  return () => { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; return x / 4294967296; };
}

/// `POISSON` requests arriving at a Poisson rate (exponential gaps, mean 1 / RATE s), at most
/// CLIENTS in flight, three rounds of the same requests: no failure, every answer equal to the
/// request run alone, the server's resident memory flat across the rounds.
async function poissonLoad(client, base, pid) {
  const rand = lcg(2024);
  const prompts = ['Once upon a time', 'The little dog', 'Sara liked to', 'In the big forest there', 'Tim and his mom',
                   'It was a sunny day', 'The bird flew', 'Max found a box', 'Lily wanted', 'A big red'];
  const requests = [];
  for (let i = 0; i < POISSON; i++) {
    const chat = i % 5 === 4, sampled = i % 3 === 1;
    const params = { model: 'toy', max_tokens: 4 + Math.floor(rand() * 40), temperature: sampled ? 0.8 : 0, return_token_ids: true };
    if (sampled) params.seed = 5000 + i;
    const text = prompts[Math.floor(rand() * prompts.length)] + ' ' + 'and then '.repeat(Math.floor(rand() * 6));
    if (chat) params.messages = [{ role: 'user', content: text }];
    else params.prompt = text;
    requests.push({ chat, params });
  }
  const solo = [];
  for (const r of requests) solo.push(whole(await (r.chat ? client.chat.completions : client.completions).create(r.params), r.chat)[0]);
  const rss = () => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;
  const rounds = [];
  let failures = 0, mismatches = 0;
  for (let round = 0; round < 3; round++) {
    let t = 0;
    const arrivals = requests.map(() => (t += -Math.log(1 - rand()) / RATE));
    let next = 0, tokens = 0;
    const t0 = Date.now();
    await Promise.all(Array.from({ length: CLIENTS }, async (_, c) => {
      for (let i = next++; i < requests.length; i = next++) {
        const wait = arrivals[i] * 1000 - (Date.now() - t0);
        if (wait > 0) await new Promise((res) => setTimeout(res, wait));
        const r = requests[i];
        try {
          let got;
          if (c % 2 === 0) {
            const list = [];
            for await (const ch of await (r.chat ? client.chat.completions : client.completions).create({ ...r.params, stream: true })) list.push(ch);
            got = folded(list, r.chat, 1);
          } else {
            const raw = await rawStream(base + (r.chat ? '/v1/chat/completions' : '/v1/completions'), { ...r.params, stream: true });
            if (raw.status !== 200 || !raw.done || raw.malformed || raw.afterDone) throw new Error('bad stream ' + JSON.stringify(raw).slice(0, 300));
            got = folded(raw.chunks, r.chat, 1);
          }
          tokens += got.choices[0].token_ids.length;
          if (got.choices[0].bad || JSON.stringify(strip(got.choices)[0]) !== JSON.stringify(solo[i])) {
            if (++mismatches <= 3) console.log(`poisson: mismatch on request ${i}`);
          }
        } catch (err) {
          if (++failures <= 3) console.log(`poisson: request ${i} failed: ${err.message}`);
        }
      }
    }));
    const seconds = (Date.now() - t0) / 1000;
    rounds.push({ seconds, tokens, rss: rss() });
    console.log(`poisson round ${round + 1}: ${requests.length} requests at ${RATE}/s from ${CLIENTS} clients in ` +
                `${seconds.toFixed(2)} s (${(tokens / seconds).toFixed(0)} tokens/s), server RSS ${rounds[round].rss.toFixed(1)} MiB`);
  }
  eq(failures, 0, `poisson: ${requests.length} requests x 3 rounds: failures`);
  eq(mismatches, 0, 'poisson: every answer equal to the request run alone');
  const grow = rounds[2].rss - rounds[0].rss;
  check(grow < 0.1 * rounds[0].rss + 4, 'poisson: resident memory flat across three rounds', rounds.map((r) => r.rss.toFixed(1)));
}

async function main() {
  let server;
  try {
    server = await startServer();
  } catch (e) {
    console.log('FAIL: ' + e.message);
    process.exit(1);
  }
  const base = server.url;
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  console.log(`server at ${base}`);
  try {
    await basics(client, base);
    await badRequests(client, base);
    await concurrency(client, base);
    if (POISSON > 0) await poissonLoad(client, base, server.child.pid);
    if (plan) {
      await disconnect(base);  // a compiled model's steps take their own time
    } else {
      const slow = await startServer(['--step-delay-ms', '5']);
      try {
        await disconnect(slow.url);
      } finally {
        slow.child.kill('SIGTERM');
      }
    }
  } catch (e) {
    check(false, 'unexpected exception', e.stack || String(e));
  }
  const exited = new Promise((res) => server.child.on('exit', (code, sig) => res([code, sig])));
  server.child.kill('SIGTERM');
  const [code] = await Promise.race([exited, new Promise((res) => setTimeout(() => res([-1]), 10000))]);
  check(code === 0, 'SIGTERM stops the server (exit 0)', [code, server.stderr().slice(-500)]);
  if (code === -1) server.child.kill('SIGKILL');
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main();
