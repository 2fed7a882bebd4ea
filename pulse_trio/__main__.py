import sys

from pulse_trio.cli import main

sys.exit(main())
