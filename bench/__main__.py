"""``python -m bench [--quick] [--only NAME[,NAME]]``."""

from bench.run import main

raise SystemExit(main())
