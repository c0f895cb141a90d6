import sys

from repocomp.cli import main

sys.exit(main())
