import sys

from pipelines.fraud.job import main

sys.exit(main())
