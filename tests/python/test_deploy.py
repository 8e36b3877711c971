"""The packaging, checked offline: the Dockerfile with hadolint, the
Kubernetes manifests with kubernetes-validate (strict, against the schemas
it ships), the ConfigMap kustomization.yaml generates rendered and checked
with them, and the configurations the image and the manifests ship loaded
by `toolgate check` as the pods would lay them out."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, binary

VENV_BIN = pathlib.Path(sys.executable).parent
K8S = ROOT / "deploy" / "kubernetes"


def tool(name: str) -> str:
    path = VENV_BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: `make setup` installs it (tests/python/requirements.txt)")
    return str(path)


def validate(*files: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("kubernetes-validate"), "--strict", "--no-warn", *map(str, files)],
        capture_output=True,
        text=True,
    )


def kustomization() -> dict:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def test_the_dockerfile_passes_hadolint():
    result = subprocess.run(
        [tool("hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The check can fail: an unpinned base image does.
    bad = subprocess.run(
        [tool("hadolint"), "-"], input="FROM debian\n", capture_output=True, text=True
    )
    assert bad.returncode != 0 and "DL3006" in bad.stdout, bad.stdout


def test_every_manifest_is_valid_kubernetes(tmp_path):
    resources = [K8S / r for r in kustomization()["resources"]]
    result = validate(*resources, K8S / "secret.example.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    # The validator catches what the API server would refuse.
    broken = K8S / "deployment.yaml"
    text = broken.read_text().replace("containerPort: 8080", "containerPort: eighty")
    tmp = tmp_path / "broken-deployment.yaml"
    tmp.write_text(text)
    result = validate(tmp)
    assert result.returncode != 0, result.stdout


def rendered_configmap() -> dict:
    """The ConfigMap kustomize generates from configMapGenerator."""
    (generator,) = kustomization()["configMapGenerator"]
    data = {}
    for entry in generator["files"]:
        key, path = entry.split("=", 1)
        data[key] = (K8S / path).read_text()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": generator["name"]},
        "data": data,
    }


def test_the_generated_configmap_is_what_the_deployment_mounts(tmp_path):
    configmap = rendered_configmap()
    path = tmp_path / "configmap.yaml"
    path.write_text(yaml.safe_dump(configmap))
    result = validate(path)
    assert result.returncode == 0, result.stdout + result.stderr

    deployment = yaml.safe_load((K8S / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    items = volume["configMap"]["items"]
    assert sorted(i["key"] for i in items) == sorted(configmap["data"]), (
        "every file of the ConfigMap is mounted, and nothing else"
    )
    # Probes name the gateway's own endpoints.
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # Kubernetes waits long enough for the drain and the grace period.
    gateway = yaml.safe_load(configmap["data"]["toolgate.yaml"])
    drain, grace = (seconds(gateway["shutdown"][k]) for k in ("drain_delay", "grace"))
    assert pod["terminationGracePeriodSeconds"] >= drain + grace + 10
    # drain_delay outlasts the readiness probe's period, so the Service
    # stops sending before the listener closes.
    probe = container["readinessProbe"]
    assert drain > probe["periodSeconds"] * probe["failureThreshold"]
    # The pods' folder, as the kubelet lays a ConfigMap volume out (files
    # in a timestamped folder, `..data` linking to it, each path a link
    # through `..data`), is a valid configuration.
    folder = tmp_path / "etc-toolgate"
    data = folder / "..2026_11_25_00_00_00.000000000"
    for item in items:
        target = data / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(configmap["data"][item["key"]])
    (folder / "..data").symlink_to(data.name)
    for top in {pathlib.Path(item["path"]).parts[0] for item in items}:
        (folder / top).symlink_to(pathlib.Path("..data") / top)
    check(folder, {"REDIS_URL": "redis://toolgate-redis:6379/0"})


def seconds(duration: str) -> int:
    """`10s`, `2m`: the durations the configuration uses here."""
    units = {"s": 1, "m": 60}
    return int(duration[:-1]) * units[duration[-1]]


def check(folder: pathlib.Path, extra_env: dict):
    env = {
        "PATH": os.environ.get("PATH", ""),
        "TOOLGATE_API_KEY": "k" * 32,
        "OPENAI_API_KEY": "sk-test",
        **extra_env,
    }
    result = subprocess.run(
        [str(binary("toolgate")), "check", "--config", str(folder)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok:"), result.stdout


def test_the_images_configuration_is_valid(tmp_path):
    folder = tmp_path / "etc-toolgate"
    shutil.copytree(ROOT / "deploy" / "container", folder)
    check(folder, {})
    # Without its API key the image refuses to start (it listens on every
    # interface).
    result = subprocess.run(
        [str(binary("toolgate")), "check", "--config", str(folder)],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert result.returncode != 0 and "TOOLGATE_API_KEY" in result.stdout, result.stdout
