"""Unpacks the data files of the wheels in DIR/wheels into DIR: the
Berkeley Function Calling Leaderboard's question and answer sets into
DIR/bfcl/ (AgentDojo's wheel is read in place by tests/bench/guards.py).

Usage: extract.py DIR
"""

import pathlib
import sys
import zipfile

out = pathlib.Path(sys.argv[1])
(wheel,) = (out / "wheels").glob("bfcl_eval-*.whl")
prefix = "bfcl_eval/data/"
with zipfile.ZipFile(wheel) as z:
    names = [
        n
        for n in z.namelist()
        if n.startswith(prefix) and n.endswith(".json") and n.count("/") <= 3 and "unused_datasets" not in n
    ]
    for name in names:
        target = out / "bfcl" / name[len(prefix) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(z.read(name))
print(f"{len(names)} BFCL data files in {out / 'bfcl'}")
