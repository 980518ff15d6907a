"""The child of :func:`aotbench.tools.compute_sanitizer.run_compute_sanitizer`: make the op, call it once on the device.

``python -m aotbench.cli.gpu_call PAYLOAD`` reads the pickled recipe and host inputs, copies the arrays to the
GPU (each in its own allocation), calls the op and synchronizes. An aotbench error is printed on one marked line of stderr (exit status 3),
so the parent reports what the call raised beside what the sanitizer saw.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str]) -> int:
    payload = pickle.loads(Path(argv[0]).read_bytes())
    from ..op.custom import _from_spec
    from ..run.gpu_availability import require_gpu
    from ..errors import AotbenchError

    try:
        op = _from_spec(payload["spec"])
        cp = require_gpu(op.name)
        # Plain cudaMalloc per array instead of cupy's pool: the sanitizer knows each allocation's bounds only
        # when the allocation is the array (a pool's chunk would hide a write just past an array's end).
        cp.cuda.set_allocator(None)
        args = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in payload["args"]]
        op(*args)
        cp.cuda.Device().synchronize()
    except AotbenchError as exc:
        print(f"aotbench-call-error: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
