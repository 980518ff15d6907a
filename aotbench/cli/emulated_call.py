"""The child of :func:`aotbench.tools.emulator_sanitizer.run_on_emulator`: make the emulated op, call it once.

``python -m aotbench.cli.emulated_call PAYLOAD`` (with AddressSanitizer's or ThreadSanitizer's runtime preloaded
for memcheck and racecheck) reads the pickled recipe, the tool and the host inputs, copies every array into an
allocation of its own (so the sanitizer knows its bounds), calls the op once and prints what the emulator's
synccheck noted. An aotbench error is printed on one marked line of stderr (exit status 3).
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np

from ..tools.emulator_sanitizer import CALL_ERROR, HAZARD


def main(argv: list[str]) -> int:
    payload = pickle.loads(Path(argv[0]).read_bytes())
    from ..errors import AotbenchError
    from ..op.custom import _from_spec
    from ..run.emulation import configure, take_hazards

    status = 0
    op = None
    try:
        op = _from_spec(payload["spec"])
        configure(op.library, seed=payload.get("seed"), synccheck=payload["tool"] == "synccheck")
        args = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in payload["args"]]
        op(*args)
    except AotbenchError as exc:
        print(f"{CALL_ERROR}{type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        status = 3
    if op is not None:
        for hazard in take_hazards(op.library):
            print(f"{HAZARD}{hazard}", file=sys.stderr)
    sys.stderr.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
