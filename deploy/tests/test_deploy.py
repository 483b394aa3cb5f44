#!/usr/bin/env python3
"""Checks the deployment files under deploy/ against each other and against the real binaries.

Every Kubernetes manifest parses and its objects hang together (selectors, volumes, resources,
probes, ports); the Grafana ConfigMap holds deploy/grafana/strata-node.json unchanged; stratad
accepts every TOML file (also the one inside the ConfigMap) and reads back each key as written;
the Docker image installs the packages of every library the binaries link, and its health check
passes against a running stratad; the systemd unit passes systemd-analyze and agrees with the
configs laid out for it.

ctest runs each case as its own entry, deploy_test.<Class>.<case> (deploy/CMakeLists.txt lists
them with --list). Environment: STRATA_STRATAD and STRATA_CLI, the built stratad and strata;
STRATA_BUILD_FLAVOUR, how they were built ("Release"; "Debug+address,undefined" with sanitizers).
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
import subprocess
import sys
import tempfile
import time
import tomllib
import unittest

try:
    import yaml  # Debian's python3-yaml (scripts/install-deps.sh)
except ImportError:
    yaml = None

DEPLOY = pathlib.Path(__file__).resolve().parent.parent
REPO = DEPLOY.parent
KUBERNETES = DEPLOY / "kubernetes"
CONFIGS = DEPLOY / "configs"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
UNIT = DEPLOY / "systemd" / "stratad.service"
GPU_DROP_IN = DEPLOY / "systemd" / "stratad-gpu.conf"
SYSUSERS = DEPLOY / "systemd" / "strata.sysusers.conf"
DASHBOARD = DEPLOY / "grafana" / "strata-node.json"
# The configs laid out for the systemd unit (sockets in /run/strata, disk tier in /var/lib/strata).
SYSTEMD_CONFIGS = ["disk-node.toml", "pd-prefill.toml", "pd-decode.toml"]
WORKLOADS = {"DaemonSet", "Deployment", "StatefulSet", "Pod"}
# Config keys that name a file stratad reads when it starts.
FILE_KEYS = {"cluster_token_file", "auth_token_file", "tls_cert_path", "tls_key_path"}
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


def manifests():
    """(file, object) for every object of every YAML file under deploy/."""
    return [(path, doc) for path in sorted(DEPLOY.rglob("*.y*ml")) for doc in yaml_documents(path)]


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


def unit_settings():
    """Key -> list of values of the systemd unit (keys may repeat)."""
    settings = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


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
                     for w in objects("DaemonSet") + objects("Deployment")]
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


class DaemonConfigs(unittest.TestCase):
    """Every TOML file is one stratad accepts, read back as written."""

    def accepted(self, name, text):
        """Runs stratad --print-config on `text`; returns the printed config, parsed."""
        with tempfile.TemporaryDirectory() as tmp:
            # --print-config validates without opening the files a config names; they are made
            # anyway (in tmp), so the check holds if stratad ever looks at them.
            def local_file(match):
                path = pathlib.Path(tmp, posixpath.basename(match.group(3)))
                path.write_text("deploy-test-token\n")
                return f'{match.group(1)}"{path}"'
            keys = "|".join(FILE_KEYS)
            text = re.sub(rf'^(\s*({keys})\s*=\s*)"([^"]+)"', local_file, text, flags=re.M)
            path = pathlib.Path(tmp, "stratad.toml")
            path.write_text(text)
            printed = run([binary("STRATA_STRATAD"), "--config", path, "--print-config"])
        self.assertEqual(printed.returncode, 0, f"stratad refuses {name}: {printed.stderr}")
        return tomllib.loads(text), tomllib.loads(printed.stdout)

    def test_stratad_accepts_every_toml(self):
        files = sorted(DEPLOY.rglob("*.toml"))
        tomls = [(str(p.relative_to(DEPLOY)), p.read_text()) for p in files]
        tomls += configmap_tomls()
        self.assertGreaterEqual(len(tomls), 5, "the example configs and the ConfigMap's")
        for name, text in tomls:
            with self.subTest(config=name):
                written, printed = self.accepted(name, text)
                for section, keys in written.items():
                    for key, value in keys.items():
                        got = printed[section][key]
                        if isinstance(value, str) and isinstance(got, int):
                            value = byte_size(value)
                        self.assertEqual(got, value, f"{name}: [{section}] {key}")

    def test_pd_pair_points_at_each_other(self):
        prefill = tomllib.loads((CONFIGS / "pd-prefill.toml").read_text())["remote"]
        decode = tomllib.loads((CONFIGS / "pd-decode.toml").read_text())["remote"]
        self.assertEqual((prefill["node_id"], decode["node_id"]), ("prefill-0", "decode-0"))
        self.assertEqual(prefill["peers"], [decode["listen_address"]])
        self.assertEqual(decode["peers"], [prefill["listen_address"]])
        self.assertEqual(prefill["cluster_token_file"], decode["cluster_token_file"])


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
        exposed = [args for op, args in instructions if op == "EXPOSE"]
        self.assertEqual(exposed, [sidecar["metrics"]["listen_address"].rsplit(":", 1)[1]])
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
        for variable in ("STRATA_STRATAD", "STRATA_CLI"):
            path = binary(variable)
            needed = re.findall(r"\(NEEDED\).*\[(.+)\]", run(["readelf", "-d", path]).stdout)
            resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", run(["ldd", path]).stdout, re.M))
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
    """deploy/systemd/stratad.service against the configs laid out for it, and systemd's tools."""

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

    def unit_copy(self, tmp, gpu=False):
        """The unit in tmp, with ExecStart running the stratad just built; with its GPU drop-in
        beside it (tmp/stratad.service.d/gpu.conf, where systemd looks for drop-ins) when `gpu`."""
        text = UNIT.read_text().replace("ExecStart=/usr/bin/stratad ",
                                        f"ExecStart={binary('STRATA_STRATAD')} ")
        path = pathlib.Path(tmp, UNIT.name)
        path.write_text(text)
        if gpu:
            drop_ins = pathlib.Path(tmp, UNIT.name + ".d")
            drop_ins.mkdir()
            (drop_ins / "gpu.conf").write_text(GPU_DROP_IN.read_text())
        return path

    def test_systemd_analyze_verify(self):
        if shutil.which("systemd-analyze") is None:
            self.skipTest("systemd-analyze not found (Debian package systemd)")
        for gpu in (False, True):
            with self.subTest(gpu=gpu), tempfile.TemporaryDirectory() as tmp:
                unit = self.unit_copy(tmp, gpu)
                self.verify_output(["systemd-analyze", "verify", unit], unit)

    def test_systemd_analyze_security(self):
        if shutil.which("systemd-analyze") is None:
            self.skipTest("systemd-analyze not found (Debian package systemd)")
        # Exposure 0.0 (locked down) .. 10.0 (unprotected): the unit scores 1.5, and 1.7 with its
        # GPU drop-in, which shows it the NVIDIA devices (and only those: DevicePolicy=closed).
        for gpu in (False, True):
            with self.subTest(gpu=gpu), tempfile.TemporaryDirectory() as tmp:
                unit = self.unit_copy(tmp, gpu)
                result = run(["systemd-analyze", "security", "--offline=yes", unit], cwd=tmp)
                if "--offline" in result.stderr:
                    self.skipTest("systemd-analyze security has no --offline (systemd < 250)")
                level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
                self.assertIsNotNone(level, result.stdout + result.stderr)
                self.assertLessEqual(float(level[1]), 2.0, result.stdout)
                # The drop-in is read: the devices are visible with it and hidden without.
                devices = re.search(r"^(\S+) PrivateDevices=", result.stdout, re.MULTILINE)
                self.assertIsNotNone(devices, result.stdout)
                self.assertEqual(devices[1], "✗" if gpu else "✓", devices[0])

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


def case_ids():
    loader = unittest.defaultTestLoader
    return [f"{case.__name__}.{name}" for case in (Manifests, DaemonConfigs, DockerImage,
                                                   SystemdUnit)
            for name in loader.getTestCaseNames(case)]


def main(argv):
    if argv[1:] == ["--list"]:
        print("\n".join(case_ids()))
        return 0
    names = argv[1:] or case_ids()
    suite = unittest.defaultTestLoader.loadTestsFromNames(names, sys.modules[__name__])
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    if not result.wasSuccessful():
        return 1
    for case, reason in result.skipped:
        print(f"{pathlib.Path(__file__).name}: Skipped\n{reason}\n[  SKIPPED ] {case.id()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
