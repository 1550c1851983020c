"""``hqa serve``: the HTTP API (FastAPI) and web page over one opened program."""

from hqa.serve.api import ServeOptions, check_bind, create_app

__all__ = ["ServeOptions", "check_bind", "create_app"]
