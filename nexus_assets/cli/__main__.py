import sys

from nexus_assets.cli import main

sys.exit(main())
