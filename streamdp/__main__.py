"""``python -m streamdp …`` is the ``streamdp`` command."""

import sys

from streamdp.cli.main import main

sys.exit(main())
