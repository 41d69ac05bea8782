"""A real cluster for the tests: the repository's `coordinator` and `worker`
binaries (from `target/debug`, or `$WEFT_BIN_DIR`), started as processes
on free loopback ports, each test module its own."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

import pytest

REPO = Path(__file__).resolve().parents[3]
HANDLERS = Path(__file__).with_name("handlers.py")


def binary(name: str) -> Path:
    directory = Path(os.environ.get("WEFT_BIN_DIR", REPO / "target" / "debug"))
    path = directory / name
    if not path.exists():
        pytest.fail(f"{path} is missing: build the binaries first (cargo build --bins)")
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    """A coordinator and its workers; `url` is the coordinator's."""

    def __init__(self, config: Optional[str] = None, env: Optional[dict[str, str]] = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="weft-py-"))
        self.env = dict(os.environ, **(env or {}))
        self.env.pop("WEFT_COORDINATOR", None)
        self.env.pop("WEFT_TOKEN", None)
        args = [str(binary("coordinator")), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                "--data-dir", str(self.dir / "data")]
        if config is not None:
            (self.dir / "coordinator.toml").write_text(config)
            args += ["--config", str(self.dir / "coordinator.toml")]
        self.processes: list[subprocess.Popen[bytes]] = []
        coordinator = self.spawn("coordinator", args, stdout=subprocess.PIPE)
        line = coordinator.stdout.readline().decode() if coordinator.stdout else ""
        if not line.startswith("coordinator listening on "):
            self.stop()
            pytest.fail(f"the coordinator did not start: {line!r} {self.log('coordinator')}")
        scheme = "https" if config is not None and "[tls]" in config else "http"
        self.url = f"{scheme}://" + line.split()[-1]

    def spawn(self, name: str, args: list[str], env: Optional[dict[str, str]] = None, **kwargs) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{name}.log", "wb")
        process = subprocess.Popen(args, env=dict(self.env, **(env or {})), stderr=log, **kwargs)
        self.processes.append(process)
        return process

    def add_worker(self, name: str, slots: int = 2, token: Optional[str] = None, ca: Optional[Path] = None,
                   env: Optional[dict[str, str]] = None) -> None:
        """Starts a Rust `worker` (with `env` added to its environment: a
        model provider's `OPENAI_BASE_URL`, say)."""
        args = [str(binary("worker")), "--coordinator", self.url, "--name", name, "--slots", str(slots),
                "--work-dir", str(self.dir / name)]
        if token:
            args += ["--token", token]
        if ca:
            args += ["--ca", str(ca)]
        self.spawn(name, args, env=env)
        self.wait_for_log(name, "joined the coordinator")

    def add_python_worker(self, name: str, token: Optional[str] = None) -> subprocess.Popen[bytes]:
        """Starts `handlers.py`, a `weft.Worker`, as its own process."""
        args = [sys.executable, str(HANDLERS), self.url, name] + ([token] if token else [])
        process = self.spawn(name, args, stdout=subprocess.PIPE)
        line = process.stdout.readline().decode() if process.stdout else ""
        assert "joined the coordinator" in line, f"{line!r}: {self.log(name)}"
        return process

    def log(self, name: str) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for_log(self, name: str, text: str, patience: float = 30) -> None:
        deadline = time.monotonic() + patience
        while text not in self.log(name):
            if time.monotonic() > deadline:
                pytest.fail(f"{name} never logged {text!r}: {self.log(name)}")
            time.sleep(0.05)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A coordinator without identities and one worker (scripts)."""
    started = Cluster()
    started.add_worker("w1", slots=4)
    yield started
    started.stop()


OPERATOR = "operator-secret-3c9e1a"
READER = "reader-secret-7b2d4f"
NODE = "node-secret-5e8a2c"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def secured() -> Iterator[Cluster]:
    """A coordinator that wants identities: `ops` operates, `viewer` reads."""
    config = f"""
[[tokens]]
name = "ops"
sha256 = "{sha256(OPERATOR)}"
role = "operator"

[[tokens]]
name = "viewer"
sha256 = "{sha256(READER)}"
role = "reader"

[[tokens]]
name = "node"
sha256 = "{sha256(NODE)}"
role = "worker"
"""
    started = Cluster(config)
    started.add_worker("w1", slots=2, token=NODE)
    yield started
    started.stop()


def certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signs for 127.0.0.1 and its key, made
    with openssl: (ca.pem, server.pem, server.key)."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=weft test CA")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "san.ext")
    return directory / "ca.pem", directory / "server.pem", directory / "server.key"


@pytest.fixture(scope="module")
def tls() -> Iterator[tuple[Cluster, Path]]:
    """A coordinator over TLS with a certificate of a test CA, a token for
    an operator, and one worker; with the CA's file."""
    directory = Path(tempfile.mkdtemp(prefix="weft-py-tls-"))
    ca, cert, key = certificates(directory)
    config = f"""
[tls]
cert = "{cert}"
key = "{key}"

[[tokens]]
name = "ops"
sha256 = "{sha256(OPERATOR)}"
role = "operator"

[[tokens]]
name = "node"
sha256 = "{sha256(NODE)}"
role = "worker"
"""
    started = Cluster(config)
    started.add_worker("w1", slots=2, token=NODE, ca=ca)
    yield started, ca
    started.stop()
