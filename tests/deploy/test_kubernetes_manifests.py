"""deploy/kubernetes: the manifests parse, fit together (labels, ports, paths, secrets), and give the
agent what it needs on a GPU node: the host's processes, /proc and /sys, the GPUs, only CAP_KILL."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import REPO

import agent
from agent.config import load_config

K8S = REPO / "deploy" / "kubernetes"


def load(name: str) -> dict:
    docs = [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    assert len(docs) == 1, name
    return docs[0]


@pytest.fixture(scope="module")
def ds() -> dict:
    return load("daemonset.yaml")


@pytest.fixture(scope="module")
def pod(ds: dict) -> dict:
    return ds["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def container(pod: dict) -> dict:
    (c,) = pod["containers"]
    return c


@pytest.fixture(scope="module")
def config_text() -> str:
    return load("configmap.yaml")["data"]["agent.toml"]


@pytest.fixture(scope="module")
def cfg(config_text: str, tmp_path_factory: pytest.TempPathFactory):
    p = tmp_path_factory.mktemp("k8s") / "agent.toml"
    p.write_text(config_text)
    return load_config(str(p))  # the real loader: unknown keys and bad values fail here


def mounts(container: dict) -> dict[str, dict]:
    return {m["name"]: m for m in container["volumeMounts"]}


def volumes(pod: dict) -> dict[str, dict]:
    return {v["name"]: v for v in pod["volumes"]}


def test_kustomization_lists_existing_files() -> None:
    k = load("kustomization.yaml")
    for res in k["resources"]:
        assert (K8S / res).is_file(), res
    for doc in ("servicemonitor.yaml", "runtimeclass-nvidia.yaml"):  # optional: named there
        assert doc in (K8S / "kustomization.yaml").read_text()
        load(doc)
    # no placeholder secret is ever applied by the kustomization
    assert "secret.example.yaml" not in k["resources"]


def test_host_pid_network_proc_sys(pod: dict, container: dict, cfg) -> None:
    assert pod["hostPID"] is True  # training pods' PIDs: NVML's process list and the signal target
    assert pod["hostNetwork"] is True  # /proc/net/dev shows the node's NICs, not the pod's veth
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["automountServiceAccountToken"] is False
    vols, ms = volumes(pod), mounts(container)
    for name, host in (("proc", "/proc"), ("sys", "/sys")):
        assert vols[name]["hostPath"]["path"] == host
        assert ms[name]["readOnly"] is True
    assert cfg.agent.procfs == ms["proc"]["mountPath"] == "/host/proc"
    assert cfg.agent.sysfs == ms["sys"]["mountPath"] == "/host/sys"
    assert cfg.storage.mountstats_pid == "1"  # the node's NFS mounts, not the container's


def test_state_and_control_socket_on_the_host(pod: dict, container: dict, cfg) -> None:
    vols, ms = volumes(pod), mounts(container)
    assert vols["state"]["hostPath"]["path"] == cfg.agent.state_dir == ms["state"]["mountPath"]
    assert vols["run"]["hostPath"]["path"] == cfg.agent.runtime_dir == ms["run"]["mountPath"]
    # trainer pods that mount /run/training-node-agent reach the socket and the request file
    assert Path(cfg.http.control_socket).parent == Path(ms["run"]["mountPath"])
    assert ms["config"]["mountPath"] == "/etc/training-node-agent" and ms["config"]["readOnly"]
    assert vols["config"]["configMap"]["name"] == load("configmap.yaml")["metadata"]["name"]
    assert container["args"] == ["run", "--config", "/etc/training-node-agent/agent.toml"]


def test_nvidia_runtime_without_allocating_gpus(container: dict) -> None:
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    resources = container["resources"]
    for section in ("requests", "limits"):
        assert not any("nvidia.com" in k for k in resources[section]), "must not take GPUs from jobs"
    patch = load("runtimeclass-nvidia.yaml")
    assert (patch["kind"], patch["metadata"]["name"]) == ("DaemonSet", "training-node-agent")
    assert patch["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"


def test_gpu_nodes_only_and_tolerates_their_taints(pod: dict) -> None:
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert {"aliyun.accelerator/nvidia_name", "nvidia.com/gpu.present"} <= keys
    assert {"operator": "Exists"} in pod["tolerations"]


def test_only_cap_kill_read_only_root(container: dict) -> None:
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["KILL"]}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged", False) is False
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"


def test_resources_sized_from_the_benchmark(container: dict) -> None:
    r = container["resources"]
    assert r["requests"] == {"cpu": "20m", "memory": "64Mi"}
    assert r["limits"] == {"cpu": "200m", "memory": "128Mi"}


def test_metrics_port_annotations_and_probes(ds: dict, container: dict, cfg) -> None:
    port = int(cfg.http.listen.rpartition(":")[2])
    (p,) = container["ports"]
    assert (p["name"], p["containerPort"]) == ("metrics", port)
    ann = ds["spec"]["template"]["metadata"]["annotations"]
    assert ann == {
        "prometheus.io/scrape": "true",
        "prometheus.io/scheme": "https",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
    }
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTPS"}


def test_the_port_is_secured_by_the_web_secret(pod: dict, container: dict, cfg, tmp_path: Path) -> None:
    """The ConfigMap's web_config is web.yml of the mounted Secret; that web.yml loads, names its
    certificate and key as files of the same Secret, exempts the probes' /healthz from basic auth,
    and the Secret is required (no pod serves the port unprotected while it is missing)."""
    from agent.config.webconfig import load_web_config

    vols, ms = volumes(pod), mounts(container)
    web, scrape = yaml.safe_load_all((REPO / "deploy/kubernetes/web-secret.example.yaml").read_text())
    assert vols["web"]["secret"]["secretName"] == web["metadata"]["name"]
    assert "optional" not in vols["web"]["secret"] and ms["web"]["readOnly"]
    assert cfg.http.web_config == ms["web"]["mountPath"] + "/web.yml"
    for name, value in web["stringData"].items():
        (tmp_path / name).write_text(value)
    (tmp_path / "web.yml").write_text(
        web["stringData"]["web.yml"].replace("REPLACE_WITH_BCRYPT_HASH", "$2b$10$" + "a" * 53)
    )
    wc = load_web_config(tmp_path / "web.yml")
    tls = wc.tls_server_config
    assert tls.enabled and {Path(tls.cert_file).name, Path(tls.key_file).name} <= set(web["stringData"])
    assert wc.basic_auth_users and wc.auth_excluded_paths == ["/healthz"]
    # the ServiceMonitor scrapes with the other Secret: TLS against the shared name, basic auth
    (ep,) = load("servicemonitor.yaml")["spec"]["endpoints"]
    assert ep["scheme"] == "https" and ep["tlsConfig"]["serverName"] == "training-node-agent"
    refs = [ep["tlsConfig"]["ca"]["secret"], ep["basicAuth"]["username"], ep["basicAuth"]["password"]]
    assert {r["name"] for r in refs} == {scrape["metadata"]["name"]}
    assert {r["key"] for r in refs} == set(scrape["stringData"])
    kube = yaml.safe_load((REPO / "configs/prometheus/scrape-kubernetes.yml").read_text())["scrape_configs"][
        0
    ]
    assert kube["scheme"] == "https" and kube["tls_config"]["server_name"] == "training-node-agent"


def test_service_and_servicemonitor_select_the_pods(ds: dict) -> None:
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    svc = load("service.yaml")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    (sport,) = svc["spec"]["ports"]
    assert sport["targetPort"] == "metrics"
    sm = load("servicemonitor.yaml")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] == sport["name"]
    # the rules' AgentDown selects job="training-node-agent": the job label comes from the Service
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "training-node-agent"
    relabel = {r["targetLabel"]: r["sourceLabels"][0] for r in ep["relabelings"]}
    # the same target labels as the plain-Prometheus Kubernetes example
    prom = yaml.safe_load((REPO / "configs/prometheus/scrape-kubernetes.yml").read_text())
    plain = {
        r["target_label"]: r["source_labels"][0]
        for r in prom["scrape_configs"][0]["relabel_configs"]
        if "target_label" in r
    }
    assert relabel == plain
    assert {"training_job", "instance_type", "instance"} <= relabel.keys()


def test_webhook_secrets_come_from_the_secret_as_files(
    pod: dict, container: dict, config_text: str, tmp_path: Path
) -> None:
    env = {e["name"]: e.get("value") for e in container["env"]}
    vols, ms = volumes(pod), mounts(container)
    secret = load("secret.example.yaml")
    assert vols["webhooks"]["secret"]["secretName"] == secret["metadata"]["name"]
    assert vols["webhooks"]["secret"]["optional"] is True  # the agent starts without chat alerts
    assert ms["webhooks"]["mountPath"] == env["CREDENTIALS_DIRECTORY"] and ms["webhooks"]["readOnly"]

    # the commented example, uncommented, is a valid config whose secrets are files of that Secret
    block = re.search(r"# BEGIN webhook example\n(.*?)\s*# END webhook example", config_text, re.S)
    assert block, "the webhook example block"
    uncommented = re.sub(r"^(\s*)# ?", r"\1", block.group(1), flags=re.M)
    enabled = config_text.replace(block.group(0), uncommented)
    p = tmp_path / "agent.toml"
    p.write_text(enabled)
    cfg = load_config(str(p))
    (hook,) = cfg.alerts.webhooks
    files = {hook.url.file, hook.secret.file}
    assert files <= set(secret["stringData"]), files
    assert all(not f.startswith("/") for f in files)  # relative: read from CREDENTIALS_DIRECTORY
    assert tomllib.loads(enabled)["alerts"]["webhooks"][0]["type"] == "dingtalk"


def test_image_and_dockerfile(container: dict) -> None:
    tag = container["image"].rpartition(":")[2]
    assert tag == agent.__version__
    k = load("kustomization.yaml")
    assert k["images"] == [{"name": "training-node-agent", "newTag": agent.__version__}]
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY") and "--from" not in line:
            *sources, _dest = line.split()[1:]
            for src in sources:
                assert (REPO / src).exists(), f"Dockerfile copies missing {src}"
    cmd = re.search(r'^CMD \["run", "--config", "([^"]+)"\]', dockerfile, re.M)
    assert cmd and cmd.group(1) == container["args"][2]
