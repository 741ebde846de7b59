"""``python -m rlstack_default_model``: see ``rlstack_default_model.generator``."""

import sys

from .generator import main

sys.exit(main())
