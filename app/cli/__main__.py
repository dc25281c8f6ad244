"""python -m app.cli: the `tally` command without its console script."""

from app.cli import main

raise SystemExit(main())
