"""``python -m hqa.cli``."""

from hqa.cli.entry import run

if __name__ == "__main__":
    run()
