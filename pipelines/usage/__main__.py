import sys

from pipelines.usage.job import main

sys.exit(main())
