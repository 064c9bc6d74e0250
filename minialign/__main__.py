import sys

from minialign.apps.cli import main

sys.exit(main())
