"""One prepared, checked kernel call: the op's recipe (spec, registration, output rules), the plan of one input
signature (Init, workspaces, marshalled shapes), memory limits, and the guarded call. Below it: build, abi."""
