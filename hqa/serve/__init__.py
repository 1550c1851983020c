"""``hqa serve``: the HTTP API (FastAPI) and web page over one opened program.

The API's names are imported on first use (PEP 562), so a module that needs only the step recorder
(:mod:`hqa.serve.steps`, which ``hqa ask`` shows its steps with) does not import FastAPI."""

__all__ = ["ServeOptions", "check_bind", "create_app"]


def __getattr__(name: str):
    if name in __all__:
        from hqa.serve import api

        return getattr(api, name)
    raise AttributeError(f"module 'hqa.serve' has no attribute {name!r}")
