"""python -m app.cli: the `tally` command without its console script."""

from app.cli import main

if __name__ == "__main__":  # a worker process of the pool imports this module again as __mp_main__
    raise SystemExit(main())
