"""Settings of `serving.endpoint.backend.EndpointBackend` (entries `endpoint*` of conf/backends/): where a server that
is already running answers, how to authenticate, and how hard tierbench may push it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from serving.settings import BackendSettings, is_positive_int

if TYPE_CHECKING:
    from serving.model_config import ModelConfig
    from serving.settings import ClusterSwitches

# The protocols an endpoint may speak, by the names a config gives them; what each means is serving/endpoint/kinds.py.
KIND_NAMES = ("oip", "torchserve", "http", "openai")
# The workload each kind's requests are (an OpenAI-compatible server answers conversations; the others, images).
KIND_WORKLOADS = {"oip": "image", "torchserve": "image", "http": "image", "openai": "generative"}
PIN_OUTPUT = ("auto", "ignore_eos", "min_tokens", "none")
# A gRPC metadata key as HTTP/2 carries it: lower case, digits, `-`, `_`, `.` (a `-bin` key's value is binary).
METADATA_KEY = re.compile(r"^[0-9a-z_.-]+$")


@dataclass
class EndpointSettings(BackendSettings):
    """A server someone else runs. Nothing here is a secret: a token or password is read from the environment
    variable `token_env` or `basic_auth_env` names, and TLS keys from their files, on the client's node, when a
    client opens."""

    _target_: str = "serving.endpoint.backend.EndpointBackend"
    url: str = ""  # its HTTP base URL, e.g. http://10.0.0.5:8000 (https://: TLS, verified)
    grpc_url: str | None = None  # host:port of its gRPC service (null: no gRPC trials)
    # Metadata every gRPC call carries, e.g. {application: resnet18}: the app a Ray Serve gRPC proxy with several apps
    # routes to. Logged with the trial, so never a credential (token_env, basic_auth_env)
    grpc_metadata: dict[str, str] = field(default_factory=dict)
    # The protocol it speaks (serving/endpoint/kinds.py): oip (Open Inference Protocol / KServe v2: Triton, KServe,
    # MLServer), torchserve (TorchServe's inference API, REST and gRPC), http (a plain HTTP API at `path`), openai
    # (an OpenAI-compatible API: vLLM, SGLang, TGI, TensorRT-LLM, llama.cpp, transformers serve, Ray Serve LLM;
    # experiment.workload=generative)
    kind: str = "oip"
    model_name: str | None = None  # the model's name there (null: model.name)
    tier: str | None = None  # the GPU tier its server runs on: a sweep of another tier skips it (null: any tier)
    # The GPU nodes answering at url (replicas behind a load balancer), each rented at the tier's price: its images
    # are priced at nodes x the tier's price per hour
    nodes: int = 1
    token_env: str | None = None  # environment variable holding a bearer token (null: no authentication)
    basic_auth_env: str | None = None  # environment variable holding user:password for HTTP basic authentication
    ca_file: str | None = None  # CA bundle its TLS certificate is verified against (null: the system's)
    client_cert: str | None = None  # mutual TLS: the client certificate's PEM file (null: none asked for)
    client_key: str | None = None  # its private key's PEM file (null: in client_cert's file)
    # kind=http: the route requests are POSTed to under url, the JSON field (and form field, for several JPEGs)
    # the images go in, and the JSON field the outputs come back in (serving/endpoint/template.py)
    path: str = "/predict"
    input_key: str = "images"
    output_key: str = "logits"
    max_concurrency: int | None = None  # refuse a sweep that would keep more requests in flight (null: no limit)
    max_rate: float | None = None  # refuse a sweep that would send more requests per second (null: no limit)
    probe_timeout_s: float = 10.0  # the reachability and metadata checks before any trial
    # The server's Prometheus metrics (Triton: http://HOST:8002/metrics; TorchServe: :8082/metrics): its own queue /
    # compute time per request and its count of images, read around every window (null: the client's view only)
    metrics_url: str | None = None
    # kind=openai: how a request asks for exactly its max_tokens: auto (the first of ignore_eos, min_tokens the server
    # takes, asked before the trials) | ignore_eos | min_tokens | none (the model may stop early; the served lengths
    # say by how much)
    pin_output: str = "auto"

    server_mode_hint: ClassVar[str] = "endpoint"
    launches_server: ClassVar[bool] = False

    @property
    def family(self) -> str:
        return "endpoint"

    def serves(self, workload: str) -> bool:
        return KIND_WORKLOADS.get(self.kind, workload) == workload  # an unknown kind: its own check refuses it

    def identity(self) -> dict[str, Any]:
        identity = super().identity()
        if self.kind != "openai":  # a setting of kind=openai alone: the other kinds' trials keep the keys they had
            del identity["pin_output"]
        return identity

    @property
    def tls(self) -> bool:
        return self.url.startswith("https://")

    def check(self, name: str, model: ModelConfig, cluster: ClusterSwitches) -> list[str]:
        problems = super().check(name, model, cluster)
        parts = urlsplit(self.url)
        authority = self.url.partition("://")[2] if "://" in self.url else self.url
        if "@" in authority.partition("/")[0]:
            # Checked first, with or without a scheme, and never echoed: the value holds a secret.
            problems.append(f"backends.{name}.url carries credentials (user info before '@'), which tierbench would "
                            "have to log: remove them and give them through an environment variable instead: a "
                            f"bearer token with backends.{name}.token_env=VARIABLE, or user:password with "
                            f"backends.{name}.basic_auth_env=VARIABLE")
        elif parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(self.refuse(name, "url", "the endpoint's base URL, http://HOST:PORT or https://HOST:PORT "
                                                     "(e.g. backends.endpoint.url=http://10.0.0.5:8000)"))
        if self.grpc_url is not None:
            host, _, port = self.grpc_url.rpartition(":")
            if "://" in self.grpc_url or not host or not port.isdigit():
                problems.append(self.refuse(name, "grpc_url", "HOST:PORT of its gRPC service, without a scheme "
                                                              "(TLS follows the url's https)"))
        problems += self._check_grpc_metadata(name)
        if self.metrics_url is not None:
            metrics = urlsplit(self.metrics_url)
            if metrics.scheme not in ("http", "https") or not metrics.hostname or "@" in metrics.netloc:
                problems.append(f"backends.{name}.metrics_url is not allowed: Triton's metrics URL, "
                                "http://HOST:8002/metrics (no credentials in it), or null")
        if self.tier is not None and not (self.tier and self.tier.replace("_", "").isalnum()):
            problems.append(self.refuse(name, "tier", "the name of the GPU tier its server runs on (a file of "
                                                      "conf/gpu/, e.g. a100), or null for any tier"))
        if self.kind not in KIND_NAMES:
            problems.append(self.refuse(name, "kind", f"one of {list(KIND_NAMES)}"))
        problems += self._check_kind(name)
        problems += self._check_credentials(name)
        if not is_positive_int(self.nodes):
            problems.append(self.refuse(name, "nodes", "the number of GPU nodes answering at its url (1 for one "
                                                       "server; N for N replicas behind a load balancer)"))
        if self.max_concurrency is not None and not is_positive_int(self.max_concurrency):
            problems.append(self.refuse(name, "max_concurrency", "a positive integer, or null for no limit"))
        if self.max_rate is not None and not self.max_rate > 0:
            problems.append(self.refuse(name, "max_rate", "requests per second > 0, or null for no limit"))
        if not self.probe_timeout_s > 0:
            problems.append(self.refuse(name, "probe_timeout_s", "seconds > 0"))
        return problems

    def _check_kind(self, name: str) -> list[str]:
        problems = []
        if self.pin_output not in PIN_OUTPUT:
            problems.append(self.refuse(name, "pin_output", f"one of {list(PIN_OUTPUT)}"))
        if self.kind == "openai":
            if self.grpc_url is not None:
                problems.append(self.refuse(name, "grpc_url", "null with kind=openai (the OpenAI API is HTTP)"))
            if self.metrics_url is not None:
                problems.append(self.refuse(name, "metrics_url", "null with kind=openai (an OpenAI-compatible "
                                                                 "server's own metrics are not read yet)"))
        if self.kind == "http":
            if self.grpc_url is not None:
                problems.append(self.refuse(name, "grpc_url", "null with kind=http (a plain HTTP API has no gRPC "
                                                              "service)"))
            if self.metrics_url is not None:
                problems.append(self.refuse(name, "metrics_url", "null with kind=http (its metrics are read for "
                                                                 "kind=oip, Triton's, and kind=torchserve)"))
            if not self.path.startswith("/") or any(c.isspace() for c in self.path):
                problems.append(self.refuse(name, "path", "the route under url that takes requests, e.g. /predict"))
            for key in ("input_key", "output_key"):
                if not getattr(self, key):
                    problems.append(self.refuse(name, key, "the name of a JSON field"))
        return problems

    def _check_grpc_metadata(self, name: str) -> list[str]:
        """Keys gRPC carries as text, none of them a credential or a header gRPC sets itself; values of printable
        ASCII."""
        problems = []
        for key, value in (self.grpc_metadata or {}).items():
            where = f"backends.{name}.grpc_metadata.{key}"
            if key in ("authorization", "cookie", "proxy-authorization"):
                # Not echoed: the value is a secret given by mistake.
                problems.append(f"{where} is a credential, which tierbench would log: give it through "
                                f"backends.{name}.token_env or basic_auth_env (environment variables), never here")
            elif not METADATA_KEY.match(str(key)) or key.endswith("-bin") or key.startswith("grpc-") or key in (
                    "te", "content-type", "user-agent"):
                problems.append(f"{where} is not allowed: a metadata key is lower case (a-z, 0-9, -, _, .), not "
                                "binary (-bin), and not one gRPC sets itself (grpc-*, te, content-type, user-agent)")
            elif not isinstance(value, str) or not value.isprintable() or not value.isascii():
                problems.append(f"{where}={value!r} is not allowed: a text value (printable ASCII), e.g. the Serve "
                                "application's name")
        return problems

    def _check_credentials(self, name: str) -> list[str]:
        problems = []
        for key in ("token_env", "basic_auth_env"):
            value = getattr(self, key)
            if value is not None and not value.replace("_", "").isalnum():
                # Not echoed: a secret given here by mistake would land in the log.
                problems.append(f"backends.{name}.{key} is not the name of an environment variable: give the NAME "
                                f"(letters, digits, _) of one that holds the secret, e.g. {key}=TIERBENCH_TOKEN, "
                                "never the secret itself")
        if self.token_env and self.basic_auth_env:
            problems.append(f"backends.{name}.token_env and basic_auth_env are both set: a request carries one "
                            "Authorization header; keep the one the endpoint asks for")
        if (self.client_cert or self.client_key) and not self.tls:
            problems.append(f"backends.{name}.client_cert/client_key are for mutual TLS: give an https:// url, or "
                            "leave them out")
        if self.client_key and not self.client_cert:
            problems.append(self.refuse(name, "client_key", "given with client_cert (the certificate's PEM file), "
                                                            "or null"))
        return problems

    def refuse_loads(self, name: str, concurrency: int, rate: float) -> list[str]:
        problems = []
        if self.max_rate is not None and concurrency:
            problems.append(f"backends.{name}.max_rate={self.max_rate:g} bounds the request rate, which a closed loop "
                            f"(experiment.load_mode=closed, concurrency up to {concurrency}) does not: its rate is "
                            "whatever the endpoint sustains. Use an open-loop load (experiment.load_mode=poisson "
                            "or constant, experiment.request_rates=[...]), or bound max_concurrency instead")
        if self.max_concurrency is not None and concurrency > self.max_concurrency:
            problems.append(f"the experiment would keep up to {concurrency} requests in flight at backends.{name} "
                            f"(experiment.concurrency, or experiment.slo.max_concurrency with an SLO search), above "
                            f"backends.{name}.max_concurrency={self.max_concurrency}: lower the load, or raise the "
                            "limit if the endpoint's owner agrees")
        if self.max_rate is not None and rate > self.max_rate:
            problems.append(f"the experiment would send up to {rate:g} requests/s to backends.{name} "
                            f"(experiment.request_rates, or experiment.slo.max_rate with an SLO search), above "
                            f"backends.{name}.max_rate={self.max_rate:g}: lower the load, or raise the limit if the "
                            "endpoint's owner agrees")
        return problems
