#!/usr/bin/env node
'use strict';
// Runs an ONNX model with onnxruntime (onnxruntime-node, CPU) on .npy inputs and writes its outputs
// as .npy files: the reference the end-to-end tests and benchmarks compare Colossal against.
//
//   node test/e2e/ort_reference.js MODEL.onnx --input NAME=FILE.npy ... [--inputs-dir DIR]
//        --output-dir DIR [--threads N]                       # writes DIR/<output>.npy, named as colossal-run names it
//   node test/e2e/ort_reference.js MODEL.onnx --inputs-dir DIR --bench --repeat N --warmup N [--threads N]
//        # prints "forward: median X ms, min Y ms over N runs" to stderr (colossal-run's format)
//   node test/e2e/ort_reference.js --probe   # exit 0 when onnxruntime-node loads, else 2
//
// Threads: intra_op_num_threads = N (default 1), inter_op_num_threads = 1, sequential execution.
// onnxruntime-node is loaded from third_party/npm/node_modules (scripts/install-deps.sh installs it),
// or from $COLOSSAL_ORT_NODE_MODULES.
const fs = require('fs');
const path = require('path');
const { readNpy, writeNpy, tensorFileName } = require('./npy');

function usage(msg) {
  if (msg) console.error(`ort_reference.js: ${msg}`);
  console.error('usage: ort_reference.js MODEL.onnx (--input NAME=FILE.npy ... | --inputs-dir DIR) ' +
                '[--output-dir DIR] [--threads N] [--bench --repeat N --warmup N]');
  process.exit(2);
}

function parseArgs(argv) {
  const a = { model: null, inputs: [], inputsDir: null, outputDir: null, threads: 1, bench: false,
              repeat: 10, warmup: 3 };
  const need = (i) => { if (i + 1 >= argv.length) usage(`${argv[i]} needs a value`); return argv[i + 1]; };
  const posInt = (flag, s, min) => {
    const v = Number(s);
    if (!Number.isInteger(v) || v < min) usage(`${flag} wants an integer >= ${min}, got '${s}'`);
    return v;
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--input') {
      const v = need(i++); const eq = v.indexOf('=');
      if (eq <= 0) usage(`--input wants NAME=FILE.npy, got '${v}'`);
      a.inputs.push([v.slice(0, eq), v.slice(eq + 1)]);
    } else if (arg === '--inputs-dir') a.inputsDir = need(i++);
    else if (arg === '--output-dir') a.outputDir = need(i++);
    else if (arg === '--threads') a.threads = posInt(arg, need(i++), 1);
    else if (arg === '--repeat') a.repeat = posInt(arg, need(i++), 1);
    else if (arg === '--warmup') a.warmup = posInt(arg, need(i++), 0);
    else if (arg === '--bench') a.bench = true;
    else if (arg === '-h' || arg === '--help') usage();
    else if (arg.startsWith('-')) usage(`unknown option ${arg}`);
    else if (a.model === null) a.model = arg;
    else usage(`unexpected argument ${arg}`);
  }
  if (!a.model) usage('no model given');
  if (!a.bench && !a.outputDir) usage('--output-dir is required (or --bench)');
  return a;
}

function loadOrt() {
  const dirs = [process.env.COLOSSAL_ORT_NODE_MODULES,
                path.join(__dirname, '..', '..', 'third_party', 'npm', 'node_modules')].filter(Boolean);
  for (const d of dirs) {
    const p = path.join(d, 'onnxruntime-node');
    if (fs.existsSync(p)) return require(p);
  }
  console.error(`ort_reference.js: onnxruntime-node not found in ${dirs.join(' or ')}; ` +
                'run scripts/install-deps.sh');
  process.exit(2);
}

const median = (xs) => {
  const s = [...xs].sort((x, y) => x - y); const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};

async function main() {
  if (process.argv[2] === '--probe') {  // test/e2e/require.py: can the tests use onnxruntime here?
    loadOrt();
    return;
  }
  const a = parseArgs(process.argv.slice(2));
  const ort = loadOrt();
  const session = await ort.InferenceSession.create(a.model, {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });

  const files = new Map(a.inputs);
  if (a.inputsDir) {
    for (const name of session.inputNames) {
      const f = path.join(a.inputsDir, `${name}.npy`);
      if (!files.has(name) && fs.existsSync(f)) files.set(name, f);
    }
  }
  const feeds = {};
  for (const name of session.inputNames) {
    if (!files.has(name)) usage(`model input '${name}' has no --input (inputs: ${session.inputNames.join(', ')})`);
    const t = readNpy(files.get(name));
    feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
  }
  for (const name of files.keys()) {
    if (!session.inputNames.includes(name)) usage(`'${name}' is not an input of ${a.model}`);
  }

  if (a.bench) {
    for (let i = 0; i < a.warmup; i++) await session.run(feeds);
    const times = [];
    for (let i = 0; i < a.repeat; i++) {
      const t0 = process.hrtime.bigint();
      await session.run(feeds);
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    console.error(`forward: median ${median(times).toFixed(3)} ms, min ${Math.min(...times).toFixed(3)} ms ` +
                  `over ${a.repeat} runs`);
    if (!a.outputDir) return;
  }

  const results = await session.run(feeds);
  fs.mkdirSync(a.outputDir, { recursive: true });
  for (const name of session.outputNames) {
    writeNpy(path.join(a.outputDir, tensorFileName(name)), results[name]);
  }
}

main().catch((e) => { console.error(`ort_reference.js: ${e.message || e}`); process.exit(1); });
