"""``python -m talentrl_core.envs.alfworld --check SPLIT ...``: play the expert on a split (``family.main``)."""

import sys

from .family import main

if __name__ == "__main__":
    sys.exit(main())
