"""tests/deploy/deploylib.py - helpers shared by the deploy checks: paths,
running the built graphserve, and a readable copy of the example config."""
import json
import os
import subprocess
import sys
import tempfile

SRC = os.environ["GS_SOURCE_DIR"]
BUILD = os.environ["GS_BUILD_DIR"]
GRAPHSERVE = os.path.join(BUILD, "server", "graphserve")


class Checks:
    """Counts checks and prints the closing 'N passed, N failed' line."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print("ok   " + what)
        else:
            self.failed += 1
            print("FAIL " + what + ("\n     " + detail.replace("\n", "\n     ") if detail else ""))
        return ok

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.exit(1 if self.failed else 0)


def clean_env():
    """The environment without a developer's own GRAPHSERVE_* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GRAPHSERVE_")}


def graphserve(*args):
    """Runs the built graphserve; returns (exit status, stdout + stderr)."""
    p = subprocess.run([GRAPHSERVE, *args], capture_output=True, text=True, env=clean_env())
    return p.returncode, p.stdout + p.stderr


def tmpdir():
    return tempfile.mkdtemp(prefix="gs-deploy-", dir=os.path.join(BUILD, "tmp")
                            if os.path.isdir(os.path.join(BUILD, "tmp")) else None)


def example_config_copy(directory):
    """deploy/graphserve.example.json with its model path pointing at a file
    that exists here (config check opens the files a config names)."""
    with open(os.path.join(SRC, "deploy", "graphserve.example.json")) as f:
        cfg = json.load(f)
    model = os.path.join(directory, "model.gguf")
    with open(model, "wb") as f:
        f.write(b"GGUF")
    cfg["model"] = model
    path = os.path.join(directory, "graphserve.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path, cfg


def effective_config(args):
    """`graphserve config print ARGS` as a dict, or (None, output) on refusal."""
    rc, out = graphserve("config", "print", *args)
    if rc != 0:
        return None, out
    return json.loads(out[out.index("{"):]), out
