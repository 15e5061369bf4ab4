#!/usr/bin/python3
"""End-to-end `train.inputs` (docs/training.md "Data for models that are not token models"): models
that are not token models train from .npy arrays and seeded RNG draws exactly as PyTorch replays them.

    data_inputs_e2e.py --case cnn|cnn_shuffle|cnn_dp|diffusion|diffusion_dp|errors --workdir W
                       [--opt PATH --run PATH] [--threads N] [--steps N]

  cnn          a torch CNN (Conv 3x3 + BatchNorm2d + ReLU + MaxPool + Linear, exported with
               TrainingMode.TRAINING) trains --steps (20) SGD steps (momentum 0.9) on Debian's
               scikit-learn digits (images float32 [N, 1, 8, 8] and labels int64 [N] as .npy), B 32;
               the rows each step read are row (s*B + r) mod N (checked on the --dump-inputs arrays),
               per-step losses within 1e-5 relative of torch.optim.SGD's run on those rows from the
               same weights, and the BatchNorm running statistics of the exported trained model
               equal torch's (momentum 0.1, unbiased running variance): max |difference| within
               1e-5 of the largest statistic;
  cnn_shuffle  the same with --shuffle --seed 7: the dumped rows are the documented per-epoch
               permutation (recomputed here from its definition), N = 1797 rows over 20 steps of
               96 rows cross an epoch;
  cnn_dp       `mesh: {dp: 2}`: every rank reads its half of the global batch and the BatchNorm
               statistics are the global batch's (an all_reduce over dp, as SyncBatchNorm): losses
               and running statistics equal PyTorch's one-rank run within 1e-5;
  diffusion    a tiny denoiser whose ONNX computes its own MSE loss from (x, noise, t)
               (`loss.kind: output`; x from npy, noise ~ normal(0, 1), t ~ uniform_int [0, 1000)) trains
               10 AdamW steps; PyTorch replays the --dump-inputs arrays: losses within 1e-5 relative;
               the draws have the documented mean/std and range;
  diffusion_dp the same under dp=2: the dumped draws equal one rank's run bit for bit, losses within 1e-5;
  errors       one clear error each: a missing npy file, an array of the wrong dtype and of the wrong
               shape (naming file, input, expected and got), npy inputs of different row counts,
               --data with a train.inputs plan, --shuffle and --dump-inputs with a token plan.

Exit codes: 0 pass, 1 mismatch, 2 a tool failed, 77 skipped (no scikit-learn; *_dp: no mpirun).
"""
import json
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402

TOL = 1e-5
MASK = (1 << 64) - 1


# ---------------------------------------------------------------- the documented generators
def mix(z):
    """SplitMix64's output function of z + 0x9E3779B97F4A7C15 (docs/training.md)."""
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & MASK
    return h


def permutation(seed, epoch, n):
    key = mix((mix(seed ^ fnv1a64(b"train.inputs shuffle")) + epoch) & MASK)
    a = list(range(n))
    for i in range(n - 1, 0, -1):
        j = mix((key + i) & MASK) % (i + 1)
        a[i], a[j] = a[j], a[i]
    return a


def rows_of_step(s, batch, n, shuffle=False, seed=0):
    out, perms = [], {}
    for r in range(batch):
        g = s * batch + r
        if shuffle:
            e = g // n
            if e not in perms:
                perms[e] = permutation(seed, e, n)
            out.append(perms[e][g % n])
        else:
            out.append(g % n)
    return out


# ---------------------------------------------------------------- tools
def tools(args):
    return u.find_tool("colossal-opt", args.opt), u.find_tool("colossal-run", args.run)


def train(args, plan, steps, metrics, dump=None, extra=(), dp=1):
    _, run = tools(args)
    cmd = [run, plan, "train", "--steps", str(steps), "--metrics", metrics,
           "--threads", str(args.threads if dp == 1 else 1)] + list(extra)
    if dump:
        shutil.rmtree(dump, ignore_errors=True)
        cmd += ["--dump-inputs", dump]
    if dp > 1:
        import dp_e2e  # mpirun and its environment as the dp tests run it
        dp_e2e.run_mpi(dp, cmd, f"colossal-run train on {dp} ranks")
    else:
        u.run(cmd, "colossal-run train", timeout=600)
    with open(metrics) as f:
        return [json.loads(line) for line in f]


def dumped(dump, step, name):
    return np.load(os.path.join(dump, f"step-{step:08d}", u.tensor_file_name(name)))


def compare_losses(ours, ref, tol=TOL):
    ok, worst = True, 0.0
    for s, (m, loss) in enumerate(zip(ours, ref)):
        err = abs(m["loss"] - loss) / abs(loss)
        worst = max(worst, err)
        bad = err > tol
        ok &= not bad
        print(f"step {s:2d}: loss {m['loss']:.7f} torch {loss:.7f} (rel {err:.1e}){'  MISMATCH' if bad else ''}")
    if len(ours) != len(ref):
        print(f"colossal-run wrote {len(ours)} steps, expected {len(ref)}")
        ok = False
    if ref[-1] >= ref[0]:
        print(f"the loss did not fall ({ref[0]:.4f} -> {ref[-1]:.4f})")
        ok = False
    print(f"worst relative loss difference {worst:.1e} over {len(ref)} steps")
    return ok


# ---------------------------------------------------------------- the CNN on the digits
class DigitsCNN(nn.Module):
    def __init__(self, batch_norm=True):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8) if batch_norm else nn.Identity()
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, image):
        return self.fc(F.max_pool2d(F.relu(self.bn(self.conv(image))), 2).flatten(1))


SGD = {"lr": 0.05, "momentum": 0.9}


def digits(workdir):
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        print("skipped: scikit-learn (python3-sklearn, which ships the digits data) is absent")
        sys.exit(u.SKIP)
    d = load_digits()
    images = (d.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    labels = d.target.astype(np.int64)
    np.save(os.path.join(workdir, "images.npy"), images)
    np.save(os.path.join(workdir, "labels.npy"), labels)
    return images, labels


def cnn_setup(args, batch, batch_norm=True):
    os.makedirs(args.workdir, exist_ok=True)
    images, labels = digits(args.workdir)
    torch.manual_seed(0)
    model = DigitsCNN(batch_norm)
    onnx_path = os.path.join(args.workdir, "cnn.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(batch, 1, 8, 8),), onnx_path, input_names=["image"],
                          output_names=["logits"], opset_version=17, training=torch.onnx.TrainingMode.TRAINING)
    return onnx_path, {k: v.clone() for k, v in model.state_dict().items()}, images, labels


def cnn_spec(workdir, batch, dp=1):
    spec = os.path.join(workdir, f"cnn_dp{dp}.yaml")
    with open(spec, "w") as f:
        f.write(f"mode: train\ninputs: {{image: [{batch}, 1, 8, 8]}}\n"
                + (f"mesh: {{dp: {dp}}}\n" if dp > 1 else "") +
                "train:\n  loss: {kind: cross_entropy, logits: logits, labels: labels}\n"
                f"  optimizer: {{kind: sgd, lr: {SGD['lr']}, momentum: {SGD['momentum']}}}\n"
                "  inputs:\n    image: {npy: images.npy}\n    labels: {npy: labels.npy}\n")
    return spec


def torch_cnn(state, batches, batch_norm=True):
    """Per-step losses and the BatchNorm module of torch.optim.SGD's run on `batches`."""
    model = DigitsCNN(batch_norm)
    model.load_state_dict(state)
    model.train()
    opt = torch.optim.SGD(model.parameters(), **SGD)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model.bn


def exported_running_stats(args, plan, save, onnx_out):
    """The BatchNorm running statistics of the trained model, as `export --onnx` writes them."""
    import onnx
    from onnx import numpy_helper
    _, run = tools(args)
    u.run([run, plan, "export", "--checkpoint", save, "--onnx", onnx_out], "colossal-run export")
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(onnx_out).graph.initializer}
    return inits["bn.running_mean"], inits["bn.running_var"]


def check_stats(ours, bn):
    ok = True
    for name, got, want in (("running_mean", ours[0], bn.running_mean), ("running_var", ours[1], bn.running_var)):
        # Relative to the largest statistic: a channel mean near zero has no relative precision.
        want = want.detach().numpy()
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        print(f"bn.{name}: max |difference| / max |torch| = {err:.1e} (torch {np.round(want[:4], 5)} ...)")
        ok &= err <= TOL
    return ok


def cnn_case(shuffle=False, dp=1, batch_norm=True):
    def run_case(args):
        batch = 96 if shuffle else 32
        onnx_path, state, images, labels = cnn_setup(args, batch, batch_norm)
        opt, _ = tools(args)
        spec = cnn_spec(args.workdir, batch, dp)
        plan = os.path.join(args.workdir, f"cnn_dp{dp}.cplan")
        u.compile_plan(opt, onnx_path, spec, plan)
        metrics = os.path.join(args.workdir, f"cnn_dp{dp}.jsonl")
        dump = os.path.join(args.workdir, f"dump_dp{dp}")
        save = os.path.join(args.workdir, f"ckpt_dp{dp}")
        shutil.rmtree(save, ignore_errors=True)
        extra = ["--save", save] + (["--shuffle", "--seed", "7"] if shuffle else [])
        ours = train(args, plan, args.steps, metrics, dump, extra, dp)
        ok, batches = True, []
        n = len(images)
        for s in range(args.steps):
            rows = rows_of_step(s, batch, n, shuffle, 7)
            x, y = dumped(dump, s, "image"), dumped(dump, s, "labels")
            if not (np.array_equal(x, images[rows]) and np.array_equal(y, labels[rows])):
                print(f"step {s}: the dumped inputs are not rows {rows[:4]}... of the arrays")
                ok = False
            batches.append((torch.from_numpy(x), torch.from_numpy(y)))
        if shuffle and len({r for s in range(args.steps) for r in rows_of_step(s, batch, n, True, 7)}) != n:
            print("the shuffled rows of the first epoch are not a permutation")
            ok = False
        print(f"the dumped inputs are the documented rows of {args.steps} steps" if ok else "row order MISMATCH")
        ref, bn = torch_cnn(state, batches, batch_norm)
        ok &= compare_losses(ours, ref)
        if batch_norm:
            trained = os.path.join(args.workdir, f"trained_dp{dp}.onnx")
            ok &= check_stats(exported_running_stats(args, plan, save, trained), bn)
        return ok
    return run_case


# ---------------------------------------------------------------- a diffusion-like denoiser
D, STEPS_T = 16, 1000
ADAMW = {"lr": 3e-3, "weight_decay": 0.01}


class Denoiser(nn.Module):
    """loss = mean((eps_theta(x_t, t) - noise)^2), x_t = sqrt(abar)·x + sqrt(1 - abar)·noise."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(D + 1, 64)
        self.fc2 = nn.Linear(64, D)

    def forward(self, x, noise, t):
        tf = t.to(torch.float32).unsqueeze(1) / STEPS_T
        abar = torch.cos(tf * (np.pi / 2)) ** 2
        xt = torch.sqrt(abar) * x + torch.sqrt(1 - abar) * noise
        pred = self.fc2(F.silu(self.fc1(torch.cat([xt, tf], dim=1))))
        return ((pred - noise) ** 2).mean()


def diffusion_setup(args, batch):
    os.makedirs(args.workdir, exist_ok=True)
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((200, D)) * 0.5 + np.sin(np.arange(D))).astype(np.float32)
    np.save(os.path.join(args.workdir, "clean.npy"), data)
    torch.manual_seed(0)
    model = Denoiser()
    onnx_path = os.path.join(args.workdir, "denoiser.onnx")
    example = (torch.zeros(batch, D), torch.zeros(batch, D), torch.zeros(batch, dtype=torch.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example, onnx_path, input_names=["x", "noise", "t"], output_names=["loss"],
                          opset_version=17)
    return onnx_path, {k: v.clone() for k, v in model.state_dict().items()}, data


def diffusion_plan(args, onnx_path, batch, dp):
    opt, _ = tools(args)
    spec = os.path.join(args.workdir, f"denoiser_dp{dp}.yaml")
    with open(spec, "w") as f:
        f.write(f"mode: train\ninputs: {{x: [{batch}, {D}], noise: [{batch}, {D}], t: [{batch}]}}\n"
                + (f"mesh: {{dp: {dp}}}\n" if dp > 1 else "") +
                "train:\n  loss: {kind: output, output: loss}\n"
                f"  optimizer: {{kind: adamw, lr: {ADAMW['lr']}, weight_decay: {ADAMW['weight_decay']}}}\n"
                "  inputs:\n    x: {npy: clean.npy}\n    noise: {normal: {mean: 0.0, std: 1.0}}\n"
                f"    t: {{uniform_int: [0, {STEPS_T}]}}\n")
    plan = os.path.join(args.workdir, f"denoiser_dp{dp}.cplan")
    u.compile_plan(opt, onnx_path, spec, plan)
    return plan


def diffusion_case(dp=1):
    def run_case(args):
        batch, steps = 16, min(args.steps, 10)
        onnx_path, state, data = diffusion_setup(args, batch)
        plan = diffusion_plan(args, onnx_path, batch, dp)
        dump = os.path.join(args.workdir, f"dump_dp{dp}")
        ours = train(args, plan, steps, os.path.join(args.workdir, f"denoiser_dp{dp}.jsonl"), dump,
                     ["--seed", "3"], dp)
        ok = True
        model = Denoiser()
        model.load_state_dict(state)
        opt = torch.optim.AdamW(model.parameters(), **ADAMW)
        ref, noises, ts = [], [], []
        for s in range(steps):
            x, noise, t = (dumped(dump, s, n) for n in ("x", "noise", "t"))
            if not np.array_equal(x, data[rows_of_step(s, batch, len(data))]):
                print(f"step {s}: the dumped x are not the documented rows")
                ok = False
            noises.append(noise)
            ts.append(t)
            opt.zero_grad()
            loss = model(torch.from_numpy(x), torch.from_numpy(noise), torch.from_numpy(t))
            loss.backward()
            opt.step()
            ref.append(loss.item())
        noise, t = np.concatenate(noises), np.concatenate(ts)
        print(f"noise: {noise.size} draws, mean {noise.mean():+.3f}, std {noise.std():.3f}; "
              f"t: {t.dtype} in [{t.min()}, {t.max()}], {len(np.unique(t))} distinct")
        if not (abs(noise.mean()) < 0.1 and abs(noise.std() - 1) < 0.1 and t.dtype == np.int64
                and t.min() >= 0 and t.max() < STEPS_T and len(np.unique(t)) > steps * batch // 2):
            print("the draws do not look like normal(0, 1) and uniform_int [0, 1000)")
            ok = False
        if dp > 1:
            # The draws are the global batch's: one rank's run sees the same arrays.
            one = os.path.join(args.workdir, "dump_dp1")
            train(args, diffusion_plan(args, onnx_path, batch, 1), steps,
                  os.path.join(args.workdir, "denoiser_dp1.jsonl"), one, ["--seed", "3"], 1)
            same = all(np.array_equal(dumped(one, s, n), dumped(dump, s, n))
                       for s in range(steps) for n in ("x", "noise", "t"))
            print("dp=2 drew the same inputs as one rank" if same else "dp=2 drew OTHER inputs than one rank")
            ok &= same
        ok &= compare_losses(ours, ref)
        return ok
    return run_case


# ---------------------------------------------------------------- errors
def errors_case(args):
    onnx_path, _, images, labels = cnn_setup(args, 32)
    opt, run = tools(args)
    w = args.workdir
    ok = True

    def expect(spec_inputs, extra, *needles, what):
        nonlocal ok
        spec = os.path.join(w, "err.yaml")
        with open(spec, "w") as f:
            f.write("mode: train\ninputs: {image: [32, 1, 8, 8]}\ntrain:\n"
                    "  loss: {kind: cross_entropy, logits: logits, labels: labels}\n  optimizer: {kind: sgd, lr: 0.1}\n"
                    "  inputs:\n" + spec_inputs)
        plan = os.path.join(w, "err.cplan")
        u.compile_plan(opt, onnx_path, spec, plan, quiet=True)
        metrics = os.path.join(w, "err.jsonl")
        p = subprocess.run([run, plan, "train", "--steps", "1", "--metrics", metrics] + extra,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        text = p.stderr.strip()
        good = p.returncode != 0 and all(n in text for n in needles) and "Assertion" not in text
        print(f"{what}: {'ok' if good else 'WRONG'}: {text}")
        ok &= good

    np.save(os.path.join(w, "images64.npy"), images.astype(np.float64))
    np.save(os.path.join(w, "flat.npy"), images.reshape(-1, 64))
    np.save(os.path.join(w, "labels_short.npy"), labels[:100])
    good_labels = "    labels: {npy: labels.npy}\n"
    expect("    image: {npy: absent.npy}\n" + good_labels, [], "train.inputs.image", "absent.npy",
           what="a missing npy file")
    expect("    image: {npy: images64.npy}\n" + good_labels, [], "train.inputs.image", "images64.npy",
           "input 'image'", "expected float32 [N, 1, 8, 8], got float64 [1797, 1, 8, 8]", what="the wrong dtype")
    expect("    image: {npy: flat.npy}\n" + good_labels, [], "flat.npy", "input 'image'",
           "expected float32 [N, 1, 8, 8], got float32 [1797, 64]", what="the wrong shape")
    expect("    image: {npy: images.npy}\n    labels: {npy: labels_short.npy}\n", [], "labels_short.npy",
           "has 100 rows but", "has 1797", what="npy inputs of different row counts")
    tokens = os.path.join(w, "tokens.bin")
    with open(tokens, "wb") as f:
        f.write(bytes(range(256)))
    expect("    image: {npy: images.npy}\n" + good_labels, ["--data", tokens], "--data", "train.inputs",
           "'image', 'labels'", what="--data with a train.inputs plan")
    # A token model (no train.inputs): --shuffle and --dump-inputs do not apply to its data order.
    token_onnx = os.path.join(w, "tokens.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(nn.Sequential(nn.Embedding(256, 8), nn.Linear(8, 256)), (torch.zeros(2, 4, dtype=torch.int64),),
                          token_onnx, input_names=["input_ids"], output_names=["logits"], opset_version=17)
    token_spec = os.path.join(w, "tokens.yaml")
    with open(token_spec, "w") as f:
        f.write("mode: train\ninputs: {input_ids: [2, 4]}\ntrain:\n  loss: {logits: logits}\n  optimizer: {lr: 0.1}\n")
    token_plan = os.path.join(w, "tokens.cplan")
    u.compile_plan(opt, token_onnx, token_spec, token_plan, quiet=True)
    for flag in (["--shuffle"], ["--dump-inputs", os.path.join(w, "dump")]):
        p = subprocess.run([run, token_plan, "train", "--data", tokens, "--steps", "1", "--metrics",
                            os.path.join(w, "tok.jsonl")] + flag, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=120)
        good = p.returncode != 0 and flag[0] in p.stderr and "train.inputs" in p.stderr
        print(f"{flag[0]} with a token plan: {'ok' if good else 'WRONG'}: {p.stderr.strip()}")
        ok &= good
    return ok


if __name__ == "__main__":
    u.case_main(__doc__, {"cnn": cnn_case(), "cnn_shuffle": cnn_case(shuffle=True), "cnn_dp": cnn_case(dp=2),
                          "diffusion": diffusion_case(), "diffusion_dp": diffusion_case(dp=2),
                          "errors": errors_case}, threads=2, steps=20)
