"""`python -m vitpos.compare`: see vitpos.compare."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
