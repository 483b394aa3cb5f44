#!/usr/bin/env python3
"""Checks the deployment files under deploy/ against each other and against the real binaries.

Every Kubernetes manifest parses and its objects hang together (selectors, volumes, resources,
probes, ports); the daemons, the controllers and etcd agree on names, ports and tokens; the
Grafana ConfigMap holds deploy/grafana/strata-node.json unchanged; stratad and strata-controller
accept every TOML file meant for them (also those inside ConfigMaps) and read back each key as
written, and the command lines of the units and manifests; etcd, the controllers and two daemons
started as the manifests start them form a cluster, and the daemons link up as peers on ports
the NetworkPolicy admits; the Docker image installs the packages of every library the binaries
link, and its health check passes against a running stratad; the systemd units pass
systemd-analyze and agree with the configs laid out for them; the DaemonSet's GPU variant (a
kustomize overlay) builds as kustomize builds it, shows stratad every GPU of its node without
taking one from the device plugin, and keeps a device pool that fails start-up where no GPU is.

ctest runs each case as its own entry, deploy_test.<Class>.<case> (deploy/CMakeLists.txt lists
them with --list). Environment: STRATA_STRATAD, STRATA_CONTROLLER and STRATA_CLI, the built
stratad, strata-controller and strata; STRATA_BUILD_FLAVOUR, how they were built ("Release";
"Debug+address,undefined" with sanitizers). etcd is looked up on the PATH.
A case that skips (a tool missing) prints what gtest prints for GTEST_SKIP, so ctest reports it
as skipped (SKIP_REGULAR_EXPRESSION) and scripts/test_summary.py shows why.

Usage: test_deploy.py [--list | Class.case]
"""

import json
import os
import pathlib
import posixpath
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import unittest
import urllib.request

try:
    import yaml  # Debian's python3-yaml (scripts/install-deps.sh)
except ImportError:
    yaml = None

DEPLOY = pathlib.Path(__file__).resolve().parent.parent
REPO = DEPLOY.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
import python_cases  # noqa: E402

KUBERNETES = DEPLOY / "kubernetes"
# stratad's GPU variant: a kustomize overlay of KUBERNETES, its own base.
GPU_OVERLAY = DEPLOY / "kubernetes-gpu"
KUSTOMIZATION = "kustomization.yaml"
CONFIGS = DEPLOY / "configs"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
UNIT = DEPLOY / "systemd" / "stratad.service"
CONTROLLER_UNIT = DEPLOY / "systemd" / "strata-controller.service"
CONTROLLER_CONFIG = CONFIGS / "strata-controller.toml"
GPU_DROP_IN = DEPLOY / "systemd" / "stratad-gpu.conf"
SYSUSERS = DEPLOY / "systemd" / "strata.sysusers.conf"
DASHBOARD = DEPLOY / "grafana" / "strata-node.json"
# The configs laid out for the systemd unit (sockets in /run/strata, disk tier in /var/lib/strata).
SYSTEMD_CONFIGS = ["disk-node.toml", "pd-prefill.toml", "pd-decode.toml"]
WORKLOADS = {"DaemonSet", "Deployment", "StatefulSet", "Pod"}
# Config keys that name a file stratad or strata-controller reads when it starts.
FILE_KEYS = {"cluster_token_file", "auth_token_file", "token_file", "tls_cert_path",
             "tls_key_path"}
# The workloads of the cluster (metadata.name), and the ConfigMap key of the controllers' config.
STRATAD, CONTROLLER, ETCD = "stratad", "strata-controller", "strata-etcd"
CONTROLLER_TOML = "strata-controller.toml"
# What the downward API gives each pod in the cluster test (env valueFrom.fieldRef).
TEST_FIELDS = {"status.podIP": "127.0.0.1", "spec.nodeName": "node-a"}
BYTE_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "KB": 1000,
              "MB": 1000**2, "GB": 1000**3, "B": 1}


def binary(variable):
    path = os.environ.get(variable, "")
    if not path or not os.access(path, os.X_OK):
        raise unittest.SkipTest(f"${variable} names no executable (run through ctest)")
    return os.path.abspath(path)


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, timeout=60, **kwargs)


def yaml_documents(path):
    """The non-empty documents of a (multi-document) YAML file."""
    if yaml is None:
        raise AssertionError("python3-yaml is missing: run scripts/install-deps.sh")
    with open(path) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def is_kustomize_file(path):
    """Whether a YAML file is kustomize's rather than a manifest: a kustomization, or a patch in
    an overlay (a directory with a kustomization, other than the manifests' own)."""
    return path.name == KUSTOMIZATION or (path.parent != KUBERNETES
                                          and (path.parent / KUSTOMIZATION).exists())


def manifests():
    """(file, object) for every object of every manifest under deploy/ (the overlays' patches and
    the kustomizations left out: GpuVariant checks those)."""
    return [(path, doc) for path in sorted(DEPLOY.rglob("*.y*ml")) if not is_kustomize_file(path)
            for doc in yaml_documents(path)]


# Lists a strategic merge patch merges item by item, matched by "name" (their patchMergeKey in
# the Kubernetes API); a patch replaces any other list whole.
MERGED_BY_NAME = {"containers", "initContainers", "env", "volumes"}


def strategic_merge(base, patch, field=None):
    """`patch` merged onto `base` as kustomize merges a strategic merge patch, for what deploy/'s
    overlays patch: maps key by key, the lists of MERGED_BY_NAME item by item (new items first,
    where kustomize puts them), any other value replaced. No $patch directives."""
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{key: strategic_merge(base[key], value, key) if key in base else value
                           for key, value in patch.items()}}
    if field in MERGED_BY_NAME:
        patched = {item["name"]: item for item in patch}
        names = {item["name"] for item in base}
        return ([item for item in patch if item["name"] not in names]
                + [strategic_merge(item, patched[item["name"]]) if item["name"] in patched
                   else item for item in base])
    return patch


def kustomization(directory):
    with open(directory / KUSTOMIZATION) as f:
        return yaml.safe_load(f)


def kustomized(directory):
    """The objects `kubectl apply -k directory` applies, built here: the kustomization's
    resources (manifest files, or directories with a kustomization) with its patches (strategic
    merge patch files, each of the object of its kind and name) merged in."""
    spec = kustomization(directory)
    built = []
    for resource in spec.get("resources", []):
        path = directory / resource
        built += kustomized(path) if path.is_dir() else yaml_documents(path)
    for patch in spec.get("patches", []):
        (change,) = yaml_documents(directory / patch["path"])
        (i,) = [i for i, o in enumerate(built) if o["kind"] == change["kind"]
                and o["metadata"]["name"] == change["metadata"]["name"]]
        built[i] = strategic_merge(built[i], change)
    return built


def by_kind_and_name(built):
    return {(o["kind"], o["metadata"]["name"]): o for o in built}


def objects(kind):
    return [doc for _, doc in manifests() if doc.get("kind") == kind]


def pod_spec(workload):
    return workload["spec"] if workload["kind"] == "Pod" else workload["spec"]["template"]["spec"]


def containers(spec):
    return spec.get("initContainers", []) + spec.get("containers", [])


def stratad_container(daemonset):
    return next(c for c in pod_spec(daemonset)["containers"] if c["name"] == "stratad")


def configmap_tomls():
    """(name, text) of every TOML file inside a ConfigMap."""
    return [(f"{cm['metadata']['name']}/{key}", text) for cm in objects("ConfigMap")
            for key, text in cm.get("data", {}).items() if key.endswith(".toml")]


def daemonset_config():
    """The stratad.toml of stratad's ConfigMap, parsed."""
    (cm,) = [cm for cm in objects("ConfigMap") if "stratad.toml" in cm.get("data", {})]
    return tomllib.loads(cm["data"]["stratad.toml"])


def mount_of(spec, container, path):
    """The volume (dict) mounted at the directory holding `path`, or at a parent of it."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in sorted(container.get("volumeMounts", []), key=lambda m: -len(m["mountPath"])):
        if path == mount["mountPath"] or path.startswith(mount["mountPath"].rstrip("/") + "/"):
            return volumes[mount["name"]]
    return None


def byte_size(text):
    for suffix, factor in BYTE_UNITS.items():
        if text.endswith(suffix) and text[:-len(suffix)].strip():
            return int(float(text[:-len(suffix)]) * factor)
    return int(text)


def dockerfile_instructions():
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(
        line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1])
            for line in joined.splitlines() if line.strip()]


def debian_package(path):
    """The Debian package that ships `path` (as ldd names it, or what it links to), or None."""
    candidates = []
    for name in (path, os.path.realpath(path)):
        # Debian 12 merges /lib into /usr/lib, but dpkg knows each file under one of the two.
        other = name[len("/usr"):] if name.startswith("/usr/") else "/usr" + name
        candidates += [name, other]
    for candidate in candidates:
        owner = run(["dpkg-query", "-S", candidate])
        if owner.returncode == 0:
            return owner.stdout.split(":", 1)[0]
    return None


def unit_settings(unit=UNIT):
    """Key -> list of values of a systemd unit (keys may repeat)."""
    settings = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def is_controller_toml(name):
    """Whether a TOML file (or ConfigMap key) is strata-controller's; the others are stratad's."""
    return posixpath.basename(name).startswith("strata-controller")


def controller_config():
    """The strata-controller.toml of the controllers' ConfigMap, parsed."""
    (cm,) = [cm for cm in objects("ConfigMap") if CONTROLLER_TOML in cm.get("data", {})]
    return tomllib.loads(cm["data"][CONTROLLER_TOML])


def workload(name):
    """The one workload called `name`."""
    (found,) = [d for _, d in manifests() if d["kind"] in WORKLOADS
                and d["metadata"]["name"] == name]
    return found


def container(workload_object, name):
    return next(c for c in pod_spec(workload_object)["containers"] if c["name"] == name)


def port_number(container_object, port):
    """A probe's or Service's port (a name or a number) as the container's port number."""
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container_object.get("ports", [])
                 if p.get("name") == port]
    return number


def address_port(address):
    return int(address.rsplit(":", 1)[1])


def expand(container_object, fields):
    """The container's command and args with $(VAR) expanded as the kubelet expands them, from
    its env: `fields` gives each downward-API fieldPath's value. KeyError for an undefined VAR
    (which the kubelet would leave as written)."""
    env = {}
    for var in container_object.get("env", []):
        field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        env[var["name"]] = fields[field] if field else var["value"]
    words = container_object.get("command", []) + container_object.get("args", [])
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], word) for word in words]


def flag_value(words, flag):
    """The value of `flag` in a command line, given as `flag value` or `flag=value`."""
    for i, word in enumerate(words):
        if word == flag:
            return words[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    raise KeyError(flag)


def member_host(statefulset, index):
    """The DNS name of one replica of a StatefulSet, under its governing Service."""
    meta = statefulset["metadata"]
    return f"{meta['name']}-{index}.{statefulset['spec']['serviceName']}.{meta['namespace']}.svc"


def member_address(statefulset, index, port):
    return f"{member_host(statefulset, index)}:{port}"


def governing_service(statefulset):
    (service,) = [s for s in objects("Service")
                  if s["metadata"]["name"] == statefulset["spec"]["serviceName"]
                  and s["metadata"].get("namespace") == statefulset["metadata"]["namespace"]]
    return service


def secret_key(workload_object, container_name, path):
    """(Secret, key) of the file at `path` in a container, or None when no Secret provides it."""
    spec = pod_spec(workload_object)
    c = container(workload_object, container_name)
    volume = mount_of(spec, c, path)
    if not volume or "secret" not in volume:
        return None
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == volume["name"]]
    relative = posixpath.relpath(path, mount["mountPath"])
    items = {item["path"]: item["key"] for item in volume["secret"].get("items", [])}
    return volume["secret"]["secretName"], items.get(relative)


def secret_items(workload_object):
    """(Secret, key) of every item the workload's Secret volumes project."""
    return {(volume["secret"]["secretName"], item["key"])
            for volume in pod_spec(workload_object).get("volumes", []) if "secret" in volume
            for item in volume["secret"].get("items", [])}


def selected_workloads(namespace, selector):
    """The DaemonSets and StatefulSets in `namespace` whose pods carry the labels `selector`."""
    return [w for w in objects("DaemonSet") + objects("StatefulSet")
            if w["metadata"].get("namespace") == namespace
            and selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()]


def ingress_admissions():
    """What the NetworkPolicies admit: (source, target, port) for every source of every ingress
    rule, each target workload the policy selects and each port of the rule. A source is a
    workload's name (a podSelector) or "namespace NAME" (a namespaceSelector); a port is as the
    rule names it (a container port's name or number), or "*" for every TCP port."""
    admitted = set()
    for policy in objects("NetworkPolicy"):
        namespace = policy["metadata"].get("namespace")
        targets = selected_workloads(namespace, policy["spec"]["podSelector"]["matchLabels"])
        for rule in policy["spec"].get("ingress", []):
            ports = [p.get("port", "*") for p in rule.get("ports", [{}])]
            for source in rule.get("from", []):
                if "namespaceSelector" in source:
                    names = source["namespaceSelector"]["matchLabels"].values()
                    sources = [f"namespace {name}" for name in names]
                else:
                    selector = source["podSelector"]["matchLabels"]
                    sources = [w["metadata"]["name"]
                               for w in selected_workloads(namespace, selector)]
                admitted |= {(s, t["metadata"]["name"], p)
                             for s in sources for t in targets for p in ports}
    return admitted


def tcp_links(dialler_pid, listener_pid):
    """The listening ports of `listener_pid` that `dialler_pid` holds established TCP connections
    to (one entry per connection), read from /proc (both in one network namespace)."""
    def sockets(pid):
        inodes = set()
        for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue  # closed meanwhile
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
        rows = []
        for table in ("tcp", "tcp6"):
            path = pathlib.Path(f"/proc/{pid}/net/{table}")
            for line in path.read_text().splitlines()[1:] if path.exists() else []:
                fields = line.split()
                # local address, remote address, state (0A listening, 01 established), inode
                if fields[9] in inodes:
                    rows.append((fields[1], fields[2], fields[3]))
        return rows

    listener = sockets(listener_pid)
    listening = {local.rsplit(":", 1)[1] for local, _, state in listener if state == "0A"}
    accepted = {local for local, _, state in listener
                if state == "01" and local.rsplit(":", 1)[1] in listening}
    return [int(remote.rsplit(":", 1)[1], 16) for _, remote, state in sockets(dialler_pid)
            if state == "01" and remote in accepted]


def localized(text, tmp):
    """A TOML text with every file key pointing at a file made in tmp (named as the original)."""
    def local_file(match):
        path = pathlib.Path(tmp, posixpath.basename(match.group(3)))
        if not path.exists():
            path.write_text("deploy-test-token\n")
        return f'{match.group(1)}"{path}"'
    keys = "|".join(FILE_KEYS)
    return re.sub(rf'^(\s*({keys})\s*=\s*)"([^"]+)"', local_file, text, flags=re.M)


def print_config(variable, text, args=()):
    """Runs the binary in $variable with `text` as its --config, `args`, and --print-config.
    Returns the result and the config as it ran (its files in a temporary directory)."""
    with tempfile.TemporaryDirectory() as tmp:
        # --print-config validates without opening the files a config names; they are made
        # anyway (in tmp), so the check holds if a binary ever looks at them.
        path = pathlib.Path(tmp, "config.toml")
        path.write_text(localized(text, tmp))
        return run([binary(variable), "--config", path, *args, "--print-config"]), path.read_text()


def readme_command(marker):
    """The words of the shell command in deploy/README.md whose first line holds `marker`
    (continuation lines joined), or None."""
    lines = (DEPLOY / "README.md").read_text().splitlines()
    for i, line in enumerate(lines):
        if marker in line:
            command = line
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            return shlex.split(command)
    return None


def free_port():
    """A loopback port free now (the kernel's pick, released at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Manifests(unittest.TestCase):
    """The Kubernetes manifests, alone and against each other."""

    def test_every_object_is_named(self):
        files = sorted(DEPLOY.rglob("*.y*ml"))
        self.assertTrue(files, "no YAML under deploy/")
        for path in files:
            docs = yaml_documents(path)
            self.assertTrue(docs, f"{path}: no object")
            for doc in docs:
                where = f"{path.relative_to(DEPLOY)}: {doc.get('kind')}"
                self.assertIsInstance(doc.get("apiVersion"), str, where)
                self.assertIsInstance(doc.get("kind"), str, where)
                self.assertTrue(doc.get("metadata", {}).get("name"), f"{where}: no metadata.name")

    def test_workloads_are_consistent(self):
        workloads = [(p, d) for p, d in manifests() if d["kind"] in WORKLOADS]
        self.assertTrue(any(d["kind"] == "DaemonSet" for _, d in workloads), "no DaemonSet")
        for path, workload in workloads:
            where = f"{path.name}: {workload['kind']} {workload['metadata']['name']}"
            spec = pod_spec(workload)
            if workload["kind"] != "Pod":
                selector = workload["spec"]["selector"]["matchLabels"]
                labels = workload["spec"]["template"]["metadata"]["labels"]
                self.assertTrue(selector, f"{where}: empty selector")
                self.assertLessEqual(selector.items(), labels.items(),
                                     f"{where}: the selector does not match the template labels")
            volumes = [v["name"] for v in spec.get("volumes", [])]
            volumes += [claim["metadata"]["name"]
                        for claim in workload["spec"].get("volumeClaimTemplates", [])]
            self.assertEqual(len(volumes), len(set(volumes)), f"{where}: a volume named twice")
            for container in containers(spec):
                at = f"{where}, container {container['name']}"
                self.assertTrue(container.get("image"), f"{at}: no image")
                resources = container.get("resources", {})
                self.assertTrue(resources.get("requests"), f"{at}: no resource requests")
                if workload["kind"] != "Pod":  # the example pod may omit limits
                    self.assertTrue(resources.get("limits"), f"{at}: no resource limits")
                for mount in container.get("volumeMounts", []):
                    self.assertIn(mount["name"], volumes, f"{at}: mounts an undeclared volume")
        for daemonset in objects("DaemonSet"):
            stratad = stratad_container(daemonset)
            for probe in ("livenessProbe", "readinessProbe"):
                self.assertIn(probe, stratad, f"stratad has no {probe}")
            # A draining daemon leaves rotation (readiness fails) without being restarted
            # (liveness holds): `strata ready` exits 1 while draining, `strata status` 0.
            self.assertEqual(stratad["readinessProbe"]["exec"]["command"][-1], "ready")
            self.assertEqual(stratad["livenessProbe"]["exec"]["command"][-1], "status")
            for kind in ("requests", "limits"):
                self.assertIn("memory", stratad["resources"][kind], f"stratad: no memory {kind}")

    def test_services_and_monitors_select_something(self):
        templates = [(w["metadata"].get("namespace"), w["spec"]["template"])
                     for w in objects("DaemonSet") + objects("Deployment") + objects("StatefulSet")]
        services = objects("Service")
        for service in services:
            selector = service["spec"]["selector"]
            matched = [t for ns, t in templates if ns == service["metadata"].get("namespace")
                       and selector.items() <= t["metadata"]["labels"].items()]
            self.assertTrue(matched, f"Service {service['metadata']['name']} selects no workload")
            ports = {p["name"] for t in matched for c in t["spec"]["containers"]
                     for p in c.get("ports", [])}
            for port in service["spec"]["ports"]:
                if isinstance(port["targetPort"], str):
                    self.assertIn(port["targetPort"], ports, "a Service names an unknown port")
        monitors = objects("ServiceMonitor")
        self.assertTrue(monitors, "no ServiceMonitor")
        for monitor in monitors:
            self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
            selector = monitor["spec"]["selector"]["matchLabels"]
            matched = [s for s in services
                       if s["metadata"].get("namespace") == monitor["metadata"].get("namespace")
                       and selector.items() <= s["metadata"].get("labels", {}).items()]
            self.assertTrue(matched, f"ServiceMonitor {monitor['metadata']['name']} selects none")
            ports = {p["name"] for s in matched for p in s["spec"]["ports"]}
            for endpoint in monitor["spec"]["endpoints"]:
                self.assertIn(endpoint["port"], ports, "a ServiceMonitor names an unknown port")

    def test_grafana_configmap_holds_the_dashboard(self):
        dashboards = [cm for cm in objects("ConfigMap") if "strata-node.json" in cm.get("data", {})]
        self.assertEqual(len(dashboards), 1, "one ConfigMap holds strata-node.json")
        embedded = dashboards[0]["data"]["strata-node.json"]
        self.assertEqual(json.loads(embedded), json.loads(DASHBOARD.read_text()))
        self.assertEqual(embedded, DASHBOARD.read_text(),
                         "stale: run deploy/kubernetes/gen_grafana_dashboard.py")
        generator = run([sys.executable, KUBERNETES / "gen_grafana_dashboard.py", "--check"])
        self.assertEqual(generator.returncode, 0, generator.stderr)

    def test_daemonset_agrees_with_its_config(self):
        config = daemonset_config()
        (daemonset,) = objects("DaemonSet")
        spec, stratad = pod_spec(daemonset), stratad_container(daemonset)
        args = stratad.get("args", [])
        config_path = args[args.index("--config") + 1]
        volume = mount_of(spec, stratad, config_path)
        self.assertIn("configMap", volume or {}, f"{config_path} is not from the ConfigMap")
        engine = mount_of(spec, stratad, config["engine"]["socket_path"])
        self.assertIn("hostPath", engine or {}, "the engine socket is not in a hostPath")
        control_path = config["control"]["unix_socket_path"]
        self.assertIn("emptyDir", mount_of(spec, stratad, control_path) or {},
                      "the control socket must lie in stratad's own emptyDir")
        disk = mount_of(spec, stratad, config["disk"]["directory"])
        self.assertIn("hostPath", disk or {}, "the disk tier is not in a hostPath")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            if probe in stratad:
                command = stratad[probe]["exec"]["command"]
                self.assertEqual(command[command.index("--addr") + 1], f"unix://{control_path}",
                                 f"{probe} asks another socket than [control] unix_socket_path")
        metrics_port = int(config["metrics"]["listen_address"].rsplit(":", 1)[1])
        self.assertIn(metrics_port, [p["containerPort"] for p in stratad["ports"]
                                     if p["name"] == "metrics"])

    def test_engine_pod_reaches_the_daemon(self):
        config = daemonset_config()
        (daemonset,) = objects("DaemonSet")
        engine_volume = mount_of(pod_spec(daemonset), stratad_container(daemonset),
                                 config["engine"]["socket_path"])
        pods = objects("Pod")
        self.assertTrue(pods, "no example engine pod")
        for pod in pods:
            (vllm,) = pod["spec"]["containers"]
            self.assertTrue(vllm["image"].startswith("vllm/vllm-openai"))
            args = vllm["args"]
            transfer = json.loads(args[args.index("--kv-transfer-config") + 1])
            self.assertEqual(transfer["kv_connector"], "StrataConnector")
            self.assertEqual(transfer["kv_connector_module_path"], "strata_vllm")
            self.assertTrue((REPO / "connector" / "python" / "strata_vllm").is_dir())
            socket = transfer["kv_connector_extra_config"]["socket_path"]
            self.assertEqual(socket, config["engine"]["socket_path"])
            volume = mount_of(pod["spec"], vllm, socket)
            self.assertEqual((volume or {}).get("hostPath", {}).get("path"),
                             engine_volume["hostPath"]["path"],
                             "the engine pod does not mount stratad's socket directory")
            env = {e["name"]: e.get("value", "") for e in vllm.get("env", [])}
            self.assertTrue(env.get("PYTHONPATH"), "no PYTHONPATH for strata_vllm")

    def test_env_references_are_defined(self):
        # The kubelet leaves a $(VAR) it cannot expand as written: stratad would then listen on
        # "$(POD_IP):50051" and fail, etcd would be named "$(POD_NAME)".
        expanded = 0
        for path, workload_object in manifests():
            if workload_object["kind"] not in WORKLOADS:
                continue
            for c in containers(pod_spec(workload_object)):
                words = c.get("command", []) + c.get("args", [])
                if not any("$(" in word for word in words):
                    continue
                fields = {var["valueFrom"]["fieldRef"]["fieldPath"]: "x" for var in c["env"]
                          if "fieldRef" in var.get("valueFrom", {})}
                try:
                    expand(c, fields)
                except KeyError as e:
                    self.fail(f"{path.name}: container {c['name']} names $({e.args[0]}), "
                              "which its env does not define")
                expanded += 1
        self.assertGreaterEqual(expanded, 2, "stratad's and etcd's command lines use $(VAR)")

    def test_controllers_agree_with_their_config(self):
        config = controller_config()
        statefulset = workload(CONTROLLER)
        self.assertEqual(statefulset["kind"], "StatefulSet",
                         "the daemons list each controller by its own stable name")
        self.assertGreaterEqual(statefulset["spec"]["replicas"], 2, "no standby to take over")
        spec, controller = pod_spec(statefulset), container(statefulset, CONTROLLER)
        words = expand(controller, {})
        self.assertEqual(posixpath.basename(words[0]), "strata-controller")
        config_path = flag_value(words, "--config")
        volume = mount_of(spec, controller, config_path)
        self.assertIn("configMap", volume or {}, f"{config_path} is not from a ConfigMap")
        (configmap,) = [cm for cm in objects("ConfigMap")
                        if cm["metadata"]["name"] == volume["configMap"]["name"]]
        self.assertIn(posixpath.basename(config_path), configmap["data"])
        self.assertEqual(posixpath.basename(config_path), CONTROLLER_TOML)
        port = address_port(config["controller"]["listen_address"])
        self.assertIn(port, [p["containerPort"] for p in controller["ports"]])
        # Every replica reads the same file: a fixed address would name them all alike, and the
        # election, which fences the leader's writes by its address, could not tell them apart.
        self.assertFalse(config.get("cluster", {}).get("advertise_address"),
                         "advertise_address set in the replicas' shared config")
        # The probes reach the cluster API, and do not ask for leadership (no exec, no gRPC
        # health service, which the controller does not serve).
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertIn(probe, controller, f"strata-controller has no {probe}")
            self.assertEqual(list(controller[probe].keys() & {"exec", "grpc", "httpGet",
                                                               "tcpSocket"}), ["tcpSocket"])
            self.assertEqual(port_number(controller, controller[probe]["tcpSocket"]["port"]),
                             port, f"{probe} asks another port than [controller] listen_address")
        # The governing Service: headless, publishing starting and standby replicas alike.
        service = governing_service(statefulset)
        self.assertEqual(service["spec"].get("clusterIP"), "None")
        self.assertTrue(service["spec"].get("publishNotReadyAddresses"))
        self.assertLessEqual(service["spec"]["selector"].items(),
                             statefulset["spec"]["template"]["metadata"]["labels"].items())
        self.assertIn(port, [port_number(controller, p["targetPort"])
                             for p in service["spec"]["ports"] if p["port"] == port])
        # Every etcd member, by its name, at its client port.
        etcd = workload(ETCD)
        client = port_number(container(etcd, "etcd"), "client")
        self.assertEqual(config["cluster"]["etcd_endpoints"],
                         [member_address(etcd, i, client) for i in range(etcd["spec"]["replicas"])])
        # Both tokens from the Secret, each its own key.
        keys = [secret_key(statefulset, CONTROLLER, config[section]["auth_token_file"])
                for section in ("controller", "daemons")]
        self.assertNotIn(None, keys, "a token file is not from a Secret")
        self.assertTrue(all(key[1] for key in keys), "a token file is no item of its Secret")
        self.assertNotEqual(keys[0], keys[1], "the controller's token is the daemons'")

    def test_daemons_join_the_controllers(self):
        daemon, controller = daemonset_config(), controller_config()
        daemonset, statefulset = workload(STRATAD), workload(CONTROLLER)
        port = address_port(controller["controller"]["listen_address"])
        self.assertEqual(daemon["cluster"]["controllers"],
                         [member_address(statefulset, i, port)
                          for i in range(statefulset["spec"]["replicas"])],
                         "the daemons do not list every controller replica")
        # The control API is what the controllers dial: on the pod's IP (the address the daemon
        # registers; the ConfigMap's wildcard would register the pod's unresolvable hostname).
        stratad = container(daemonset, STRATAD)
        words = expand(stratad, {"status.podIP": "10.1.2.3", "spec.nodeName": "node-7"})
        control_port = address_port(daemon["control"]["listen_address"])
        self.assertEqual(flag_value(words, "--listen"), f"10.1.2.3:{control_port}")
        self.assertEqual(flag_value(words, "--instance-id"), "node-7")
        self.assertIn(control_port, [p["containerPort"] for p in stratad["ports"]])
        # Each token is the same Secret key on both sides.
        pairs = [(daemon["cluster"]["token_file"], controller["controller"]["auth_token_file"]),
                 (daemon["control"]["auth_token_file"], controller["daemons"]["auth_token_file"])]
        for daemon_path, controller_path in pairs:
            theirs = secret_key(daemonset, STRATAD, daemon_path)
            self.assertIsNotNone(theirs, f"{daemon_path} is not from a Secret")
            self.assertTrue(theirs[1], f"{daemon_path} is no item of its Secret")
            self.assertEqual(theirs, secret_key(statefulset, CONTROLLER, controller_path),
                             f"the daemon's {daemon_path} is not the controller's "
                             f"{controller_path}")
        # The Secret is made by hand, as deploy/README.md says: with every key the pods project,
        # and no other.
        words = readme_command("create secret generic")
        self.assertIsNotNone(words, "deploy/README.md does not say how to make the Secret")
        self.assertEqual(flag_value(words, "-n"), daemonset["metadata"]["namespace"])
        made = {(words[words.index("generic") + 1], word.split("=")[1]) for word in words
                if word.startswith("--from-literal=")}
        projected = {item for _, w in manifests() if w["kind"] in WORKLOADS
                     for item in secret_items(w)}
        used = {secret_key(w, c, path) for w, c, paths in (
            (daemonset, STRATAD, [d for d, _ in pairs] + [daemon["remote"]["cluster_token_file"]]),
            (statefulset, CONTROLLER, [c for _, c in pairs])) for path in paths}
        self.assertLessEqual(used, projected, "a token file is no item of its Secret")
        self.assertEqual(made, projected, "the README's Secret is not the one the pods mount")

    def test_daemons_peer_through_the_controllers(self):
        daemon = daemonset_config()
        daemonset = workload(STRATAD)
        stratad = container(daemonset, STRATAD)
        remote = daemon.get("remote", {})
        self.assertTrue(remote.get("listen_address"), "the DaemonSet runs no remote tier")
        # The controllers hand each daemon its peers: a peer listed in this config, which every
        # node shares, would be dialled by every node, that peer's own among them.
        self.assertTrue(daemon["cluster"]["controllers"])
        self.assertEqual(remote.get("peers", []), [], "peers listed in a config every node shares")
        # The peer address a daemon registers and the others dial: the pod's IP at the config's
        # port, which is the container's port "peers".
        words = expand(stratad, {"status.podIP": "10.1.2.3", "spec.nodeName": "node-7"})
        port = address_port(remote["listen_address"])
        self.assertTrue(any(w.startswith("--remote-listen") for w in words),
                        "no --remote-listen: the daemons would register the wildcard address")
        self.assertEqual(flag_value(words, "--remote-listen"), f"10.1.2.3:{port}")
        (peers,) = [p for p in stratad["ports"] if p["name"] == "peers"]
        self.assertEqual((peers["containerPort"], peers.get("protocol", "TCP")), (port, "TCP"))
        # The links' secret: projected by the tokens volume, the daemons' alone, and no bearer
        # token (those cross the network; the peer secret never does).
        key = secret_key(daemonset, STRATAD, remote["cluster_token_file"])
        self.assertIsNotNone(key, f"{remote['cluster_token_file']} is not from a Secret")
        self.assertTrue(key[1], f"{remote['cluster_token_file']} is no item of its Secret")
        bearer = {secret_key(daemonset, STRATAD, daemon[section][name])
                  for section, name in (("cluster", "token_file"), ("control", "auth_token_file"))}
        self.assertNotIn(key, bearer, "the peer links' secret is also a bearer token")
        self.assertNotIn(key, secret_items(workload(CONTROLLER)),
                         "the controllers mount the peer links' secret")

    def test_etcd_members_form_one_cluster(self):
        etcd = workload(ETCD)
        self.assertEqual(etcd["kind"], "StatefulSet")
        replicas = etcd["spec"]["replicas"]
        self.assertTrue(replicas >= 3 and replicas % 2 == 1, "etcd wants an odd quorum of 3+")
        # A member is healthy only once a quorum runs: they start together, and find each
        # other's names before they are ready.
        self.assertEqual(etcd["spec"].get("podManagementPolicy"), "Parallel")
        service = governing_service(etcd)
        self.assertEqual(service["spec"].get("clusterIP"), "None")
        self.assertTrue(service["spec"].get("publishNotReadyAddresses"))
        member = container(etcd, "etcd")
        ports = {p["name"]: p["containerPort"] for p in member["ports"]}
        names = [f"{etcd['metadata']['name']}-{i}" for i in range(replicas)]
        peer_urls = [f"http://{member_address(etcd, i, ports['peer'])}" for i in range(replicas)]
        for i, name in enumerate(names):
            words = expand(member, {"metadata.name": name})
            self.assertEqual(flag_value(words, "--name"), name)
            self.assertEqual(flag_value(words, "--initial-advertise-peer-urls"), peer_urls[i])
            self.assertEqual(flag_value(words, "--advertise-client-urls"),
                             f"http://{member_address(etcd, i, ports['client'])}")
            self.assertEqual(flag_value(words, "--initial-cluster"),
                             ",".join(f"{n}={u}" for n, u in zip(names, peer_urls)))
        words = expand(member, {"metadata.name": names[0]})
        for flag, port in (("--listen-client-urls", "client"), ("--listen-peer-urls", "peer"),
                           ("--listen-metrics-urls", "metrics")):
            self.assertEqual(address_port(flag_value(words, flag)), ports[port], flag)
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertEqual(port_number(member, member[probe]["httpGet"]["port"]),
                             ports["metrics"], f"etcd's {probe} is not on its metrics port")
        # The data on the member's own volume, not in the container.
        claims = [claim["metadata"]["name"] for claim in etcd["spec"]["volumeClaimTemplates"]]
        data = flag_value(words, "--data-dir")
        self.assertTrue(any(m["name"] in claims and data.startswith(m["mountPath"] + "/")
                            for m in member["volumeMounts"]), f"{data} is on no claimed volume")

    def test_network_policies_admit_the_clients(self):
        policies = objects("NetworkPolicy")
        self.assertTrue(policies, "no NetworkPolicy")
        for policy in policies:
            where = f"NetworkPolicy {policy['metadata']['name']}"
            namespace = policy["metadata"].get("namespace")
            self.assertEqual(policy["spec"]["policyTypes"], ["Ingress"], where)
            targets = selected_workloads(namespace, policy["spec"]["podSelector"]["matchLabels"])
            self.assertTrue(targets, f"{where} selects no workload")
            ports = [p for w in targets for c in pod_spec(w)["containers"]
                     for p in c.get("ports", [])]
            for rule in policy["spec"]["ingress"]:
                self.assertTrue(rule.get("from"), f"{where}: a rule admits every pod")
                self.assertTrue(rule.get("ports"), f"{where}: a rule admits every protocol")
                for port in rule["ports"]:
                    self.assertEqual(port.get("protocol", "TCP"), "TCP", where)
                    # endPort: a network plugin that ignores it admits the first port alone.
                    self.assertNotIn("endPort", port, where)
                    if "port" in port:
                        self.assertIn(port["port"], [p["name"] for p in ports]
                                      + [p["containerPort"] for p in ports],
                                      f"{where} names a port its pods do not have")
                for source in rule["from"]:
                    if "namespaceSelector" in source:
                        # The label Kubernetes gives every namespace: its name.
                        self.assertEqual(list(source["namespaceSelector"]["matchLabels"]),
                                         ["kubernetes.io/metadata.name"], where)
                    else:
                        self.assertTrue(selected_workloads(
                            namespace, source["podSelector"]["matchLabels"]),
                            f"{where} admits pods no workload runs")

        admitted = ingress_admissions()

        def admits(source, target, port):
            return bool({(source, target, port), (source, target, "*")} & admitted)

        def sources(target, port):
            return {s for s, t, p in admitted if t == target and p in (port, "*")}

        # etcd: the controllers reach its clients port; the members reach each other.
        self.assertTrue(admits(CONTROLLER, ETCD, "client"))
        self.assertTrue(admits(ETCD, ETCD, "client") and admits(ETCD, ETCD, "peer"))
        self.assertEqual(sources(ETCD, "peer"), {ETCD}, "etcd's peer port admits strangers")
        # stratad: the peers port admits stratad pods alone, the control port the controllers,
        # the metrics port a namespace (Prometheus's, which the manifests cannot know), and every
        # port of the container is admitted from somewhere (a policy closes what no rule opens).
        self.assertEqual(sources(STRATAD, "peers"), {STRATAD},
                         "the peers port admits other pods than stratad's")
        # A peer link's UCX tcp transport also connects to listeners of its own, on ports the
        # kernel picks (Cluster sees them): stratad pods reach each other on every TCP port.
        self.assertIn((STRATAD, STRATAD, "*"), admitted, "stratad pods cannot link up as peers")
        self.assertTrue(admits(CONTROLLER, STRATAD, "control"), "the controllers cannot dial")
        self.assertTrue(any(s.startswith("namespace ") for s in sources(STRATAD, "metrics")),
                        "Prometheus cannot scrape /metrics")
        for port in container(workload(STRATAD), STRATAD)["ports"]:
            admitting = sources(STRATAD, port["name"]) | sources(STRATAD, port["containerPort"])
            self.assertTrue(admitting, f"stratad's port {port['name']} admits nobody")


def accepted(test, variable, name, text):
    """Runs the binary in $variable with --print-config on `text`; returns the config as written
    (its files made in a temporary directory) and as printed, both parsed."""
    printed, text = print_config(variable, text)
    test.assertEqual(printed.returncode, 0, f"{variable} refuses {name}: {printed.stderr}")
    return tomllib.loads(text), tomllib.loads(printed.stdout)


def assert_read_back(test, name, written, printed):
    """Each key of `written` has its value in `printed` (a byte size as its number of bytes)."""
    for section, keys in written.items():
        for key, value in keys.items():
            got = printed[section][key]
            if isinstance(value, str) and isinstance(got, int):
                value = byte_size(value)
            test.assertEqual(got, value, f"{name}: [{section}] {key}")


def deploy_tomls(controller):
    """(name, text) of the TOML files under deploy/ and in ConfigMaps: strata-controller's when
    `controller`, else stratad's."""
    files = [(str(p.relative_to(DEPLOY)), p.read_text()) for p in sorted(DEPLOY.rglob("*.toml"))]
    return [(name, text) for name, text in files + configmap_tomls()
            if is_controller_toml(name) == controller]


class DaemonConfigs(unittest.TestCase):
    """Every TOML file meant for stratad is one it accepts, read back as written."""

    def test_stratad_accepts_every_toml(self):
        tomls = deploy_tomls(controller=False)
        self.assertGreaterEqual(len(tomls), 5, "the example configs and the ConfigMap's")
        for name, text in tomls:
            with self.subTest(config=name):
                written, printed = accepted(self, "STRATA_STRATAD", name, text)
                assert_read_back(self, name, written, printed)

    def test_pd_pair_points_at_each_other(self):
        prefill = tomllib.loads((CONFIGS / "pd-prefill.toml").read_text())["remote"]
        decode = tomllib.loads((CONFIGS / "pd-decode.toml").read_text())["remote"]
        self.assertEqual((prefill["node_id"], decode["node_id"]), ("prefill-0", "decode-0"))
        self.assertEqual(prefill["peers"], [decode["listen_address"]])
        self.assertEqual(decode["peers"], [prefill["listen_address"]])
        self.assertEqual(prefill["cluster_token_file"], decode["cluster_token_file"])


class ControllerConfigs(unittest.TestCase):
    """Every TOML file meant for strata-controller is one it accepts, read back as written."""

    def test_controller_accepts_every_toml(self):
        tomls = deploy_tomls(controller=True)
        self.assertGreaterEqual(len(tomls), 2, "configs/strata-controller.toml and the ConfigMap's")
        for name, text in tomls:
            with self.subTest(config=name):
                written, printed = accepted(self, "STRATA_CONTROLLER", name, text)
                assert_read_back(self, name, written, printed)


class CommandLines(unittest.TestCase):
    """The units' and the manifests' command lines are ones the binaries accept."""

    def accepts(self, variable, args, config_text):
        """Runs the binary with `args` (their --config replaced by `config_text`) and
        --print-config; returns the printed config, parsed."""
        config = flag_value(args, "--config")
        args = [word for word in args if word != config and word != "--config"]
        printed, _ = print_config(variable, config_text, args)
        self.assertEqual(printed.returncode, 0,
                         f"{variable} refuses {' '.join(args)}: {printed.stderr}")
        return tomllib.loads(printed.stdout)

    def test_manifests_command_lines(self):
        daemonset, statefulset = workload(STRATAD), workload(CONTROLLER)
        stratad = container(daemonset, STRATAD)
        self.assertNotIn("command", stratad, "stratad runs as the image's entrypoint")
        args = expand(stratad, TEST_FIELDS)
        (configmap,) = [cm for cm in objects("ConfigMap") if "stratad.toml" in cm.get("data", {})]
        printed = self.accepts("STRATA_STRATAD", args, configmap["data"]["stratad.toml"])
        self.assertEqual(printed["control"]["listen_address"], flag_value(args, "--listen"))
        self.assertEqual(printed["remote"]["listen_address"], flag_value(args, "--remote-listen"))
        self.assertEqual(printed["cluster"]["instance_id"], flag_value(args, "--instance-id"))

        controller = container(statefulset, CONTROLLER)
        words = expand(controller, TEST_FIELDS)
        self.assertEqual(words[0], "/usr/bin/strata-controller")
        (configmap,) = [cm for cm in objects("ConfigMap") if CONTROLLER_TOML in cm.get("data", {})]
        printed = self.accepts("STRATA_CONTROLLER", words[1:], configmap["data"][CONTROLLER_TOML])
        self.assertEqual(printed["cluster"]["etcd_endpoints"],
                         controller_config()["cluster"]["etcd_endpoints"])

    def test_units_command_lines(self):
        # Each unit with the config its install lines put at its --config path.
        for unit, config, variable in ((UNIT, CONFIGS / "disk-node.toml", "STRATA_STRATAD"),
                                       (CONTROLLER_UNIT, CONTROLLER_CONFIG, "STRATA_CONTROLLER")):
            with self.subTest(unit=unit.name):
                (exec_start,) = unit_settings(unit)["ExecStart"]
                words = shlex.split(exec_start)
                self.assertIn(f"{config.name} {flag_value(words, '--config')}",
                              " ".join(unit.read_text().split()),
                              f"{unit.name} does not say to install {config.name} there")
                self.accepts(variable, words[1:], config.read_text())

    def test_etcd_knows_every_flag(self):
        etcd = shutil.which("etcd")
        if etcd is None:
            self.skipTest("etcd not found (Debian package etcd-server)")
        usage = run([etcd, "--help"])
        known = set(re.findall(r"^\s+(--[\w-]+)", usage.stdout + usage.stderr, re.M))
        self.assertIn("--initial-cluster", known, "etcd --help lists no flags")
        for word in container(workload(ETCD), "etcd")["args"]:
            self.assertTrue(word.split("=", 1)[0] in known, f"etcd does not know {word}")


class DockerImage(unittest.TestCase):
    """deploy/docker/Dockerfile against the repository, the build and a running stratad."""

    def test_paths_ports_and_healthcheck_agree(self):
        instructions = dockerfile_instructions()
        build_dir = re.search(r"^BUILD \?= (\S+)$", (REPO / "Makefile").read_text(), re.M)[1]
        for op, args in instructions:
            if op == "COPY" and "--from=" not in args:
                for source in shlex.split(args)[:-1]:
                    self.assertTrue((REPO / source).exists(), f"COPY {source}: no such file")
            if op == "COPY" and "--from=build" in args:
                for source in shlex.split(args)[1:-1]:
                    self.assertTrue(source.startswith(f"/src/{build_dir}/"), source)
        sidecar = tomllib.loads((CONFIGS / "sidecar.toml").read_text())
        exposed = [port for op, args in instructions if op == "EXPOSE" for port in args.split()]
        controller_ports = {address_port(tomllib.loads(text)["controller"]["listen_address"])
                            for _, text in deploy_tomls(controller=True)}
        self.assertEqual(sorted(map(int, exposed)),
                         sorted({address_port(sidecar["metrics"]["listen_address"])}
                                | controller_ports))
        # What the manifests run from this image is in it.
        installed = {posixpath.join(shlex.split(args)[-1], posixpath.basename(source))
                     for op, args in instructions if op == "COPY" and "--from=build" in args
                     for source in shlex.split(args)[1:-1]}
        (entrypoint,) = [json.loads(args) for op, args in instructions if op == "ENTRYPOINT"]
        image = container(workload(STRATAD), STRATAD)["image"]
        ran = [c.get("command", entrypoint)[0] for _, w in manifests() if w["kind"] in WORKLOADS
               for c in containers(pod_spec(w)) if c["image"] == image]
        self.assertIn("/usr/bin/strata-controller", ran)
        self.assertLessEqual(set(ran), installed, "a manifest runs what the image lacks")
        (health,) = [args for op, args in instructions if op == "HEALTHCHECK"]
        command = json.loads(health.split("CMD", 1)[1])
        self.assertEqual(command[command.index("--addr") + 1],
                         "unix://" + sidecar["control"]["unix_socket_path"])
        (user,) = [args for op, args in instructions if op == "USER"]
        self.assertNotIn(user.split(":")[0], ("0", "root"))

    def test_runtime_packages_cover_the_binaries(self):
        build = os.environ.get("STRATA_BUILD_FLAVOUR", "")
        if build != "Release":
            # Other build types and sanitizers link other libraries (libasan, gflags, ...).
            self.skipTest(f"binaries built as '{build}', the image's as 'Release': not comparable")
        for tool in ("ldd", "readelf", "dpkg-query"):
            if shutil.which(tool) is None:
                self.skipTest(f"{tool} not found: cannot map the binaries' libraries to packages")
        runtime = dockerfile_instructions()
        runtime = runtime[max(i for i, (op, _) in enumerate(runtime) if op == "FROM"):]
        installed = {"libc6", "libgcc-s1", "libstdc++6"}  # in debian:12-slim
        for op, args in runtime:
            for install in re.findall(r"apt-get install ([^&]*)", args) if op == "RUN" else []:
                installed |= {word for word in install.split() if not word.startswith("-")}
        for variable in ("STRATA_STRATAD", "STRATA_CONTROLLER", "STRATA_CLI"):
            with self.subTest(binary=variable):
                path = binary(variable)
                needed = re.findall(r"\(NEEDED\).*\[(.+)\]", run(["readelf", "-d", path]).stdout)
                resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", run(["ldd", path]).stdout,
                                           re.M))
                for library in needed:
                    if library.startswith("ld-linux"):
                        continue  # the loader, in libc6
                    self.assertIn(library, resolved, f"{path}: {library} not found by ldd")
                    package = debian_package(resolved[library])
                    self.assertIsNotNone(package, f"{library}: from no Debian package")
                    self.assertIn(package, installed, f"{library} ({package}): not in the image")

    def test_healthcheck_passes_against_stratad(self):
        (health,) = [args for op, args in dockerfile_instructions() if op == "HEALTHCHECK"]
        command = json.loads(health.split("CMD", 1)[1])
        self.assertEqual(command[0], "strata")
        with tempfile.TemporaryDirectory() as tmp:
            control = f"{tmp}/control.sock"
            # The image's default config, with sockets in tmp, no TCP ports, a small host tier.
            daemon = subprocess.Popen(
                [binary("STRATA_STRATAD"), "--config", CONFIGS / "sidecar.toml",
                 "--engine-socket", f"{tmp}/engine.sock", "--control-socket", control,
                 "--listen", "", "--no-metrics", "--host-capacity", "64MiB"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                command = [binary("STRATA_CLI")] + command[1:]
                command[command.index("--addr") + 1] = f"unix://{control}"
                deadline = time.monotonic() + 20
                while True:
                    status = run(command)
                    exited = daemon.poll() is not None
                    if status.returncode == 0 or exited or time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
            finally:
                daemon.send_signal(signal.SIGTERM)
                log = daemon.communicate(timeout=30)[0]
            self.assertEqual(status.returncode, 0, f"{status.stdout}{status.stderr}\n{log}")
            self.assertEqual(daemon.returncode, 0, f"stratad did not drain cleanly:\n{log}")


class SystemdUnit(unittest.TestCase):
    """deploy/systemd's units against the configs laid out for them, and systemd's tools."""

    def test_unit_agrees_with_its_configs(self):
        unit = unit_settings()
        self.assertEqual(unit["ExecStart"], ["/usr/bin/stratad --config /etc/strata/stratad.toml"])
        (runtime,), (state,) = unit["RuntimeDirectory"], unit["StateDirectory"]
        self.assertTrue(int(unit["RuntimeDirectoryMode"][0], 8) & 0o010,
                        "engines (group strata) cannot enter the socket directory")
        for name in SYSTEMD_CONFIGS:
            config = tomllib.loads((CONFIGS / name).read_text())
            for path in (config["engine"]["socket_path"], config["control"]["unix_socket_path"]):
                self.assertEqual(posixpath.dirname(path), f"/run/{runtime}", f"{name}: {path}")
            if config.get("disk", {}).get("directory"):
                self.assertTrue(config["disk"]["directory"].startswith(f"/var/lib/{state}/"))
        self.assertEqual(unit["AmbientCapabilities"], unit["CapabilityBoundingSet"])
        self.assertEqual(unit["User"], ["strata"])
        self.assertIn(f"u {unit['User'][0]} ", SYSUSERS.read_text())

    def test_controller_unit_agrees_with_its_config(self):
        unit = unit_settings(CONTROLLER_UNIT)
        self.assertEqual(unit["ExecStart"],
                         ["/usr/bin/strata-controller --config /etc/strata/strata-controller.toml"])
        # The tokens lie in the read-only ConfigurationDirectory, beside the config.
        (configuration,) = unit["ConfigurationDirectory"]
        config = tomllib.loads(CONTROLLER_CONFIG.read_text())
        for section in ("controller", "daemons"):
            path = config[section]["auth_token_file"]
            self.assertEqual(posixpath.dirname(path), f"/etc/{configuration}", path)
        # No capabilities at all (stratad keeps CAP_IPC_LOCK), no code written and run (stratad
        # allows it for UCX), and the user sysusers creates.
        self.assertEqual(unit["CapabilityBoundingSet"], [""])
        self.assertNotIn("AmbientCapabilities", unit)
        self.assertEqual(unit["MemoryDenyWriteExecute"], ["yes"])
        self.assertEqual(unit["User"], unit_settings()["User"])
        self.assertIn(f"u {unit['User'][0]} ", SYSUSERS.read_text())

    def verify_output(self, command, unit):
        """Runs `command` (a systemd tool) on `unit`; fails on any complaint about the unit."""
        result = run(command, cwd=unit.parent)
        output = (result.stdout + result.stderr).strip()
        about_unit = [line for line in output.splitlines() if unit.name in line]
        self.assertFalse(about_unit, "\n".join(about_unit))
        if result.returncode != 0:
            environment = ("Failed to connect to bus", "not been booted with systemd",
                           "Failed to initialize manager", "Failed to allocate manager")
            if any(marker in output for marker in environment):
                self.skipTest(f"{command[0]} cannot run here: {output}")
            self.fail(f"{' '.join(map(str, command))}: exit {result.returncode}\n{output}")
        return output

    def unit_copy(self, tmp, gpu=False, unit=UNIT):
        """The unit in tmp, with ExecStart running the binary just built; with stratad's GPU
        drop-in beside it (tmp/stratad.service.d/gpu.conf, where systemd looks for drop-ins) when
        `gpu`."""
        variable = {UNIT: "STRATA_STRATAD", CONTROLLER_UNIT: "STRATA_CONTROLLER"}[unit]
        (exec_start,) = unit_settings(unit)["ExecStart"]
        program = exec_start.split()[0]
        text = unit.read_text().replace(f"ExecStart={program} ",
                                        f"ExecStart={binary(variable)} ")
        path = pathlib.Path(tmp, unit.name)
        path.write_text(text)
        if gpu:
            drop_ins = pathlib.Path(tmp, unit.name + ".d")
            drop_ins.mkdir()
            (drop_ins / "gpu.conf").write_text(GPU_DROP_IN.read_text())
        return path

    def exposure(self, unit):
        """systemd-analyze security's exposure level of `unit`, and its report."""
        result = run(["systemd-analyze", "security", "--offline=yes", unit], cwd=unit.parent)
        if "--offline" in result.stderr:
            self.skipTest("systemd-analyze security has no --offline (systemd < 250)")
        level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
        self.assertIsNotNone(level, result.stdout + result.stderr)
        return float(level[1]), result.stdout

    def test_systemd_analyze_verify(self):
        if shutil.which("systemd-analyze") is None:
            self.skipTest("systemd-analyze not found (Debian package systemd)")
        for unit_file, gpu in ((UNIT, False), (UNIT, True), (CONTROLLER_UNIT, False)):
            with self.subTest(unit=unit_file.name, gpu=gpu), tempfile.TemporaryDirectory() as tmp:
                unit = self.unit_copy(tmp, gpu, unit_file)
                self.verify_output(["systemd-analyze", "verify", unit], unit)

    def test_systemd_analyze_security(self):
        if shutil.which("systemd-analyze") is None:
            self.skipTest("systemd-analyze not found (Debian package systemd)")
        # Exposure 0.0 (locked down) .. 10.0 (unprotected): the unit scores 1.5, and 1.7 with its
        # GPU drop-in, which shows it the NVIDIA devices (and only those: DevicePolicy=closed).
        levels = {}
        for gpu in (False, True):
            with self.subTest(gpu=gpu), tempfile.TemporaryDirectory() as tmp:
                levels[gpu], report = self.exposure(self.unit_copy(tmp, gpu))
                self.assertLessEqual(levels[gpu], 2.0, report)
                # The drop-in is read: the devices are visible with it and hidden without.
                devices = re.search(r"^(\S+) PrivateDevices=", report, re.MULTILINE)
                self.assertIsNotNone(devices, report)
                self.assertEqual(devices[1], "✗" if gpu else "✓", devices[0])
        # The controller needs less than stratad (no capability, no UCX, no shared memory, no
        # files of its own): it scores 1.2.
        with tempfile.TemporaryDirectory() as tmp:
            level, report = self.exposure(self.unit_copy(tmp, unit=CONTROLLER_UNIT))
            self.assertLess(level, levels.get(False, 0.0), report)
            self.assertLessEqual(level, 1.5, report)

    def test_gpu_drop_in_opens_only_the_nvidia_devices(self):
        settings = {}
        for line in GPU_DROP_IN.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                key, value = line.split("=", 1)
                settings.setdefault(key, []).append(value)
        self.assertEqual(settings["PrivateDevices"], ["no"])
        self.assertEqual(settings["DevicePolicy"], ["closed"])
        self.assertTrue(all(v.startswith("char-nvidia") for v in settings["DeviceAllow"]),
                        settings["DeviceAllow"])

    def test_sysusers_creates_the_user(self):
        if shutil.which("systemd-sysusers") is None:
            self.skipTest("systemd-sysusers not found (Debian package systemd)")
        with tempfile.TemporaryDirectory() as tmp:
            result = run(["systemd-sysusers", "--dry-run", f"--root={tmp}", SYSUSERS])
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("Creating user 'strata'", result.stdout + result.stderr)
            self.assertNotIn("gnoring", result.stdout + result.stderr)


class Cluster(unittest.TestCase):
    """etcd, the controllers and two daemons started as the manifests start them, on loopback:
    each pod's host:port becomes 127.0.0.1 and a free port, its volumes directories in tmp, the
    Secret's keys files there."""

    def setUp(self):
        self.etcd = shutil.which("etcd")
        if self.etcd is None:
            self.skipTest("etcd not found (Debian package etcd-server)")
        self.binaries = {v: binary(v) for v in ("STRATA_STRATAD", "STRATA_CONTROLLER",
                                                "STRATA_CLI")}
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="strata-deploy-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.processes = []
        self.addCleanup(self.stop_all)
        # Each pod's host:port (by its name under its Service, and 0.0.0.0 for its listeners),
        # mapped to a loopback port.
        self.addresses = {}
        # A distinct value per Secret key: a token wired to the wrong key fails the calls.
        self.secrets = self.tmp / "secrets"
        self.secrets.mkdir()

    def stop_all(self):
        for _, process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def start(self, name, command):
        log = open(self.tmp / f"{name}.log", "w")
        self.addCleanup(log.close)
        process = subprocess.Popen([str(word) for word in command], stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append((name, process))
        return process

    def logs(self):
        return "".join(f"--- {name}\n{(self.tmp / f'{name}.log').read_text()[-3000:]}"
                       for name, _ in self.processes)

    def local(self, host, port):
        """The loopback address standing for host:port."""
        return f"127.0.0.1:{self.addresses.setdefault((host, int(port)), free_port())}"

    def map_pod(self, statefulset, index, c):
        """Maps one replica's listening ports, by its name and by 0.0.0.0 alike."""
        host = member_host(statefulset, index)
        for port in c["ports"]:
            local = self.local(host, port["containerPort"])
            self.addresses[(f"0.0.0.0@{host}", port["containerPort"])] = address_port(local)
        return host

    def localize_urls(self, word, host):
        """A word with every http://host:port in it mapped (0.0.0.0 to `host`'s ports)."""
        def mapped(match):
            name = f"0.0.0.0@{host}" if match[1] == "0.0.0.0" else match[1]
            self.assertIn((name, int(match[2])), self.addresses, f"{match[0]}: no such pod")
            return f"http://{self.local(name, match[2])}"
        return re.sub(r"http://([\w.-]+):(\d+)", mapped, word)

    def localize_volumes(self, word, c, pod):
        """A word with a mount path of the container in it pointing at tmp/<pod>/<volume>."""
        for mount in c.get("volumeMounts", []):
            if mount["mountPath"] in word:
                local = self.tmp / pod / mount["name"]
                local.mkdir(parents=True, exist_ok=True)
                word = word.replace(mount["mountPath"], str(local))
        return word

    def secret_file(self, key):
        """The file holding a Secret's key, (secret, key), here."""
        file = self.secrets / f"{key[0]}.{key[1]}"
        file.write_text(f"{key[0]}-{key[1]}-value")
        return file

    def secret_files(self, workload_object, container_name, text):
        """A config's text with every path on a Secret volume of the container pointing at the
        Secret's key in tmp/secrets (so that both sides of a token read the same file)."""
        for path in set(re.findall(r'"(/[^"]+)"', text)):
            key = secret_key(workload_object, container_name, path)
            if key and key[1]:
                text = text.replace(f'"{path}"', f'"{self.secret_file(key)}"')
        return text

    def http_ok(self, url):
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200, response.read().decode()
        except OSError as e:
            return False, str(e)

    def eventually(self, check, what, timeout_s=30):
        deadline = time.monotonic() + timeout_s
        while True:
            result = check()
            if result or time.monotonic() > deadline:
                break
            for name, process in self.processes:
                if process.poll() is not None:
                    self.fail(f"{name} exited ({process.returncode}) before {what}\n{self.logs()}")
            time.sleep(0.2)
        self.assertTrue(result, f"not within {timeout_s} s: {what}\n{self.logs()}")
        return result

    def cli(self, addresses, *command):
        return run([self.binaries["STRATA_CLI"], "--controller", ",".join(addresses),
                    "--token-file", self.controller_token, "--timeout-ms", "2000", *command])

    def test_cluster_runs_as_the_manifests_wire_it(self):
        etcd, statefulset, daemonset = workload(ETCD), workload(CONTROLLER), workload(STRATAD)
        member, controller = container(etcd, "etcd"), container(statefulset, CONTROLLER)
        stratad = container(daemonset, STRATAD)
        hosts = {}
        for sts, c in ((etcd, member), (statefulset, controller)):
            hosts[sts["metadata"]["name"]] = [self.map_pod(sts, i, c)
                                              for i in range(sts["spec"]["replicas"])]

        # etcd: every member as its StatefulSet starts it.
        for host in hosts[ETCD]:
            pod = host.split(".")[0]
            words = expand(member, {"metadata.name": pod})[1:]
            words = [self.localize_volumes(self.localize_urls(w, host), member, pod)
                     for w in words]
            self.start(pod, [self.etcd, *words])
        for host in hosts[ETCD]:
            for probe in ("livenessProbe", "readinessProbe"):
                get = member[probe]["httpGet"]
                url = (f"http://{self.local(f'0.0.0.0@{host}', port_number(member, get['port']))}"
                       f"{get['path']}")
                self.eventually(lambda: self.http_ok(url)[0], f"etcd's {probe} {url} passes")
            self.assertIn('"health":"true"', self.http_ok(url)[1])

        # The controllers: their ConfigMap's config, etcd's and their own addresses local.
        (configmap,) = [cm for cm in objects("ConfigMap") if CONTROLLER_TOML in cm.get("data", {})]
        text = self.secret_files(statefulset, CONTROLLER, configmap["data"][CONTROLLER_TOML])
        for (host, port), _ in list(self.addresses.items()):
            text = text.replace(f'"{host}:{port}"', f'"{self.local(host, port)}"')
        self.assertNotIn(".svc:", text, "an etcd endpoint names no member")
        listen = address_port(controller_config()["controller"]["listen_address"])
        controllers = []
        for host in hosts[CONTROLLER]:
            pod = host.split(".")[0]
            address = self.local(host, listen)
            config = self.tmp / f"{pod}.toml"
            config.write_text(re.sub(r'^listen_address = "[^"]*"', f'listen_address = "{address}"',
                                     text, flags=re.M))
            words = expand(controller, TEST_FIELDS)
            words[words.index(flag_value(words, "--config"))] = str(config)
            self.start(pod, [self.binaries["STRATA_CONTROLLER"], *words[1:]])
            controllers.append(address)
        self.controller_token = self.secret_file(secret_key(
            statefulset, CONTROLLER, controller_config()["controller"]["auth_token_file"]))

        # The probes (tcpSocket on the cluster API) pass on both; one of them leads.
        for address in controllers:
            def connects(address=address):
                try:
                    socket.create_connection(tuple(address.rsplit(":", 1)), timeout=1).close()
                    return True
                except OSError:
                    return False
            self.eventually(connects, f"the probes' port of {address} accepts")

        def one_leads():
            answers = [self.cli([address], "instances") for address in controllers]
            leading = [a for a in answers if a.returncode == 0]
            standby = [a for a in answers if "standby" in a.stderr]
            return len(leading) == 1 and len(standby) == len(controllers) - 1
        self.eventually(one_leads, "one controller leads, the others stand by")

        # Two daemons, as the DaemonSet starts them on two nodes, with the ConfigMap's config:
        # each registers with the controllers it lists, and the leader indexes it through its
        # control API.
        (configmap,) = [cm for cm in objects("ConfigMap") if "stratad.toml" in cm.get("data", {})]
        text = self.secret_files(daemonset, STRATAD, configmap["data"]["stratad.toml"])
        for host in hosts[CONTROLLER]:
            text = text.replace(f'"{host}:{listen}"', f'"{self.local(host, listen)}"')
        self.assertNotIn(".svc:", text, "a controller entry names no replica")
        config = self.tmp / "stratad.toml"
        config.write_text(text)
        nodes = {}  # node name -> (control address, peer address, process)
        for node in ("node-a", "node-b"):
            words = expand(stratad, {**TEST_FIELDS, "spec.nodeName": node})
            words[words.index(flag_value(words, "--config"))] = str(config)
            addresses = []
            for flag in ("--listen", "--remote-listen"):
                address = flag_value(words, flag)
                self.assertEqual(address.split(":")[0], "127.0.0.1", f"{flag} is not the pod's IP")
                addresses.append(self.local(node, address_port(address)))
                words[words.index(address)] = addresses[-1]
            # Its sockets in tmp, no disk tier or metrics, a small host tier.
            sockets = self.tmp / node
            sockets.mkdir()
            process = self.start(node, [self.binaries["STRATA_STRATAD"], *words,
                                        "--engine-socket", sockets / "engine.sock",
                                        "--control-socket", sockets / "control.sock",
                                        "--disk-dir", "", "--no-metrics",
                                        "--host-capacity", "64MiB"])
            nodes[node] = (*addresses, process)

        def indexed():
            # instance, control endpoint, indexed (yes/no), ...
            listed = self.cli(controllers, "instances").stdout.splitlines()
            listed = [line.split() for line in listed]
            rows = [row for row in listed if row[:1] and row[0] in nodes and row[2] == "yes"]
            return rows if len(rows) == len(nodes) else []
        rows = self.eventually(indexed, f"the controllers index {', '.join(nodes)}")
        for row in rows:
            self.assertEqual(row[1], nodes[row[0]][0], f"{row[0]} registered another address")

        # No config lists a peer: the controllers' membership tells the daemons about each other,
        # and one of them dials the other, which must prove peer-token (wired the same on both).
        def linked():
            for node, other in (("node-a", "node-b"), ("node-b", "node-a")):
                peers = run([self.binaries["STRATA_CLI"], "--addr",
                             f"unix://{self.tmp / node / 'control.sock'}", "peers"])
                # address, node id, direction, state, ...
                rows = [line.split() for line in peers.stdout.splitlines()]
                if any(row[:1] == [nodes[other][1]] and row[2:4] == ["out", "up"]
                       for row in rows):
                    return node, other
            return None
        dialler, listener = self.eventually(linked, "the daemons link up as peers")

        # Every TCP connection of the link lands on a port the NetworkPolicy admits stratad pods
        # to: the peers port carries UCX's connection manager, and UCX's tcp transport connects
        # to listeners of its own, on ports the manifests do not know.
        self.assertIn(address_port(nodes[listener][1]),
                      tcp_links(nodes[dialler][2].pid, nodes[listener][2].pid),
                      f"{dialler} holds no connection to {listener}'s peers port")
        admitted = ingress_admissions()
        # The peers port as the manifests name it: by name, or by its number in the pod.
        peers = {"peers", address_port(flag_value(expand(stratad, TEST_FIELDS), "--remote-listen"))}
        for source, target in ((dialler, listener), (listener, dialler)):
            peers_port = address_port(nodes[target][1])
            ports = tcp_links(nodes[source][2].pid, nodes[target][2].pid)
            for port in ports:
                names = {"*"} | (peers if port == peers_port else set())
                self.assertTrue({(STRATAD, STRATAD, name) for name in names} & admitted,
                                f"{source} connects to {target}'s port {port}, which the "
                                f"NetworkPolicy closes to stratad pods (ports {sorted(ports)}, "
                                f"the peers port {peers_port})")


class GpuVariant(unittest.TestCase):
    """stratad's GPU variant, kubernetes-gpu/: a kustomize overlay of kubernetes/ whose DaemonSet
    sees every GPU of its node without taking one from the device plugin, and whose config keeps
    a device pool that fails start-up, saying so, where no GPU is usable."""

    def gpu(self, kind, name):
        return by_kind_and_name(kustomized(GPU_OVERLAY))[(kind, name)]

    def gpu_toml(self):
        return self.gpu("ConfigMap", "stratad-config")["data"]["stratad.toml"]

    def test_kustomizations_list_what_exists(self):
        listed = [KUBERNETES / resource for resource in kustomization(KUBERNETES)["resources"]]
        for path in listed:
            self.assertTrue(path.is_file(), f"kubernetes/{KUSTOMIZATION}: no {path.name}")
        # The base is the cluster: the namespace, every workload but the example engine, and
        # the ConfigMaps they mount.
        files = {path: yaml_documents(path) for path in sorted(KUBERNETES.glob("*.yaml"))
                 if not is_kustomize_file(path)}
        needed = {path for path, docs in files.items() for doc in docs
                  if doc["kind"] in {"Namespace", "DaemonSet", "StatefulSet", "Deployment"}}
        mounted = {volume["configMap"]["name"] for path in needed for doc in files[path]
                   if doc["kind"] in WORKLOADS for volume in pod_spec(doc).get("volumes", [])
                   if "configMap" in volume}
        needed |= {path for path, docs in files.items() for doc in docs
                   if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] in mounted}
        self.assertEqual(len(mounted), 2, "stratad's and the controllers' configs")
        self.assertLessEqual({p.name for p in needed}, {p.name for p in listed},
                             f"kubernetes/{KUSTOMIZATION} leaves out part of the cluster")
        # The overlay: the base, and patches of objects the base has.
        overlay = kustomization(GPU_OVERLAY)
        self.assertEqual([(GPU_OVERLAY / r).resolve() for r in overlay["resources"]],
                         [KUBERNETES.resolve()])
        base = by_kind_and_name(kustomized(KUBERNETES))
        self.assertEqual(len(overlay["patches"]), 2, "the DaemonSet's and the ConfigMap's")
        for patch in overlay["patches"]:
            self.assertEqual(set(patch), {"path"}, "kustomized() knows patch files alone")
            self.assertTrue((GPU_OVERLAY / patch["path"]).is_file(), patch["path"])
            (change,) = yaml_documents(GPU_OVERLAY / patch["path"])
            self.assertIn((change["kind"], change["metadata"]["name"]), base,
                          f"{patch['path']} patches nothing of the base")

    def test_kustomize_builds_what_this_test_merges(self):
        # The checks below read the overlay as kustomized() merges it; kustomize (or kubectl's)
        # must build the same objects, base and overlay alike.
        tool = (["kustomize", "build"] if shutil.which("kustomize")
                else ["kubectl", "kustomize"] if shutil.which("kubectl") else None)
        if tool is None:
            self.skipTest("neither kustomize nor kubectl found: the overlay is checked as "
                          "strategic_merge() merges it, not as kustomize does")
        for directory in (KUBERNETES, GPU_OVERLAY):
            with self.subTest(directory=directory.name):
                built = run(tool + [directory])
                self.assertEqual(built.returncode, 0, built.stderr)
                theirs = by_kind_and_name(d for d in yaml.safe_load_all(built.stdout) if d)
                ours = by_kind_and_name(kustomized(directory))
                self.assertEqual(sorted(theirs), sorted(ours))
                for key, obj in ours.items():
                    self.assertEqual(theirs[key], obj, f"{directory.name}: {key}")

    def test_daemonset_sees_every_gpu_and_takes_none(self):
        gpu, base = self.gpu("DaemonSet", STRATAD), workload(STRATAD)
        spec, stratad = pod_spec(gpu), container(gpu, STRATAD)
        # Every GPU of the node, through the NVIDIA container runtime, and none from the device
        # plugin: the engines' pods get them all.
        self.assertEqual(spec.get("runtimeClassName"), "nvidia")
        env = {var["name"]: var.get("value") for var in stratad["env"]}
        self.assertEqual(env.get("NVIDIA_VISIBLE_DEVICES"), "all")
        self.assertIn("compute", env.get("NVIDIA_DRIVER_CAPABILITIES", "").split(","))
        for c in containers(spec):
            for kind in ("requests", "limits"):
                taken = [r for r in c["resources"].get(kind, {}) if r.startswith("nvidia.com/")]
                self.assertFalse(taken, f"{c['name']} takes {taken} from the device plugin")
        # GPU nodes alone, tainted or not; the host's PID namespace for CUDA IPC.
        self.assertEqual(spec.get("nodeSelector"), {"nvidia.com/gpu.present": "true"})
        self.assertIn({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                      spec.get("tolerations", []))
        self.assertIs(spec.get("hostPID"), True)
        (namespace,) = [n for n in objects("Namespace")
                        if n["metadata"]["name"] == gpu["metadata"]["namespace"]]
        self.assertEqual(namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
                         "privileged", "Pod Security below privileged refuses hostPID")
        # The rest is the base's: command line, resources, probes, volumes and securityContext
        # (the device nodes come from the runtime; no capability or privilege opens them).
        stripped = json.loads(json.dumps(gpu))
        for field in ("runtimeClassName", "nodeSelector", "tolerations", "hostPID"):
            pod_spec(stripped).pop(field)
        base_env = {var["name"] for var in container(base, STRATAD)["env"]}
        c = container(stripped, STRATAD)
        c["env"] = [var for var in c["env"] if var["name"] in base_env]
        self.assertEqual(stripped, base, "the GPU variant changes more than it says")
        self.assertFalse(stratad["securityContext"].get("privileged"))

    def test_config_is_the_base_with_a_device_pool(self):
        text, base = self.gpu_toml(), by_kind_and_name(kustomized(KUBERNETES))
        base_text = base[("ConfigMap", "stratad-config")]["data"]["stratad.toml"]
        self.assertTrue(text.startswith(base_text),
                        "kubernetes-gpu/stratad-configmap-gpu.yaml: not the base's stratad.toml "
                        "followed by [device_pool] (copy the base's text)")
        self.assertEqual(list(tomllib.loads(text[len(base_text):])), ["device_pool"])
        written, printed = accepted(self, "STRATA_STRATAD", "kubernetes-gpu stratad.toml", text)
        assert_read_back(self, "kubernetes-gpu stratad.toml", written, printed)
        pool = printed["device_pool"]
        self.assertGreater(pool["bytes_per_layout"], 0, "no device pool")
        self.assertEqual(pool["backend"], "auto")
        self.assertIs(pool["allow_host_fallback"], False,
                      "a node without a usable GPU would pool host memory quietly")

    def test_start_up_fails_without_a_gpu(self):
        # stratad with the GPU variant's config, its sockets, disk tier and token files in tmp,
        # its listeners on loopback, a small host tier. Without a usable GPU (this machine, or a
        # build without CUDA) it must exit saying why; with one it starts, and the case is moot.
        with tempfile.TemporaryDirectory() as tmp:
            config = pathlib.Path(tmp, "stratad.toml")
            config.write_text(localized(self.gpu_toml(), tmp))
            log = pathlib.Path(tmp, "stratad.log")
            with open(log, "w") as out:
                daemon = subprocess.Popen(
                    [binary("STRATA_STRATAD"), "--config", config, "--host-capacity", "64MiB",
                     "--disk-dir", f"{tmp}/disk", "--engine-socket", f"{tmp}/engine.sock",
                     "--control-socket", f"{tmp}/control.sock", "--metrics-listen", "",
                     "--listen", f"127.0.0.1:{free_port()}",
                     "--remote-listen", f"127.0.0.1:{free_port()}", "--instance-id", "node-a"],
                    stdout=out, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + 30
                pool = None
                while daemon.poll() is None and time.monotonic() < deadline and not pool:
                    time.sleep(0.1)
                    pool = re.search(r"device pool: \d+ bytes per layout in (\w+) memory",
                                     log.read_text())
                exited = daemon.poll() is not None
            finally:
                if daemon.poll() is None:
                    daemon.terminate()
                    daemon.wait(timeout=30)
            output = log.read_text()
        if pool and pool[1] == "cuda":
            self.skipTest("stratad found a usable GPU here: its pool started on it")
        self.assertIsNone(pool, f"stratad pooled {pool and pool[1]} memory:\n{output}")
        self.assertTrue(exited, f"stratad neither failed nor pooled in 30 s:\n{output}")
        self.assertNotEqual(daemon.returncode, 0, output)
        self.assertIn('device pool: backend "auto" found no usable GPU', output)
        self.assertIn("allow_host_fallback", output, "the error names no way out")


CASES = (Manifests, DaemonConfigs, ControllerConfigs, CommandLines, DockerImage, SystemdUnit,
         Cluster, GpuVariant)


if __name__ == "__main__":
    sys.exit(python_cases.main(sys.argv, __file__, sys.modules[__name__], CASES))
