"""``python -m poolgrad``: self-check every operator, then benchmark the default workload."""
import sys

from .benchmark import main

sys.exit(main())
