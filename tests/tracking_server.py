"""A team's MLflow tracking server, for tests and benchmarks: PostgreSQL on a private port and data folder, and
`mlflow server --app-name basic-auth` on it, as ordinary processes (no system service), always stopped.

The commands are those of the recipe in docs/cloud.md (#a-shared-mlflow-server-for-the-team), so the tests run the
recipe. PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user (Debian's package creates
it), else as `nobody`.
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from serving.process import free_ports, start_process, stop_process_group, tail, wait_until

HOST = "127.0.0.1"
DB_USER = "mlflow"
ADMIN = "admin"
USERS = ("alice", "bob")  # two teammates, each writing sweeps (default_permission = EDIT: into each other's too)
# What the server needs beyond tierbench's own dependencies (the `[server]` extra).
SERVER_MODULES = {"psycopg": "psycopg[binary]", "flask_wtf": "mlflow[auth]"}
AUTH_INI = """[mlflow]
default_permission = EDIT
database_uri = postgresql+psycopg://{db_user}:{db_password}@{host}:{pg_port}/mlflow_auth
admin_username = {admin}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
auth_cache_ttl_seconds = 60
"""


class Unavailable(RuntimeError):
    """PostgreSQL or the server's Python packages are missing here; the message says which and how to get them."""


def postgres_bin() -> Path:
    """The folder of PostgreSQL's server commands (initdb, postgres): on PATH, else Debian's newest."""
    found = shutil.which("initdb")
    candidates = [Path(found).parent] if found else []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True)
    for folder in candidates:
        if all((folder / name).exists() for name in ("initdb", "postgres", "createdb", "pg_isready")):
            return folder
    raise Unavailable("no PostgreSQL server here (initdb, postgres): `apt-get install postgresql` (Debian)")


def check_server_packages() -> None:
    import importlib.util

    missing = [pip for module, pip in SERVER_MODULES.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise Unavailable(f"the tracking server needs {', '.join(missing)}: pip install -e '.[server]'")


def _run_as() -> str | None:
    """Who runs PostgreSQL: None (ourselves) unless we are root, which initdb and postgres refuse."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name).pw_name
        except KeyError:
            continue
    raise Unavailable("running as root, and neither a `postgres` nor a `nobody` user to run PostgreSQL as")


@dataclass
class TrackingServer:
    """PostgreSQL + `mlflow server` under `folder`; `uri(user)` is a teammate's tracking URI (password included)."""

    folder: Path
    pg_bin: Path
    pg_port: int = 0
    port: int = 0
    db_password: str = field(default_factory=lambda: secrets.token_hex(12))
    passwords: dict[str, str] = field(default_factory=dict)
    postgres: subprocess.Popen | None = None
    mlflow: subprocess.Popen | None = None
    user: str | None = None
    startup_s: dict[str, float] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # for its processes (e.g. a leak check's marker)

    @property
    def mlflow_log(self) -> Path:
        return self.folder / "mlflow-server.log"

    def uri(self, user: str = USERS[0]) -> str:
        return f"http://{user}:{self.passwords[user]}@{HOST}:{self.port}"

    def backend_uri(self, database: str = "mlflow") -> str:
        return f"postgresql+psycopg://{DB_USER}:{self.db_password}@{HOST}:{self.pg_port}/{database}"

    def _pg(self, *args: str, log: str) -> subprocess.CompletedProcess:
        env = {**os.environ, **self.env, "PGPASSWORD": self.db_password}
        proc = subprocess.run([str(self.pg_bin / args[0]), *args[1:]], capture_output=True, text=True, env=env,
                              user=self.user, group=self._group(), extra_groups=[] if self.user else None,
                              cwd=self.folder, timeout=120)
        (self.folder / log).write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:1])} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return proc

    def _group(self) -> int | None:
        return pwd.getpwnam(self.user).pw_gid if self.user else None

    def start_postgres(self) -> None:
        """initdb (password auth), `postgres` on HOST:pg_port only (no Unix socket), the two databases."""
        self.user = _run_as()
        if self.user:
            os.chown(self.folder, pwd.getpwnam(self.user).pw_uid, self._group())
        pw_file = self.folder / "db-password"
        pw_file.write_text(self.db_password + "\n")
        if self.user:
            os.chown(pw_file, pwd.getpwnam(self.user).pw_uid, self._group())
        started = time.monotonic()
        self._pg("initdb", "-D", "pgdata", "-U", DB_USER, f"--pwfile={pw_file}", "--auth=scram-sha-256",
                 "-E", "UTF8", log="initdb.log")
        (self.pg_port,) = free_ports(1)
        cmd = [str(self.pg_bin / "postgres"), "-D", str(self.folder / "pgdata"), "-p", str(self.pg_port),
               "-c", f"listen_addresses={HOST}", "-c", "unix_socket_directories="]
        log_path = self.folder / "postgres.log"
        with open(log_path, "ab") as log_file:
            self.postgres = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT,
                                             env={**os.environ, **self.env}, stdin=subprocess.DEVNULL,
                                             user=self.user, group=self._group(),
                                             extra_groups=[] if self.user else None, start_new_session=True)

        def ready() -> bool:
            return subprocess.run([str(self.pg_bin / "pg_isready"), "-h", HOST, "-p", str(self.pg_port), "-q"],
                                  timeout=10).returncode == 0

        try:
            wait_until(ready, 60, lambda: self.postgres.poll() is None, "postgres")
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{exc}: {tail(log_path)}") from exc
        for database in ("mlflow", "mlflow_auth"):
            self._pg("createdb", "-h", HOST, "-p", str(self.pg_port), "-U", DB_USER, database, log="createdb.log")
        self.startup_s["postgres"] = time.monotonic() - started

    def start_mlflow(self, wait: bool = True) -> float:
        """`mlflow server --app-name basic-auth` (on its earlier port, else a free one); the seconds until it answered
        (with `wait`; else `wait_ready` waits)."""
        self.port = self.port or free_ports(1)[0]
        ini = self.folder / "basic_auth.ini"
        ini.write_text(AUTH_INI.format(db_user=DB_USER, db_password=self.db_password, host=HOST,
                                       pg_port=self.pg_port, admin=ADMIN))
        self.passwords.setdefault(ADMIN, secrets.token_hex(12))
        env = {**os.environ, **self.env, "MLFLOW_AUTH_CONFIG_PATH": str(ini),
               "MLFLOW_AUTH_ADMIN_PASSWORD": self.passwords[ADMIN],
               "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
               "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # GenAI jobs: not used, 3 processes fewer
        env.pop("MLFLOW_TRACKING_URI", None)
        cmd = [sys.executable, "-m", "mlflow", "server", "--app-name", "basic-auth",
               "--backend-store-uri", self.backend_uri(), "--artifacts-destination", str(self.folder / "artifacts"),
               "--host", HOST, "--port", str(self.port), "--workers", "1"]
        self.mlflow = start_process(cmd, self.mlflow_log, env=env)
        return self.wait_ready() if wait else 0.0

    def wait_ready(self) -> float:
        """Wait until the started server answers; the seconds waited."""
        try:
            seconds = wait_until(self._healthy, 180, lambda: self.mlflow.poll() is None, "mlflow server",
                                 interval_s=0.25)
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{exc}: {tail(self.mlflow_log)}") from exc
        self.startup_s.setdefault("mlflow", seconds)
        return seconds

    def _healthy(self) -> bool:
        with urllib.request.urlopen(f"http://{HOST}:{self.port}/health", timeout=5) as response:
            return response.status == 200

    def add_users(self, *users: str) -> None:
        """Each user created by the admin (POST users/create, as `curl` does in the recipe)."""
        for user in users:
            self.passwords[user] = secrets.token_hex(12)
            body = json.dumps({"username": user, "password": self.passwords[user]}).encode()
            token = base64.b64encode(f"{ADMIN}:{self.passwords[ADMIN]}".encode()).decode()
            request = urllib.request.Request(f"http://{HOST}:{self.port}/api/2.0/mlflow/users/create", data=body,
                                             headers={"Content-Type": "application/json",
                                                      "Authorization": f"Basic {token}"})
            with urllib.request.urlopen(request, timeout=30):
                pass

    def kill_mlflow(self) -> None:
        """The tracking server dies at once (SIGKILL to its processes); PostgreSQL keeps the data."""
        if self.mlflow is not None:
            os.killpg(self.mlflow.pid, signal.SIGKILL)
            self.mlflow.wait(timeout=30)
            self.mlflow = None

    def stop(self) -> None:
        if self.mlflow is not None:
            stop_process_group(self.mlflow, timeout_s=15)
            self.mlflow = None
        if self.postgres is not None:
            if self.postgres.poll() is None:
                self.postgres.send_signal(signal.SIGINT)  # SIGINT: PostgreSQL's fast shutdown (ends its backends too)
                try:
                    self.postgres.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.postgres.kill()
                    self.postgres.wait(timeout=10)
            self.postgres = None


def unavailable() -> str | None:
    """Why no tracking server can start here (None when it can)."""
    try:
        postgres_bin()
        check_server_packages()
        _run_as()
    except Unavailable as exc:
        return str(exc)
    return None


@contextmanager
def tracking_server(env: dict[str, str] | None = None) -> Iterator[TrackingServer]:
    """PostgreSQL + `mlflow server` with users alice and bob, in a private temporary folder (`env` added to their
    environment); stopped and removed on exit, on failure and Ctrl-C too. Raises Unavailable when PostgreSQL or the
    server's packages are missing."""
    pg_bin = postgres_bin()
    check_server_packages()
    # Not under pytest's tmp folders: those are root's alone (0700), and PostgreSQL may run as another user.
    folder = Path(tempfile.mkdtemp(prefix="tierbench-tracking-"))
    server = TrackingServer(folder, pg_bin, env=dict(env or {}))
    try:
        server.start_postgres()
        server.start_mlflow()
        server.add_users(*USERS)
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
