"""python -m app: `tally serve`, with the settings from the environment."""

from app.cli.serve import serve

if __name__ == "__main__":
    raise SystemExit(serve())
