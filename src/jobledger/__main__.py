"""`python -m jobledger`: the `jobledger` command, for an environment whose scripts
directory is not on PATH."""

from jobledger.cli import main

raise SystemExit(main())
