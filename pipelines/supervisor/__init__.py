"""The supervisor: process management (`processes`), the faults it carries out (`faults`), the
live auditor (`auditor`), tied together in `core`."""
