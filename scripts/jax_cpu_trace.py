"""Record tests/data/jax_cpu/: JAX profiler traces of a 2-process JAX job on CPU.

Two processes (``jax.distributed`` on localhost, one CPU device each, gloo collectives) run
three steps of a small data-parallel MLP whose parameters are sharded FSDP-style: each step
all-gathers the weights, computes, and reduce-scatters and all-reduces the gradients (XLA
collectives over the two processes). Steps 1 and 2 are profiled with ``jax.profiler.trace``
(``create_perfetto_trace=True``: the Chrome trace-event JSON, ``perfetto_trace.json.gz``,
beside the XPlane protobuf). Needs ``jax[cpu]`` (``pip install 'jax[cpu]'`` in a venv of its
own). Run: ``python scripts/jax_cpu_trace.py tests/data/jax_cpu`` (it starts both processes and
keeps ``rank<r>.trace.json.gz``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PORT = 29731
STEPS = 3


def worker(rank: int, out: Path) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{PORT}", num_processes=2, process_id=rank)
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(jax.devices(), ("dp",))
    shard = NamedSharding(mesh, P("dp"))

    def loss(w, x):
        return jnp.mean(jnp.tanh(x @ w) ** 2)

    @jax.jit
    def step(w, x):
        g = jax.grad(loss)(w, x)  # w sharded on dp: XLA gathers it, reduce-scatters g
        total = jax.lax.with_sharding_constraint(jnp.sum(g), NamedSharding(mesh, P()))
        return w - 0.1 * g, total

    w = jax.make_array_from_callback((256, 128), shard, lambda i: jnp.ones((128, 128))[:128])
    x = jax.make_array_from_callback((64, 256), shard, lambda i: jnp.ones((32, 256)) * rank)
    w, _ = step(w, x)  # compile outside the profile
    jax.block_until_ready(w)
    with jax.profiler.trace(str(out / f"rank{rank}"), create_perfetto_trace=True):
        for i in range(1, STEPS):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                w, total = step(w, x)
                jax.block_until_ready((w, total))
    jax.distributed.shutdown()


def main() -> None:
    if len(sys.argv) == 3:
        worker(int(sys.argv[1]), Path(sys.argv[2]))
        return
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen([sys.executable, __file__, str(r), str(out)], env=env) for r in (0, 1)
    ]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"a worker failed: exit codes {codes}")
    for rank in (0, 1):  # keep the trace-viewer JSON, named after its rank
        (trace,) = (out / f"rank{rank}").rglob("*.trace.json.gz")
        trace.rename(out / f"rank{rank}.trace.json.gz")
        shutil.rmtree(out / f"rank{rank}")
        print(out / f"rank{rank}.trace.json.gz")


if __name__ == "__main__":
    main()
