"""`python -m chaos.toxiproxy`: serve the Toxiproxy API (see `chaos.toxiproxy.server`)."""

import sys

from chaos.toxiproxy.server import main

sys.exit(main())
