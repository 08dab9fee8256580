"""``python -m rsched._devtools.demo``."""

import sys

from rsched._devtools.demo.main import main

sys.exit(main())
