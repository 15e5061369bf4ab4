#!/usr/bin/python3
"""Samples clips from the trained video DiT with the compiled denoiser, into an animated GIF.

    sample.py --work DIR --checkpoint CKPT [--steps K] [--seed S] [--gif OUT.gif] [--check-torch]
              [--opt PATH --run PATH] [--threads N]

1. `colossal-run DIR/train.cplan export --checkpoint CKPT --onnx DIR/trained.onnx` writes the
   trained training graph; its weights are copied into DIR/denoiser.onnx (the same VideoDiT
   exported without the loss, export.py; DIR/weights.json pairs the initializers), giving
   DIR/denoiser_trained.onnx.
2. `colossal-opt` compiles that into an inference plan DIR/denoiser.cplan (mode: inference,
   inputs x [N, F, H, W] and tau [N]).
3. Euler steps of the rectified flow from tau = 1 to 0: x ~ normal(0, 1), then K times
   x ← x − (1/K)·velocity(x, tau) at tau = k/K for k = K..1, each one `colossal-run
   denoiser.cplan --input x=... --input tau=... --output-dir ...`.
4. The N clips go side by side into OUT.gif (default DIR/samples.gif); DIR/samples.npy keeps them.
With --check-torch the first step's velocity is also computed by PyTorch from the trained weights
and the largest difference printed (the compiled denoiser against its source).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import clips as clip_util  # noqa: E402


def find_tool(name, explicit):
    if explicit:
        return explicit
    for c in (os.path.join(HERE, "..", "..", "build", "bin", name), shutil.which(name)):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    sys.exit(f"{name} not found: pass --{name.split('-')[1]} PATH or build it into build/bin")


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.strip()}")
    return p.stdout


def trained_denoiser(work, run_bin, checkpoint):
    """Writes DIR/denoiser_trained.onnx: denoiser.onnx with the checkpoint's trained values."""
    import onnx
    from onnx import numpy_helper
    trained_path = os.path.join(work, "trained.onnx")
    run([run_bin, os.path.join(work, "train.cplan"), "export", "--checkpoint", checkpoint, "--onnx", trained_path])
    trained = {t.name: t for t in onnx.load(trained_path).graph.initializer}
    with open(os.path.join(work, "weights.json")) as f:
        maps = json.load(f)  # which train.onnx initializer each weight is (export.py)
    source_of = maps["denoiser"]
    den = onnx.load(os.path.join(work, "denoiser.onnx"))
    for t in den.graph.initializer:
        if t.name not in source_of:
            continue  # a constant of the graph (shape arithmetic), not a weight
        src = trained.get(source_of[t.name])
        if src is None or list(src.dims) != list(t.dims):
            sys.exit(f"{trained_path}: no initializer '{source_of[t.name]}' of shape {list(t.dims)} for '{t.name}'")
        t.raw_data = numpy_helper.from_array(numpy_helper.to_array(src)).raw_data
        del t.float_data[:]
    out = os.path.join(work, "denoiser_trained.onnx")
    onnx.save(den, out)
    # The PyTorch state_dict of the trained weights, for --check-torch.
    state = {}
    for key, (name, transposed) in maps["torch"].items():
        v = numpy_helper.to_array(trained[name])
        state[key] = v.T.copy() if transposed else v.copy()
    return out, state


def torch_velocity(cfg, state, x, tau):
    import torch
    import model as m
    dit = m.VideoDiT(m.Config(**cfg))
    dit.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    with torch.no_grad():
        return dit(torch.from_numpy(x), torch.from_numpy(tau)).numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="the folder export.py wrote (with train.cplan)")
    ap.add_argument("--checkpoint", required=True, help="the --save folder of the training run")
    ap.add_argument("--steps", type=int, default=25, help="Euler steps from noise to a clip")
    ap.add_argument("--seed", type=int, default=0, help="seed of the starting noise")
    ap.add_argument("--gif", help="output GIF (default WORK/samples.gif)")
    ap.add_argument("--check-torch", action="store_true", help="compare the first velocity with PyTorch's")
    ap.add_argument("--opt")
    ap.add_argument("--run")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    opt_bin, run_bin = find_tool("colossal-opt", a.opt), find_tool("colossal-run", a.run)
    work = a.work
    with open(os.path.join(work, "config.json")) as f:
        conf = json.load(f)
    cfg, n = conf["model"], conf["samples"]
    shape = [n, cfg["frames"], cfg["size"], cfg["size"]]

    t0 = time.perf_counter()
    onnx_path, weights = trained_denoiser(work, run_bin, a.checkpoint)
    spec = os.path.join(work, "denoiser.yaml")
    with open(spec, "w") as f:
        f.write(f"mode: inference\ninputs: {{x: {shape}, tau: [{n}]}}\n")
    plan = os.path.join(work, "denoiser.cplan")
    run([opt_bin, onnx_path, "--spec", spec, "-o", plan])
    print(f"compiled the trained denoiser: {plan} ({time.perf_counter() - t0:.1f} s)")

    t0 = time.perf_counter()
    step_dir = os.path.join(work, "sampling")
    os.makedirs(step_dir, exist_ok=True)
    x = np.random.default_rng(a.seed).standard_normal(shape).astype(np.float32)
    for k in range(a.steps, 0, -1):
        tau = np.full([n], k / a.steps, np.float32)
        np.save(os.path.join(step_dir, "x.npy"), x)
        np.save(os.path.join(step_dir, "tau.npy"), tau)
        out = os.path.join(step_dir, "out")
        shutil.rmtree(out, ignore_errors=True)
        run([run_bin, plan, "--input", f"x={step_dir}/x.npy", "--input", f"tau={step_dir}/tau.npy",
             "--output-dir", out, "--threads", str(a.threads)])
        v = np.load(os.path.join(out, "velocity.npy"))
        if a.check_torch and k == a.steps:
            ref = torch_velocity(cfg, weights, x, tau)
            err = float(np.max(np.abs(v - ref)) / np.max(np.abs(ref)))
            print(f"first step: the compiled denoiser's velocity vs PyTorch's: max |difference| / max |torch| = {err:.1e}")
        x = x - v / a.steps
    print(f"{a.steps} Euler steps over {n} clips: {time.perf_counter() - t0:.1f} s")
    np.save(os.path.join(work, "samples.npy"), x)
    print(clip_util.describe("samples", x))
    data = np.load(os.path.join(work, "clips.npy"), mmap_mode="r")[:256]
    print(clip_util.describe("training clips", data))
    gif = a.gif or os.path.join(work, "samples.gif")
    try:
        clip_util.write_gif(gif, x)
        print(f"wrote {gif}")
    except ImportError:
        print("no GIF: Pillow is absent (apt-get install python3-pil); the clips are in samples.npy")


if __name__ == "__main__":
    main()
