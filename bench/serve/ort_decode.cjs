#!/usr/bin/env node
// onnxruntime as the serving benchmark's second peer (bench/serve/run.sh): a greedy KV-cache
// decode loop over export_kv.py's step graph (onnxruntime-node, CPU execution provider, graph
// optimizations `all`, intra-op threads = --threads, inter-op 1).
//
//   node ort_decode.cjs --model model-kv.onnx --info model-kv.json --requests R.jsonl
//                       --concurrency C --threads N --timings OUT.json [--npm third_party/npm]
//
// R.jsonl is prepare.py's requests-cC.jsonl; its requests run in groups of consecutive lines with
// the same id prefix (`warm`, `r0`, `r1`, ...), each group as one batch: the prompts in one step
// from an empty cache, then one token per sequence per step, the present keys and values fed back
// as the next step's past. Greedy (argmax, lowest id on ties), end of sequence ignored. OUT.json
// has report.py's format; times in seconds since the first group started.
'use strict';
const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

function arg(name, dflt) {
  const i = process.argv.indexOf('--' + name);
  if (i > 0 && i + 1 < process.argv.length) return process.argv[i + 1];
  if (dflt === undefined) {
    console.error(`ort_decode.cjs: --${name} is required`);
    process.exit(2);
  }
  return dflt;
}
const npmDir = arg('npm', path.join(__dirname, '..', '..', 'third_party', 'npm'));
const ort = createRequire(path.join(path.resolve(npmDir), 'package.json'))('onnxruntime-node');
const info = JSON.parse(fs.readFileSync(arg('info'), 'utf8'));
const threads = Number(arg('threads'));
const requests = fs.readFileSync(arg('requests'), 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));

function argmax(data, offset, n) {
  let best = 0;
  for (let i = 1; i < n; i++) if (data[offset + i] > data[offset + best]) best = i;
  return best;
}

async function runGroup(session, group, now) {
  const B = group.length, P = group[0].prompt.length, V = info.vocab;
  const kvDims = (len) => [info.layers, B, info.kv_heads, len, info.head_dim];
  const arrival = now();
  const outs = group.map((r) => ({ id: r.id, arrival_s: arrival, token_s: [], token_ids: [] }));
  let ids = new ort.Tensor('int64', BigInt64Array.from(group.flatMap((r) => r.prompt.map(BigInt))), [B, P]);
  let pastK = new ort.Tensor('float32', new Float32Array(0), kvDims(0));
  let pastV = pastK;
  const maxTokens = Math.max(...group.map((r) => r.max_tokens));
  for (let step = 0; step < maxTokens; step++) {
    const res = await session.run({ input_ids: ids, past_k: pastK, past_v: pastV });
    const t = now();
    const next = new BigInt64Array(B);
    for (let b = 0; b < B; b++) {
      const token = argmax(res.logits.data, b * V, V);
      next[b] = BigInt(token);
      if (outs[b].token_ids.length < group[b].max_tokens) {
        outs[b].token_ids.push(token);
        outs[b].token_s.push(t);
      }
    }
    ids = new ort.Tensor('int64', next, [B, 1]);
    pastK = res.present_k;
    pastV = res.present_v;
  }
  return outs;
}

async function main() {
  const session = await ort.InferenceSession.create(arg('model'), {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all',
  });
  const groups = [];
  for (const r of requests) {
    const g = r.id.split('-')[0];
    if (!groups.length || groups[groups.length - 1].name !== g) groups.push({ name: g, items: [] });
    groups[groups.length - 1].items.push(r);
  }
  const t0 = performance.now();
  const now = () => (performance.now() - t0) / 1000;
  const done = [];
  for (const g of groups) done.push(...(await runGroup(session, g.items, now)));
  fs.writeFileSync(arg('timings'), JSON.stringify({ wall_s: now(), requests: done }) + '\n');
}

main().catch((e) => {
  console.error(`ort_decode.cjs: ${e.stack || e}`);
  process.exit(1);
});
