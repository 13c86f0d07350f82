#!/usr/bin/env python3
"""get_onednn.py PREFIX — put oneDNN 3.2 (GNU OpenMP runtime) into PREFIX/include, PREFIX/lib.

The default build's oneDNN (Makefile: run when PREFIX/.version is missing; `make ONEDNN_ROOT=/path`
uses a site's install instead and never runs this). Debian 12 ships only oneDNN 2.6.3
(libdnnl-dev), so the 3.x library comes from PyPI as wheels, fetched with pip's own client:

    onednn-devel-cpu-gomp 2023.2.0   headers (data/include)
    onednn-cpu-gomp       2023.2.0   data/lib/libdnnl.so.3 (oneDNN 3.2, libgomp; no TBB)

`pip download --no-deps` fetches the two pinned wheels; each is checked against the sha256
pinned below (the hashes PyPI publishes for these files) before anything is unpacked, and the
wheels (zip files) are unpacked with zipfile. Only what the build needs is written: the headers
and one copy of the library (the wheel holds libdnnl.so, .so.3 and .so.3.2 as three 52 MiB
copies), with libdnnl.so -> libdnnl.so.3 as a link. ONEDNN_WHEELS=DIR uses wheels already in DIR
(same names, same hashes) instead of the network.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

VERSION = "2023.2.0"  # the PyPI release of oneDNN 3.2
WHEELS = {
    "onednn-devel-cpu-gomp": (
        "onednn_devel_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl",
        "9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284",
    ),
    "onednn-cpu-gomp": (
        "onednn_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl",
        "2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb",
    ),
}


def die(msg):
    sys.stderr.write("get_onednn: %s\n" % msg)
    sys.exit(1)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(dest):
    """The two wheels in dest, from ONEDNN_WHEELS or pip download; returns their paths."""
    cache = os.environ.get("ONEDNN_WHEELS")
    paths = {}
    missing = []
    for name, (fname, _) in WHEELS.items():
        if cache and os.path.isfile(os.path.join(cache, fname)):
            paths[name] = os.path.join(cache, fname)
        else:
            missing.append(name)
    if missing:
        if subprocess.call([sys.executable, "-m", "pip", "--version"], stdout=subprocess.DEVNULL) != 0:
            die("no pip for %s: install the Debian package python3-pip (make deps)" % sys.executable)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", dest] + ["%s==%s" % (n, VERSION) for n in missing]
        print("get_onednn: " + " ".join(cmd), flush=True)
        if subprocess.call(cmd) != 0:
            die("pip download failed (PyPI unreachable? set ONEDNN_WHEELS=DIR with the wheels, "
                "or build with make ONEDNN_ROOT=/path/to/onednn-3.x)")
        for name in missing:
            paths[name] = os.path.join(dest, WHEELS[name][0])
    for name, (fname, want) in WHEELS.items():
        if not os.path.isfile(paths[name]):
            die("pip did not produce %s" % fname)
        got = sha256(paths[name])
        if got != want:
            die("%s: sha256 %s, expected %s — refusing to use it" % (paths[name], got, want))
    return paths


def main():
    if len(sys.argv) != 2:
        die("usage: get_onednn.py PREFIX")
    prefix = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="onednn-")
    stage = prefix + ".tmp"
    try:
        paths = fetch(tmp)
        shutil.rmtree(stage, ignore_errors=True)
        os.makedirs(os.path.join(stage, "lib"))
        with zipfile.ZipFile(paths["onednn-devel-cpu-gomp"]) as z:
            root = "onednn_devel_cpu_gomp-%s.data/data/include/" % VERSION
            for n in z.namelist():
                if n.startswith(root) and not n.endswith("/"):
                    out = os.path.join(stage, "include", n[len(root):])
                    os.makedirs(os.path.dirname(out), exist_ok=True)
                    with z.open(n) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        with zipfile.ZipFile(paths["onednn-cpu-gomp"]) as z:
            lib = "onednn_cpu_gomp-%s.data/data/lib/libdnnl.so.3" % VERSION
            out = os.path.join(stage, "lib", "libdnnl.so.3")
            with z.open(lib) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.chmod(out, 0o755)
        os.symlink("libdnnl.so.3", os.path.join(stage, "lib", "libdnnl.so"))
        with open(os.path.join(stage, ".version"), "w") as f:
            f.write("oneDNN from PyPI onednn-cpu-gomp %s\n" % VERSION)
        shutil.rmtree(prefix, ignore_errors=True)
        os.rename(stage, prefix)
        print("get_onednn: oneDNN (PyPI %s) in %s" % (VERSION, prefix))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(stage, ignore_errors=True)


if __name__ == "__main__":
    main()
