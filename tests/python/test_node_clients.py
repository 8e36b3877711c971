"""The official Node clients (tests/node: the openai SDK, Vercel's AI SDK
and Google's @google/genai, with the Node 22 they need, installed by
`make setup`) against the gateway, run with `node --test`."""

import os
import subprocess

import pytest

from conftest import ROOT, missing

NODE = ROOT / "tests" / "node" / "node_modules" / ".bin" / "node"


def test_node_clients(gateway):
    if not NODE.exists():
        missing(f"{NODE} is missing: run `make setup`")
    r = subprocess.run(
        [str(NODE), "--test", "--test-reporter=spec", str(ROOT / "tests" / "node" / "clients.test.mjs")],
        env={**os.environ, "TOOLGATE_URL": gateway},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # Every test ran and passed (none skipped or silently missing).
    assert "ℹ tests 12" in r.stdout and "ℹ pass 12" in r.stdout, r.stdout
