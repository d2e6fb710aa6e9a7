"""``python -m proxy``: the same as the ``memproxy`` command."""

from proxy.cli import main

raise SystemExit(main())
