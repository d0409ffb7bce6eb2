"""`python -m pipelines.audit [--json] [--record]`: one audit now, printed (and recorded)."""
import argparse
import json
import sys

from infra import logs
from infra.config import load
from pipelines import audit


def main(argv: list[str] | None = None) -> int:
    logs.setup("WARNING")
    parser = argparse.ArgumentParser(prog="python -m pipelines.audit",
                                     description="Truth from Kafka vs each job and guarantee, at a consistent cut.")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line last")
    parser.add_argument("--record", action="store_true", help="also append them to the store's audit table")
    args = parser.parse_args(argv)
    s = load()
    try:
        auditor = audit.Auditor(s)
        snap = auditor.snapshot()
    except Exception as exc:  # noqa: BLE001 - one sentence for the user, not a traceback
        print(f"audit: could not read Kafka at {s.kafka_bootstrap} or the store {s.store_path}: {exc}",
              file=sys.stderr)
        return 1
    if args.record:
        audit.record(auditor.db, snap)
    print(json.dumps(snap) if args.json else audit.render(snap), flush=True)
    return 0


sys.exit(main())
