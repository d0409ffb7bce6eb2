import sys

from pipelines.supervisor.core import main

sys.exit(main())
