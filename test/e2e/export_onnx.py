#!/usr/bin/python3
"""End-to-end check of `colossal-run M.cplan export --onnx OUT.onnx` (docs/training.md).

    export_onnx.py --workdir W [--opt colossal-opt] [--run colossal-run] [--protoc protoc]

1. examples/models/export.py writes a seeded GPT-2 (tied embeddings, static [2, 16]); its weights
   are re-saved as ONNX external data (W/ext/model.onnx + weights.bin), so the export has to
   read and inline them.
2. colossal-opt compiles W/ext/model.onnx (the plan records its absolute path and FNV-1a 64);
   colossal-run runs `forward` on the exported inputs.
3. colossal-run ... export --onnx W/exported.onnx; the result must pass onnx.checker, hold every
   weight inline, with each initializer equal to the source's (an inference plan has no trained
   parameter to replace), and onnxruntime on it must give colossal-run's logits
   (max|err| <= 1e-4 * max|ref|); onnxruntime is itself checked against PyTorch's logits.
4. Errors, each one line naming what is wrong: --onnx naming the source model or its external
   data file, a source model changed after compilation, a source model gone.
5. Replaced weights and an Identity tie, through --checkpoint: layer 1's attention projection is
   turned into an `Identity` of layer 0's (torch's way of tying weights), and the plan gets one
   PARAM state per float initializer plus one for the Identity's output (added to the compiled
   plan with protobuf's Python bindings: the states a training plan would carry). A checkpoint
   (model.safetensors) holds new seeded values for all of them. The exported model must hold
   exactly those values, with the Identity replaced by an initializer of its own, and onnxruntime
   on it must match colossal-run on a plan compiled from the same values written into the model
   by Python (onnx.helper), independently of the exporter. The checkpoint carries a full manifest
   (file sizes and FNV-1a 64): a flipped bit in model.safetensors and --onnx naming a checkpoint
   file are each one error line.

Exit 0 pass, 1 mismatch, 2 a tool failed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as u  # noqa: E402



def plan_file_bytes(plan):
    """A plan file as colossal-opt writes it (runtime serializePlan, include/colossal/runtime/Plan.h):
    the deterministic serialization without plan_hash, then plan_hash (field 63, fixed64) holding
    the FNV-1a 64 of the bytes before it."""
    plan.ClearField("plan_hash")
    body = plan.SerializeToString(deterministic=True)
    h = 0xcbf29ce484222325
    for b in body:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return body + b"\xf9\x03" + h.to_bytes(8, "little")

def expect_failure(cmd, needle):
    """Runs CMD, which must exit 1 with one "error: ..." line containing NEEDLE."""
    print("$ " + " ".join(cmd) + "   # must fail", flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    err = p.stderr.strip()
    ok = p.returncode == 1 and err.startswith("error: ") and needle in err and len(err.splitlines()) == 1
    print(f"  exit {p.returncode}: {err}  {'ok' if ok else 'UNEXPECTED (wanted ' + repr(needle) + ')'}")
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--opt", help="colossal-opt binary")
    p.add_argument("--run", help="colossal-run binary")
    p.add_argument("--protoc", default="protoc", help="protoc, to generate plan.proto's Python bindings")
    p.add_argument("--tol", type=float, default=1e-4)
    args = p.parse_args()
    w = os.path.abspath(args.workdir)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    ok = True
    try:
        opt = u.find_tool("colossal-opt", args.opt)
        run_bin = u.find_tool("colossal-run", args.run)
        model_dir = os.path.join(w, "model")
        out, _, _ = u.run([sys.executable, u.EXPORT_PY, "--arch", "gpt2", "--opset", "17", "--static", "--quiet",
                           "--out", model_dir], "export.py", timeout=600)
        inputs = u.npy_dir(os.path.join(model_dir, "inputs"))
        torch_ref = u.npy_dir(os.path.join(model_dir, "reference"))

        # The source model with every initializer in an external data file.
        ext_dir = os.path.join(w, "ext")
        os.makedirs(ext_dir)
        source = os.path.join(ext_dir, "model.onnx")
        m = onnx.load(os.path.join(model_dir, "model.onnx"))
        onnx.save_model(m, source, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="weights.bin", size_threshold=0)
        n_external = sum(t.data_location == onnx.TensorProto.EXTERNAL for t in onnx.load(source, load_external_data=False).graph.initializer)
        print(f"source model: {len(m.graph.initializer)} initializers, {n_external} as external data")
        if n_external == 0:
            u.die("the source model has no external data: the test would not exercise inlining")

        plan = os.path.join(w, "model.cplan")
        u.compile_plan(opt, source, os.path.join(model_dir, "spec.yaml"), plan)
        colossal_dir = os.path.join(w, "colossal")
        u.run_plan(run_bin, plan, inputs, colossal_dir)

        exported = os.path.join(w, "exported.onnx")
        u.run([run_bin, plan, "export", "--onnx", exported], "colossal-run export")
    except u.ToolError as e:
        u.die(str(e))

    # The exported model: valid, self-contained, the source's weights unchanged.
    e = onnx.load(exported, load_external_data=False)
    onnx.checker.check_model(e)
    src = {t.name: numpy_helper.to_array(t, base_dir=ext_dir) for t in onnx.load(source, load_external_data=False).graph.initializer}
    got = {}
    for t in e.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
            print(f"  initializer {t.name}: still external data  MISMATCH")
            ok = False
        got[t.name] = numpy_helper.to_array(t)
    same = sorted(got) == sorted(src) and all(
        got[k].dtype == src[k].dtype and np.array_equal(got[k], src[k]) for k in src)
    print(f"exported initializers: {len(got)} inline, equal to the source's: {same}")
    ok &= same
    if [n.op_type for n in e.graph.node] != [n.op_type for n in m.graph.node]:
        print("  the exported graph's nodes differ from the source's  MISMATCH")
        ok = False

    try:
        ort_dir = os.path.join(w, "ort")
        u.run_ort(exported, inputs, ort_dir)
    except u.ToolError as err:
        u.die(str(err))
    print("onnxruntime on the exported model vs PyTorch")
    ok &= u.compare(torch_ref, ort_dir, args.tol, label="onnxruntime")
    print("colossal-run forward vs onnxruntime on the exported model")
    ok &= u.compare(u.npy_dir(ort_dir), colossal_dir, args.tol)

    # Errors.
    bad = os.path.join(w, "bad.onnx")
    ok &= expect_failure([run_bin, plan, "export", "--onnx", source], "is the source model")
    ok &= expect_failure([run_bin, plan, "export", "--onnx", os.path.join(ext_dir, "weights.bin")],
                         "is an external data file of the source model")
    ok &= expect_failure([run_bin, plan, "export"], "export needs --onnx OUT.onnx")
    original = open(source, "rb").read()
    changed = onnx.load(source, load_external_data=False)
    changed.producer_name = "edited after compilation"
    onnx.save_model(changed, source)
    ok &= expect_failure([run_bin, plan, "export", "--onnx", bad], "the model changed since compilation")
    os.remove(source)
    ok &= expect_failure([run_bin, plan, "export", "--onnx", bad], source)
    with open(source, "wb") as f:
        f.write(original)
    if os.path.exists(bad):
        print(f"  {bad} was written by a failed export  MISMATCH")
        ok = False

    ok &= check_checkpoint_export(w, os.path.join(w, "model", "model.onnx"), inputs, opt, run_bin, args.tol,
                                  args.protoc)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def write_safetensors(path, tensors):
    """{name: float32 array} -> a safetensors file (the format: u64 header length, JSON, data)."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def fnv1a64(data):
    """FNV-1a 64 of bytes (docs/training.md: the checkpoint manifest's file hashes)."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def write_checkpoint(step_dir, step, params):
    """A checkpoint step folder as colossal-run writes it: model.safetensors (the PARAM values), an
    empty optimizer.safetensors and a manifest.json with each file's size and FNV-1a 64."""
    write_safetensors(os.path.join(step_dir, "model.safetensors"), params)
    write_safetensors(os.path.join(step_dir, "optimizer.safetensors"), {})
    files = {}
    for name in ("model.safetensors", "optimizer.safetensors"):
        with open(os.path.join(step_dir, name), "rb") as f:
            data = f.read()
        files[name] = {"bytes": len(data), "fnv1a64": f"{fnv1a64(data):016x}"}
    tensors = {k: {"file": "model.safetensors", "role": "param", "dtype": "F32", "shape": list(v.shape)}
               for k, v in params.items()}
    with open(os.path.join(step_dir, "manifest.json"), "w") as f:
        json.dump({"format": "colossal-checkpoint", "version": 1, "step": step, "data_position": 0,
                   "seed": "0" * 16, "spec_hash": "0" * 16, "mesh": {}, "files": files, "tensors": tensors}, f)


def check_checkpoint_export(w, model_path, inputs, opt, run_bin, tol, protoc):
    print("--- replaced weights and an Identity tie, through --checkpoint")
    m = onnx.load(model_path)
    ok = True
    repo_plan_dir = os.path.join(u.REPO, "runtime", "plan")
    pb_dir = os.path.join(w, "pb")
    os.makedirs(pb_dir)
    try:
        u.run([protoc, f"--proto_path={repo_plan_dir}", f"--python_out={pb_dir}", "plan.proto"], "protoc")
    except u.ToolError as e:
        u.die(str(e))
    sys.path.insert(0, pb_dir)
    import plan_pb2  # noqa: E402

    # Tie layer 1's attention output projection to layer 0's through an Identity.
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    proj = [n.input[1] for n in g.node if n.op_type == "MatMul" and "attn/c_proj" in n.name and n.input[1] in inits]
    if len(proj) < 2:
        u.die(f"expected two attention projection weights in the GPT-2 export, found {proj}")
    first, second = proj[0], proj[1]
    for n in g.node:
        for i, name in enumerate(n.input):
            if name == second:
                n.input[i] = "tied_copy"
    g.initializer.remove(inits[second])
    g.node.insert(0, onnx.helper.make_node("Identity", [first], ["tied_copy"], name="tie"))
    tie_dir = os.path.join(w, "tied")
    os.makedirs(tie_dir)
    source = os.path.join(tie_dir, "model.onnx")
    onnx.save_model(m, source, save_as_external_data=True, location="weights.bin", size_threshold=0)
    spec = os.path.join(w, "model", "spec.yaml")
    plan_path = os.path.join(w, "tied.cplan")
    try:
        u.compile_plan(opt, source, spec, plan_path)
    except u.ToolError as e:
        u.die(str(e))

    # PARAM states for every float initializer and for the Identity's output.
    plan = plan_pb2.Plan()
    with open(plan_path, "rb") as f:
        plan.ParseFromString(f.read())
    weight_keys = {b.weight_name for b in plan.programs[0].buffers if b.storage == plan_pb2.WEIGHT}
    src = {t.name: numpy_helper.to_array(t, base_dir=tie_dir)
           for t in onnx.load(source, load_external_data=False).graph.initializer}
    params = {k: v for k, v in src.items() if v.dtype == np.float32}
    params["tied_copy"] = src[first]
    rng = np.random.default_rng(1)
    trained = {k: (v * 0.9 + 0.05 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in params.items()}
    for name, v in trained.items():
        s = plan.states.add()
        s.name, s.dtype, s.role, s.source = name, plan_pb2.F32, plan_pb2.StateTensor.PARAM, name
        s.shape.extend(v.shape)
        s.init_weight = name if name in weight_keys else first
    with open(plan_path, "wb") as f:
        f.write(plan_file_bytes(plan))
    ckpt = os.path.join(w, "ckpt")
    os.makedirs(os.path.join(ckpt, "step-00000003"))
    with open(os.path.join(ckpt, "latest"), "w") as f:
        f.write("step-00000003\n")
    write_checkpoint(os.path.join(ckpt, "step-00000003"), 3, trained)

    # The reference: the same values written into the model by Python, compiled and run.
    ref_model = onnx.load(source)
    for t in ref_model.graph.initializer:
        if t.name in trained:
            t.CopyFrom(numpy_helper.from_array(trained[t.name], t.name))
    ref_model.graph.initializer.append(numpy_helper.from_array(trained["tied_copy"], "tied_copy"))
    ref_model.graph.node.remove(ref_model.graph.node[0])
    ref_path = os.path.join(w, "reference.onnx")
    onnx.save_model(ref_model, ref_path)
    exported = os.path.join(w, "exported_ckpt.onnx")
    try:
        u.compile_plan(opt, ref_path, spec, os.path.join(w, "reference.cplan"))
        u.run_plan(run_bin, os.path.join(w, "reference.cplan"), inputs, os.path.join(w, "colossal_ckpt"))
        u.run([run_bin, plan_path, "export", "--onnx", exported, "--checkpoint", ckpt], "colossal-run export")
        u.run_ort(exported, inputs, os.path.join(w, "ort_ckpt"))
    except u.ToolError as e:
        u.die(str(e))

    e = onnx.load(exported)
    onnx.checker.check_model(e)
    got = {t.name: numpy_helper.to_array(t) for t in e.graph.initializer}
    exact = all(np.array_equal(got.get(k), v) for k, v in trained.items())
    untouched = all(np.array_equal(got.get(k), v) for k, v in src.items() if k not in trained)
    identities = [n for n in e.graph.node if n.op_type == "Identity" and n.output[0] == "tied_copy"]
    print(f"exported: {len(trained)} parameters equal to the checkpoint's: {exact}; other initializers "
          f"unchanged: {untouched}; Identity 'tie' removed: {not identities}; "
          f"'{first}' and 'tied_copy' independent: {not np.array_equal(got[first], got['tied_copy'])}")
    ok &= exact and untouched and not identities and not np.array_equal(got[first], got["tied_copy"])
    print("colossal-run forward (weights written by Python) vs onnxruntime on the exported model")
    ok &= u.compare(u.npy_dir(os.path.join(w, "ort_ckpt")), os.path.join(w, "colossal_ckpt"), tol)
    # The trained logits differ from the untrained ones: the comparison is not vacuous.
    before = np.load(os.path.join(w, "ort", "logits.npy"))
    after = np.load(os.path.join(w, "ort_ckpt", "logits.npy"))
    print(f"  max|logits(trained) - logits(initial)| = {np.max(np.abs(after - before)):.3e}")
    ok &= bool(np.max(np.abs(after - before)) > 1e-2)

    # A flipped bit in model.safetensors: the loader's manifest check (as train --resume and sample).
    model_file = os.path.join(ckpt, "step-00000003", "model.safetensors")
    with open(model_file, "r+b") as f:
        f.seek(-5, os.SEEK_END)
        b = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x04]))
    ok &= expect_failure([run_bin, plan_path, "export", "--onnx", os.path.join(w, "bad3.onnx"), "--checkpoint", ckpt],
                         "model.safetensors: FNV-1a hash ")
    # --onnx naming a file of the checkpoint is refused (and leaves it alone).
    ok &= expect_failure([run_bin, plan_path, "export", "--onnx", model_file, "--checkpoint", ckpt],
                         "a file of the checkpoint")

    # A checkpoint without one of the parameters: an error naming the file and the tensor.
    del trained["tied_copy"]
    write_checkpoint(os.path.join(ckpt, "step-00000003"), 3, trained)
    ok &= expect_failure([run_bin, plan_path, "export", "--onnx", os.path.join(w, "bad2.onnx"), "--checkpoint", ckpt],
                         "model.safetensors: no tensor 'tied_copy'")
    return ok


if __name__ == "__main__":
    sys.exit(main())
