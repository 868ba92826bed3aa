"""deploy/kubernetes, checked offline: every manifest against Kubernetes' own schemas (kubernetes-validate,
strict: a misspelt field is an error), the ServiceMonitor against the prometheus-operator CRD's schema
(tests/deploy/schemas, strict the same way), and what no schema sees: selectors that select, ports that
exist, arguments gputui's own parser accepts, a comment for each privilege, and the example web config
as gputui's loader reads it."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML comes with the prometheus extra")
kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="the test extra brings kubernetes-validate"
)
jsonschema = pytest.importorskip("jsonschema")

from gputui import __version__, cli, commands  # noqa: E402
from gputui.export.web_config import WebConfigError, load  # noqa: E402
from tests.export.servers import NO_OPENSSL, OPENSSL, make_tls_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
SCHEMAS = Path(__file__).with_name("schemas")
MANIFESTS = ("namespace.yaml", "daemonset.yaml", "service.yaml", "servicemonitor.yaml")
# The oldest Kubernetes still supported by its cloud vendors' extended support, and the newest the
# installed kubernetes-validate knows.
VERSIONS = ("1.27", kubernetes_validate.utils.latest_version())


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def everything() -> dict[str, dict[str, Any]]:
    found = {}
    for name in MANIFESTS:
        for doc in documents(name):
            found[doc["kind"]] = doc
    return found


def test_the_folder_holds_what_the_kustomization_applies() -> None:
    kustomization = documents("kustomization.yaml")[0]
    assert tuple(kustomization["resources"]) == MANIFESTS
    manifests = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert manifests == set(MANIFESTS)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", [m for m in MANIFESTS if m != "servicemonitor.yaml"])
def test_each_manifest_against_kubernetes_schemas(name: str, version: str) -> None:
    for doc in documents(name):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_kubernetes_check_catches_a_misspelt_field() -> None:
    daemonset = copy.deepcopy(everything()["DaemonSet"])
    spec = daemonset["spec"]["template"]["spec"]
    spec["hostPid"] = spec.pop("hostPID")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, VERSIONS[-1], strict=True)


def strict(schema: Any) -> Any:
    """The CRD's schema with unknown fields refused (the API server would drop them silently: a typo'd
    tlsConfig would scrape in plain text), as kubernetes-validate's strict schemas do."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        open_ended = "additionalProperties" in schema or schema.get("x-kubernetes-preserve-unknown-fields")
        if "properties" in schema and not open_ended:
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [strict(v) for v in schema]
    return schema


def service_monitor_validator() -> Any:
    schema = strict(json.loads((SCHEMAS / "servicemonitor-v1.json").read_text()))
    schema["properties"]["metadata"] = {
        "type": "object",
        "required": ["name", "namespace"],
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
            "namespace": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "additionalProperties": False,
    }
    return jsonschema.Draft7Validator(schema)


def test_the_service_monitor_against_the_operators_crd() -> None:
    monitor = everything()["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    errors = [
        f"{'.'.join(map(str, e.path))}: {e.message}" for e in service_monitor_validator().iter_errors(monitor)
    ]
    assert errors == []


def test_the_crd_check_catches_a_misspelt_field() -> None:
    monitor = copy.deepcopy(everything()["ServiceMonitor"])
    endpoint = monitor["spec"]["endpoints"][0]
    endpoint["tlsconfig"] = endpoint.pop("tlsConfig")
    assert list(service_monitor_validator().iter_errors(monitor))


def pod_labels(daemonset: dict[str, Any]) -> dict[str, str]:
    return dict(daemonset["spec"]["template"]["metadata"]["labels"])


def test_selectors_select_and_ports_exist() -> None:
    found = everything()
    namespace = found["Namespace"]["metadata"]["name"]
    daemonset, service, monitor = found["DaemonSet"], found["Service"], found["ServiceMonitor"]
    for resource in (daemonset, service, monitor):
        assert resource["metadata"]["namespace"] == namespace
    labels = pod_labels(daemonset)
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert namespace in monitor["spec"]["namespaceSelector"]["matchNames"]
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] in ports
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {service_port["name"]}
    assert container["livenessProbe"]["tcpSocket"]["port"] in ports
    # the name the TLS certificate must carry is the Service's own
    server_name = monitor["spec"]["endpoints"][0]["tlsConfig"]["serverName"]
    assert server_name == f"{service['metadata']['name']}.{namespace}.svc"


def test_the_pod_is_held_to_what_it_needs() -> None:
    daemonset = everything()["DaemonSet"]
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and not spec.get("hostNetwork") and not spec.get("hostIPC")
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert set(context["capabilities"]["add"]) == {"SYS_PTRACE", "DAC_READ_SEARCH"}
    assert container["resources"]["limits"]["memory"] and container["resources"]["limits"]["cpu"]
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})  # takes no GPU from jobs
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert all(m.get("readOnly") for m in container["volumeMounts"] if m["name"] != "tmp")
    host_paths = [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v]
    assert host_paths == ["/var/log/pods"]


def test_every_privilege_says_why() -> None:
    lines = (DEPLOY / "daemonset.yaml").read_text().splitlines()
    privileged = (
        "hostPID:",
        "runtimeClassName:",
        "runAsUser:",
        "add:",
        "hostPath:",
        "- name: NVIDIA_VISIBLE_",
    )
    for key in privileged:
        (at,) = [i for i, line in enumerate(lines) if line.strip().startswith(key)]
        above = [line.strip() for line in lines[max(0, at - 4) : at]]
        assert any(line.startswith("#") for line in above), f"{key} has no comment saying why"


def test_the_container_runs_gputui_export_with_arguments_gputui_accepts(tmp_path: Path) -> None:
    daemonset = everything()["DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["image"].rsplit(":", 1)[1] == __version__
    env = {e["name"] for e in container["env"]}
    args = list(container["args"])
    for arg in args:  # $(VAR) is Kubernetes' expansion: only of variables the container defines
        assert set(re.findall(r"\$\((\w+)\)", arg)) <= env, arg
    config_arg = next(a for a in args if a.startswith("--web-config-file="))
    config_path = Path(config_arg.partition("=")[2])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    secrets = {
        v["name"]: v["secret"]["secretName"]
        for v in daemonset["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }
    (volume,) = [name for name, path in mounts.items() if Path(path) == config_path.parent]
    assert secrets[volume] == "gputui-web-config"

    local = tmp_path / "web-config.yml"
    local.write_text("")  # the parser reads the file: an empty one is a valid (plain) config
    argv = [a.replace("$(NODE_NAME)", "gpu-node-7").replace(str(config_path), str(local)) for a in args]
    parsed = cli.build_parser().parse_args(argv)
    assert parsed.handler is commands.export
    assert (parsed.bind, parsed.hostname) == ("0.0.0.0", "gpu-node-7")
    assert parsed.port == {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"]
    assert parsed.web_config.path == local


@pytest.mark.skipif(OPENSSL is None, reason=NO_OPENSSL)
def test_the_example_web_config_refuses_to_start_until_its_hash_is_set(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path)
    shutil.copy(tls.cert, tmp_path / "tls.crt")
    shutil.copy(tls.key, tmp_path / "tls.key")
    example = (DEPLOY / "web-config.yml").read_text()
    config = tmp_path / "web-config.yml"
    config.write_text(example)
    with pytest.raises(WebConfigError, match="the password of prometheus is not a bcrypt hash"):
        load(config)
    bcrypt = pytest.importorskip("bcrypt")
    hashed = bcrypt.hashpw(b"scrape", bcrypt.gensalt(4)).decode()
    config.write_text(example.replace("REPLACE-WITH-A-BCRYPT-HASH", hashed))
    loaded = load(config)
    assert loaded.context is not None and set(loaded.users) == {"prometheus"}
    assert "X-Content-Type-Options: nosniff" in loaded.header_lines
