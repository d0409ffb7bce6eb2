"""Run one benchmark scenario: `python -m bench SCENARIO [options]`; the last stdout line is JSON."""
from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path


def scenarios() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules([str(here)])
                  if not m.name.startswith("_") and not m.ispkg and m.name != "common")


def main(argv: list[str]) -> int:
    names = scenarios()
    if not argv or argv[0] not in names:
        unknown = f"no scenario named {argv[0]!r}. " if argv else ""
        print(f"{unknown}usage: python -m bench SCENARIO [options] --json; scenarios: {', '.join(names) or 'none yet'}",
              file=sys.stderr)
        return 2
    module = importlib.import_module(f"bench.{argv[0].replace('-', '_')}")  # fraud-guarantees
    result = module.main(argv[1:])
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
