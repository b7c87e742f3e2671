"""Entry point: ``python -m aitune_fast.bench``."""

import sys

from .cli import main

sys.exit(main())
