#!/usr/bin/env python3
"""End-to-end checks of `mode: generate` (docs/serving.md): KV-cache decoding through the paged
cache against full recompute, and continuous batching against solo runs.

Cases:
  shared     the shared pretrained Llamas (aidreams260K, stories260K): greedy decoding from BOS
             through the KV cache gives aidreams260K's greedy_from_bos_60.json token for token, and
             every generated token's logits are within 1e-4 of a full recompute (the inference
             plan run over the whole sequence, teacher-forced with the generated tokens).
  gpt2       a GPT-2 example (learned positions) and
  llama      a Llama example (GQA, RoPE): 20 prompts x 64 tokens run together through the
             scheduler, each request's tokens the argmax of the full recompute's logits at its
             positions and its logits within 1e-4 of them.
  batching   16 requests arriving staggered (prompts of 1-300 tokens, different max_tokens) on a
             Llama example (d_model 256): each request's tokens and logits (bit for bit) equal its
             solo run, for prefill chunks of 16, 64 and whole prompts, and under forced preemption
             (a small block pool; preemptions > 0).
  tp         tensor parallelism (mesh tp=2, two ranks): the 16 staggered requests of `batching`
             give the same tokens as tp=1 for prefill chunks of 16, 64 and whole and under forced
             preemption, every logits row within 1e-4 of tp=1's; a tp=2 server answers a
             completion with the tokens of tp=1; on the shared aidreams260K, greedy from BOS at
             tp=2 equals greedy_from_bos_60.json; specs tp cannot serve are one clear error.
  errors     bad specs and models get one clear error (speculative decoding's draft plans too).
  speculative  speculative decoding on the shared aidreams260K: greedy output with `--speculative
             ngram` and with `--speculative draft` (the draft: stories260K compiled with the same
             spec, and aidreams260K itself) is token for token the non-speculative output, for
             six text prompts run together (`--requests`, EOS stops kept) and for one `--prompt`
             on one thread; --dump-logits gives the non-speculative rows; `serve` answers with
             generate's tokens and counts drafts in /metrics; prints each run's acceptance rate and its wall-clock speedup (tokens/s,
             best of three, against the non-speculative run's); the flag errors.

The full recompute is the model's inference plan (our attention kernel, checked against
onnxruntime by the e2e.<arch> tests), independent of the paged kernels and the scheduler.
"""
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import EXPORT_PY, REPO, SKIP, ToolError, case_main, find_tool, run  # noqa: E402

TOL = 1e-4
PY = sys.executable


def tools(args):
    return find_tool("colossal-opt", args.opt), find_tool("colossal-run", args.run)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def generate_spec(workdir, max_seq_len, block_size=16, seqs=8, tokens=64, kv_blocks=None):
    kv = f", kv_blocks: {kv_blocks}" if kv_blocks else ""
    return write(os.path.join(workdir, "generate.yaml"),
                 f"mode: generate\ngenerate: {{max_seq_len: {max_seq_len}, block_size: {block_size}, "
                 f"max_batch_seqs: {seqs}, max_batch_tokens: {tokens}{kv}}}\n")


def compile_generate(args, model, spec, plan):
    opt, _ = tools(args)
    run([opt, model, "--spec", spec, "-o", plan], "colossal-opt (mode generate)", timeout=900)
    return plan


def full_logits(args, model, sequences, workdir, name):
    """Logits [R, L, V] of the inference plan over `sequences` (a list of token lists) padded
    with token 0 to one length L: position p's logits depend only on tokens [0, p] (causal)."""
    opt, runb = tools(args)
    L = max(len(s) for s in sequences)
    ids = np.zeros((len(sequences), L), dtype=np.int64)
    for r, s in enumerate(sequences):
        ids[r, :len(s)] = s
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "input_ids.npy"), ids)
    spec = write(os.path.join(d, "spec.yaml"), f"mode: inference\ninputs: {{input_ids: [{len(sequences)}, {L}]}}\n")
    plan = os.path.join(d, "model.cplan")
    run([opt, model, "--spec", spec, "-o", plan], "colossal-opt (full recompute)", timeout=900)
    run([runb, plan, "--input", f"input_ids={os.path.join(d, 'input_ids.npy')}", "--output-dir", d,
         "--threads", str(args.threads)], "colossal-run (full recompute)", timeout=900)
    return np.load(os.path.join(d, "logits.npy"))


def generate_requests(args, plan, requests, workdir, name, extra=(), logits=False):
    """Runs `requests` (dicts) through `colossal-run PLAN generate --requests`; returns the output
    lines by id (and the logits dumps when asked) and the stderr summary."""
    _, runb = tools(args)
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    req = write(os.path.join(d, "requests.jsonl"), "".join(json.dumps(r) + "\n" for r in requests))
    out = os.path.join(d, "out.jsonl")
    cmd = [runb, plan, "generate", "--requests", req, "--output", out, "--ignore-eos",
           "--threads", str(args.threads)] + list(extra)
    if logits:
        cmd += ["--dump-logits", os.path.join(d, "logits")]
    _, err, _ = run(cmd, f"colossal-run generate ({name})", timeout=900)
    lines = {}
    with open(out) as f:
        for line in f:
            o = json.loads(line)
            lines[o["id"]] = o
    dumps = {}
    if logits:
        for r in requests:
            dumps[r["id"]] = np.load(os.path.join(d, "logits", r["id"] + ".npy"))
    return lines, dumps, err.strip()


def check_against_full(args, model, plan, prompts, max_tokens, workdir, label):
    """Greedy generation of `prompts` together vs the full recompute of each final sequence."""
    requests = [{"id": f"r{i}", "prompt": p, "max_tokens": max_tokens, "temperature": 0} for i, p in enumerate(prompts)]
    lines, dumps, summary = generate_requests(args, plan, requests, workdir, label + "_gen", logits=True)
    print(summary)
    seqs = [p + lines[r["id"]]["token_ids"] for p, r in zip(prompts, requests)]
    full = full_logits(args, model, seqs, workdir, label + "_full")
    ok = True
    worst = 0.0
    for i, (p, r) in enumerate(zip(prompts, requests)):
        toks = lines[r["id"]]["token_ids"]
        if len(toks) != max_tokens:
            print(f"FAIL {label} {r['id']}: {len(toks)} tokens, expected {max_tokens}")
            ok = False
            continue
        ref = full[i, len(p) - 1:len(p) - 1 + max_tokens]  # the logits that chose each token
        got = dumps[r["id"]]
        err = float(np.max(np.abs(got - ref)))
        worst = max(worst, err)
        argmax = ref.argmax(axis=-1).tolist()
        if err > TOL:
            print(f"FAIL {label} {r['id']}: logits differ from full recompute by {err:.3g} (> {TOL})")
            ok = False
        if argmax != toks:
            j = next(k for k in range(max_tokens) if argmax[k] != toks[k])
            print(f"FAIL {label} {r['id']}: token {j} is {toks[j]}, full recompute's argmax {argmax[j]}")
            ok = False
    print(f"{label}: {len(prompts)} prompts x {max_tokens} tokens, max |logits - full recompute| = {worst:.3g}")
    return ok


def case_shared(args):
    ok = True
    for name in ("aidreams260K", "stories260K"):
        folder = os.path.join(args.shared_dir, "models", name)
        model = os.path.join(folder, "model.onnx")
        if not os.path.isfile(model):
            print(f"SKIPPED: {model} is absent (set --shared-dir)")
            sys.exit(SKIP)
        wd = os.path.join(args.workdir, name)
        os.makedirs(wd, exist_ok=True)
        plan = compile_generate(args, model, generate_spec(wd, 128, seqs=4, tokens=64), os.path.join(wd, "gen.cplan"))
        ok &= check_against_full(args, model, plan, [[1]], 60, wd, name + "_bos")
        if name == "aidreams260K":
            with open(os.path.join(folder, "greedy_from_bos_60.json")) as f:
                ref = json.load(f)
            want = ref[1:]  # BOS, then the 60 greedy tokens
            lines, _, _ = generate_requests(args, plan, [{"id": "bos", "prompt": [1], "max_tokens": 60}], wd, "greedy")
            got = lines["bos"]["token_ids"]
            if got != want:
                print(f"FAIL aidreams260K greedy from BOS: {got[:12]}... vs greedy_from_bos_60.json {want[:12]}...")
                ok = False
            else:
                print("aidreams260K: greedy from BOS equals greedy_from_bos_60.json (60 tokens)")
        rng = np.random.default_rng(1)
        prompts = [[1] + rng.integers(3, 512, int(n)).tolist() for n in rng.integers(0, 40, 6)]
        ok &= check_against_full(args, model, plan, prompts, 40, wd, name + "_prompts")
    return ok


def export(args, arch, name, extra):
    d = os.path.join(args.workdir, name)
    run([PY, EXPORT_PY, "--arch", arch, "--out", d, "--quiet"] + extra, f"export {name}", timeout=600)
    return os.path.join(d, "model.onnx")


def twenty_prompts(seed, vocab, longest):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, int(n)).tolist() for n in rng.integers(1, longest, 20)]


def case_gpt2(args):
    model = export(args, "gpt2", "gpt2", ["--layers", "2", "--d-model", "64", "--heads", "4", "--vocab", "256",
                                          "--context", "256"])
    plan = compile_generate(args, model, generate_spec(args.workdir, 256, seqs=8, tokens=64), os.path.join(args.workdir, "gpt2.cplan"))
    return check_against_full(args, model, plan, twenty_prompts(2, 256, 120), 64, args.workdir, "gpt2")


def case_llama(args):
    model = export(args, "llama", "llama", ["--layers", "2", "--d-model", "64", "--heads", "4", "--kv-heads", "2",
                                            "--vocab", "256", "--context", "256"])
    plan = compile_generate(args, model, generate_spec(args.workdir, 256, seqs=8, tokens=64), os.path.join(args.workdir, "llama.cplan"))
    return check_against_full(args, model, plan, twenty_prompts(3, 256, 120), 64, args.workdir, "llama")


def case_batching(args):
    model = export(args, "llama", "llama_b", ["--layers", "2", "--d-model", "256", "--heads", "4", "--kv-heads", "2",
                                              "--vocab", "256", "--context", "1024"])
    plan = compile_generate(args, model, generate_spec(args.workdir, 512, block_size=16, seqs=16, tokens=512),
                            os.path.join(args.workdir, "batching.cplan"))
    rng = np.random.default_rng(4)
    requests = []
    for i in range(16):
        n = int(rng.integers(1, 301))
        requests.append({"id": f"q{i}", "prompt": rng.integers(0, 256, n).tolist(),
                         "max_tokens": int(rng.integers(1, 65)), "temperature": 0, "arrival_step": 3 * i})
    # Solo: each request alone (whole prompt in one step).
    solo, solo_logits = {}, {}
    for r in requests:
        lines, dumps, _ = generate_requests(args, plan, [dict(r, arrival_step=0)], args.workdir, "solo_" + r["id"],
                                            logits=True)
        solo[r["id"]] = lines[r["id"]]["token_ids"]
        solo_logits[r["id"]] = dumps[r["id"]]
    ok = True
    runs = [("chunk16", ["--max-batch-tokens", "16"]), ("chunk64", ["--max-batch-tokens", "64"]),
            ("whole", []), ("preempt", ["--max-batch-tokens", "64", "--kv-blocks", "40"])]
    for label, extra in runs:
        lines, dumps, summary = generate_requests(args, plan, requests, args.workdir, "batch_" + label, extra,
                                                  logits=True)
        print(f"{label}: {summary}")
        for r in requests:
            if lines[r["id"]]["token_ids"] != solo[r["id"]]:
                print(f"FAIL {label} {r['id']} (prompt {len(r['prompt'])} tokens): differs from its solo run")
                ok = False
            elif not np.array_equal(dumps[r["id"]], solo_logits[r["id"]]):
                # Batch invariance (docs/serving.md): the same bits, not only the same tokens.
                diff = float(np.max(np.abs(dumps[r["id"]] - solo_logits[r["id"]])))
                print(f"FAIL {label} {r['id']}: logits differ from its solo run by up to {diff:.3g} (not bit-equal)")
                ok = False
        if label == "preempt":
            pre = sum(o["preemptions"] for o in lines.values())
            if pre == 0:
                print("FAIL preempt: no request was preempted (the pool should be too small)")
                ok = False
            else:
                print(f"preempt: {pre} preemptions, every output equal to its solo run")
        for r in requests:  # the steps are on the arrival_step clock: no request arrives early
            o = lines[r["id"]]
            if not r["arrival_step"] <= o["arrival_step"] <= o["first_token_step"] <= o["finish_step"]:
                print(f"FAIL {label} {r['id']}: arrival_step {r['arrival_step']} requested, reported steps "
                      f"{o['arrival_step']}, {o['first_token_step']}, {o['finish_step']}")
                ok = False
    # An idle engine jumps to the next arrival: the late request is added at exactly its step.
    late = [dict(requests[0], id="early", max_tokens=2, arrival_step=0),
            dict(requests[1], id="late", max_tokens=2, arrival_step=1000)]
    lines, _, _ = generate_requests(args, plan, late, args.workdir, "idle_jump")
    got = [(lines[i]["arrival_step"], lines[i]["first_token_step"], lines[i]["finish_step"]) for i in ("early", "late")]
    if got[1][0] != 1000 or not (got[1][0] <= got[1][1] <= got[1][2]) or got[0][2] >= 1000:
        print(f"FAIL idle jump: (arrival, first token, finish) steps {got}; the late one should arrive at 1000")
        ok = False
    else:
        print(f"idle jump: (arrival, first token, finish) steps {got}")
    if ok:
        print("every request's logits bit-equal to its solo run's in every schedule")
    return ok


def expect_fail(cmd, *needles, what):
    """Runs CMD, which must fail with a message holding every needle; prints why not. True if so."""
    try:
        run(cmd, what, timeout=600, quiet=True)
        print(f"FAIL {what}: succeeded")
        return False
    except ToolError as e:
        msg = str(e)
    for n in needles:
        if n not in msg:
            print(f"FAIL {what}: message lacks '{n}':\n{msg}")
            return False
    print(f"ok: {what}: {msg.splitlines()[1] if len(msg.splitlines()) > 1 else msg}")
    return True


def staggered_requests(seed, vocab, count=16):
    rng = np.random.default_rng(seed)
    requests = []
    for i in range(count):
        n = int(rng.integers(1, 301))
        requests.append({"id": f"q{i}", "prompt": rng.integers(0, vocab, n).tolist(),
                         "max_tokens": int(rng.integers(1, 65)), "temperature": 0, "arrival_step": 3 * i})
    return requests


def serve_completion(args, plan, prompt, max_tokens, extra=()):
    """Starts `colossal-run PLAN serve` (port 0), sends one greedy completion of the prompt ids,
    stops the server; returns the choice's token ids."""
    import re
    import signal
    import subprocess
    import urllib.request
    _, runb = tools(args)
    tokenizer = os.path.join(args.workdir, "tokenizer.bin")
    run([PY, os.path.join(REPO, "test", "serve", "make_tokenizer.py"), tokenizer, "--vocab", "512"], "make_tokenizer.py")
    cmd = [runb, plan, "serve", "--tokenizer", tokenizer, "--port", "0", "--quiet",
           "--threads", "1"] + list(extra)
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        seen = []
        for line in p.stdout:
            seen.append(line)
            m = re.search(r"http://[0-9.]+:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            raise ToolError("serve did not start:\n" + "".join(seen))
        body = json.dumps({"model": os.path.splitext(os.path.basename(plan))[0], "prompt": prompt,
                           "max_tokens": max_tokens, "temperature": 0, "return_token_ids": True,
                           "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            out = json.loads(r.read())
        return out["choices"][0]["token_ids"]
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            raise ToolError("serve did not stop within 60 s of SIGINT")


def case_tp(args):
    opt, runb = tools(args)
    model = export(args, "llama", "llama_tp", ["--layers", "2", "--d-model", "64", "--heads", "4", "--kv-heads", "2",
                                               "--vocab", "512", "--context", "1024"])
    gen = "generate: {max_seq_len: 512, block_size: 16, max_batch_seqs: 16, max_batch_tokens: 512}\n"
    plan1 = os.path.join(args.workdir, "tp1.cplan")
    plan2 = os.path.join(args.workdir, "tp2.cplan")
    run([opt, model, "--spec", write(os.path.join(args.workdir, "tp1.yaml"), "mode: generate\n" + gen), "-o", plan1],
        "colossal-opt (tp=1)", timeout=900)
    run([opt, model, "--spec", write(os.path.join(args.workdir, "tp2.yaml"), "mode: generate\nmesh: {tp: 2}\n" + gen),
         "-o", plan2, "--report"], "colossal-opt (tp=2)", timeout=900)
    requests = staggered_requests(4, 512)
    ok = True
    worst = 0.0
    runs = [("chunk16", ["--max-batch-tokens", "16"]), ("chunk64", ["--max-batch-tokens", "64"]),
            ("whole", []), ("preempt", ["--max-batch-tokens", "64", "--kv-blocks", "40"])]
    for label, extra in runs:
        ref, ref_logits, _ = generate_requests(args, plan1, requests, args.workdir, "tp1_" + label, extra, logits=True)
        got, got_logits, summary = generate_requests(args, plan2, requests, args.workdir, "tp2_" + label,
                                                     ["--nproc", "2"] + extra, logits=True)
        print(f"tp=2 {label}: {summary}")
        for r in requests:
            i = r["id"]
            if got[i]["token_ids"] != ref[i]["token_ids"]:
                print(f"FAIL tp=2 {label} {i} (prompt {len(r['prompt'])} tokens): tokens differ from tp=1")
                ok = False
                continue
            err = float(np.max(np.abs(got_logits[i] - ref_logits[i])))
            worst = max(worst, err)
            if err > TOL:
                print(f"FAIL tp=2 {label} {i}: logits differ from tp=1 by {err:.3g} (> {TOL})")
                ok = False
        if label == "preempt" and sum(o["preemptions"] for o in got.values()) == 0:
            print("FAIL tp=2 preempt: no request was preempted (the pool should be too small)")
            ok = False
    print(f"tp=2 vs tp=1: 16 staggered requests x 4 schedules, tokens equal, max |logits diff| = {worst:.3g}")

    # The server at tp=2 answers with tp=1's tokens.
    r = requests[5]
    served = serve_completion(args, plan2, r["prompt"], 24, ["--nproc", "2"])
    solo, _, _ = generate_requests(args, plan1, [{"id": "s", "prompt": r["prompt"], "max_tokens": 24, "temperature": 0}],
                                   args.workdir, "tp1_serve_ref")
    if served != solo["s"]["token_ids"]:
        print(f"FAIL tp=2 serve: {served[:8]}... vs tp=1 generate {solo['s']['token_ids'][:8]}...")
        ok = False
    else:
        print(f"tp=2 serve: a {len(r['prompt'])}-token prompt's 24 greedy tokens equal tp=1's")

    # A draft model runs on rank 0 alone: a tensor-parallel draft plan is refused at start.
    ok &= expect_fail([runb, plan1, "generate", "--prompt-ids", "1,2,3", "--max-tokens", "4", "--speculative", "draft",
                       "--num-speculative-tokens", "2", "--draft-plan", plan2], "runs on rank 0 alone",
                      what="a tp=2 draft plan")

    # Specs tensor parallelism cannot serve.
    for label, extra, needle in [("dp", "mesh: {dp: 2}\n", "mesh dp=2 is not supported yet"),
                                 ("sequence_parallel", "mesh: {tp: 2}\nparallel:\n  tensor: {sequence_parallel: true}\n",
                                  "sequence_parallel")]:
        spec = write(os.path.join(args.workdir, f"bad_{label}.yaml"), "mode: generate\n" + extra + gen)
        ok &= expect_fail([opt, model, "--spec", spec, "-o", os.path.join(args.workdir, "bad.cplan")], needle,
                          what=f"generate with {label}")

    # The shared pretrained Llama at tp=2 (4 query and 4 key/value heads).
    folder = os.path.join(args.shared_dir, "models", "aidreams260K")
    if not os.path.isfile(os.path.join(folder, "model.onnx")):
        print(f"note: {folder} is absent; the shared-model part of this case did not run")
        return ok
    wd = os.path.join(args.workdir, "aidreams_tp2")
    os.makedirs(wd, exist_ok=True)
    plan = os.path.join(wd, "gen.cplan")
    run([opt, os.path.join(folder, "model.onnx"), "--spec",
         write(os.path.join(wd, "spec.yaml"), "mode: generate\nmesh: {tp: 2}\n"
               "generate: {max_seq_len: 128, block_size: 16, max_batch_seqs: 4, max_batch_tokens: 64}\n"),
         "-o", plan], "colossal-opt (aidreams260K tp=2)", timeout=900)
    with open(os.path.join(folder, "greedy_from_bos_60.json")) as f:
        want = json.load(f)[1:]
    lines, _, _ = generate_requests(args, plan, [{"id": "bos", "prompt": [1], "max_tokens": 60}], wd, "greedy",
                                    ["--nproc", "2"])
    if lines["bos"]["token_ids"] != want:
        print(f"FAIL aidreams260K tp=2 greedy from BOS: {lines['bos']['token_ids'][:12]}... vs {want[:12]}...")
        ok = False
    else:
        print("aidreams260K tp=2: greedy from BOS equals greedy_from_bos_60.json (60 tokens)")
    return ok


SPEC_PROMPTS = ["The stars", "Echoes of vectors unfold", "I sense the nodes", "Once upon a time",
                "a gentle hum of precision, a gentle hum of", "Lily went to the park. Lily went to the"]


def tokens_per_second(summary):
    """tokens/s from generate's summary line ("generate: R requests, T tokens in S steps (...), X tokens/s")."""
    line = next(l for l in summary.splitlines() if l.startswith("generate:") and "tokens/s" in l)
    return float(line.rsplit(",", 1)[1].split()[0])


def check_serve(runb, plan, tok, spec_flags, want, prompt, wd):
    """`serve` with `spec_flags`: a greedy completion of `prompt` equals `want` (generate's tokens)
    and /metrics counts the drafts."""
    import subprocess
    import urllib.request
    log = os.path.join(wd, "serve.log")
    with open(log, "w") as logf:
        server = subprocess.Popen([runb, plan, "serve", "--tokenizer", tok, "--port", "0", "--quiet"] + spec_flags,
                                  stdout=logf, stderr=subprocess.STDOUT)
    try:
        url = None
        for _ in range(200):
            with open(log) as f:
                text = f.read()
            if "listening on " in text:
                url = text.split("listening on ", 1)[1].split()[0]
                break
            if server.poll() is not None:
                break
            time.sleep(0.05)
        if url is None:
            print(f"FAIL serve {' '.join(spec_flags)} did not start:\n{text}")
            return False
        body = json.dumps({"prompt": prompt, "max_tokens": len(want), "temperature": 0, "ignore_eos": True,
                           "return_token_ids": True}).encode()
        req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        got = json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["token_ids"]
        metrics = urllib.request.urlopen(url + "/metrics", timeout=60).read().decode()
    finally:
        server.terminate()
        server.wait(timeout=30)
    counters = {}
    for line in metrics.splitlines():
        if line.startswith("colossal_spec_decode_"):
            counters[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
    ok = got == want
    if not ok:
        print(f"FAIL serve {' '.join(spec_flags)}: {got[:10]}... vs generate's {want[:10]}...")
    drafts = counters.get("colossal_spec_decode_draft_tokens_total", 0)
    accepted = counters.get("colossal_spec_decode_accepted_tokens_total", -1)
    if not (drafts > 0 and 0 <= accepted <= drafts):
        print(f"FAIL serve /metrics: speculative counters {counters}")
        ok = False
    print(f"serve {' '.join(spec_flags)}: the completion equals generate's {len(want)} tokens; /metrics: "
          f"{accepted:.0f} of {drafts:.0f} drafts accepted")
    return ok


def case_speculative(args):
    shared = os.path.join(args.shared_dir, "models")
    target_model = os.path.join(shared, "aidreams260K", "model.onnx")
    draft_model = os.path.join(shared, "stories260K", "model.onnx")
    tok = os.path.join(shared, "aidreams260K", "tokenizer.bin")
    for f in (target_model, draft_model, tok):
        if not os.path.isfile(f):
            print(f"SKIPPED: {f} is absent (set --shared-dir)")
            sys.exit(SKIP)
    _, runb = tools(args)
    wd = args.workdir
    os.makedirs(wd, exist_ok=True)
    spec = generate_spec(wd, 128, seqs=8, tokens=64)
    target = compile_generate(args, target_model, spec, os.path.join(wd, "aidreams.cplan"))
    draft = compile_generate(args, draft_model, spec, os.path.join(wd, "stories.cplan"))
    requests = [{"id": f"p{i}", "prompt": p, "max_tokens": 100, "temperature": 0, "ignore_eos": i % 2 == 0,
                 "arrival_step": 2 * i} for i, p in enumerate(SPEC_PROMPTS)]
    req = write(os.path.join(wd, "requests.jsonl"), "".join(json.dumps(r) + "\n" for r in requests))

    def generate(label, extra):
        out = os.path.join(wd, label + ".jsonl")
        # Best of three for the timing (the machine is shared); the outputs must agree every time.
        best, lines = None, None
        for _ in range(3):
            _, err, _ = run([runb, target, "generate", "--requests", req, "--output", out, "--tokenizer", tok,
                             "--threads", str(args.threads)] + extra, f"colossal-run generate ({label})", timeout=300)
            with open(out) as f:
                got = {o["id"]: o for o in map(json.loads, f)}
            if lines is not None and any(got[k]["token_ids"] != lines[k]["token_ids"] for k in got):
                raise ToolError(f"{label}: two runs of the same requests gave different tokens")
            lines = got
            if best is None or tokens_per_second(err) > tokens_per_second(best):
                best = err
        return lines, best.strip()

    base, base_err = generate("base", [])
    base_tps = tokens_per_second(base_err)
    print(f"base: {base_err}")
    ok = True
    finishes = {o["finish_reason"] for o in base.values()}
    if finishes != {"stop", "length"}:
        print(f"note: finish reasons {sorted(finishes)} (EOS inside an accepted run is not exercised)")
    runs = [("ngram", ["--speculative", "ngram", "--num-speculative-tokens", "4", "--ngram-max", "4", "--ngram-min", "1"]),
            ("draft-stories260K", ["--speculative", "draft", "--num-speculative-tokens", "4", "--draft-plan", draft]),
            ("draft-aidreams260K", ["--speculative", "draft", "--num-speculative-tokens", "4", "--draft-plan", target])]
    for label, extra in runs:
        lines, err = generate(label, extra)
        for r in requests:
            if lines[r["id"]]["token_ids"] != base[r["id"]]["token_ids"]:
                print(f"FAIL {label} {r['id']} ({r['prompt']!r}): differs from the non-speculative run")
                ok = False
            if lines[r["id"]]["finish_reason"] != base[r["id"]]["finish_reason"]:
                print(f"FAIL {label} {r['id']}: finish reason {lines[r['id']]['finish_reason']}, "
                      f"not {base[r['id']]['finish_reason']}")
                ok = False
        summary = next(l for l in err.splitlines() if "speculative" in l)
        rate = summary.split("(")[2].split("%")[0] if summary.count("(") >= 2 else "?"
        speedup = tokens_per_second(err) / base_tps
        print(f"{label}: {len(requests)} requests identical to the non-speculative run; acceptance {rate}%, "
              f"speedup {speedup:.2f}x ({tokens_per_second(err):.0f} vs {base_tps:.0f} tokens/s)\n  {summary}")
        # The target as its own draft agrees with itself up to rounding (its GEMMs see other batches).
        if label == "draft-aidreams260K" and not float(rate) >= 95:
            print(f"FAIL {label}: the target as its own draft should accept (nearly) every draft: {summary}")
            ok = False

    # --dump-logits: the rows of the emitted tokens, as without speculation (to rounding: the
    # plan's GEMMs see other row counts).
    dumps = {}
    for label, extra in [("base", [])] + runs[:1]:
        d = os.path.join(wd, "logits_" + label)
        run([runb, target, "generate", "--requests", req, "--output", os.path.join(d + ".jsonl"), "--tokenizer", tok,
             "--dump-logits", d, "--threads", str(args.threads)] + extra, f"colossal-run generate --dump-logits ({label})",
            quiet=True)
        dumps[label] = {r["id"]: np.load(os.path.join(d, r["id"] + ".npy")) for r in requests}
    worst = 0.0
    for r in requests:
        a, b = dumps["base"][r["id"]], dumps[runs[0][0]][r["id"]]
        if a.shape != b.shape:
            print(f"FAIL --dump-logits {r['id']}: shape {b.shape} with ngram, {a.shape} without")
            ok = False
            continue
        worst = max(worst, float(np.max(np.abs(a - b))))
    if worst > TOL:
        print(f"FAIL --dump-logits: ngram's rows differ from the non-speculative ones by {worst:.3g} (> {TOL})")
        ok = False
    print(f"--dump-logits: ngram's logits of every emitted token within {worst:.3g} of the non-speculative ones")

    # One streamed prompt (the --prompt path), one thread: a single stream's speedup.
    solo, solo_tps = {}, {}
    prompt = SPEC_PROMPTS[4]
    for label, extra in [("base", [])] + runs:
        for _ in range(3):
            out, err, _ = run([runb, target, "generate", "--tokenizer", tok, "--prompt", prompt, "--max-tokens",
                               "110", "--threads", "1"] + extra, f"colossal-run generate --prompt ({label})",
                              quiet=True)
            if label in solo and out != solo[label]:
                raise ToolError(f"--prompt {label}: two runs gave different text")
            solo[label] = out
            solo_tps[label] = max(solo_tps.get(label, 0.0), tokens_per_second(err))
        if solo[label] != solo["base"]:
            print(f"FAIL --prompt with {label}: {solo[label]!r} vs {solo['base']!r}")
            ok = False
        elif label != "base":
            rate = next(l for l in err.splitlines() if "speculative" in l).split("(")[2].split("%")[0]
            print(f"--prompt {prompt!r}, {label}: the same text; acceptance {rate}%, speedup "
                  f"{solo_tps[label] / solo_tps['base']:.2f}x ({solo_tps[label]:.0f} vs {solo_tps['base']:.0f} tokens/s)")

    ok &= check_serve(runb, target, tok, runs[0][1], base[requests[0]["id"]]["token_ids"], requests[0]["prompt"], wd)

    def expect_error(extra, needle):
        nonlocal ok
        try:
            run([runb, target, "generate", "--prompt-ids", "1", "--max-tokens", "4"] + extra, "bad flags", quiet=True)
            print(f"FAIL {' '.join(extra)}: succeeded")
            ok = False
        except ToolError as e:
            if needle not in str(e):
                print(f"FAIL {' '.join(extra)}: the message lacks {needle!r}:\n{e}")
                ok = False
            else:
                print(f"ok: {' '.join(extra)}: {needle}")
    expect_error(["--speculative", "ngram", "--num-speculative-tokens", "0"], "--num-speculative-tokens must be >= 1")
    expect_error(["--speculative", "ngram", "--num-speculative-tokens", "64"],
                 "a verification runs K + 1 = 65 tokens, but the largest program of")
    expect_error(["--speculative", "ngram"], "needs --num-speculative-tokens")
    expect_error(["--speculative", "medusa", "--num-speculative-tokens", "2"], "the methods are ngram and draft")
    expect_error(["--speculative", "draft", "--num-speculative-tokens", "2"], "needs --draft-plan")
    expect_error(["--num-speculative-tokens", "2"], "give --speculative ngram|draft")
    expect_error(["--speculative", "ngram", "--num-speculative-tokens", "2", "--draft-plan", draft],
                 "--draft-plan is for --speculative draft")
    return ok


def case_errors(args):
    opt, runb = tools(args)
    ok = True

    def check(cmd, *needles, what):
        nonlocal ok
        ok &= expect_fail(cmd, *needles, what=what)

    model = export(args, "llama", "llama_e", ["--layers", "1", "--d-model", "32", "--heads", "2", "--vocab", "64",
                                              "--context", "64"])
    bert = export(args, "bert", "bert_e", ["--layers", "1", "--d-model", "32", "--heads", "2", "--vocab", "64"])
    wd = args.workdir
    spec_inputs = write(os.path.join(wd, "inputs.yaml"), "mode: generate\ninputs: {input_ids: [1, 8]}\n")
    check([opt, model, "--spec", spec_inputs, "-o", os.path.join(wd, "x.cplan")], "no inputs:",
                what="a generate spec with inputs:")
    long = write(os.path.join(wd, "long.yaml"), "mode: generate\ngenerate: {max_seq_len: 64, max_batch_tokens: 64}\n")
    check([opt, model, "--spec", long, "-o", os.path.join(wd, "x.cplan")], "one sequence of 128 positions",
                "smaller max_batch_tokens", what="a step as long as the model's 64 positions")
    tiny = write(os.path.join(wd, "tiny.yaml"), "mode: generate\ngenerate: {max_seq_len: 64, max_batch_tokens: 16, kv_blocks: 2}\n")
    check([opt, model, "--spec", tiny, "-o", os.path.join(wd, "x.cplan")], "cannot hold one sequence",
                what="a KV pool below one sequence")
    ok_spec = write(os.path.join(wd, "ok.yaml"), "mode: generate\ngenerate: {max_seq_len: 64, max_batch_tokens: 16, max_batch_seqs: 2}\n")
    check([opt, bert, "--spec", ok_spec, "-o", os.path.join(wd, "x.cplan")], "mode generate",
                what="BERT (not a causal decoder)")
    # kv_blocks auto under a memory budget: the pool is the budget's share, and the plan fits it.
    budget = write(os.path.join(wd, "budget.yaml"), "mode: generate\nmemory: {budget_mb: 2}\n"
                   "generate: {max_seq_len: 64, max_batch_tokens: 16, max_batch_seqs: 2, kv_blocks: auto}\n")
    try:
        run([opt, model, "--spec", budget, "-o", os.path.join(wd, "budget.cplan")], "kv_blocks auto under a budget",
            timeout=600, quiet=True)
        print("ok: kv_blocks auto under memory.budget_mb 2 compiles within the budget")
    except ToolError as e:
        print(f"FAIL kv_blocks auto under memory.budget_mb 2:\n{e}")
        ok = False
    plan = os.path.join(wd, "ok.cplan")
    run([opt, model, "--spec", ok_spec, "-o", plan], "colossal-opt", timeout=600, quiet=True)
    check([runb, plan], "generate", what="a generate plan run as a program")
    check([runb, plan, "generate", "--prompt-ids", "1,2", "--max-tokens", "64"], "max_seq_len",
                what="prompt + max_tokens beyond the context")
    check([runb, plan, "generate", "--prompt-ids", "1,99", "--max-tokens", "4"], "99",
                what="a token id outside the vocabulary")
    check([runb, plan, "generate", "--prompt", "hi", "--max-tokens", "4"], "--tokenizer",
                what="a text prompt without a tokenizer")
    check([runb, plan, "generate", "--prompt-ids", "1", "--max-tokens", "4", "--max-batch-tokens", "99"],
                "[1, 16]", what="--max-batch-tokens above the plan's")
    check([runb, plan, "generate", "--prompt-ids", "1", "--max-tokens", "4", "--kv-blocks", "0"],
                "--kv-blocks 0", "must be in [1,", what="--kv-blocks 0 (not a silent 'all of the plan's')")
    # Speculative decoding's draft plan: another vocabulary, a shorter max_seq_len.
    other = export(args, "llama", "llama_v", ["--layers", "1", "--d-model", "32", "--heads", "2", "--vocab", "96",
                                              "--context", "64"])
    other_plan = os.path.join(wd, "vocab96.cplan")
    run([opt, other, "--spec", ok_spec, "-o", other_plan], "colossal-opt", timeout=600, quiet=True)
    check([runb, plan, "generate", "--prompt-ids", "1", "--max-tokens", "4", "--speculative", "draft",
                 "--num-speculative-tokens", "2", "--draft-plan", other_plan],
                f"--draft-plan {other_plan} has a vocabulary of 96 tokens, {plan} one of 64", what="a draft plan of another vocabulary")
    short = write(os.path.join(wd, "short.yaml"), "mode: generate\ngenerate: {max_seq_len: 32, max_batch_tokens: 16, max_batch_seqs: 2}\n")
    short_plan = os.path.join(wd, "short.cplan")
    run([opt, model, "--spec", short, "-o", short_plan], "colossal-opt", timeout=600, quiet=True)
    check([runb, plan, "generate", "--prompt-ids", "1", "--max-tokens", "4", "--speculative", "draft",
                 "--num-speculative-tokens", "2", "--draft-plan", short_plan],
                f"--draft-plan {short_plan} has max_seq_len 32, below {plan}'s 64", what="a draft plan of a shorter context")
    check([runb, plan, "generate", "--prompt-ids", "1", "--max-tokens", "4", "--speculative", "ngram",
                 "--num-speculative-tokens", "16"], "K + 1 = 17 tokens, but the largest program of",
                what="K + 1 above the largest program")

    # A decoder with a second output (a hidden state, first or after the logits): the logits are
    # served, the other output is dropped, and the tokens equal the one-output model's.
    import onnx
    from onnx import helper
    base_ids = run([runb, plan, "generate", "--prompt-ids", "1,2,3", "--max-tokens", "6", "--ignore-eos"],
                   "colossal-run generate (one output)", timeout=600, quiet=True)[0].split()
    for first in (False, True):
        m = onnx.load(model)
        g = m.graph
        logits = next(o for o in g.output if o.name == "logits")
        g.node.append(helper.make_node("Identity", ["logits"], ["hidden"], name="hidden_copy"))
        hidden = onnx.ValueInfoProto()
        hidden.CopyFrom(logits)
        hidden.name = "hidden"
        if first:
            g.output.insert(0, hidden)
        else:
            g.output.append(hidden)
        two = os.path.join(wd, f"two_outputs_{int(first)}.onnx")
        onnx.save(m, two)
        two_plan = os.path.join(wd, f"two_outputs_{int(first)}.cplan")
        what = f"a decoder with a second output {'before' if first else 'after'} its logits"
        try:
            run([opt, two, "--spec", ok_spec, "-o", two_plan], "colossal-opt", timeout=600, quiet=True)
            ids = run([runb, two_plan, "generate", "--prompt-ids", "1,2,3", "--max-tokens", "6", "--ignore-eos"],
                      "colossal-run generate (two outputs)", timeout=600, quiet=True)[0].split()
            if ids != base_ids:
                print(f"FAIL {what}: tokens {ids}, the one-output model's {base_ids}")
                ok = False
            else:
                print(f"ok: {what}: compiles and gives the one-output model's tokens {ids}")
        except ToolError as e:
            print(f"FAIL {what}:\n{e}")
            ok = False
    # A float input with a dynamic batch (not token ids): one error saying what generate feeds, not
    # "bind them with the spec's inputs" (a generate spec has none).
    from onnx import TensorProto, numpy_helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])
    w = numpy_helper.from_array(np.ones((16, 8), np.float32), "w")
    dense = os.path.join(wd, "dense.onnx")
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "dense", [x], [y], [w]),
                                opset_imports=[helper.make_opsetid("", 14)]), dense)
    try:
        run([opt, dense, "--spec", ok_spec, "-o", os.path.join(wd, "x.cplan")], "colossal-opt (dense)", timeout=600,
            quiet=True)
        print("FAIL a float input under mode generate: compiled")
        ok = False
    except ToolError as e:
        msg = str(e)
        if "mode generate feeds a decoder its token ids" not in msg or "spec's inputs" in msg or "one sequence of" in msg:
            print(f"FAIL a float input under mode generate: unclear message:\n{msg}")
            ok = False
        else:
            print("ok: a float input under mode generate: " + msg.splitlines()[-1])
    # The note about the imported length belongs to a node's failure only, not to a missing file.
    try:
        run([opt, os.path.join(wd, "missing.onnx"), "--spec", ok_spec, "-o", os.path.join(wd, "x.cplan")],
            "colossal-opt (missing model)", timeout=600, quiet=True)
        print("FAIL a missing model: compiled")
        ok = False
    except ToolError as e:
        if "one sequence of" in str(e) or "missing.onnx" not in str(e):
            print(f"FAIL a missing model: the message should name the file and only it:\n{e}")
            ok = False
        else:
            print("ok: a missing model under a generate spec: the file's error alone")
    return ok


if __name__ == "__main__":
    case_main(__doc__, {"shared": case_shared, "gpt2": case_gpt2, "llama": case_llama, "batching": case_batching,
                        "tp": case_tp, "errors": case_errors, "speculative": case_speculative}, threads=2)
