#!/usr/bin/env node
// The serving benchmark's HTTP client (bench/serve/run.sh): drives an OpenAI-compatible server
// (`colossal-run M.cplan serve`) with the official `openai` npm client, as vLLM's
// benchmark_serving does: streamed completions of token-id prompts, greedy, end of sequence
// ignored, at most `concurrency` requests in flight (each of that many workers sends its next
// request when its last one finished).
//
//   node http_client.cjs --url http://HOST:PORT --model NAME --requests R.jsonl --concurrency C
//                        --timings OUT.json [--npm third_party/npm]
//
// R.jsonl is prepare.py's requests-cC.jsonl: the `warm-*` requests run first, all at once and
// untimed; the others are the measured ones. OUT.json has report.py's format: {"wall_s",
// "requests": [{"id", "arrival_s", "token_s", "token_ids"}]}, seconds since the first measured
// request was sent; a token's time is the arrival of the chunk that carried it.
'use strict';
const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

function arg(name, dflt) {
  const i = process.argv.indexOf('--' + name);
  if (i > 0 && i + 1 < process.argv.length) return process.argv[i + 1];
  if (dflt === undefined) {
    console.error(`http_client.cjs: --${name} is required`);
    process.exit(2);
  }
  return dflt;
}
const url = arg('url');
const model = arg('model');
const concurrency = Number(arg('concurrency'));
const timingsPath = arg('timings');
const npmDir = arg('npm', path.join(__dirname, '..', '..', 'third_party', 'npm'));
let OpenAI = createRequire(path.join(path.resolve(npmDir), 'package.json'))('openai');
OpenAI = OpenAI.default || OpenAI.OpenAI || OpenAI;

const requests = fs.readFileSync(arg('requests'), 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
const warmup = requests.filter((r) => r.id.startsWith('warm'));
const measured = requests.filter((r) => !r.id.startsWith('warm'));
const client = new OpenAI({ baseURL: url + '/v1', apiKey: 'none', maxRetries: 0, timeout: 600000 });

let t0 = 0;
const now = () => (performance.now() - t0) / 1000;

async function send(r) {
  const out = { id: r.id, arrival_s: now(), token_s: [], token_ids: [] };
  const stream = await client.completions.create({
    model, prompt: r.prompt, max_tokens: r.max_tokens, temperature: 0, ignore_eos: true,
    return_token_ids: true, stream: true,
  });
  for await (const chunk of stream) {
    const t = now();
    for (const choice of chunk.choices || []) {
      for (const id of choice.token_ids || []) {
        out.token_s.push(t);
        out.token_ids.push(id);
      }
    }
  }
  if (out.token_ids.length !== r.max_tokens) throw new Error(`${r.id}: ${out.token_ids.length} tokens, not ${r.max_tokens}`);
  return out;
}

async function main() {
  await Promise.all(warmup.map(send));
  t0 = performance.now();
  const done = [];
  let next = 0;
  const worker = async () => {
    while (next < measured.length) done.push(await send(measured[next++]));
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const wall = now();
  done.sort((a, b) => measured.findIndex((r) => r.id === a.id) - measured.findIndex((r) => r.id === b.id));
  fs.writeFileSync(timingsPath, JSON.stringify({ wall_s: wall, requests: done }) + '\n');
}

main().catch((e) => {
  console.error(`http_client.cjs: ${e.stack || e}`);
  process.exit(1);
});
