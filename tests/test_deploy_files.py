"""docker-compose.yml, the Dockerfile and the Kubernetes manifests in deploy/ parse and agree with the code: the
topics they create are the ones the worker uses, their commands are valid ``streamdp`` command lines, the config
they mount is a valid service configuration. (Docker and Kubernetes cannot run here; this keeps them honest.)"""

from __future__ import annotations

import os
import re
import shlex
import tomllib

import pytest
import yaml  # PyYAML: test dependency

from streamdp.adapters.kafka.topics import forward_topic, service_topics
from streamdp.cli.main import build_parser
from streamdp.config.loader import load_config, parse_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = os.path.join(ROOT, "deploy")


def _yaml(path: str) -> list[dict]:
    with open(os.path.join(ROOT, path)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def _created_topics(script: str) -> set[str]:
    return set(re.findall(r"--topic\s+(\S+)", script))


def _all_topics(cfg) -> set[str]:
    return (set(service_topics(cfg.kafka, [t["id"] for t in cfg.query_tables]))
            | {cfg.kafka["input_topic"], forward_topic(cfg.kafka)})


@pytest.fixture(scope="module")
def compose() -> dict:
    (doc,) = _yaml("docker-compose.yml")
    return doc


@pytest.fixture(scope="module")
def k8s() -> dict:
    docs = {}
    for name in sorted(os.listdir(DEPLOY)):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            for d in _yaml(os.path.join("deploy", name)):
                docs[(d["kind"], d["metadata"]["name"])] = d
    return docs


def test_compose_services(compose):
    s = compose["services"]
    assert {"kafka", "redis", "topics", "worker", "replay"} <= set(s)
    kafka = s["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert "controller" in kafka["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper
    assert not any("zookeeper" in k.lower() for k in s)
    assert re.match(r"redis:7", s["redis"]["image"])
    assert s["worker"]["build"] == "." and os.path.exists(os.path.join(ROOT, "Dockerfile"))
    assert s["worker"]["depends_on"]["topics"]["condition"] == "service_completed_successfully"


def test_compose_commands_are_valid_streamdp_command_lines(compose):
    s = compose["services"]
    parser = build_parser()
    run = parser.parse_args(s["worker"]["command"])
    assert run.command == "run" and run.config == "/etc/streamdp/streamdp.toml"
    mounts = {v.split(":")[1]: v.split(":")[0] for v in s["worker"]["volumes"]}
    assert mounts[run.config] == "./deploy/streamdp.toml"
    assert s["worker"]["environment"]["STREAMDP_STORE"].startswith("redis://redis:")
    # the staged topology (profile "staged"): ingest workers beside the worker in the coordinator role
    ing = parser.parse_args(s["ingest"]["command"])
    assert ing.command == "run" and ing.role == "ingest" and ing.config == run.config
    assert s["ingest"]["profiles"] == ["staged"] and s["coordinator"]["profiles"] == ["staged"]
    co = parser.parse_args(s["coordinator"]["command"])
    assert co.role == "coordinator" and co.config == run.config and run.role == "all"
    assert s["coordinator"]["environment"] == s["worker"]["environment"]
    rep = parser.parse_args(s["replay"]["command"])
    assert rep.command == "replay" and rep.nycflights13 and rep.config == run.config


def test_compose_topics_match_the_worker_config(compose):
    cfg = load_config(os.path.join(DEPLOY, "streamdp.toml"))
    script = "\n".join(compose["services"]["topics"]["command"])
    assert _created_topics(script) == _all_topics(cfg)
    assert f"--partitions {cfg.kafka['partitions']}" in script
    assert cfg.kafka["bootstrap"] == "kafka:9092" and "kafka:9092" in script
    assert cfg.store.startswith("redis://redis:")
    run = build_parser().parse_args(compose["services"]["worker"]["command"])
    assert run.metrics_port == cfg.kafka["metrics_port"]


def test_k8s_configmap_is_a_valid_config_equal_to_the_compose_one(k8s):
    cm = k8s[("ConfigMap", "streamdp-config")]
    cfg = parse_config(tomllib.loads(cm["data"]["streamdp.toml"]))
    ref = load_config(os.path.join(DEPLOY, "streamdp.toml"))
    assert cfg.query_tables == ref.query_tables and cfg.service == ref.service and cfg.budget == ref.budget
    for k in ("input_topic", "output_prefix", "dead_letter_topic", "group_id", "partitions", "metrics_port"):
        assert cfg.kafka[k] == ref.kafka[k], k
    job = k8s[("Job", "streamdp-topics")]
    script = "\n".join(job["spec"]["template"]["spec"]["containers"][0]["args"])
    assert _created_topics(script) == _all_topics(cfg)
    assert cfg.kafka["bootstrap"].split(":")[0] in script
    assert ("Service", cfg.kafka["bootstrap"].split(":")[0]) in k8s  # the Kafka pointer


def test_k8s_worker_deployment_and_metrics_service(k8s):
    dep = k8s[("Deployment", "streamdp-worker")]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    run = build_parser().parse_args(c["args"])
    assert run.command == "run"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    vol = next(v for v in pod["volumes"] if v["name"] == "config")
    assert os.path.dirname(run.config) == mount["mountPath"] and vol["configMap"]["name"] == "streamdp-config"
    assert os.path.basename(run.config) in k8s[("ConfigMap", "streamdp-config")]["data"]
    env = {e["name"]: e for e in c["env"]}
    ref = env["STREAMDP_STORE"]["valueFrom"]["secretKeyRef"]
    assert ref["key"] in k8s[("Secret", ref["name"])]["stringData"]
    assert pod["terminationGracePeriodSeconds"] >= 30
    svc = k8s[("Service", "streamdp-metrics")]
    port = {p["name"]: p["containerPort"] for p in c["ports"]}
    (sp,) = svc["spec"]["ports"]
    assert port[sp["targetPort"]] == run.metrics_port == sp["port"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_kustomization_lists_every_manifest():
    (k,) = _yaml("deploy/kustomization.yaml")
    files = {n for n in os.listdir(DEPLOY) if n.endswith(".yaml") and n != "kustomization.yaml"}
    assert set(k["resources"]) == files


def test_dockerfile_installs_the_kafka_extra_and_runs_streamdp():
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        text = f.read()
    assert re.search(r'pip install "\.\[kafka\]"', text)
    entry = re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1)
    assert eval(entry) == ["streamdp"]  # noqa: S307 - a JSON list literal
    cmd = eval(re.search(r"^CMD (.+)$", text, re.M).group(1))  # noqa: S307
    assert build_parser().parse_args(cmd).command == "run"
    assert "EXPOSE 9108" in text


def test_operations_guide_names_the_real_commands_and_metrics():
    with open(os.path.join(DEPLOY, "OPERATIONS.md")) as f:
        text = f.read()
    parser = build_parser()
    cmds = re.findall(r"^\s*(streamdp (?:run|replay)[^\n`]*)$", text, re.M)
    assert cmds
    for line in cmds:
        parser.parse_args(shlex.split(line)[1:])
    from streamdp.adapters.metrics import WorkerMetrics

    names = {m.name for m in WorkerMetrics().registry.collect()}
    for metric in re.findall(r"`(streamdp_[a-z_]+)`", text):
        base = re.sub(r"_(total|bucket|count|sum)$", "", metric)
        assert base in names, metric


def test_k8s_staged_overlay(k8s):
    (kz,) = _yaml("deploy/staged/kustomization.yaml")
    assert "../" in kz["resources"] and "ingest-deployment.yaml" in kz["resources"]
    (patch,) = kz["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "streamdp-worker"} and ("Deployment", "streamdp-worker") in k8s
    (ops,) = _yaml(os.path.join("deploy", "staged", patch["path"]))
    (op,) = ops
    base_args = k8s[("Deployment", "streamdp-worker")]["spec"]["template"]["spec"]["containers"][0]["args"]
    parser = build_parser()
    co, base = parser.parse_args(op["value"]), parser.parse_args(base_args)
    assert op["path"] == "/spec/template/spec/containers/0/args" and co.role == "coordinator"
    assert (co.config, co.metrics_port) == (base.config, base.metrics_port)
    (dep,) = _yaml("deploy/staged/ingest-deployment.yaml")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    ing = parser.parse_args(c["args"])
    assert ing.role == "ingest" and ing.config == base.config
    assert dep["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] == "streamdp-config"
