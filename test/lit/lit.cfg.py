# lit configuration of the colossal compiler tests. The build writes lit.site.cfg.py (paths) and
# loads this file; run `lit -sv BUILD/test/lit`, never this folder directly.
import os

import lit.formats

config.name = "colossal"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "Inputs", "lit.cfg.py", "lit.site.cfg.py"]

if not hasattr(config, "colossal_obj_root"):
    lit_config.fatal("run lit on the build's test/lit folder (it holds lit.site.cfg.py)")

config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.colossal_obj_root

# colossal-opt comes from this build; FileCheck, not, split-file and count from LLVM 22, which
# Debian does not put on PATH.
for tool_dir in (config.llvm_tools_dir, config.colossal_tools_dir):
    if not os.path.isdir(tool_dir):
        lit_config.fatal("missing tool folder " + tool_dir)
path = os.pathsep.join(
    [config.colossal_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")]
)
config.environment["PATH"] = path

# A bare `colossal-opt` in a RUN line means this build's binary, whatever PATH holds.
config.substitutions.append(
    (r"(?<![-./\w])colossal-opt\b(?!-)", os.path.join(config.colossal_tools_dir, "colossal-opt"))
)
config.substitutions.append(("%shared", config.colossal_shared_dir))
config.substitutions.append(("%src", config.colossal_src_root))

# Debian's python3-onnx belongs to /usr/bin/python3 (the python3 first on PATH lacks it). Tests
# that build their models with it say `REQUIRES: python-onnx` (numpy + onnx) or `REQUIRES:
# python-torch` (examples/models/export.py); without them lit reports those tests UNSUPPORTED.
import subprocess


def _python_has(modules):
    try:
        return subprocess.run(["/usr/bin/python3", "-c", "import " + ", ".join(modules)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False


if _python_has(["numpy", "onnx"]):
    config.available_features.add("python-onnx")
    if _python_has(["torch"]):
        config.available_features.add("python-torch")

config.substitutions.append(("%python", "/usr/bin/python3"))
config.substitutions.append(("%make_onnx", "/usr/bin/python3 " + os.path.join(config.test_source_root, "Import", "Inputs", "make_onnx.py")))
